// RMSNorm through the C++ API on a real GPU, checked against the CPU fallback on
// the same (random, never zero) inputs: the two share the semantics and both
// accumulate in fp32, so they agree to an ulp or two of the output dtype. Covers
// every kernel class the H200 dispatcher picks (multi-row, one CTA per row,
// cluster, two-pass, scalar access), outputs poisoned first with guard regions
// checked afterwards, and bitwise-reproducible dweight/dbias. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "../../src/runtime/cuda_driver.hpp"
#include "host_convert.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"

using namespace normkit::norm;
namespace rt = normkit::rt;

namespace {

constexpr std::uint8_t kPoison = 0xA5;  // a NaN-free but implausible byte pattern for every dtype
constexpr std::size_t kGuard = 256;      // bytes checked before and after each output

// Device memory in the primary context of device 0, with guard bytes around it.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    NK_CU_CHECK(rt::driver().cuMemAlloc(&base_, bytes_ + 2 * kGuard + 16));
    poison();
  }
  ~DeviceBuffer() { rt::driver().cuMemFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // `shift` bytes past the aligned start: unaligned views for the scalar path.
  void* data(std::size_t shift = 0) const { return reinterpret_cast<void*>(base_ + kGuard + shift); }
  void poison() {
    std::vector<std::uint8_t> p(bytes_ + 2 * kGuard + 16, kPoison);
    NK_CU_CHECK(rt::driver().cuMemcpyHtoD(base_, p.data(), p.size()));
  }
  void upload(const std::vector<std::uint8_t>& host, std::size_t shift = 0) {
    NK_CU_CHECK(rt::driver().cuMemcpyHtoD(base_ + kGuard + shift, host.data(), host.size()));
  }
  std::vector<std::uint8_t> download_all() const {
    std::vector<std::uint8_t> h(bytes_ + 2 * kGuard + 16);
    NK_CU_CHECK(rt::driver().cuMemcpyDtoHAsync(h.data(), base_, h.size(), nullptr));
    NK_CU_CHECK(rt::driver().cuStreamSynchronize(nullptr));
    return h;
  }
  // The `size` bytes at `shift`, after checking that nothing outside them changed.
  std::vector<std::uint8_t> download_checked(std::size_t size, std::size_t shift, const char* what) const {
    const auto all = download_all();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const bool inside = i >= kGuard + shift && i < kGuard + shift + size;
      if (!inside && all[i] != kPoison) {
        ADD_FAILURE() << what << ": byte " << static_cast<long long>(i) - static_cast<long long>(kGuard + shift)
                      << " outside the output was written";
        break;
      }
    }
    return {all.begin() + kGuard + shift, all.begin() + kGuard + shift + size};
  }

 private:
  CUdeviceptr base_ = 0;
  std::size_t bytes_;
};

std::vector<std::uint8_t> random_bytes(std::size_t count, DType t, std::mt19937& rng, float lo = -2.f, float hi = 2.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<std::uint8_t> out(count * dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) detail::store_elem(out.data(), t, static_cast<std::int64_t>(i), dist(rng));
  return out;
}

double tolerance(DType t) {
  switch (t) {
    case DType::kBFloat16: return 1.0 / 64;  // 2 ulp at 1.0
    case DType::kFloat16: return 1.0 / 512;
    case DType::kFloat32: return 2e-5;
    case DType::kFloat64: break;  // CPU fallback only: never a GPU output
  }
  return 0;
}

void expect_close(const std::vector<std::uint8_t>& gpu, const std::vector<std::uint8_t>& cpu, DType t, std::size_t count,
                  double scale, const char* what) {
  int bad = 0;
  for (std::size_t i = 0; i < count && bad < 5; ++i) {
    const double g = detail::load_elem(gpu.data(), t, static_cast<std::int64_t>(i));
    const double c = detail::load_elem(cpu.data(), t, static_cast<std::int64_t>(i));
    if (!(std::fabs(g - c) <= tolerance(t) * scale * (1.0 + std::fabs(c)))) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g << " cpu " << c;
      ++bad;
    }
  }
}

