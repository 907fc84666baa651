// The instruction cost of one small fire-and-forget actor message between two procs, for
// profiling with callgrind (repeatable, unlike wall time on this VM):
//
//   valgrind --tool=callgrind build/default/bench/actor_cost --messages 100000
//   callgrind_annotate callgrind.out.<pid>
//
// One process, two Procs over unix sockets: the main thread sends --messages `take` calls to
// an actor in the other proc, then one `count` call whose reply follows them all; with --rtt,
// an actor makes --messages round trips to it instead. Compare the
// instruction total per message with channel_cost's to see what the actor layer adds.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "sceptre/sceptre.h"

namespace {

class Sink : public sceptre::Actor {
 public:
  void take(std::string) { ++taken_; }
  std::string echo(std::string s) { return s; }
  std::uint64_t count() const { return taken_; }

 private:
  std::uint64_t taken_ = 0;
};
SCEPTRE_ACTOR(Sink, take, echo, count);

// Round trips from an actor, as actor_bench's Pinger does them.
class Pinger : public sceptre::Actor {
 public:
  sceptre::Task<std::uint64_t> rally(sceptre::ActorRef<Sink> sink, std::string payload, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) (void)co_await sink.call<&Sink::echo>(payload);
    co_return n;
  }
};
SCEPTRE_ACTOR(Pinger, rally);

}  // namespace

int main(int argc, char** argv) {
  using namespace sceptre;
  CLI::App app{"per-message cost of an actor message (run under callgrind)"};
  std::size_t messages = 100000;
  std::size_t size = 64;
  app.add_option("--messages", messages);
  app.add_option("--size", size);
  bool rtt = false;
  app.add_flag("--rtt", rtt, "round trips from an actor instead of a one-way stream");
  CLI11_PARSE(app, argc, argv);

  ProcOptions options;
  options.channel.secret = "cost";
  Proc receiver(options);
  Proc sender(options);
  ActorRef<Sink> sink;
  {
    ProcScope in(receiver);
    sink = receiver.spawn<Sink>("sink");
  }
  ProcScope in(sender);
  std::string payload(size, 'x');
  if (rtt) {
    auto pinger = sender.spawn<Pinger>("pinger");
    auto start = std::chrono::steady_clock::now();
    auto n = pinger.call<&Pinger::rally>(sink, payload, static_cast<std::uint64_t>(messages)).get(std::chrono::seconds(300));
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%llu round trips of %zu B: %.1f us each (wall time: orientation only)\n",
                static_cast<unsigned long long>(n), size, sec / n * 1e6);
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < messages; ++i) sink.send<&Sink::take>(payload);
  std::uint64_t got = sink.call<&Sink::count>().get(std::chrono::seconds(300));
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu messages of %zu B in %.3f s (%.2f M msg/s, wall time: orientation only)\n",
              static_cast<unsigned long long>(got), size, sec, messages / sec / 1e6);
  return got == messages ? 0 : 1;
}
