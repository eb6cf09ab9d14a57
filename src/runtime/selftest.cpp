#include "normkit/runtime/selftest.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "cuda_driver.hpp"

namespace normkit::embedded {
void register_runtime_device_headers();  // generated from device/ at build time
}

namespace normkit::rt::selftest {
namespace {
constexpr unsigned kThreads = 256;
}

KernelSource axpy_source(int unroll) {
  NK_CHECK(unroll >= 1 && unroll <= 16, "selftest axpy: unroll must be in [1, 16], got ", unroll);
  normkit::embedded::register_runtime_device_headers();
  KernelSource k;
  k.family = "selftest_axpy";
  k.template_args = "unroll=" + std::to_string(unroll);
  k.source = "#include \"normkit/selftest/axpy.cuh\"\n";
  k.entry = "nk_selftest::axpy_kernel<" + std::to_string(unroll) + ">";
  return k;
}

void axpy(const float* x, float* y, std::int64_t n, float a, Stream stream, int unroll, unsigned cluster, bool pdl,
          bool cooperative) {
  NK_CHECK(n >= 0, "selftest axpy: n must be >= 0, got ", n);
  if (n == 0) return;
  Runtime& rt = Runtime::instance();
  const int device = rt.device_of({x, y}, {"x", "y"});
  const LoadedKernel kernel = rt.get(axpy_source(unroll), device, stream);
  LaunchConfig cfg;
  const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * unroll;
  std::int64_t blocks = (n + per_block - 1) / per_block;
  if (cluster > 0) {
    blocks = (blocks + cluster - 1) / cluster * cluster;  // the grid must be a whole number of clusters
    cfg.cluster = {cluster, 1, 1};
  }
  cfg.grid.x = static_cast<unsigned>(blocks);
  cfg.block.x = kThreads;
  cfg.stream = stream;
  cfg.pdl = pdl;
  cfg.cooperative = cooperative;
  long long n_arg = n;
  void* args[] = {&x, &y, &n_arg, &a};
  rt.launch(kernel, cfg, args);
}

std::string run_on_device(int device) {
  Runtime& rt = Runtime::instance();
  rt.device_info(device);  // validates the ordinal
  const DriverApi& d = driver();
  CUdevice dev;
  NK_CU_CHECK(d.cuDeviceGet(&dev, device));
  CUcontext ctx;
  NK_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx, dev));
  NK_CU_CHECK(d.cuCtxPushCurrent(ctx));
  struct Pop {
    ~Pop() {
      CUcontext c;
      driver().cuCtxPopCurrent(&c);
    }
  } pop;

  const std::int64_t n = (1 << 20) + 17;  // not a multiple of the block: exercises the tail guard
  std::mt19937 rng(1234 + device);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> hx(n), hy(n), out(n);
  for (auto& v : hx) v = dist(rng);
  for (auto& v : hy) v = dist(rng);
  CUdeviceptr dx = 0, dy = 0;
  CUstream stream = nullptr;
  NK_CU_CHECK(d.cuMemAlloc(&dx, n * sizeof(float)));
  NK_CU_CHECK(d.cuMemAlloc(&dy, n * sizeof(float)));
  NK_CU_CHECK(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::string failure;
  try {
    NK_CU_CHECK(d.cuMemcpyHtoD(dx, hx.data(), n * sizeof(float)));
    NK_CU_CHECK(d.cuMemcpyHtoD(dy, hy.data(), n * sizeof(float)));
    // Three dependent launches on a non-blocking stream: the result is right only if they run in order.
    const float a[3] = {2.f, -0.5f, 3.f};
    for (float ai : a) axpy(reinterpret_cast<float*>(dx), reinterpret_cast<float*>(dy), n, ai, stream);
    NK_CU_CHECK(d.cuMemcpyDtoHAsync(out.data(), dy, n * sizeof(float), stream));
    NK_CU_CHECK(d.cuStreamSynchronize(stream));
    for (std::int64_t i = 0; i < n && failure.empty(); ++i) {
      float ref = hy[i];
      for (float ai : a) ref = ai * hx[i] + ref;
      if (!(std::fabs(out[i] - ref) <= 1e-5f * (1.f + std::fabs(ref))))
        failure = "element " + std::to_string(i) + ": got " + std::to_string(out[i]) + ", expected " + std::to_string(ref);
    }
  } catch (const Error& e) {
    failure = e.message();
  }
  d.cuStreamDestroy(stream);
  d.cuMemFree(dx);
  d.cuMemFree(dy);
  return failure;
}

}  // namespace normkit::rt::selftest
