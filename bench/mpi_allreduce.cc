// The Open MPI reference of ft_bench's allreduce part: MPI_Allreduce (sum, float32) of each size,
// over TCP on loopback (mpirun's --mca btl tcp,self), timed as the slowest rank's time per call.
//
//   mpirun -np N mpi_allreduce ITERATIONS MIB...
// Rank 0 prints one line per size: "mpi np=N mib=M seconds=S" (the median over ITERATIONS).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 21;
  for (int a = 2; a < argc; ++a) {
    const std::size_t len = static_cast<std::size_t>(std::atoi(argv[a])) * (1u << 20) / sizeof(float);
    std::vector<float> in(len, 1.0f), out(len);
    std::vector<double> seconds;
    for (int i = -2; i < iterations; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t = bench::Clock::now();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(len), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double mine = bench::us_since(t) / 1e6, slowest = 0;
      MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (i >= 0) seconds.push_back(slowest);
      if (out[len / 2] != static_cast<float>(size)) {
        std::fprintf(stderr, "mpi: wrong sum %f at iteration %d\n", out[len / 2], i);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    if (rank == 0) std::printf("mpi np=%d mib=%s seconds=%.6f\n", size, argv[a], bench::median(seconds));
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
