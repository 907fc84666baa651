// The floor of the actor benchmark: sceptre channels doing the actor benchmark's exchange, as
// channel_bench's run_sceptre does it. The client dials the server's Rx and serves an Rx of its
// own for the replies; the next ping leaves from the reply handler on the I/O thread, and the
// stream is timed from the first send to the server's "done". Whatever sceptre actors measure
// above these numbers is the actor layer's own cost.
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actor_peers.h"
#include "channel_messages.h"
#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"

namespace bench {
namespace {

using namespace std::chrono_literals;
using sceptre::wire::Message;
using sceptre::wire::Part;


std::string listen_addr(bool tcp, const char* who) {
  return tcp ? "tcp:127.0.0.1:0" : std::string("unix:@sceptre-actor-floor-") + who + std::to_string(::getpid());
}

// Echoes every message, except that "#count" starts a stream of `count` messages that it
// counts and answers with one "done". The first message names the address to reply to.
[[noreturn]] void serve_echo(bool tcp, const sceptre::channel::ChannelOptions& options,
                             const std::function<void(std::string)>& report) {
  using namespace sceptre::channel;
  Context ctx;
  std::unique_ptr<Tx> back;
  std::uint64_t expect = 0;
  auto rx = serve(ctx, *ChannelAddr::parse(listen_addr(tcp, "s")), options, [&](Message m) {
    if (!back) {
      back = std::move(*dial(ctx, *ChannelAddr::parse(text_of(m)), options));
      return;
    }
    if (expect == 0 && m.parts.empty() && !m.body.empty() && m.body[0] == std::byte{'#'}) {
      expect = std::stoull(text_of(m).substr(1));
      return;
    }
    if (expect > 0) {
      if (--expect == 0) (void)back->send(text_message("done"));
      return;
    }
    (void)back->send(std::move(m));
  });
  if (!rx.ok()) std::abort();
  report((*rx)->address().to_string());
  for (;;) ::pause();
}

}  // namespace

Sample run_channel_floor(bool tcp, int client_cpu, int server_cpu) {
  using namespace sceptre::channel;
  ChannelOptions options;
  options.secret = "bench-secret";
  auto [pid, addr] = fork_server(server_cpu, [&](const auto& report) { serve_echo(tcp, options, report); });
  pin(client_cpu);
  Sample s;
  {
    Context ctx;
    Part large = Part::copy_of(std::string(kLarge, 'x'));
    std::mutex mu;
    std::function<void(Message)> on_reply;
    auto rx = serve(ctx, *ChannelAddr::parse(listen_addr(tcp, "c")), options, [&](Message m) {
      std::lock_guard lock(mu);  // the main thread swaps on_reply between phases
      on_reply(std::move(m));
    });
    if (!rx.ok()) std::abort();
    auto tx = std::move(*dial(ctx, *ChannelAddr::parse(addr), options));
    (void)tx->send(text_message((*rx)->address().to_string()));

    for (std::size_t size : {kSmall, kLarge}) {
      int n = rtt_count(size);
      std::vector<double> us;
      us.reserve(n);
      std::promise<void> done;
      Clock::time_point start;
      int skip = warmup(n);
      std::unique_lock lock(mu);
      // The next ping leaves from the reply handler, on the I/O thread.
      on_reply = [&](Message) {
        if (skip > 0) {
          --skip;
        } else {
          us.push_back(us_since(start));
        }
        if (static_cast<int>(us.size()) == n) {
          done.set_value();
          return;
        }
        start = Clock::now();
        (void)tx->send(payload_message(size, large));
      };
      lock.unlock();
      start = Clock::now();
      (void)tx->send(payload_message(size, large));
      done.get_future().wait();
      lock.lock();
      (size == kSmall ? s.small : s.large) = rtt_of(us);
    }

    std::promise<void> done;
    {
      std::lock_guard lock(mu);
      on_reply = [&](Message) { done.set_value(); };
    }
    const int n = params.stream;
    (void)tx->send(text_message("#" + std::to_string(n)));
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (!tx->send(payload_message(kSmall, large), 30s).ok()) std::abort();
    }
    done.get_future().wait();
    s.msgs_per_s = n / (us_since(t) / 1e6);

    std::lock_guard lock(mu);
    on_reply = [](Message) {};
  }
  reap(pid);
  return s;
}

}  // namespace bench
