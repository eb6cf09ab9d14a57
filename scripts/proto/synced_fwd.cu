// Prototype (not part of the library): forward of RMSNorm/LayerNorm for long rows by
// independent CTAs that each own a column chunk of a row (ticket in start order),
// publish the chunk's sums, wait for the row's other chunks, and normalize from
// registers. Measures the pattern's bandwidth against a device copy before any
// integration. nvcc -O3 -std=c++17 -arch=sm_90a scripts/proto/synced_fwd.cu -o /tmp/synced
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); std::exit(1); } } while (0)

template <class T> __device__ __forceinline__ void widen(const int4& v, float* f) {
  if constexpr (sizeof(T) == 4) { const float* p = reinterpret_cast<const float*>(&v); for (int i = 0; i < 4; ++i) f[i] = p[i]; }
  else { const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v); for (int i = 0; i < 4; ++i) { float2 q = __bfloat1622float2(p[i]); f[2*i] = q.x; f[2*i+1] = q.y; } }
}
template <class T> __device__ __forceinline__ int4 narrow(const float* f) {
  int4 v;
  if constexpr (sizeof(T) == 4) { float* p = reinterpret_cast<float*>(&v); for (int i = 0; i < 4; ++i) p[i] = f[i]; }
  else { __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&v); for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(f[2*i], f[2*i+1]); }
  return v;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}

template <class T, int TPR, int ITEMS, bool CENTER, bool RES>
__global__ void __launch_bounds__(TPR) synced_fwd(const T* x, const T* res, T* out, T* res_out, const T* w, const T* b,
                                                  float* partial, unsigned* counters, int N, int S, float eps) {
  constexpr int VEC = 16 / sizeof(T), WARPS = TPR / 32;
  __shared__ unsigned tk;
  __shared__ float red[2][WARPS];
  __shared__ float stats[2];
  if (threadIdx.x == 0) tk = atomicAdd(counters, 1u);
  __syncthreads();
  const unsigned t = tk;
  const int chunk = t % S;
  const long long row = t / S;
  const int4* xr = reinterpret_cast<const int4*>(x + row * N);
  const int4* rr = reinterpret_cast<const int4*>(res + row * N);
  const int base = chunk * TPR * ITEMS + threadIdx.x;
  int4 xv[ITEMS], rv[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) { xv[k] = xr[base + k * TPR]; if constexpr (RES) rv[k] = rr[base + k * TPR]; }
  float s1 = 0.f, s2 = 0.f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    float f[VEC]; widen<T>(xv[k], f);
    if constexpr (RES) {
      float g[VEC]; widen<T>(rv[k], g);
      for (int i = 0; i < VEC; ++i) f[i] += g[i];
      xv[k] = narrow<T>(f); widen<T>(xv[k], f);
      reinterpret_cast<int4*>(res_out + row * N)[base + k * TPR] = xv[k];
    }
    for (int i = 0; i < VEC; ++i) { s1 += f[i]; s2 += f[i] * f[i]; }
  }
  for (int o = 16; o; o >>= 1) { s1 += __shfl_xor_sync(~0u, s1, o); s2 += __shfl_xor_sync(~0u, s2, o); }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { red[0][warp] = s1; red[1][warp] = s2; }
  __syncthreads();
  if (warp == 0) {
    s1 = lane < WARPS ? red[0][lane] : 0.f; s2 = lane < WARPS ? red[1][lane] : 0.f;
    for (int o = 16; o; o >>= 1) { s1 += __shfl_xor_sync(~0u, s1, o); s2 += __shfl_xor_sync(~0u, s2, o); }
    if (lane == 0) {
      float* pp = partial + (row * S + chunk) * 2;
      pp[0] = s1; pp[1] = s2;
      __threadfence();
      atomicAdd(counters + 1 + row, 1u);
      while (ld_acquire(counters + 1 + row) < static_cast<unsigned>(S)) {}
    }
    __syncwarp();
    float a = 0.f, q = 0.f;
    for (int c = lane; c < S; c += 32) { a += __ldcg(partial + (row * S + c) * 2); q += __ldcg(partial + (row * S + c) * 2 + 1); }
    for (int o = 16; o; o >>= 1) { a += __shfl_xor_sync(~0u, a, o); q += __shfl_xor_sync(~0u, q, o); }
    if (lane == 0) {
      const float mean = CENTER ? a / N : 0.f;
      const float var = q / N - mean * mean;
      stats[0] = mean; stats[1] = rsqrtf(var + eps);
    }
  }
  __syncthreads();
  const float mean = stats[0], rstd = stats[1];
  const int4* wr = reinterpret_cast<const int4*>(w);
  const int4* br = reinterpret_cast<const int4*>(b);
  int4* orow = reinterpret_cast<int4*>(out + row * N);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    float f[VEC], g[VEC], h[VEC];
    widen<T>(xv[k], f); widen<T>(wr[base + k * TPR], g);
    if constexpr (CENTER) widen<T>(br[base + k * TPR], h);
    for (int i = 0; i < VEC; ++i) f[i] = (f[i] - mean) * rstd * g[i] + (CENTER ? h[i] : 0.f);
    orow[base + k * TPR] = narrow<T>(f);
  }
}

