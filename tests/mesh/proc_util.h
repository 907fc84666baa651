// Helpers of the mesh tests for processes: is a pid alive, run this binary as a child
// controller and read what it prints.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sceptre::testing {

using namespace std::chrono_literals;

// True while `pid` exists and is not a zombie.
inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

inline bool gone_within(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any |= alive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Runs this binary with `args` and extra environment; its stdout comes back through a pipe.
struct Child {
  pid_t pid = 0;
  FILE* out = nullptr;
};
// Runs `argv` (argv[0] a path) likewise.
inline Child run_program(std::vector<std::string> args, std::vector<std::string> env = {}, bool merge_stderr = false);
// With `merge_stderr`, its stderr comes through the same pipe.
inline Child run_self(std::vector<std::string> args, std::vector<std::string> env = {}, bool merge_stderr = false) {
  args.insert(args.begin(), "/proc/self/exe");
  return run_program(std::move(args), std::move(env), merge_stderr);
}
inline Child run_program(std::vector<std::string> args, std::vector<std::string> env, bool merge_stderr) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  if (merge_stderr) posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> all_env;
  for (char** e = environ; *e; ++e) all_env.emplace_back(*e);
  all_env.insert(all_env.end(), env.begin(), env.end());
  std::vector<char*> envp, argv;
  for (auto& s : all_env) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  return Child{pid, ::fdopen(fds[0], "r")};
}
inline std::string read_line(FILE* f) {
  char buf[4096];
  if (!std::fgets(buf, sizeof buf, f)) return "";
  std::string s(buf);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}
inline std::vector<std::string> read_all_lines(FILE* f) {
  std::vector<std::string> lines;
  for (std::string l; !(l = read_line(f)).empty() || !std::feof(f);) {
    if (!l.empty()) lines.push_back(l);
  }
  return lines;
}
// The pids of a "PIDS a b c" line (none when the next line is not one).
inline std::vector<pid_t> read_pids(FILE* f) {
  std::istringstream in(read_line(f));
  std::string word;
  in >> word;
  std::vector<pid_t> pids;
  if (word != "PIDS") return pids;
  for (pid_t p; in >> p;) pids.push_back(p);
  return pids;
}
inline int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace sceptre::testing
