// Channel benchmark: sceptre's unix and tcp channels beside the floor (plain blocking sockets
// doing the same exchange) and ZeroMQ (PAIR sockets), in one run. sceptre runs twice: with its
// I/O threads' default polling before they sleep ("sceptre") and with none ("no-poll": every
// wait sleeps in epoll_wait, as the floor sleeps in read and ZeroMQ in its poller).
//
// For each transport and CPU placement (both processes on one core; on different cores), and
// for each of --reps repetitions, the four implementations run one after another (interleaved),
// each as a fresh client process against a fresh server process (both forked):
//   latency     round trips of 64 B, 4 KiB and 1 MiB (p50 and p99 per repetition, after
//               an untimed warm-up of 10 % more round trips)
//   throughput  one-way stream of 64 B messages (messages/s) and 1 MiB messages (GB/s),
//               timed from the first send to the server's acknowledgement of the last.
// The table shows medians over repetitions and the ratios sceptre/floor, sceptre/ZeroMQ and
// no-poll/floor computed from those same-run medians.
//
//   channel_bench [--reps 5] [--quick]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "channel_messages.h"
#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"

namespace {

using namespace bench;
using namespace std::chrono_literals;
using sceptre::wire::Message;
using sceptre::wire::Part;

// --- parameters ------------------------------------------------------------------------------

struct Params {
  int lat_small = 2000;    // round trips for 64 B and 4 KiB
  int lat_large = 200;     // round trips for 1 MiB
  int thr_small = 400000;  // 64 B messages streamed
  int thr_large = 400;     // 1 MiB messages streamed
};
Params params;

const std::vector<std::size_t> kLatencySizes = {64, 4096, 1 << 20};

struct Sample {  // one implementation, one repetition
  std::map<std::size_t, std::pair<double, double>> latency_us;  // size -> (p50, p99)
  double small_msgs_per_s = 0;
  double large_gb_per_s = 0;
};

// --- floor: plain blocking sockets -------------------------------------------------------------

int floor_listen(bool tcp, std::string& addr) {
  int fd;
  if (tcp) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    socklen_t len = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    addr = std::to_string(ntohs(sa.sin_port));
  } else {
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    addr = "/tmp/sceptre-bench-floor-" + std::to_string(::getpid());
    ::unlink(addr.c_str());
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr.c_str());
    ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  ::listen(fd, 4);
  return fd;
}

int floor_connect(bool tcp, const std::string& addr) {
  int fd;
  if (tcp) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr)));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) std::abort();
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  } else {
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) std::abort();
  }
  return fd;
}

// Protocol: an 8-byte command {mode, size, count}; mode 0 echoes `count` messages of `size`,
// mode 1 reads count*size bytes and answers one byte.
struct FloorCmd {
  std::uint32_t mode, size, count;
};

Sample run_floor(bool tcp, int client_cpu, int server_cpu) {
  auto [pid, addr] = fork_server(server_cpu, [tcp](const auto& report) {
    std::string a;
    int lfd = floor_listen(tcp, a);
    report(a);
    int fd = ::accept(lfd, nullptr, nullptr);
    if (tcp) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    std::vector<char> buf(1 << 20);
    FloorCmd cmd;
    while (read_full(fd, &cmd, sizeof(cmd))) {
      if (cmd.mode == 0) {
        for (std::uint32_t i = 0; i < cmd.count; ++i) {
          if (!read_full(fd, buf.data(), cmd.size) || !write_full(fd, buf.data(), cmd.size)) return;
        }
      } else {
        std::size_t left = std::size_t{cmd.size} * cmd.count;
        while (left) {
          ssize_t r = ::read(fd, buf.data(), std::min(left, buf.size()));
          if (r <= 0) return;
          left -= static_cast<std::size_t>(r);
        }
        char one = 1;
        write_full(fd, &one, 1);
      }
    }
  });
  pin(client_cpu);
  int fd = floor_connect(tcp, addr);
  Sample s;
  std::vector<char> buf(1 << 20, 'x');
  for (std::size_t size : kLatencySizes) {
    int n = size >= (1 << 20) ? params.lat_large : params.lat_small;
    FloorCmd cmd{0, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(n + warmup(n))};
    write_full(fd, &cmd, sizeof(cmd));
    std::vector<double> us;
    for (int i = 0; i < n + warmup(n); ++i) {
      auto t = Clock::now();
      write_full(fd, buf.data(), size);
      read_full(fd, buf.data(), size);
      if (i >= warmup(n)) us.push_back(us_since(t));
    }
    s.latency_us[size] = percentiles(us);
  }
  for (auto [size, n] : {std::pair<std::size_t, int>{64, params.thr_small}, {1 << 20, params.thr_large}}) {
    FloorCmd cmd{1, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(n)};
    write_full(fd, &cmd, sizeof(cmd));
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) write_full(fd, buf.data(), size);  // one system call per message
    char ack;
    read_full(fd, &ack, 1);
    double sec = us_since(t) / 1e6;
    if (size == 64) s.small_msgs_per_s = n / sec;
    else s.large_gb_per_s = double(size) * n / sec / 1e9;
  }
  ::close(fd);
  reap(pid);
  return s;
}

