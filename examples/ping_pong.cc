// Two processes exchanging messages over sceptre channels.
//
// The parent serves a channel, starts a copy of itself as the child, and the child dials back
// and says where it listens. Then they play ping-pong: each ping carries a counter and a
// payload part, the child answers with a pong, and the parent prints what it measured.
//
//   ping_pong [--rounds N] [--transport unix|tcp] [--payload BYTES]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <variant>

#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"
#include "sceptre/wire/codec.h"

extern char** environ;

namespace {

using namespace sceptre;
using namespace std::chrono_literals;

struct Hello {
  std::string address;  // where the child listens
  std::int32_t pid = 0;
  SCEPTRE_FIELDS(address, pid)
};
struct Ping {
  std::uint64_t round = 0;
  wire::Part payload;
  SCEPTRE_FIELDS(round, payload)
};
struct Bye {
  SCEPTRE_FIELDS()
};
using Note = std::variant<Hello, Ping, Bye>;

[[noreturn]] void die(const Error& e) {
  std::fprintf(stderr, "ping_pong: %s\n", e.to_string().c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r) {
  if (!r) die(r.error());
  return std::move(r).value();
}

int run_child(const std::string& parent, const std::string& transport) {
  channel::Context ctx;
  channel::ChannelOptions options;  // the secret comes from SCEPTRE_SECRET
  auto to_parent = must(channel::dial(ctx, must(channel::ChannelAddr::parse(parent)), options));
  std::promise<void> done;
  auto listen = transport == "tcp" ? "tcp:127.0.0.1:0" : "unix:@sceptre-pong-" + std::to_string(::getpid());
  auto rx = must(channel::serve(ctx, must(channel::ChannelAddr::parse(listen)), options,
                                [&](wire::Message m) {
                                  Note note = must(wire::decode<Note>(m));
                                  if (std::holds_alternative<Bye>(note)) {
                                    done.set_value();
                                    return;
                                  }
                                  // Answer on the I/O thread: no thread hop on the way back.
                                  if (!to_parent->send(std::move(m)).ok()) std::exit(1);
                                }));
  auto hello = wire::encode(Note{Hello{rx->address().to_string(), ::getpid()}});
  if (!to_parent->send(std::move(hello)).ok()) return 1;
  done.get_future().wait();
  return to_parent->flush(10s).ok() ? 0 : 1;
}

int run_parent(const char* self, int rounds, const std::string& transport, std::size_t payload) {
  // A fresh per-job secret, handed to the child through its environment.
  std::random_device rd;
  std::string secret = std::to_string(rd()) + "-" + std::to_string(rd()) + "-" + std::to_string(rd());
  ::setenv("SCEPTRE_SECRET", secret.c_str(), 1);

  channel::Context ctx;
  channel::ChannelOptions options;
  std::promise<Hello> hello;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t last_pong = 0;
  auto listen = transport == "tcp" ? "tcp:127.0.0.1:0" : "unix:@sceptre-ping-" + std::to_string(::getpid());
  auto rx = must(channel::serve(ctx, must(channel::ChannelAddr::parse(listen)), options,
                                [&](wire::Message m) {
                                  Note note = must(wire::decode<Note>(m));
                                  if (auto* h = std::get_if<Hello>(&note)) {
                                    hello.set_value(*h);
                                  } else if (auto* p = std::get_if<Ping>(&note)) {
                                    std::lock_guard lock(mu);
                                    last_pong = p->round;
                                    cv.notify_one();
                                  }
                                }));
  std::string addr = rx->address().to_string();
  std::vector<std::string> args{self, "--child-of", addr, "--transport", transport};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  if (posix_spawn(&child, self, nullptr, nullptr, argv.data(), environ) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  auto hello_future = hello.get_future();
  if (hello_future.wait_for(10s) != std::future_status::ready) {
    std::fprintf(stderr, "ping_pong: the child did not say hello within 10 s\n");
    ::kill(child, SIGKILL);
    return 1;
  }
  Hello h = hello_future.get();
  std::printf("parent %d serves %s; child %d serves %s\n", ::getpid(), addr.c_str(), h.pid,
              h.address.c_str());
  auto to_child = must(channel::dial(ctx, must(channel::ChannelAddr::parse(h.address)), options));

  wire::Part part = wire::Part::copy_of(std::string(payload, 'x'));
  std::vector<double> us;
  for (int r = 1; r <= rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    if (auto s = to_child->send(wire::encode(Note{Ping{static_cast<std::uint64_t>(r), part}})); !s) die(s.error());
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, 10s, [&] { return last_pong == static_cast<std::uint64_t>(r); })) {
      std::fprintf(stderr, "ping_pong: no pong for round %d within 10 s\n", r);
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  (void)to_child->send(wire::encode(Note{Bye{}}));
  int status = 0;
  ::waitpid(child, &status, 0);
  std::sort(us.begin(), us.end());
  std::printf("%d round trips over %s with a %zu-byte part: p50 %.1f us, p99 %.1f us\n", rounds,
              transport.c_str(), payload, us[us.size() / 2], us[us.size() * 99 / 100]);
  std::printf("child exited with status %d\n", WEXITSTATUS(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sceptre example: two processes playing ping-pong over a channel"};
  int rounds = 1000;
  std::string transport = "unix";
  std::size_t payload = 4096;
  std::string parent;
  app.add_option("--rounds", rounds, "round trips to time")->check(CLI::PositiveNumber);
  app.add_option("--transport", transport, "unix or tcp")->check(CLI::IsMember({"unix", "tcp"}));
  app.add_option("--payload", payload, "bytes in each ping's part");
  app.add_option("--child-of", parent, "(internal) run as the child of this address");
  CLI11_PARSE(app, argc, argv);
  if (!parent.empty()) return run_child(parent, transport);
  return run_parent(argv[0], rounds, transport, payload);
}