struct Case {
  const char* name;
  std::int64_t m, n, heads;
  DType x;
  std::optional<DType> weight, bias, residual, residual_out;
  DType out;
  std::size_t shift_elems;  // misalign x/out/dout/dx by this many elements
};

// gtest prints parameters in skip and failure lines: the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

bool gpu_available(std::string* why) {
  try {
    if (rt::Runtime::instance().device_count() > 0) return true;
    *why = "no CUDA device";
  } catch (const normkit::Error& e) {
    *why = "no CUDA driver: " + e.message();
  }
  return false;
}

class RmsNormGpu : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu_available(&why)) GTEST_SKIP() << why;
    rt::Runtime::instance().device_info(0);
    CUdevice dev;
    NK_CU_CHECK(rt::driver().cuDeviceGet(&dev, 0));
    NK_CU_CHECK(rt::driver().cuDevicePrimaryCtxRetain(&ctx_, dev));
    NK_CU_CHECK(rt::driver().cuCtxPushCurrent(ctx_));
    pushed_ = true;
  }
  void TearDown() override {
    if (pushed_) {
      CUcontext c;
      rt::driver().cuCtxPopCurrent(&c);
    }
  }
  CUcontext ctx_ = nullptr;
  bool pushed_ = false;
};

}  // namespace

