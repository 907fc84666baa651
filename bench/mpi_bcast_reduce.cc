// The reference of mesh_bench: Open MPI's broadcast of 64 bytes from rank 0 followed by a sum
// reduction of 64 bytes (8 int64) back to rank 0 — what a call with a sum is, in MPI. Open MPI
// busy-polls, so it never pays this VM's cross-core wake-up; it is reported, not a target.
//
//   mpirun -np N mpi_bcast_reduce ITERATIONS
// Rank 0 prints one line: "mpi np=N p50_us=... p99_us=...".
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000;
  std::int64_t in[8], out[8];
  std::vector<double> us;
  for (int i = -bench::warmup(iterations); i < iterations; ++i) {
    auto t = bench::Clock::now();
    for (auto& v : in) v = i;
    MPI_Bcast(in, sizeof in, MPI_BYTE, 0, MPI_COMM_WORLD);
    for (auto& v : in) v += rank;
    MPI_Reduce(in, out, 8, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && i >= 0) us.push_back(bench::us_since(t));
    if (rank == 0 && out[0] != static_cast<std::int64_t>(i) * size + static_cast<std::int64_t>(size) * (size - 1) / 2) {
      std::fprintf(stderr, "mpi: wrong sum at iteration %d\n", i);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  if (rank == 0) {
    auto [p50, p99] = bench::percentiles(us);
    std::printf("mpi np=%d p50_us=%.1f p99_us=%.1f\n", size, p50, p99);
  }
  MPI_Finalize();
  return 0;
}
