// Runtime self-test kernel: y = a*x + y over fp32. Deliberately trivial: it exists
// to prove the JIT path (embedded header -> NVRTC -> cache -> load -> launch) and
// stream ordering, not to be fast. UNROLL only varies the instantiation.
#pragma once

namespace nk_selftest {

template <int UNROLL>
__global__ void axpy_kernel(const float* __restrict__ x, float* __restrict__ y, long long n, float a) {
  const long long base = static_cast<long long>(blockIdx.x) * blockDim.x * UNROLL + threadIdx.x;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const long long i = base + static_cast<long long>(u) * blockDim.x;
    if (i < n) y[i] = a * x[i] + y[i];
  }
}

}  // namespace nk_selftest