static float bf(uint16_t u) { uint32_t v = uint32_t(u) << 16; float f; memcpy(&f, &v, 4); return f; }
template <class T> static double hval(const std::vector<char>& buf, size_t i) {
  if constexpr (sizeof(T) == 4) return reinterpret_cast<const float*>(buf.data())[i];
  else return bf(reinterpret_cast<const uint16_t*>(buf.data())[i]);
}

struct Buffers { char *x, *r, *o, *ro, *w, *b; float* part; unsigned* cnt; };

template <class T, int TPR, int ITEMS, bool CENTER, bool RES>
void run(const Buffers& B, int N, long long M, float copy_us, const char* name) {
  constexpr int VEC = 16 / sizeof(T);
  const int chunk = TPR * ITEMS * VEC;
  if (N % chunk) return;
  const int S = N / chunk;
  auto launch = [&] {
    cudaMemsetAsync(B.cnt, 0, (1 + M) * 4);
    synced_fwd<T, TPR, ITEMS, CENTER, RES><<<unsigned(M * S), TPR>>>((const T*)B.x, (const T*)B.r, (T*)B.o, (T*)B.ro,
        (const T*)B.w, (const T*)B.b, B.part, B.cnt, N, S, 1e-5f);
  };
  CK(cudaMemset(B.o, 0xff, M * N * sizeof(T)));
  launch(); CK(cudaDeviceSynchronize());
  // check rows 0 and M-1 against a double reference
  double err = 0;
  for (long long row : {0LL, M - 1}) {
    std::vector<char> hx(N * sizeof(T)), hr(N * sizeof(T)), ho(N * sizeof(T)), hw(N * sizeof(T)), hb(N * sizeof(T));
    CK(cudaMemcpy(hx.data(), B.x + row * N * sizeof(T), N * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hr.data(), B.r + row * N * sizeof(T), N * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ho.data(), B.o + row * N * sizeof(T), N * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hw.data(), B.w, N * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), B.b, N * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<double> h(N);
    double s1 = 0, s2 = 0;
    for (int i = 0; i < N; ++i) { h[i] = hval<T>(hx, i) + (RES ? hval<T>(hr, i) : 0.0); s1 += h[i]; }
    const double mean = CENTER ? s1 / N : 0.0;
    for (int i = 0; i < N; ++i) s2 += (h[i] - mean) * (h[i] - mean);
    const double rstd = 1.0 / std::sqrt(s2 / N + 1e-5);
    for (int i = 0; i < N; ++i) {
      const double ref = (h[i] - mean) * rstd * hval<T>(hw, i) + (CENTER ? hval<T>(hb, i) : 0.0);
      const double got = hval<T>(ho, i);
      err = std::max(err, std::isnan(got) ? 1e9 : std::fabs(got - ref) / (1.0 + std::fabs(ref)));
    }
  }
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ts;
  for (int i = 0; i < 25; ++i) { cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000); }
  std::sort(ts.begin(), ts.end());
  const float us = ts[ts.size() / 2];
  printf("%-14s N=%-7d tpr=%-4d ept=%-3d S=%-3d  %8.1f us  ratio %.3f  err %.2e\n", name, N, TPR, ITEMS * VEC, S, us, copy_us / us, err);
}