TEST_P(RmsNormGpu, ForwardAndBackwardMatchTheCpuFallback) {
  const Case c = GetParam();
  const std::int64_t count = c.m * c.n;
  const std::size_t pcount = static_cast<std::size_t>(c.heads * c.n);
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n));
  const std::size_t xs = c.shift_elems * dtype_size(c.x);

  // ---- forward -------------------------------------------------------------
  auto hx = random_bytes(count, c.x, rng);
  auto hres = c.residual ? random_bytes(count, *c.residual, rng) : std::vector<std::uint8_t>{};
  auto hw = c.weight ? random_bytes(pcount, *c.weight, rng, 0.5f, 1.5f) : std::vector<std::uint8_t>{};
  auto hb = c.bias ? random_bytes(pcount, *c.bias, rng) : std::vector<std::uint8_t>{};
  const DType ro_t = c.residual_out.value_or(c.x);

  DeviceBuffer dx_in(hx.size() + xs), dres(hres.size() + 1), dw(hw.size() + 1), db(hb.size() + 1);
  DeviceBuffer dout_buf(count * dtype_size(c.out) + xs), dro(c.residual_out ? count * dtype_size(ro_t) : 1),
      drstd(c.m * sizeof(float));
  dx_in.upload(hx, xs);
  if (c.residual) dres.upload(hres);
  if (c.weight) dw.upload(hw);
  if (c.bias) db.upload(hb);

  auto fwd_args = [&](bool host, void* x, void* res, void* out, void* ro, void* w, void* b, float* rstd) {
    RmsNormFwdArgs a;
    a.shape = {c.m, c.n, 0};
    a.x = {x, c.x, c.n, c.n};
    if (c.residual) a.residual = {res, *c.residual, c.n, c.n};
    a.out = {out, c.out, c.n, c.n};
    if (c.residual_out) a.residual_out = {ro, ro_t, c.n, c.n};
    if (c.weight) a.weight = {w, *c.weight};
    if (c.bias) a.bias = {b, *c.bias};
    a.heads = c.heads;
    a.rstd = rstd;
    a.eps = 1e-5f;
    a.device = host ? Device::cpu() : Device::cuda(0);
    return a;
  };
  rmsnorm_fwd(fwd_args(false, dx_in.data(xs), dres.data(), dout_buf.data(xs), dro.data(), dw.data(), db.data(),
                       static_cast<float*>(drstd.data())));
  NK_CU_CHECK(rt::driver().cuStreamSynchronize(nullptr));

  std::vector<std::uint8_t> cout(count * dtype_size(c.out)), cro(c.residual_out ? count * dtype_size(ro_t) : 1);
  std::vector<float> crstd(c.m);
  rmsnorm_fwd(fwd_args(true, hx.data(), hres.data(), cout.data(), cro.data(), hw.data(), hb.data(), crstd.data()));

  expect_close(dout_buf.download_checked(cout.size(), xs, "out"), cout, c.out, count, 1.0, "out");
  if (c.residual_out)
    expect_close(dro.download_checked(cro.size(), 0, "residual_out"), cro, ro_t, count, 1.0, "residual_out");
  const auto grstd = drstd.download_checked(c.m * sizeof(float), 0, "rstd");
  for (std::int64_t r = 0; r < c.m; ++r) {
    float g;
    std::memcpy(&g, grstd.data() + r * sizeof(float), sizeof g);
    ASSERT_NEAR(g, crstd[r], 1e-5 * std::fabs(crstd[r])) << "rstd[" << r << "]";
  }

  // ---- backward (h = residual_out when a residual was added, else x) ----------
  const bool has_res = c.residual.has_value();
  const DType h_t = has_res ? ro_t : c.x;
  const std::vector<std::uint8_t>& hh = has_res ? cro : hx;
  auto hdy = random_bytes(count, c.out, rng);
  auto hdro = has_res ? random_bytes(count, ro_t, rng) : std::vector<std::uint8_t>{};
  DeviceBuffer dh(hh.size() + xs), ddy(hdy.size() + xs), ddro(hdro.size() + 1), ddx(count * dtype_size(c.x) + xs),
      ddres(has_res ? count * dtype_size(*c.residual) : 1), ddw(c.weight ? pcount * dtype_size(*c.weight) : 1),
      ddb(c.bias ? pcount * dtype_size(*c.bias) : 1), dr2(c.m * sizeof(float));
  dh.upload(hh, xs);
  ddy.upload(hdy, xs);
  if (has_res) ddro.upload(hdro);
  std::vector<std::uint8_t> rstd_bytes(c.m * sizeof(float));
  std::memcpy(rstd_bytes.data(), crstd.data(), rstd_bytes.size());
  dr2.upload(rstd_bytes);

  auto bwd_args = [&](bool host, void* h, void* dy, void* dro_p, void* dx, void* dres_p, void* w, const float* rstd,
                      void* dwp, void* dbp) {
    RmsNormBwdArgs a;
    a.shape = {c.m, c.n, 0};
    a.x = {h, h_t, c.n, c.n};
    a.dout = {dy, c.out, c.n, c.n};
    if (has_res) a.dresidual_out = {dro_p, ro_t, c.n, c.n};
    a.dx = {dx, c.x, c.n, c.n};
    if (has_res) a.dresidual = {dres_p, *c.residual, c.n, c.n};
    if (c.weight) a.weight = {w, *c.weight};
    a.heads = c.heads;
    a.rstd = rstd;
    a.dweight = c.weight ? dwp : nullptr;
    if (c.bias) a.dbias = {dbp, *c.bias};
    a.device = host ? Device::cpu() : Device::cuda(0);
    return a;
  };
  RmsNormBwdArgs ga = bwd_args(false, dh.data(xs), ddy.data(xs), ddro.data(), ddx.data(xs), ddres.data(), dw.data(),
                               static_cast<const float*>(dr2.data()), ddw.data(), ddb.data());
  const std::size_t ws_bytes = rmsnorm_bwd_workspace_bytes(ga);
  DeviceBuffer ws(ws_bytes + 4);
  ga.workspace = ws.data();
  ga.workspace_bytes = ws_bytes;
  rmsnorm_bwd(ga);
  NK_CU_CHECK(rt::driver().cuStreamSynchronize(nullptr));

  std::vector<std::uint8_t> cdx(count * dtype_size(c.x)), cdres(has_res ? count * dtype_size(*c.residual) : 1),
      cdw(c.weight ? pcount * dtype_size(*c.weight) : 1), cdb(c.bias ? pcount * dtype_size(*c.bias) : 1);
  rmsnorm_bwd(bwd_args(true, const_cast<std::uint8_t*>(hh.data()), hdy.data(), hdro.data(), cdx.data(), cdres.data(),
                       hw.data(), crstd.data(), cdw.data(), cdb.data()));

  expect_close(ddx.download_checked(cdx.size(), xs, "dx"), cdx, c.x, count, 2.0, "dx");
  if (has_res) expect_close(ddres.download_checked(cdres.size(), 0, "dresidual"), cdres, *c.residual, count, 2.0, "dresidual");
  const double sum_scale = std::sqrt(static_cast<double>(c.m / c.heads)) * 4;
  std::vector<std::uint8_t> first_dw, first_db;
  if (c.weight) {
    first_dw = ddw.download_checked(cdw.size(), 0, "dweight");
    expect_close(first_dw, cdw, *c.weight, pcount, sum_scale, "dweight");
  }
  if (c.bias) {
    first_db = ddb.download_checked(cdb.size(), 0, "dbias");
    expect_close(first_db, cdb, *c.bias, pcount, sum_scale, "dbias");
  }
  // Bitwise reproducible: the same call again gives the same bits; the second
  // rerun takes its workspace from an allocator (one call, of exactly the
  // queried size, and none when no workspace is needed).
  struct Alloc {
    DeviceBuffer* buffer;
    std::size_t bytes = 0;
    int calls = 0;
  } alloc{&ws};
  for (int run = 0; run < 2; ++run) {
    ddw.poison();
    ddb.poison();
    if (run == 0) {
      rmsnorm_bwd(ga);
    } else {
      RmsNormBwdArgs no_ws = ga;
      no_ws.workspace = nullptr;
      no_ws.workspace_bytes = 0;
      rmsnorm_bwd(no_ws, [](std::size_t bytes, void* context) -> void* {
        auto* a = static_cast<Alloc*>(context);
        a->bytes = bytes;
        ++a->calls;
        return a->buffer->data();
      }, &alloc);
      EXPECT_EQ(alloc.calls, ws_bytes > 0 ? 1 : 0);
      EXPECT_EQ(alloc.bytes, ws_bytes);
    }
    NK_CU_CHECK(rt::driver().cuStreamSynchronize(nullptr));
    if (c.weight) {
      EXPECT_EQ(ddw.download_checked(cdw.size(), 0, "dweight"), first_dw) << "dweight differs on rerun";
    }
    if (c.bias) {
      EXPECT_EQ(ddb.download_checked(cdb.size(), 0, "dbias"), first_db) << "dbias differs on rerun";
    }
  }
  // The partials are stored as 16-byte vectors: a workspace off that alignment is
  // refused by name before any launch.
  if (ws_bytes > 0) {
    RmsNormBwdArgs off = ga;
    off.workspace = static_cast<std::uint8_t*>(ws.data()) + 4;
    try {
      rmsnorm_bwd(off);
      ADD_FAILURE() << "a workspace 4 bytes off 16-byte alignment was accepted";
    } catch (const normkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find("argument 'workspace' must be 16-byte aligned"), std::string::npos)
          << e.what();
    }
  }
}

