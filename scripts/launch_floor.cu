// Host time per kernel launch, back to back, with no Python and no PyTorch: the driver's
// floor under issue 4's 5 us eager call (scripts/host_breakdown.py times the layers above it).
// Runtime <<<>>>, cuLaunchKernel, and cuLaunchKernelEx with the PDL attribute that normkit's
// launches carry; 10,000 launches a round, median of 5 rounds.
//
//   nvcc -O2 -arch=sm_90 -o /tmp/launch_floor scripts/launch_floor.cu -lcuda && /tmp/launch_floor
//
// A diagnostic, not a test: needs a CUDA device.
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
__global__ void empty_kernel() {}
__global__ void three_args(const float* x, float* y, int n) { if (threadIdx.x == 0 && n < 0) y[0] = x[0]; }
int main() {
  cudaFree(0);
  float *x, *y; cudaMalloc(&x, 1 << 20); cudaMalloc(&y, 1 << 20);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  CUfunction f; cudaGetFuncBySymbol((cudaFunction_t*)&f, (const void*)three_args);
  const int calls = 10000;
  auto bench = [&](const char* name, auto fn) {
    for (int i = 0; i < 500; ++i) fn();
    cudaStreamSynchronize(s);
    std::vector<double> r;
    for (int k = 0; k < 5; ++k) {
      auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) fn();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / calls;
      cudaStreamSynchronize(s);
      r.push_back(us);
    }
    std::sort(r.begin(), r.end());
    printf("%-40s %6.2f us/launch (min %.2f max %.2f)\n", name, r[2], r[0], r[4]);
  };
  bench("runtime <<<1,32>>> empty", [&] { empty_kernel<<<1, 32, 0, s>>>(); });
  bench("runtime <<<1,32>>> 3 args", [&] { three_args<<<1, 32, 0, s>>>(x, y, 4096); });
  int n = 4096; void* args[] = {&x, &y, &n};
  bench("driver cuLaunchKernel 3 args", [&] { cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr); });
  CUlaunchConfig cfg{}; cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1; cfg.blockDimX = 32; cfg.blockDimY = cfg.blockDimZ = 1; cfg.hStream = s;
  CUlaunchAttribute pdl{}; pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; pdl.value.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &pdl; cfg.numAttrs = 1;
  bench("driver cuLaunchKernelEx 3 args + PDL", [&] { cuLaunchKernelEx(&cfg, f, args, nullptr); });
  printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
}
