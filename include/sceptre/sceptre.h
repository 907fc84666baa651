// Everything a user of sceptre's actor runtime and meshes needs, in one include.
#pragma once

#include "sceptre/actor/actor.h"
#include "sceptre/actor/actor_ref.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/actor/errors.h"
#include "sceptre/actor/future.h"
#include "sceptre/actor/port.h"
#include "sceptre/actor/proc.h"
#include "sceptre/actor/task.h"
#include "sceptre/core/config.h"
#include "sceptre/core/ids.h"
#include "sceptre/mesh/actor_mesh.h"
#include "sceptre/mesh/extent.h"
#include "sceptre/mesh/runtime.h"
#include "sceptre/mesh/selection.h"
#include "sceptre/mesh/slice.h"
