// sceptre actors doing the actor benchmark's exchange: an Echo actor in the server process, a
// Pinger actor in the client process.
//   round trip  Pinger::rally, a coroutine endpoint, awaits Echo::echo again and again: each
//               call leaves from the client proc's I/O thread as the floor's next ping does
//   one-way     the client's main thread sends Echo::take fire-and-forget, then calls
//               Echo::count, which is handled after every take (per-sender order): timed from
//               the first send to that reply, as the floor's stream is timed to its "done"
// 64 B travel in the body (a string), 1 MiB as a zero-copy part, as in the floor.
#include <chrono>
#include <string>
#include <vector>

#include "actor_peers.h"
#include "sceptre/sceptre.h"

namespace bench {
namespace {

using namespace std::chrono_literals;

struct Payload {
  std::string small;
  sceptre::wire::Part large;
  SCEPTRE_FIELDS(small, large)
};

Payload payload_of(std::size_t size, const sceptre::wire::Part& large) {
  Payload p;
  if (size >= (64 << 10)) {
    p.large = large;
  } else {
    p.small.assign(size, 'x');
  }
  return p;
}

class Echo : public sceptre::Actor {
 public:
  Payload echo(Payload p) { return p; }
  void take(Payload) { ++taken_; }
  std::uint64_t count() const { return taken_; }

 private:
  std::uint64_t taken_ = 0;
};
SCEPTRE_ACTOR(Echo, echo, take, count);

class Pinger : public sceptre::Actor {
 public:
  // `n` timed round trips of `size` bytes after warmup(n) untimed ones; each in µs.
  sceptre::Task<std::vector<double>> rally(sceptre::ActorRef<Echo> echo, std::uint64_t size, int n) {
    sceptre::wire::Part large = sceptre::wire::Part::copy_of(std::string(size >= kLarge ? size : 0, 'x'));
    std::vector<double> us;
    us.reserve(n);
    for (int i = -warmup(n); i < n; ++i) {
      Payload p = payload_of(size, large);  // a named local: see the GCC 12 note in task.h
      auto start = Clock::now();
      Payload back = co_await echo.call<&Echo::echo>(p);
      if (i >= 0) us.push_back(us_since(start));
    }
    co_return us;
  }
};
SCEPTRE_ACTOR(Pinger, rally);

sceptre::ProcOptions options(bool tcp) {
  sceptre::ProcOptions o;
  o.listen = tcp ? "tcp:127.0.0.1:0" : "";
  o.channel.secret = "bench-secret";
  return o;
}

}  // namespace

Sample run_sceptre_actors(bool tcp, int client_cpu, int server_cpu) {
  auto [pid, echo_text] = fork_server(server_cpu, [&](const auto& report) {
    sceptre::Proc proc(options(tcp));
    auto echo = proc.spawn<Echo>("echo");
    report(echo.id().to_string());
    for (;;) ::pause();
  });
  pin(client_cpu);
  Sample s;
  {
    sceptre::Proc proc(options(tcp));
    auto echo = sceptre::ActorRef<Echo>(*sceptre::ActorId::parse(echo_text));
    auto pinger = proc.spawn<Pinger>("pinger");
    for (std::size_t size : {kSmall, kLarge}) {
      auto us = pinger.call<&Pinger::rally>(echo, size, rtt_count(size)).get(300s);
      (size == kSmall ? s.small : s.large) = rtt_of(us);
    }
    const int n = params.stream;
    const std::uint64_t before = echo.call<&Echo::count>().get(60s);
    Payload small = payload_of(kSmall, {});
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) echo.send<&Echo::take>(small);
    std::uint64_t after = echo.call<&Echo::count>().get(300s);
    s.msgs_per_s = n / (us_since(t) / 1e6);
    if (after - before != static_cast<std::uint64_t>(n)) std::abort();
  }
  reap(pid);
  return s;
}

}  // namespace bench
