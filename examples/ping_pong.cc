// Two processes playing ping-pong through actors.
//
// The controller (this program) creates its Proc, re-executes itself as a child proc, and
// learns where the child serves through a port: the port's id travels to the child as text in
// its environment, and the child sends its proc id back to it. The controller then spawns a
// Ponger in the child (built there from a message), a Pinger beside itself, and asks the Pinger
// to rally: a coroutine endpoint that awaits the Ponger's reply to each ball. Each ball carries a
// payload part that travels beside the message body, never copied into it.
//
//   ping_pong [--rounds N] [--transport unix|tcp] [--payload BYTES]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>

#include "sceptre/sceptre.h"

extern char** environ;

namespace {

using namespace sceptre;
using namespace std::chrono_literals;

struct Ball {
  std::uint64_t round = 0;
  wire::Part payload;
  SCEPTRE_FIELDS(round, payload)
};

class Ponger : public Actor {
 public:
  Ball ping(Ball ball) {
    ++returned_;
    return ball;
  }
  int pid() const { return static_cast<int>(::getpid()); }
  std::uint64_t returned() const { return returned_; }

 private:
  std::uint64_t returned_ = 0;
};
SCEPTRE_ACTOR(Ponger, ping, pid, returned);

class Pinger : public Actor {
 public:
  // Plays `rounds` balls against `ponger`; returns each round trip in microseconds.
  Task<std::vector<double>> rally(ActorRef<Ponger> ponger, int rounds, std::uint64_t payload) {
    wire::Part part = wire::Part::copy_of(std::string(payload, 'x'));
    std::vector<double> us;
    for (int r = 1; r <= rounds; ++r) {
      auto start = std::chrono::steady_clock::now();
      Ball ball{static_cast<std::uint64_t>(r), part};  // a named local: see the GCC 12 note in task.h
      Ball back = co_await ponger.call<&Ponger::ping>(ball);
      if (back.round != static_cast<std::uint64_t>(r) || back.payload.size() != payload) {
        throw std::runtime_error("ball " + std::to_string(r) + " came back wrong");
      }
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    co_return us;
  }
};
SCEPTRE_ACTOR(Pinger, rally);

ProcOptions options_for(const std::string& transport) {
  ProcOptions o;  // the secret comes from SCEPTRE_SECRET
  if (transport == "tcp") o.listen = "tcp:127.0.0.1:0";
  return o;
}

// The child proc: says where it serves, then serves until the controller closes its stdin.
int run_child(const std::string& hello_port, const std::string& transport) {
  Proc proc(options_for(transport));
  auto port = PortId::parse(hello_port);
  if (!port) {
    std::fprintf(stderr, "ping_pong child: %s\n", port.error().to_string().c_str());
    return 1;
  }
  PortRef<std::string>(*port).send(proc.id().to_string());
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}

int run_controller(const char* self, int rounds, const std::string& transport, std::uint64_t payload) {
  // A fresh per-job secret, handed to the child through its environment.
  std::random_device rd;
  std::string secret = std::to_string(rd()) + "-" + std::to_string(rd()) + "-" + std::to_string(rd());
  ::setenv("SCEPTRE_SECRET", secret.c_str(), 1);
  Proc proc(options_for(transport));
  auto [hello, hello_rx] = open_port<std::string>();
  // The child's environment: ours plus where to say hello (no setenv once threads run).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("SCEPTRE_PING_PONG_HELLO=" + hello.id().to_string());
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);

  int stdin_pipe[2];
  if (::pipe(stdin_pipe) != 0) return 1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_pipe[0], 0);
  posix_spawn_file_actions_addclose(&actions, stdin_pipe[1]);
  std::vector<std::string> args{self, "--transport", transport};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  if (posix_spawn(&child, self, &actions, nullptr, argv.data(), env.data()) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  ::close(stdin_pipe[0]);

  int code = 0;
  try {
    ProcId child_proc{hello_rx.recv(10s)};
    auto ponger = proc.spawn_on<Ponger>(child_proc, "ponger").get(10s);
    auto pinger = proc.spawn<Pinger>("pinger");
    std::printf("controller %d serves %s; child %d serves %s\n", ::getpid(), proc.id().to_string().c_str(),
                ponger.call<&Ponger::pid>().get(10s), child_proc.to_string().c_str());
    std::vector<double> us = pinger.call<&Pinger::rally>(ponger, rounds, payload).get(120s);
    std::sort(us.begin(), us.end());
    std::printf("%d actor round trips over %s with a %llu-byte part: p50 %.1f us, p99 %.1f us\n", rounds,
                transport.c_str(), static_cast<unsigned long long>(payload), us[us.size() / 2],
                us[us.size() * 99 / 100]);
    std::printf("ponger returned %llu balls\n",
                static_cast<unsigned long long>(ponger.call<&Ponger::returned>().get(10s)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ping_pong: %s\n", e.what());
    ::kill(child, SIGKILL);
    code = 1;
  }
  ::close(stdin_pipe[1]);  // the child's cue to exit
  int status = 0;
  ::waitpid(child, &status, 0);
  std::printf("child exited with status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return code == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sceptre example: two processes playing ping-pong through actors"};
  int rounds = 1000;
  std::string transport = "unix";
  std::uint64_t payload = 4096;
  app.add_option("--rounds", rounds, "round trips to time")->check(CLI::PositiveNumber);
  app.add_option("--transport", transport, "unix or tcp")->check(CLI::IsMember({"unix", "tcp"}));
  app.add_option("--payload", payload, "bytes in each ball's part");
  CLI11_PARSE(app, argc, argv);
  if (const char* hello = std::getenv("SCEPTRE_PING_PONG_HELLO")) return run_child(hello, transport);
  return run_controller(argv[0], rounds, transport, payload);
}
