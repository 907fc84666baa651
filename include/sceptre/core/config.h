// Config: the runtime's tunables, typed, with one place that says how each is spelled in JSON and
// in the environment. A process reads its effective configuration once with Config::load(); a
// controller hands its own to the procs it spawns as JSON text in SCEPTRE_CONFIG, so the procs of a
// job start from the controller's configuration rather than from whatever their hosts' files say.
//
// Every field has one row in the table in src/core/config.cc; from_json, from_env, to_json and
// describe() all read that table, so a field added here without a row there is caught by
// tests/core/config_test.cc. docs/configuration.md carries describe()'s table (a test checks it).
//
// All functions are pure apart from reading the file or the environment; any thread may call them.
// Bad input is never fixed up silently: it is Error(Code::kInvalidArgument) naming the key.
//
// The overloads without `base` stand in for a `Config base = {}` default argument, which GCC 12
// rejects inside Config itself: its member initializers are not usable before the class is complete
// (CWG 2335).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "sceptre/core/result.h"

namespace sceptre {

struct Config {
  std::size_t cast_fanout = 16;                      // children per node of a cast tree (>= 2)
  std::size_t cast_root_fanout = 1;                  // children of the sender's own node (>= 1)
  std::chrono::milliseconds spawn_timeout{30'000};   // how long spawn_procs / spawn wait for members
  std::chrono::milliseconds stop_timeout{5'000};     // graceful stop of actors and procs before it is forced
  std::string transport = "unix";                    // "unix", "tcp" or "netns": what procs serve
  bool log_fold = true;                              // fold identical lines from many ranks
  std::chrono::milliseconds log_fold_window{100};    // how long a line waits for identical ones
  std::size_t stderr_tail_lines = 20;                // lines of a failed proc's stderr in its error
  std::string log_level = "info";                    // trace, debug, info, warn, error, off
  std::chrono::milliseconds heartbeat_interval{100};  // how often a proc tells the controller it is alive
  std::chrono::milliseconds heartbeat_timeout{800};   // silence after which a proc is declared lost
  std::chrono::milliseconds watchdog_timeout{300'000};  // a handler running longer is reported (0: never)
  std::chrono::milliseconds orphan_timeout{60'000};   // a proc that cannot reach its controller this long stops (0: never)
  std::chrono::milliseconds gpu_health_interval{1'000};  // how often hosts poll their GPUs' health (0: never)
  std::size_t io_poll_us = 50;  // how long an I/O thread polls before it sleeps, in us (0: never)
  bool proc_zygote = true;  // fork procs from a zygote of the binary, not execute it afresh for each

  // Overlays a JSON object on `base`: only the keys present change. Unknown keys, wrong types and
  // out-of-range values are Error(Code::kInvalidArgument) naming the key (an unknown key's error
  // lists the known ones). Durations are an integer (milliseconds) or a string with a unit:
  // "250ms", "30s", "2m", "1h".
  static Result<Config> from_json(std::string_view json_text, Config base);
  static Result<Config> from_json(std::string_view json_text);  // on the defaults
  // from_json on a file's contents: kNotFound if it cannot be opened, kInvalidArgument if its
  // contents are bad; either way the error's context names the path.
  static Result<Config> from_file(const std::string& path, Config base);
  static Result<Config> from_file(const std::string& path);  // on the defaults
  // Overlays SCEPTRE_<FIELD in upper case> on `base`, e.g. SCEPTRE_CAST_FANOUT=8,
  // SCEPTRE_LOG_FOLD=0|1|true|false, SCEPTRE_SPAWN_TIMEOUT=10s. A variable that is unset or empty
  // leaves its field alone. `getenv` is injectable for tests.
  static Result<Config> from_env(Config base, std::function<const char*(const char*)> getenv = ::getenv);
  static Result<Config> from_env();  // on the defaults, from the real environment
  // The effective configuration of this process: defaults, then the file named by
  // SCEPTRE_CONFIG_FILE, then SCEPTRE_CONFIG (JSON text — what a controller hands to the procs it
  // spawns), then SCEPTRE_<FIELD>. A later source wins for the keys it sets.
  static Result<Config> load(std::function<const char*(const char*)> getenv = ::getenv);

  // Every field, as one line of JSON (fit for SCEPTRE_CONFIG); from_json(to_json()) == *this.
  std::string to_json() const;
  // A Markdown table of the fields: field, env var, type, default, meaning. One row per line,
  // ending in '\n'.
  static std::string describe();

  bool operator==(const Config&) const = default;
};

}  // namespace sceptre
