// The `sceptre` command: version information, a connectivity check of a channel address, and
// `host`, the entry point of a host agent (later issues add `run` and `status`).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

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
  auto* host = app.add_subcommand(
      "host", "run PROGRAM (a sceptre binary) as the host agent its launcher described in the environment");
  std::vector<std::string> program;
  host->add_option("program", program, "the program and its arguments, after --")->required();
  CLI11_PARSE(app, argc, argv);

  if (*version) {
    std::cout << "sceptre " << SCEPTRE_VERSION << "\n";
    return 0;
  }
  if (*host) {
    // What a launcher (sceptre::Runtime::launch_hosts) gives an agent; without it the program
    // would run as a controller of its own.
    std::string missing;
    for (const char* name : {"SCEPTRE_BOOT", "SCEPTRE_HEALTH", "SCEPTRE_HOST_EVENTS", "SCEPTRE_HOST_ID", "SCEPTRE_SECRET",
                             "SCEPTRE_CONFIG"}) {
      const char* v = std::getenv(name);
      if (!v || !*v) missing += std::string(missing.empty() ? "" : ", ") + name;
    }
    if (!missing.empty()) {
      std::cerr << "sceptre host: not started by a sceptre launcher: " << missing << " not set\n";
      return 2;
    }
    ::setenv("SCEPTRE_ROLE", "host", 1);
    std::vector<char*> args;
    for (auto& a : program) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());  // the same pid: the launcher's supervision and lifeline hold
    std::cerr << "sceptre host: cannot run " << program[0] << ": " << std::strerror(errno) << "\n";
    return 2;
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
