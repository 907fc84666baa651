// Actor benchmark: sceptre actors beside their floor (sceptre channels doing the same exchange)
// and two peers, CAF remote actors and gRPC, in one run. Method as in channel_bench:
//
// For each transport (unix, tcp) and CPU placement (both processes on CPU 0; CPU 0 and 1),
// and for each of --reps repetitions, the implementations run one after another
// (interleaved), each as a fresh client process against a fresh server process (both forked):
//   latency     round trips of 64 B and 1 MiB (p50 and p99 per repetition, after an untimed
//               warm-up of 10 % more round trips)
//   throughput  one-way stream of 64 B messages (messages/s), timed from the first send to
//               the server's "done" after the last.
// The table shows medians over repetitions and the ratios sceptre/floor, sceptre/CAF and
// sceptre/gRPC computed from those same-run medians. CAF's network layer is tcp only; gRPC
// runs over a unix socket in the unix rows. A "-" is a number not measured (--only, or an
// implementation that returned zeros).
//
//   actor_bench [--reps 5] [--quick] [--only floor,sceptre,caf,grpc]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actor_peers.h"

namespace {

using namespace bench;

struct Impl {
  const char* name;
  bool tcp_only;
  Sample (*run)(bool tcp, int client_cpu, int server_cpu);
};

const Impl kImpls[] = {
    {"floor", false, run_channel_floor},
    {"sceptre", false, run_sceptre_actors},
    {"caf", true, [](bool, int client_cpu, int server_cpu) { return run_caf(client_cpu, server_cpu); }},
    {"grpc", false, [](bool tcp, int client_cpu, int server_cpu) { return run_grpc(!tcp, client_cpu, server_cpu); }},
};

// One table cell: a value, or "-" where nothing was measured.
std::string cell(double v, int digits) {
  if (!(v > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string ratio(double num, double den) {
  if (!(num > 0) || !(den > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", num / den);
  return buf;
}

struct Measure {
  const char* label;
  double (*get)(const Sample&);
  int digits;
};

const Measure kMeasures[] = {
    {"rtt p50 64 B (us)", [](const Sample& s) { return s.small.p50; }, 1},
    {"rtt p99 64 B (us)", [](const Sample& s) { return s.small.p99; }, 1},
    {"rtt p50 1 MiB (us)", [](const Sample& s) { return s.large.p50; }, 1},
    {"rtt p99 1 MiB (us)", [](const Sample& s) { return s.large.p99; }, 1},
    {"64 B (M msg/s)", [](const Sample& s) { return s.msgs_per_s / 1e6; }, 3},
};

void print_table(bool tcp, const char* placement, const std::map<std::string, std::vector<Sample>>& samples) {
  auto med = [&](const char* impl, const Measure& m) {
    auto it = samples.find(impl);
    if (it == samples.end()) return 0.0;
    std::vector<double> v;
    for (const Sample& s : it->second) v.push_back(m.get(s));
    return median(v);
  };
  std::printf("== %s, %s ==\n", tcp ? "tcp" : "unix", placement);
  std::printf("%-20s %10s %10s %10s %10s %14s %12s %13s\n", "measure", "floor", "sceptre", "caf", "grpc",
              "sceptre/floor", "sceptre/caf", "sceptre/grpc");
  for (const Measure& m : kMeasures) {
    double f = med("floor", m), sc = med("sceptre", m), c = med("caf", m), g = med("grpc", m);
    std::printf("%-20s %10s %10s %10s %10s %14s %12s %13s\n", m.label, cell(f, m.digits).c_str(),
                cell(sc, m.digits).c_str(), cell(c, m.digits).c_str(), cell(g, m.digits).c_str(),
                ratio(sc, f).c_str(), ratio(sc, c).c_str(), ratio(sc, g).c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sceptre actor benchmark: sceptre actors vs their channel floor vs CAF vs gRPC"};
  int reps = 5;
  bool quick = false;
  std::vector<std::string> only;
  app.add_option("--reps", reps, "repetitions (interleaved)")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "a tenth of the iterations (a smoke run, not for reporting)");
  app.add_option("--only", only, "implementations to run, comma-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"floor", "sceptre", "caf", "grpc"}));
  CLI11_PARSE(app, argc, argv);
  if (quick) params = Params{params.rtt_small / 10, params.rtt_large / 10, params.stream / 10};
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) std::fprintf(stderr, "warning: fewer than 2 CPUs\n");
  auto wanted = [&](const char* name) { return only.empty() || std::find(only.begin(), only.end(), name) != only.end(); };

  std::printf("actor_bench: %d repetitions, medians over repetitions; ratios from same-run medians\n", reps);
  std::printf("latency: round trip, p50/p99 in us; throughput: one-way 64 B in M msg/s\n");
  std::printf("floor: sceptre channels; caf: tcp only; grpc: unix socket in the unix rows\n\n");
  for (bool tcp : {false, true}) {
    for (auto [placement, server_cpu] : {std::pair<const char*, int>{"same core (0,0)", 0}, {"cross cores (0,1)", 1}}) {
      std::map<std::string, std::vector<Sample>> samples;
      for (int r = 0; r < reps; ++r) {
        for (const Impl& impl : kImpls) {
          if (!wanted(impl.name) || (impl.tcp_only && !tcp)) continue;
          samples[impl.name].push_back(
              in_child<Sample>([&, run = impl.run] { return run(tcp, 0, server_cpu); }, "actor_bench"));
        }
      }
      print_table(tcp, placement, samples);
    }
  }
  return 0;
}
