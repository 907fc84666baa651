// The implementations that actor_bench compares, one .cc file each: the sceptre channel floor
// (actor_floor.cc), sceptre actors (actor_sceptre.cc), CAF (actor_caf.cc) and gRPC
// (actor_grpc.cc). Each function is the client of one measurement: it forks its server with
// bench::fork_server (pinned to server_cpu), pins itself to client_cpu, measures, reaps the
// server and returns. actor_bench calls each one inside bench::in_child, so a function may
// start threads and leave them running.
#pragma once

#include <cstddef>
#include <vector>

#include "bench_util.h"

namespace bench {

inline constexpr std::size_t kSmall = 64;       // bytes of a small message
inline constexpr std::size_t kLarge = 1 << 20;  // bytes of a large message

struct Params {
  int rtt_small = 2000;  // timed 64 B round trips (each series starts with warmup(n) untimed)
  int rtt_large = 200;   // timed 1 MiB round trips
  int stream = 200000;   // 64 B messages in the one-way stream
};
// Set by actor_bench's main before anything forks; the children inherit it.
inline Params params;

inline int rtt_count(std::size_t size) { return size >= kLarge ? params.rtt_large : params.rtt_small; }

struct Rtt {  // one round-trip series, in µs
  double p50 = 0, p99 = 0;
};

inline Rtt rtt_of(const std::vector<double>& us) {
  auto [p50, p99] = percentiles(us);
  return {p50, p99};
}

// One implementation, one repetition. Trivially copyable: it comes back through a pipe.
// A zero means "not measured".
struct Sample {
  Rtt small;               // 64 B round trips
  Rtt large;               // 1 MiB round trips
  double msgs_per_s = 0;   // one-way 64 B stream, first send to the server's "done"
};

// The sceptre channel: the floor that sceptre actors add to. tcp, or unix when false.
Sample run_channel_floor(bool tcp, int client_cpu, int server_cpu);

// sceptre actors over a channel of the same transport.
Sample run_sceptre_actors(bool tcp, int client_cpu, int server_cpu);

// CAF 0.17 remote actors (its middleman speaks only tcp).
Sample run_caf(int client_cpu, int server_cpu);

// gRPC: unary Echo for round trips, client-streaming Stream for the one-way stream.
Sample run_grpc(bool unix_socket, int client_cpu, int server_cpu);

}  // namespace bench
