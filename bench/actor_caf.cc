// CAF 0.17 (Debian's libcaf-dev) doing the actor benchmark's exchange between two processes:
// the server publishes an actor with the middleman on 127.0.0.1, the client gets a proxy with
// remote_actor. CAF's network layer (BASP) is tcp only, so there is no unix row for it.
//
//   round trip  a client actor request()s a std::string of 64 B or 1 MiB from the server
//               actor, which returns it; the next request leaves from the response handler
//               (then()), carrying the reply string moved, so the client copies no payload.
//   stream      a client actor request()s (count, n), then send()s n (data, 64 B string)
//               messages; the server counts them and fulfils the count request after the last.
//               The data atom tags stream messages so that their handler returns nothing: a
//               value returned from a CAF handler goes back to the sender even after a plain
//               send().
//
// Threads: CAF's default work-stealing scheduler with its default worker count, which is
// hardware_concurrency() (2 here) and ignores the affinity mask; the middleman adds its
// multiplexer thread. See kCafWorkers.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdint>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "actor_peers.h"

namespace bench {
namespace {

using count_atom = caf::atom_constant<caf::atom("count")>;
using data_atom = caf::atom_constant<caf::atom("data")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

// 0 keeps CAF's default (one worker per online CPU). Pinned to one CPU, the workers share it;
// one or three workers measured the same within noise on this 2-core VM (round trips and
// stream alike), so the default stays. The stream is bound by the receiving middleman thread,
// which reads each BASP message with two recv() calls (header, then payload); idle workers
// poll with short sleeps (tens of thousands of clock_nanosleep calls a second).
constexpr std::size_t kCafWorkers = 0;

void configure(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  if (kCafWorkers > 0) cfg.set("scheduler.max-threads", kCafWorkers);
}

struct ServerState {
  std::uint64_t expect = 0;
  caf::typed_response_promise<done_atom> done;
};

caf::behavior echo_server(caf::stateful_actor<ServerState>* self) {
  return {
      [](std::string& payload) { return std::move(payload); },
      [self](count_atom, std::uint64_t n) {
        self->state.expect = n;
        self->state.done = self->make_response_promise<done_atom>();
        return self->state.done;
      },
      [self](data_atom, const std::string&) {
        if (self->state.expect > 0 && --self->state.expect == 0) self->state.done.deliver(done_atom::value);
      },
  };
}

struct Series {
  int n = 0;
  int skip = 0;
  std::vector<double> us;
  Clock::time_point start;
  std::promise<void> done;
};

void ping(caf::event_based_actor* self, const caf::actor& server, Series& series, std::string payload) {
  series.start = Clock::now();
  self->request(server, caf::infinite, std::move(payload)).then([self, server, &series](std::string& reply) {
    if (series.skip > 0) {
      --series.skip;
    } else {
      series.us.push_back(us_since(series.start));
    }
    if (static_cast<int>(series.us.size()) == series.n) {
      series.done.set_value();
      self->quit();
      return;
    }
    ping(self, server, series, std::move(reply));
  });
}

}  // namespace

Sample run_caf(int client_cpu, int server_cpu) {
  auto [pid, addr] = fork_server(server_cpu, [](const auto& report) {
    caf::actor_system_config cfg;
    configure(cfg);
    caf::actor_system sys{cfg};
    auto port = sys.middleman().publish(sys.spawn(echo_server), 0, "127.0.0.1");
    if (!port) {
      std::fprintf(stderr, "caf: publish failed: %s\n", sys.render(port.error()).c_str());
      std::abort();
    }
    report(std::to_string(*port));
    for (;;) ::pause();
  });
  pin(client_cpu);
  Sample s;
  {
    caf::actor_system_config cfg;
    configure(cfg);
    caf::actor_system sys{cfg};
    auto server = sys.middleman().remote_actor("127.0.0.1", static_cast<std::uint16_t>(std::stoi(addr)));
    if (!server) {
      std::fprintf(stderr, "caf: remote_actor failed: %s\n", sys.render(server.error()).c_str());
      std::abort();
    }
    for (std::size_t size : {kSmall, kLarge}) {
      Series series;
      series.n = rtt_count(size);
      series.skip = warmup(series.n);
      series.us.reserve(series.n);
      auto finished = series.done.get_future();
      sys.spawn([&, size](caf::event_based_actor* self) { ping(self, *server, series, std::string(size, 'x')); });
      finished.wait();
      (size == kSmall ? s.small : s.large) = rtt_of(series.us);
    }

    std::promise<double> elapsed_us;
    auto finished = elapsed_us.get_future();
    sys.spawn([&](caf::event_based_actor* self) {
      const int n = params.stream;
      auto t = Clock::now();
      self->request(*server, caf::infinite, count_atom::value, static_cast<std::uint64_t>(n))
          .then([&elapsed_us, t, self](done_atom) {
            elapsed_us.set_value(us_since(t));
            self->quit();
          });
      const std::string payload(kSmall, 'x');
      for (int i = 0; i < n; ++i) self->send(*server, data_atom::value, payload);
    });
    s.msgs_per_s = params.stream / (finished.get() / 1e6);
  }
  reap(pid);
  return s;
}

}  // namespace bench
