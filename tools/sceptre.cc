// The `sceptre` command. For now: version information and a connectivity check of a channel
// address (later issues add `run`, `host` and `status`).
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>

#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"
#include "sceptre/wire/codec.h"

int main(int argc, char** argv) {
  CLI::App app{"sceptre: single-controller distributed runtime"};
  app.require_subcommand(1);
  auto* version = app.add_subcommand("version", "print the build and protocol versions");
  auto* ping = app.add_subcommand("ping", "send one message to a channel address and wait for its acknowledgement");
  std::string address;
  int timeout_ms = 5000;
  ping->add_option("address", address, "e.g. tcp:host:port or unix:/path")->required();
  ping->add_option("--timeout-ms", timeout_ms, "how long to wait");
  CLI11_PARSE(app, argc, argv);

  if (*version) {
    std::cout << "sceptre " << SCEPTRE_VERSION << "\n";
    return 0;
  }
  auto addr = sceptre::channel::ChannelAddr::parse(address);
  if (!addr) {
    std::cerr << addr.error().to_string() << "\n";
    return 2;
  }
  sceptre::channel::Context ctx;
  sceptre::channel::ChannelOptions options;
  options.delivery_timeout = std::chrono::milliseconds(timeout_ms);
  auto tx = sceptre::channel::dial(ctx, *addr, options);
  if (!tx) {
    std::cerr << tx.error().to_string() << "\n";
    return 2;
  }
  auto start = std::chrono::steady_clock::now();
  auto sent = (*tx)->send(sceptre::wire::encode(std::string("ping")));
  auto flushed = sent.ok() ? (*tx)->flush(std::chrono::milliseconds(timeout_ms)) : sent;
  if (!flushed.ok()) {
    std::cerr << flushed.error().to_string() << "\n";
    return 1;
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  std::cout << address << " acknowledged in " << us.count() << " us\n";
  return 0;
}
