// A channel peer in its own process, for the tests that kill processes mid-stream.
//   channel_peer send --addr A --sender S --count N [--interval-us U]
//   channel_peer recv --addr A      (prints "sender index" per message, flushed)
// The job secret comes from SCEPTRE_SECRET.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"
#include "sceptre/wire/codec.h"

namespace {

struct Numbered {  // same layout as the tests' Numbered
  std::uint32_t sender = 0;
  std::uint64_t index = 0;
  sceptre::wire::Part payload;
  SCEPTRE_FIELDS(sender, index, payload)
};

}  // namespace

int main(int argc, char** argv) {
  using namespace sceptre;
  CLI::App app{"channel test peer"};
  std::string address;
  std::uint32_t sender = 0;
  std::uint64_t count = 0;
  int interval_us = 0;
  auto* send = app.add_subcommand("send");
  send->add_option("--addr", address)->required();
  send->add_option("--sender", sender);
  send->add_option("--count", count)->required();
  send->add_option("--interval-us", interval_us);
  auto* recv = app.add_subcommand("recv");
  recv->add_option("--addr", address)->required();
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);

  auto addr = channel::ChannelAddr::parse(address);
  if (!addr) {
    std::fprintf(stderr, "%s\n", addr.error().to_string().c_str());
    return 2;
  }
  channel::Context ctx;
  channel::ChannelOptions options;
  if (*send) {
    auto tx = channel::dial(ctx, *addr, options);
    if (!tx) return 2;
    for (std::uint64_t i = 0; i < count; ++i) {
      auto s = (*tx)->send(wire::encode(Numbered{sender, i, {}}), std::chrono::seconds(30));
      if (!s.ok()) {
        std::fprintf(stderr, "send: %s\n", s.error().to_string().c_str());
        return 1;
      }
      if (interval_us) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
    return (*tx)->flush(std::chrono::seconds(30)).ok() ? 0 : 1;
  }
  auto rx = channel::serve(ctx, *addr, options, [](wire::Message m) {
    auto n = wire::decode<Numbered>(m);
    if (!n) std::abort();
    std::printf("%u %llu\n", n->sender, static_cast<unsigned long long>(n->index));
    std::fflush(stdout);
  });
  if (!rx) {
    std::fprintf(stderr, "%s\n", rx.error().to_string().c_str());
    return 2;
  }
  std::printf("ready %s\n", (*rx)->address().to_string().c_str());
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}
