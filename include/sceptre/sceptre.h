// Everything a user of sceptre's actor runtime needs, in one include.
#pragma once

#include "sceptre/actor/actor.h"
#include "sceptre/actor/actor_ref.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/actor/errors.h"
#include "sceptre/actor/future.h"
#include "sceptre/actor/port.h"
#include "sceptre/actor/proc.h"
#include "sceptre/actor/task.h"
#include "sceptre/core/ids.h"