// --- ZeroMQ: PAIR sockets ------------------------------------------------------------------------

Sample run_zmq(bool tcp, int client_cpu, int server_cpu) {
  auto [pid, addr] = fork_server(server_cpu, [tcp](const auto& report) {
    void* ctx = zmq_ctx_new();
    void* sock = zmq_socket(ctx, ZMQ_PAIR);
    std::string bind = tcp ? "tcp://127.0.0.1:*" : "ipc:///tmp/sceptre-bench-zmq-" + std::to_string(::getpid());
    zmq_bind(sock, bind.c_str());
    char endpoint[256];
    std::size_t len = sizeof(endpoint);
    zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, endpoint, &len);
    report(endpoint);
    std::vector<char> buf(1 << 20);
    FloorCmd cmd;
    while (zmq_recv(sock, &cmd, sizeof(cmd), 0) == sizeof(cmd)) {
      if (cmd.mode == 0) {
        for (std::uint32_t i = 0; i < cmd.count; ++i) {
          int n = zmq_recv(sock, buf.data(), buf.size(), 0);
          zmq_send(sock, buf.data(), static_cast<std::size_t>(n), 0);
        }
      } else {
        for (std::uint32_t i = 0; i < cmd.count; ++i) zmq_recv(sock, buf.data(), buf.size(), 0);
        char one = 1;
        zmq_send(sock, &one, 1, 0);
      }
    }
  });
  pin(client_cpu);
  void* ctx = zmq_ctx_new();
  void* sock = zmq_socket(ctx, ZMQ_PAIR);
  zmq_connect(sock, addr.c_str());
  Sample s;
  std::vector<char> buf(1 << 20, 'x');
  for (std::size_t size : kLatencySizes) {
    int n = size >= (1 << 20) ? params.lat_large : params.lat_small;
    FloorCmd cmd{0, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(n + warmup(n))};
    zmq_send(sock, &cmd, sizeof(cmd), 0);
    std::vector<double> us;
    for (int i = 0; i < n + warmup(n); ++i) {
      auto t = Clock::now();
      zmq_send(sock, buf.data(), size, 0);
      zmq_recv(sock, buf.data(), buf.size(), 0);
      if (i >= warmup(n)) us.push_back(us_since(t));
    }
    s.latency_us[size] = percentiles(us);
  }
  for (auto [size, n] : {std::pair<std::size_t, int>{64, params.thr_small}, {1 << 20, params.thr_large}}) {
    FloorCmd cmd{1, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(n)};
    zmq_send(sock, &cmd, sizeof(cmd), 0);
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) zmq_send(sock, buf.data(), size, 0);
    char ack;
    zmq_recv(sock, &ack, 1, 0);
    double sec = us_since(t) / 1e6;
    if (size == 64) s.small_msgs_per_s = n / sec;
    else s.large_gb_per_s = double(size) * n / sec / 1e9;
  }
  int zero = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_close(sock);
  zmq_ctx_term(ctx);
  reap(pid);
  return s;
}

// --- sceptre channels ------------------------------------------------------------------------


