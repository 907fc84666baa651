// The instruction cost of one small message through a channel, for profiling with callgrind
// (repeatable, unlike wall time on this VM):
//
//   valgrind --tool=callgrind build/default/bench/channel_cost --messages 200000
//   callgrind_annotate callgrind.out.<pid>
//
// One process: a Tx streams --messages messages of --size bytes over --addr to an Rx whose
// handler counts them; divide the instruction total by the message count. Prints wall time
// too, for orientation only.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>

#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"

int main(int argc, char** argv) {
  using namespace sceptre;
  CLI::App app{"per-message cost of a channel (run under callgrind)"};
  std::size_t messages = 200000;
  std::size_t size = 64;
  std::string address = "unix:@sceptre-channel-cost";
  app.add_option("--messages", messages);
  app.add_option("--size", size);
  app.add_option("--addr", address);
  CLI11_PARSE(app, argc, argv);

  channel::ChannelOptions options;
  options.secret = "cost";
  channel::Context rx_ctx;
  channel::Context tx_ctx;
  std::atomic<std::size_t> got{0};
  std::promise<void> done;
  auto rx = channel::serve(rx_ctx, *channel::ChannelAddr::parse(address), options,
                           [&](wire::Message) {
                             if (++got == messages) done.set_value();
                           });
  if (!rx) {
    std::fprintf(stderr, "%s\n", rx.error().to_string().c_str());
    return 1;
  }
  auto tx = channel::dial(tx_ctx, (*rx)->address(), options);
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < messages; ++i) {
    wire::Message m;
    m.body.assign(size, std::byte{'x'});
    if (!(*tx)->send(std::move(m), std::chrono::seconds(30)).ok()) return 1;
  }
  done.get_future().wait();
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu messages of %zu B in %.3f s (%.2f M msg/s, wall time: orientation only)\n",
              messages, size, sec, messages / sec / 1e6);
  return 0;
}
