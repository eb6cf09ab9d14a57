// Prototype (not part of the library): forward of RMSNorm/LayerNorm for long rows by a
// persistent grid of plain CTAs (no cluster: every SM usable, not only whole GPC
// slices) in groups of S, each CTA owning one slice of every row its group takes.
// Rows come by cp.async.bulk into a ring of shared-memory stages; the group combines
// its slices' sums through global memory (publish, count, spin), the ring loading
// the next rows meanwhile. nvcc -O3 -std=c++17 -arch=sm_90a scripts/proto/vring_fwd.cu
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(unsigned long long* b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem(dst)), "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(smem(b)) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* b, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(smem(b)), "r"(parity) : "memory");
}

template <int TPR> struct Reduce {
  float part[2][2][TPR / 32];
  unsigned uses = 0;
};
// Sum over the CTA of a (and b); alternating slots so one barrier a sum suffices.
template <int TPR>
__device__ __forceinline__ void cta_sum(float& a, float& b, float (&part)[2][2][TPR / 32], unsigned& use) {
  for (int o = 16; o; o >>= 1) { a += __shfl_xor_sync(~0u, a, o); b += __shfl_xor_sync(~0u, b, o); }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slot = use++ & 1u;
  if (lane == 0) { part[slot][0][warp] = a; part[slot][1][warp] = b; }
  __syncthreads();
  a = 0.f; b = 0.f;
#pragma unroll
  for (int w = 0; w < TPR / 32; ++w) { a += part[slot][0][w]; b += part[slot][1][w]; }
}

template <class T, int TPR, int ITEMS, bool CENTER, bool RES, int MINB>
__global__ void __launch_bounds__(TPR, MINB) vring_fwd(const T* x, const T* res, T* out, T* res_out, const T* w, const T* b,
                                                      float2* partial, unsigned* counters, long long M, int N, int S,
                                                      int stages, float eps) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int SLICE_V = TPR * ITEMS;            // vectors of a slice
  constexpr unsigned X_BYTES = SLICE_V * 16;
  constexpr unsigned STAGE_BYTES = X_BYTES * (RES ? 2 : 1);
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ unsigned long long full[16];
  __shared__ float part[2][2][TPR / 32];
  __shared__ float2 stats;
  unsigned uses = 0;
  const int rank = blockIdx.x % S;
  const long long first = blockIdx.x / S, stride = gridDim.x / S;
  const long long col0 = static_cast<long long>(rank) * SLICE_V * VEC;
  auto issue = [&](long long r, int s) {
    if (r >= M) return;
    bar_expect(&full[s], STAGE_BYTES);
    bulk(ring + s * STAGE_BYTES, x + r * N + col0, X_BYTES, &full[s]);
    if constexpr (RES) bulk(ring + s * STAGE_BYTES + X_BYTES, res + r * N + col0, X_BYTES, &full[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bar_init(&full[s]);
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
    for (int s = 0; s < stages; ++s) issue(first + s * stride, s);
  }
  __syncthreads();
  int s = 0;
  unsigned phase = 0;
  for (long long r = first; r < M; r += stride) {
    bar_wait(&full[s], phase);
    int4 xv[ITEMS];
    float sa = 0.f, sb = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int v = k * TPR + threadIdx.x;
      xv[k] = reinterpret_cast<const int4*>(ring + s * STAGE_BYTES)[v];
      float f[VEC]; widen<T>(xv[k], f);
      if constexpr (RES) {
        float g[VEC]; widen<T>(reinterpret_cast<const int4*>(ring + s * STAGE_BYTES + X_BYTES)[v], g);
        for (int i = 0; i < VEC; ++i) f[i] += g[i];
        xv[k] = narrow<T>(f); widen<T>(xv[k], f);
        reinterpret_cast<int4*>(res_out + r * N + col0)[v] = xv[k];
      }
      for (int i = 0; i < VEC; ++i) { sa += f[i]; sb += f[i] * f[i]; }
    }
    cta_sum<TPR>(sa, sb, part, uses);  // every thread past its stage reads
    if (threadIdx.x == 0) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(r + stages * stride, s);
    }
    float slice_mean = 0.f, slice_m2 = sb;
    if constexpr (CENTER) {
      slice_mean = sa / (SLICE_V * VEC);
      float q = 0.f, unused = 0.f;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) { float f[VEC]; widen<T>(xv[k], f); for (int i = 0; i < VEC; ++i) { const float d = f[i] - slice_mean; q += d * d; } }
      cta_sum<TPR>(q, unused, part, uses);
      slice_m2 = q;
    }
    // weight (and bias) of the slice, asked before the wait
    int4 wv[ITEMS], bv[CENTER ? ITEMS : 1];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int v = k * TPR + threadIdx.x;
      wv[k] = reinterpret_cast<const int4*>(w + col0)[v];
      if constexpr (CENTER) bv[k] = reinterpret_cast<const int4*>(b + col0)[v];
    }
    if (threadIdx.x < 32) {
      if (threadIdx.x == 0) {
        partial[r * S + rank] = make_float2(slice_mean, slice_m2);
        red_release(counters + r, 1u);
        while (ld_acquire(counters + r) < static_cast<unsigned>(S)) {}
      }
      __syncwarp();
      const int lane = threadIdx.x;
      float m = 0.f;
      float2 mine[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = lane + 32 * j;
        mine[j] = c < S ? __ldcg(partial + r * S + c) : make_float2(0.f, 0.f);
        m += mine[j].x;
      }
      for (int o = 16; o; o >>= 1) m += __shfl_xor_sync(~0u, m, o);
      const float mean = CENTER ? m / S : 0.f;
      float m2 = 0.f;
      const float n_c = SLICE_V * VEC;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = lane + 32 * j;
        if (c < S) { const float d = mine[j].x - mean; m2 += mine[j].y + (CENTER ? n_c * d * d : 0.f); }
      }
      for (int o = 16; o; o >>= 1) m2 += __shfl_xor_sync(~0u, m2, o);
      if (lane == 0) stats = make_float2(mean, 1.f / sqrtf(m2 / N + eps));
    }
    __syncthreads();
    const float mean = stats.x, rstd = stats.y;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int v = k * TPR + threadIdx.x;
      float f[VEC], g[VEC], h[VEC];
      widen<T>(xv[k], f); widen<T>(wv[k], g);
      if constexpr (CENTER) widen<T>(bv[k], h);
      for (int i = 0; i < VEC; ++i) f[i] = (f[i] - mean) * rstd * g[i] + (CENTER ? h[i] : 0.f);
      reinterpret_cast<int4*>(out + r * N + col0)[v] = narrow<T>(f);
    }
    if (++s == stages) { s = 0; phase ^= 1u; }
  }
}

