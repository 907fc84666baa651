// Actors in real processes: a peer process (this binary, re-executed) serves a proc; the test
// spawns actors there from messages, calls them over unix and tcp, and kills the peer mid-call.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include "actor/test_actors.h"

extern char** environ;

namespace sceptre::testing {
namespace {

class PeerProcess {
 public:
  explicit PeerProcess(const std::string& listen) {
    int out[2], in[2];
    SCEPTRE_CHECK(::pipe(out) == 0 && ::pipe(in) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    env_strings.push_back("SCEPTRE_ACTOR_TEST_PEER=" + listen);
    std::vector<char*> env;
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    SCEPTRE_CHECK(posix_spawn(&pid_, self, &actions, nullptr, argv, env.data()) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(in[0]);
    stdin_ = in[1];
    FILE* f = ::fdopen(out[0], "r");
    char line[512] = {};
    SCEPTRE_CHECK(std::fgets(line, sizeof(line), f) != nullptr);
    std::fclose(f);
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    id_ = ProcId{text};
  }
  ~PeerProcess() {
    ::close(stdin_);
    if (pid_ > 0) {
      // A clean exit, so a sanitizer's report in the peer fails the test too.
      int status = 0;
      ::waitpid(pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "peer exit status " << status;
    }
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const ProcId& id() const { return id_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  ProcId id_;
};

class ProcessTest : public ::testing::TestWithParam<std::string> {
 protected:
  Proc proc{test_options()};
  ProcScope scope{proc};
};

TEST_P(ProcessTest, ActorsInAnotherProcess) {
  PeerProcess peer(GetParam());
  auto remote = proc.spawn_on<Counter>(peer.id(), "remote", 10).get(10s);
  EXPECT_EQ(remote.id().proc, peer.id());
  EXPECT_EQ(remote.call<&Counter::pid>().get(10s), peer.pid());
  EXPECT_EQ(remote.call<&Counter::add>(5).get(10s), 15);

  // Coroutines across processes, both ways.
  auto local = proc.spawn<Counter>("local", 100);
  EXPECT_EQ(local.call<&Counter::add_via>(remote, 1).get(10s), 160);
  EXPECT_EQ(remote.call<&Counter::add_via>(local, 1).get(10s), 1020);  // remote is now 17

  // Parts travel beside the body, intact.
  Blob blob{wire::Part::copy_of(std::string(4 << 20, 'p')), "big"};
  EXPECT_EQ(remote.call<&Counter::echo_blob>(blob).get(30s).data, blob.data);

  // Errors keep their type and where they came from.
  try {
    remote.call<&Counter::boom>(std::string("far away")).get(10s);
    FAIL();
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.exception_type(), "std::out_of_range");
    EXPECT_EQ(e.message(), "far away");
    EXPECT_EQ(e.actor(), remote.id().to_string());
  }
  EXPECT_THROW(ActorRef<Other>(remote.id()).call<&Other::only_here>().get(10s), CallError);
  ActorId ghost = remote.id();
  ghost.index += 100;
  EXPECT_THROW(ActorRef<Counter>(ghost).call<&Counter::get>().get(10s), CallError);

  // A port in this process fed by the remote actor.
  auto [port, rx] = open_port<int>();
  remote.send<&Counter::report_to>(port, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rx.recv(10s), 17 + i);
}

TEST_P(ProcessTest, PerSenderOrderAcrossProcesses) {
  PeerProcess peer(GetParam());
  auto remote = proc.spawn_on<Counter>(peer.id(), "ordered").get(10s);
  constexpr int kSenders = 4, kEach = 20000;
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      ProcScope in(proc);
      for (int i = 0; i < kEach; ++i) remote.send<&Counter::record>(s, i);
    });
  }
  for (auto& t : senders) t.join();
  auto [recorded, violations] = remote.call<&Counter::order_stats>().get(60s);
  EXPECT_EQ(recorded, kSenders * kEach);
  EXPECT_EQ(violations, 0);
}

TEST_P(ProcessTest, CallsToAKilledPeerFailInsteadOfHanging) {
  Proc quick(test_options("", 3s));  // undeliverable calls fail after 3 s
  ProcScope in(quick);
  PeerProcess peer(GetParam());
  auto remote = quick.spawn_on<Counter>(peer.id(), "doomed").get(10s);
  EXPECT_EQ(remote.call<&Counter::add>(1).get(10s), 1);
  peer.kill();
  // The channel cannot reconnect; its delivery timeout (3 s here) hands the call back.
  // (A call the peer had already received when it died waits for the supervision layer's
  // failure detection, or its caller's get(timeout).)
  try {
    remote.call<&Counter::get>().get(30s);
    FAIL();
  } catch (const CallError& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("undeliverable"), std::string::npos) << e.what();
  }
  // A later proc on the same machine is reachable again: the failed channel is replaced.
  PeerProcess again(GetParam());
  auto fresh = quick.spawn_on<Counter>(again.id(), "fresh", 2).get(10s);
  EXPECT_EQ(fresh.call<&Counter::get>().get(10s), 2);
}

INSTANTIATE_TEST_SUITE_P(Transports, ProcessTest, ::testing::Values("", "tcp:127.0.0.1:0"),
                         [](const auto& info) { return info.param.empty() ? std::string("unix") : std::string("tcp"); });

}  // namespace
}  // namespace sceptre::testing
