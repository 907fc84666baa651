// The device-side self-check: a kernel in the subset CUDA and HIP share, compiled by nvcc for
// NVIDIA (sm_80, sm_90) and by hipcc for AMD (gfx90a, gfx940) on every build that has the
// toolchains — CI always — so that both stay proven while the project writes no kernels of its
// own. The one vendor condition is the header HIP needs for threadIdx and friends.
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

extern "C" __global__ void sceptre_selfcheck_axpy(float a, const float* x, float* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