static float bf(uint16_t u) { uint32_t v = uint32_t(u) << 16; float f; memcpy(&f, &v, 4); return f; }
template <class T> static double hval(const std::vector<char>& buf, size_t i) {
  if constexpr (sizeof(T) == 4) return reinterpret_cast<const float*>(buf.data())[i];
  else return bf(reinterpret_cast<const uint16_t*>(buf.data())[i]);
}
struct Buffers { char *x, *r, *o, *ro, *w, *b; float2* part; unsigned* cnt; int sms; };

template <class T, int TPR, int ITEMS, bool CENTER, bool RES, int MINB>
void run(const Buffers& B, int N, long long M, float copy_us, const char* name) {
  constexpr int VEC = 16 / sizeof(T);
  const int slice = TPR * ITEMS * VEC;
  if (N % slice || N / slice > 128) return;
  const int S = N / slice;
  const int stage_bytes = TPR * ITEMS * 16 * (RES ? 2 : 1);
  const int budget = (MINB == 1 ? 220 : 110) * 1024;
  const int stages = std::min(16, budget / stage_bytes);
  if (stages < 2) { printf("%-14s N=%-7d tpr=%-4d ept=%-3d minb=%d: no room for 2 stages\n", name, N, TPR, ITEMS * VEC, MINB); return; }
  auto kern = vring_fwd<T, TPR, ITEMS, CENTER, RES, MINB>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, stages * stage_bytes));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, TPR, stages * stage_bytes));
  const long long resident = static_cast<long long>(per_sm) * B.sms;
  long long groups = std::min<long long>(resident / S, M);
  if (groups < 1) { printf("%s: S=%d > resident %lld\n", name, S, resident); return; }
  const unsigned grid = static_cast<unsigned>(groups * S);
  auto launch = [&] {
    cudaMemsetAsync(B.cnt, 0, M * 4);
    kern<<<grid, TPR, stages * stage_bytes>>>((const T*)B.x, (const T*)B.r, (T*)B.o, (T*)B.ro, (const T*)B.w, (const T*)B.b,
                                              B.part, B.cnt, M, N, S, stages, 1e-5f);
  };
  CK(cudaMemset(B.o, 0xff, M * N * sizeof(T)));
  launch(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  double err = 0;
  for (long long row : {0LL, M / 2 + 1, M - 1}) {
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
  printf("%-14s N=%-7d tpr=%-4d ept=%-3d minb=%d S=%-3d stages=%-2d grid=%-4u %8.1f us  ratio %.3f  err %.2e\n", name, N, TPR,
         ITEMS * VEC, MINB, S, stages, grid, us, copy_us / us, err);
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
  for (int N : {16384, 32768, 65536, 131072, 262144}) {
    const long long M = E / N;
    const size_t bytes = size_t(E) * sizeof(T) * (RES ? 2 : 1);
    const float copy_us = time_copy(B.o, B.x, bytes);
    // slices of 8/16/32/64 KB of x
    run<T, 512, 1, CENTER, RES, 1>(B, N, M, copy_us, name);
    run<T, 512, 2, CENTER, RES, 1>(B, N, M, copy_us, name);
    run<T, 512, 4, CENTER, RES, 1>(B, N, M, copy_us, name);
    run<T, 512, 8, CENTER, RES, 1>(B, N, M, copy_us, name);
    run<T, 256, 2, CENTER, RES, 2>(B, N, M, copy_us, name);
    run<T, 256, 4, CENTER, RES, 2>(B, N, M, copy_us, name);
    run<T, 512, 2, CENTER, RES, 2>(B, N, M, copy_us, name);
  }
}

int main(int argc, char** argv) {
  const size_t E = size_t(1) << 27, big = E * 4 * 2;
  Buffers B;
  CK(cudaMalloc(&B.x, big)); CK(cudaMalloc(&B.r, E * 4)); CK(cudaMalloc(&B.o, big)); CK(cudaMalloc(&B.ro, E * 4));
  CK(cudaMalloc(&B.w, 262144 * 4)); CK(cudaMalloc(&B.b, 262144 * 4));
  CK(cudaMalloc(&B.part, (1 << 20) * 8)); CK(cudaMalloc(&B.cnt, (1 << 20) * 4));
  int dev; cudaGetDevice(&dev); cudaDeviceProp prop; cudaGetDeviceProperties(&prop, dev);
  B.sms = prop.multiProcessorCount;
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