float time_copy(char* dst, const char* src, size_t bytes) {
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
  std::vector<float> ts;
  for (int i = 0; i < 25; ++i) { cudaEventRecord(e0); cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000); }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

__global__ void fill(uint32_t* p, size_t n, uint32_t seed, bool fp32) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    float a = (h & 0xffff) / 65536.f * 2.f - 1.f, c = (h >> 16) / 65536.f * 2.f - 1.f;
    if (fp32) p[i] = __float_as_uint(a);
    else { __nv_bfloat162 v = __floats2bfloat162_rn(a, c); p[i] = *reinterpret_cast<uint32_t*>(&v); }
  }
}

template <class T, bool CENTER, bool RES>
void family(const Buffers& B, const char* name) {
  const long long E = 1LL << 27;
  for (int N : {32768, 65536, 131072, 262144}) {
    const long long M = E / N;
    const size_t bytes = size_t(E) * sizeof(T) * (RES ? 2 : 1);
    const float copy_us = time_copy(B.o, B.x, bytes);
    run<T, 256, 2, CENTER, RES>(B, N, M, copy_us, name);
    run<T, 256, 4, CENTER, RES>(B, N, M, copy_us, name);
    run<T, 512, 2, CENTER, RES>(B, N, M, copy_us, name);
    run<T, 512, 4, CENTER, RES>(B, N, M, copy_us, name);
    run<T, 128, 8, CENTER, RES>(B, N, M, copy_us, name);
    if constexpr (sizeof(T) == 4) run<T, 1024, 2, CENTER, RES>(B, N, M, copy_us, name);
  }
}

int main() {
  const size_t E = size_t(1) << 27, big = E * 4 * 2;  // room for fp32 pairs (copy of x with residual)
  Buffers B;
  CK(cudaMalloc(&B.x, big)); CK(cudaMalloc(&B.r, E * 4)); CK(cudaMalloc(&B.o, big)); CK(cudaMalloc(&B.ro, E * 4));
  CK(cudaMalloc(&B.w, 262144 * 4)); CK(cudaMalloc(&B.b, 262144 * 4));
  CK(cudaMalloc(&B.part, (1 << 20) * 8)); CK(cudaMalloc(&B.cnt, (1 << 20) * 4));
  int dev; cudaGetDevice(&dev); cudaDeviceProp prop; cudaGetDeviceProperties(&prop, dev);
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (int fp32 = 0; fp32 < 2; ++fp32) {
    fill<<<1024, 256>>>((uint32_t*)B.x, big / 4, 1, fp32); fill<<<1024, 256>>>((uint32_t*)B.r, E, 2, fp32);
    fill<<<64, 256>>>((uint32_t*)B.w, 262144, 3, fp32); fill<<<64, 256>>>((uint32_t*)B.b, 262144, 4, fp32);
    CK(cudaDeviceSynchronize());
    if (!fp32) {
      family<__nv_bfloat16, false, false>(B, "rms bf16");
      family<__nv_bfloat16, true, false>(B, "ln bf16");
      family<__nv_bfloat16, true, true>(B, "ln bf16 res");
    } else {
      family<float, true, false>(B, "ln fp32");
      family<float, false, true>(B, "rms fp32 res");
    }
  }
  return 0;
}
