// rmsnorm_example: calling normkit's RMSNorm from a C++ inference engine.
//
// Two calls an engine makes every layer, on bf16 activations with an fp32 weight:
//  1. fused residual add + RMSNorm on the hidden state, x read through a padded
//     row stride (no copy), the updated residual stream written to residual_out;
//  2. QK-norm: RMSNorm over each head of q, read straight out of a fused qkv
//     projection with the two-level row layout.
// Both run on host memory (the CPU fallback); when built with the CUDA runtime
// (NORMKIT_EXAMPLE_WITH_CUDART) and a GPU is present, they run again on the GPU,
// asynchronously on a stream, and the results are compared.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"

#if NORMKIT_EXAMPLE_WITH_CUDART
#include <cuda_runtime_api.h>
#endif

using namespace normkit::norm;
using bf16 = std::uint16_t;  // the engine's own bf16 type would do; only the bits matter

namespace {

constexpr std::int64_t kTokens = 6;
constexpr std::int64_t kHidden = 1000;
constexpr std::int64_t kLd = 1024;  // x's row stride: rows padded to 1024 elements
constexpr std::int64_t kHeads = 8, kHeadDim = 128;
constexpr float kEps = 1e-6f;

bf16 to_bf16(float f) {  // round to nearest even; finite values only
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}
float from_bf16(bf16 b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Host copies of every tensor; the GPU run mirrors them in device memory.
struct Tensors {
  std::vector<bf16> x = std::vector<bf16>(kTokens * kLd);
  std::vector<bf16> residual = std::vector<bf16>(kTokens * kHidden);
  std::vector<float> weight = std::vector<float>(kHidden);
  std::vector<bf16> out = std::vector<bf16>(kTokens * kHidden);
  std::vector<bf16> residual_out = std::vector<bf16>(kTokens * kHidden);
  std::vector<bf16> qkv = std::vector<bf16>(kTokens * 3 * kHeads * kHeadDim);  // (T, 3, H, D)
  std::vector<float> q_weight = std::vector<float>(kHeadDim);                  // shared by all heads
  std::vector<bf16> q_out = std::vector<bf16>(kTokens * kHeads * kHeadDim);    // (T, H, D)
};

struct Pointers {  // host or device addresses of the tensors above
  const void *x, *residual, *weight, *qkv, *q_weight;
  void *out, *residual_out, *q_out;
};

// 1. h = x + residual; out = rmsnorm(h) * weight; residual_out = h.
RmsNormFwdArgs hidden_norm_args(const Pointers& p) {
  RmsNormFwdArgs a;
  a.shape = {kTokens, kHidden, /*rows_inner=*/0};  // 0: one plain row stride
  // With a single row stride, row r starts at r * stride_inner.
  a.x = {p.x, DType::kBFloat16, /*stride_outer=*/kLd, /*stride_inner=*/kLd};
  a.residual = {p.residual, DType::kBFloat16, kHidden, kHidden};
  a.out = {p.out, DType::kBFloat16, kHidden, kHidden};
  a.residual_out = {p.residual_out, DType::kBFloat16, kHidden, kHidden};
  a.weight = {p.weight, DType::kFloat32};
  a.eps = kEps;
  return a;
}

// 2. q = qkv[:, 0] has shape (T, H, D) and strides (3*H*D, D, 1): T*H rows,
// H of them per token (rows_inner), tokens 3*H*D apart (stride_outer).
RmsNormFwdArgs q_norm_args(const Pointers& p) {
  RmsNormFwdArgs a;
  a.shape = {kTokens * kHeads, kHeadDim, /*rows_inner=*/kHeads};
  a.x = {p.qkv, DType::kBFloat16, 3 * kHeads * kHeadDim, kHeadDim};
  a.out = {p.q_out, DType::kBFloat16, kHeads * kHeadDim, kHeadDim};
  a.weight = {p.q_weight, DType::kFloat32};  // heads = 1: one weight for every head
  a.eps = kEps;
  return a;
}

Pointers host_pointers(Tensors& t) {
  return {t.x.data(),        t.residual.data(), t.weight.data(),       t.qkv.data(),
          t.q_weight.data(), t.out.data(),      t.residual_out.data(), t.q_out.data()};
}

double checksum(const std::vector<bf16>& v) {
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += from_bf16(v[i]) * static_cast<double>(i % 7 + 1);
  return s;
}

#if NORMKIT_EXAMPLE_WITH_CUDART
#define CUDA_OK(call)                                                         \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

// Largest difference in units of the CPU value's magnitude (GPU and CPU may round
// rstd differently, so a bf16 ulp or two apart is expected).
double max_rel_diff(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = from_bf16(a[i]), y = from_bf16(b[i]);
    worst = std::fmax(worst, std::fabs(x - y) / (std::fabs(x) + 1e-2));
  }
  return worst;
}

template <class T>
int to_device(const std::vector<T>& host, void** dev) {
  CUDA_OK(cudaMalloc(dev, host.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(*dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return 0;
}

int run_on_gpu(const Tensors& cpu) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device found: GPU run skipped (CPU result above)\n");
    return 0;
  }
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  Tensors gpu = cpu;  // same inputs; outputs are overwritten below
  void *x, *residual, *weight, *qkv, *q_weight, *out, *residual_out, *q_out;
  if (to_device(gpu.x, &x) || to_device(gpu.residual, &residual) || to_device(gpu.weight, &weight) ||
      to_device(gpu.qkv, &qkv) || to_device(gpu.q_weight, &q_weight) || to_device(gpu.out, &out) ||
      to_device(gpu.residual_out, &residual_out) || to_device(gpu.q_out, &q_out))
    return 1;
  const Pointers p{x, residual, weight, qkv, q_weight, out, residual_out, q_out};
  for (RmsNormFwdArgs a : {hidden_norm_args(p), q_norm_args(p)}) {
    a.device = Device::cuda(0);  // kAuto would find out from the pointers
    a.stream = stream;           // asynchronous: nothing waits here
    rmsnorm_fwd(a);
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(gpu.out.data(), out, gpu.out.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gpu.residual_out.data(), residual_out, gpu.residual_out.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gpu.q_out.data(), q_out, gpu.q_out.size() * 2, cudaMemcpyDeviceToHost));
  for (void* d : {x, residual, weight, qkv, q_weight, out, residual_out, q_out}) CUDA_OK(cudaFree(d));
  CUDA_OK(cudaStreamDestroy(stream));

  const double d1 = max_rel_diff(cpu.out, gpu.out), d2 = max_rel_diff(cpu.residual_out, gpu.residual_out),
               d3 = max_rel_diff(cpu.q_out, gpu.q_out);
  std::printf("gpu: out checksum %.6f, q_out checksum %.6f\n", checksum(gpu.out), checksum(gpu.q_out));
  std::printf("gpu vs cpu max relative difference: out %.2e, residual_out %.2e, q_out %.2e\n", d1, d2, d3);
  const double tol = 1.0 / 64;  // two bf16 ulps
  if (d1 > tol || d2 > tol || d3 > tol) {
    std::printf("MISMATCH between GPU and CPU results\n");
    return 1;
  }
  std::printf("GPU and CPU results agree\n");
  return 0;
}
#endif

}  // namespace

int main() {
  try {
    Tensors t;
    std::mt19937 rng(2024);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : t.x) v = to_bf16(normal(rng));
    for (auto& v : t.residual) v = to_bf16(normal(rng));
    for (auto& v : t.weight) v = 1.f + 0.1f * normal(rng);
    for (auto& v : t.qkv) v = to_bf16(normal(rng));
    for (auto& v : t.q_weight) v = 1.f + 0.1f * normal(rng);

    const Pointers p = host_pointers(t);
    for (RmsNormFwdArgs a : {hidden_norm_args(p), q_norm_args(p)}) {
      a.device = Device::cpu();  // host data: the CPU fallback, synchronous
      rmsnorm_fwd(a);
    }
    std::printf("cpu: out checksum %.6f, q_out checksum %.6f\n", checksum(t.out), checksum(t.q_out));
#if NORMKIT_EXAMPLE_WITH_CUDART
    return run_on_gpu(t);
#else
    std::printf("built without the CUDA runtime: GPU run skipped\n");
    return 0;
#endif
  } catch (const normkit::Error& e) {
    // Bad arguments, a failed compile or launch: the message names the cause.
    std::fprintf(stderr, "normkit error: %s\n", e.what());
    return 1;
  }
}