// `poll`: how long each side's I/O thread polls before it sleeps (ContextOptions); the
// "sceptre" column runs the default, the "no poll" column zero (every wait sleeps in epoll).
Sample run_sceptre_with(bool tcp, int client_cpu, int server_cpu, std::optional<std::chrono::microseconds> poll) {
  using namespace sceptre::channel;
  ContextOptions io{poll};
  ChannelOptions options;
  options.secret = "bench-secret";
  auto [pid, addr] = fork_server(server_cpu, [&](const auto& report) {
    Context ctx(io);
    std::unique_ptr<Tx> back;
    std::uint64_t expect = 0;  // throughput mode: messages to count before acknowledging
    auto rx = serve(ctx, *ChannelAddr::parse(tcp ? "tcp:127.0.0.1:0" : "unix:@sceptre-bench-" + std::to_string(::getpid())),
                    options, [&](Message m) {
                      if (!back) {  // first message: "reply-address"
                        back = std::move(*dial(ctx, *ChannelAddr::parse(text_of(m)), options));
                        return;
                      }
                      if (expect == 0 && m.parts.empty() && m.body.size() > 0 && m.body[0] == std::byte{'#'}) {
                        expect = std::stoull(text_of(m).substr(1));  // "#count" starts a stream
                        return;
                      }
                      if (expect > 0) {
                        if (--expect == 0) (void)back->send(text_message("done"));
                        return;
                      }
                      (void)back->send(std::move(m));  // echo
                    });
    report((*rx)->address().to_string());
    for (;;) ::pause();
  });
  pin(client_cpu);
  Sample s;
  {
    Context ctx(io);
    Part large = Part::copy_of(std::string(1 << 20, 'x'));
    std::mutex mu;
    std::function<void(Message)> on_reply;
    auto rx = serve(ctx, *ChannelAddr::parse(tcp ? "tcp:127.0.0.1:0" : "unix:@sceptre-bench-c-" + std::to_string(::getpid())),
                    options, [&](Message m) {
                      std::lock_guard lock(mu);  // main thread swaps on_reply between phases
                      on_reply(std::move(m));
                    });
    auto tx = std::move(*dial(ctx, *ChannelAddr::parse(addr), options));
    (void)tx->send(text_message((*rx)->address().to_string()));

    for (std::size_t size : kLatencySizes) {
      int n = size >= (1 << 20) ? params.lat_large : params.lat_small;
      std::vector<double> us;
      us.reserve(n);
      std::promise<void> done;
      Clock::time_point start;
      std::unique_lock lock(mu);
      // The next ping leaves from the reply handler, on the I/O thread, as the floor's loop does.
      int skip = warmup(n);
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
      s.latency_us[size] = percentiles(us);
    }
    for (auto [size, n] : {std::pair<std::size_t, int>{64, params.thr_small}, {1 << 20, params.thr_large}}) {
      std::promise<void> done;
      {
        std::lock_guard lock(mu);
        on_reply = [&](Message) { done.set_value(); };
      }
      (void)tx->send(text_message("#" + std::to_string(n)));
      auto t = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (!tx->send(payload_message(size, large), 30s).ok()) std::abort();
      }
      done.get_future().wait();
      double sec = us_since(t) / 1e6;
      if (size == 64) s.small_msgs_per_s = n / sec;
      else s.large_gb_per_s = double(size) * n / sec / 1e9;
    }
    std::lock_guard lock(mu);
    on_reply = [](Message) {};
  }
  reap(pid);
  return s;
}

Sample run_sceptre(bool tcp, int client_cpu, int server_cpu) {
  return run_sceptre_with(tcp, client_cpu, server_cpu, std::nullopt);
}
Sample run_sceptre_no_poll(bool tcp, int client_cpu, int server_cpu) {
  return run_sceptre_with(tcp, client_cpu, server_cpu, std::chrono::microseconds(0));
}

// A Sample as bench::in_child carries it back through its pipe.
struct FlatSample {
  double latency[3][2];
  double small_msgs_per_s, large_gb_per_s;
};

Sample run_in_child(const std::function<Sample()>& client) {
  FlatSample flat = bench::in_child<FlatSample>(
      [&] {
        Sample s = client();
        FlatSample f{};
        for (std::size_t i = 0; i < kLatencySizes.size(); ++i) {
          f.latency[i][0] = s.latency_us.at(kLatencySizes[i]).first;
          f.latency[i][1] = s.latency_us.at(kLatencySizes[i]).second;
        }
        f.small_msgs_per_s = s.small_msgs_per_s;
        f.large_gb_per_s = s.large_gb_per_s;
        return f;
      },
      "channel_bench");
  Sample s;
  for (std::size_t i = 0; i < kLatencySizes.size(); ++i) {
    s.latency_us[kLatencySizes[i]] = {flat.latency[i][0], flat.latency[i][1]};
  }
  s.small_msgs_per_s = flat.small_msgs_per_s;
  s.large_gb_per_s = flat.large_gb_per_s;
  return s;
}