namespace {
constexpr DType bf16 = DType::kBFloat16;
constexpr DType f16 = DType::kFloat16;
constexpr DType f32 = DType::kFloat32;
}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Classes, RmsNormGpu,
    ::testing::Values(
        Case{"short_rows_many_per_cta", 1000, 256, 1, bf16, bf16, {}, {}, {}, bf16, 0},
        Case{"all_features_fp32_weight", 300, 4096, 1, bf16, f32, bf16, bf16, f32, bf16, 0},
        Case{"fp16_out_fp32", 77, 8192, 1, f16, f16, f16, f16, f16, f32, 0},
        Case{"odd_n", 77, 1023, 1, f16, f32, f32, {}, {}, f16, 0},
        Case{"unaligned", 65, 4096, 1, bf16, bf16, {}, bf16, bf16, bf16, 1},
        Case{"per_head", 64 * 8, 128, 8, bf16, bf16, bf16, {}, {}, bf16, 0},
        Case{"fp32_long_rows_cluster", 5, 262144, 1, f32, f32, {}, f32, f32, f32, 0},
        Case{"bf16_131072", 9, 131072, 1, bf16, bf16, bf16, bf16, bf16, bf16, 0},
        Case{"one_row", 1, 4096, 1, bf16, bf16, {}, {}, {}, bf16, 0},
        Case{"no_weight", 257, 32768, 1, f32, {}, {}, {}, {}, f32, 0}),
    [](const auto& info) { return std::string(info.param.name); });