// --- report --------------------------------------------------------------------------------------

std::string human_size(std::size_t n) {
  if (n >= (1 << 20)) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sceptre channel benchmark: sceptre vs plain sockets (floor) vs ZeroMQ"};
  int reps = 5;
  bool quick = false;
  app.add_option("--reps", reps, "repetitions (interleaved)");
  app.add_flag("--quick", quick, "fewer iterations (a smoke run, not for reporting)");
  std::string only;
  app.add_option("--only", only, "run one implementation (for profiling)")
      ->check(CLI::IsMember({"floor", "zeromq", "sceptre", "no-poll"}));
  CLI11_PARSE(app, argc, argv);
  if (quick) params = Params{200, 20, 20000, 40};
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) std::fprintf(stderr, "warning: fewer than 2 CPUs\n");

  std::printf("channel_bench: %d repetitions, medians over repetitions; ratios from same-run medians\n", reps);
  std::printf("latency: round trip, p50/p99 in us; throughput: one-way, 64 B in M msg/s, 1 MiB in GB/s\n\n");
  for (bool tcp : {false, true}) {
    for (auto [placement, server_cpu] : {std::pair<const char*, int>{"same core (0,0)", 0}, {"cross cores (0,1)", 1}}) {
      std::map<std::string, std::vector<Sample>> samples;
      for (int r = 0; r < reps; ++r) {
        for (auto [name, run] : {std::pair<const char*, Sample (*)(bool, int, int)>{"floor", run_floor},
                                 {"zeromq", run_zmq}, {"sceptre", run_sceptre},
                                 {"no-poll", run_sceptre_no_poll}}) {
          if (only.empty() || only == name) {
            samples[name].push_back(run_in_child([&, run = run] { return run(tcp, 0, server_cpu); }));
          }
        }
      }
      if (!only.empty()) {  // profiling runs: just this implementation's medians
        auto one = [&](auto get) {
          std::vector<double> v;
          for (const Sample& s : samples[only]) v.push_back(get(s));
          return median(v);
        };
        std::printf("%s %s %s: rtt p50 64 B %.1f us, 64 B %.3f M msg/s, 1 MiB %.3f GB/s\n",
                    only.c_str(), tcp ? "tcp" : "unix", placement,
                    one([](const Sample& s) { return s.latency_us.at(64).first; }),
                    one([](const Sample& s) { return s.small_msgs_per_s / 1e6; }),
                    one([](const Sample& s) { return s.large_gb_per_s; }));
        continue;
      }
      auto med = [&](const char* impl, auto get) {
        std::vector<double> v;
        for (const Sample& s : samples[impl]) v.push_back(get(s));
        return median(v);
      };
      std::printf("== %s, %s ==\n", tcp ? "tcp" : "unix", placement);
      std::printf("%-22s %10s %10s %10s %10s %9s %9s %9s\n", "measure", "floor", "zeromq", "sceptre",
                  "no-poll", "/floor", "/zeromq", "np/floor");
      auto row = [&](const std::string& name, auto get, int digits) {
        double f = med("floor", get), z = med("zeromq", get), sc = med("sceptre", get),
               np = med("no-poll", get);
        std::printf("%-22s %10.*f %10.*f %10.*f %10.*f %8.2fx %8.2fx %8.2fx\n", name.c_str(), digits, f,
                    digits, z, digits, sc, digits, np, sc / f, sc / z, np / f);
      };
      for (std::size_t size : kLatencySizes) {
        row("rtt p50 " + human_size(size) + " (us)", [size](const Sample& s) { return s.latency_us.at(size).first; }, 1);
        row("rtt p99 " + human_size(size) + " (us)", [size](const Sample& s) { return s.latency_us.at(size).second; }, 1);
      }
      row("64 B (M msg/s)", [](const Sample& s) { return s.small_msgs_per_s / 1e6; }, 3);
      row("1 MiB (GB/s)", [](const Sample& s) { return s.large_gb_per_s; }, 3);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
