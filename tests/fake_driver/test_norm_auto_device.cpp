// RMSNorm's automatic device (Device::Kind::kAuto, the default of the C++ API):
// the operator asks the driver where `x` lives and requires every other pointer to
// agree. Run against the fake driver (two devices), so that this is covered on any
// machine: host data takes the CPU fallback, device data runs on the data's
// device whatever device is current, and a mix names the argument that disagrees.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "fake_probe.hpp"

using namespace normkit::norm;

namespace {

constexpr std::int64_t kRows = 8, kN = 1024;

// Sets environment variables (the fake driver's and normkit's) and reloads the runtime's
// configuration for a scope; unsets them and reloads again at its end, failed
// assertions included.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      setenv(name, value, 1);
      names_.push_back(name);
    }
    normkit::rt::Runtime::instance().reload_config();
  }
  ~ScopedEnv() {
    for (const char* name : names_) unsetenv(name);
    normkit::rt::Runtime::instance().reload_config();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<const char*> names_;
};

class NormAutoDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    nktest::open_fake_driver(&probe_);
    if (HasFatalFailure()) return;
    normkit::rt::Runtime::instance().reload_config();
  }
  void* on(int device, unsigned long long offset) {
    return reinterpret_cast<void*>(probe_.device_pointer(device, offset));
  }
  int launches(int device) const { return probe_.launches(device); }

  // Forward arguments with every pointer given; device left at its default (kAuto).
  static RmsNormFwdArgs fwd(const void* x, void* out, const void* w, float* rstd) {
    RmsNormFwdArgs a;
    a.shape = {kRows, kN, 0};
    a.x = Rows::strided(x, DType::kFloat32, kN);
    a.out = Rows::strided(out, DType::kFloat32, kN);
    a.weight = {w, DType::kFloat32};
    a.rstd = rstd;
    return a;
  }
  // 4096 rows of n elements on device 0, out of place, with a weight of x's dtype or none.
  RmsNormFwdArgs plain_rows(std::int64_t n, DType dtype, bool weight) {
    RmsNormFwdArgs a;
    a.shape = {4096, n, 0};
    a.x = Rows::strided(on(0, 0), dtype, n);
    a.out = Rows::strided(on(0, 1ULL << 30), dtype, n);
    if (weight) a.weight = {on(0, 2ULL << 30), dtype};
    return a;
  }
  // fp32 rows with a residual at N=262144, which sm_90 plans as grouped rows; in place:
  // out over x and residual_out over the residual (the fused add).
  RmsNormFwdArgs grouped_fused_add(bool in_place) {
    constexpr std::int64_t rows = 64, n = 262144;
    RmsNormFwdArgs a;
    a.shape = {rows, n, 0};
    a.x = Rows::strided(on(0, 0), DType::kFloat32, n);
    a.residual = Rows::strided(on(0, 128ull << 20), DType::kFloat32, n);
    a.out = in_place ? a.x : Rows::strided(on(0, 256ull << 20), DType::kFloat32, n);
    a.residual_out = in_place ? a.residual : Rows::strided(on(0, 384ull << 20), DType::kFloat32, n);
    a.weight = {on(0, 512ull << 20), DType::kFloat32};
    a.device = Device::cuda(0);
    return a;
  }
  static std::string error_of(const RmsNormFwdArgs& a) {
    try {
      rmsnorm_fwd(a);
    } catch (const normkit::Error& e) {
      return e.what();
    }
    return "";
  }

  nktest::FakeProbe probe_;
};

}  // namespace

TEST_F(NormAutoDevice, DefaultDeviceIsAuto) { EXPECT_EQ(RmsNormFwdArgs{}.device.kind, Device::Kind::kAuto); }

TEST_F(NormAutoDevice, HostDataRunsTheCpuFallbackWithTheSameBits) {
  std::vector<float> x(kRows * kN), w(kN), out_auto(x.size(), NAN), out_cpu(x.size(), NAN);
  std::vector<float> rstd_auto(kRows, NAN), rstd_cpu(kRows, NAN);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.001f * static_cast<float>(i);
  rmsnorm_fwd(fwd(x.data(), out_auto.data(), w.data(), rstd_auto.data()));
  RmsNormFwdArgs cpu = fwd(x.data(), out_cpu.data(), w.data(), rstd_cpu.data());
  cpu.device = Device::cpu();
  rmsnorm_fwd(cpu);
  EXPECT_EQ(std::memcmp(out_auto.data(), out_cpu.data(), out_cpu.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(rstd_auto.data(), rstd_cpu.data(), rstd_cpu.size() * sizeof(float)), 0);
  EXPECT_FALSE(std::isnan(out_auto[0]));
  EXPECT_EQ(launches(0) + launches(1), 0);
}

TEST_F(NormAutoDevice, DeviceDataRunsOnItsDeviceNotTheCurrentOne) {
  // Nothing is current on this thread; the data lives on cuda:1.
  const unsigned long long row_bytes = kRows * kN * sizeof(float);
  rmsnorm_fwd(fwd(on(1, 0), on(1, row_bytes), on(1, 2 * row_bytes), static_cast<float*>(on(1, 3 * row_bytes))));
  EXPECT_EQ(launches(1), 1);
  EXPECT_EQ(launches(0), 0);
  rmsnorm_fwd(fwd(on(0, 0), on(0, row_bytes), on(0, 2 * row_bytes), static_cast<float*>(on(0, 3 * row_bytes))));
  EXPECT_EQ(launches(0), 1);
  EXPECT_EQ(launches(1), 1);
}

TEST_F(NormAutoDevice, MixedPlacementsAreErrorsNamingTheArgument) {
  const unsigned long long row_bytes = kRows * kN * sizeof(float);
  std::vector<float> host(kRows * kN), host_w(kN), host_rstd(kRows);
  // Device x, host weight.
  std::string e = error_of(fwd(on(1, 0), on(1, row_bytes), host_w.data(), static_cast<float*>(on(1, 2 * row_bytes))));
  EXPECT_NE(e.find("weight"), std::string::npos) << e;
  // Host x, device out.
  e = error_of(fwd(host.data(), on(0, 0), host_w.data(), host_rstd.data()));
  EXPECT_NE(e.find("'out' is device memory but 'x' is host memory"), std::string::npos) << e;
  // Two devices.
  e = error_of(fwd(on(0, 0), on(1, 0), on(0, row_bytes), static_cast<float*>(on(0, 2 * row_bytes))));
  EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:1"), std::string::npos) << e;
  EXPECT_EQ(launches(0) + launches(1), 0) << "nothing may run after a failed check";
}

// The pipelined forward (RowPlan::prefetch: 16-bit rows of 1024-thread CTAs, no
// residual; without a weight here, since rows with one take 64 elements a thread and
// no pipeline on sm_90) walks rows persistently: its grid is what the driver says the device
// holds at once, in whole clusters, never more (a cluster that is not resident
// would start only when the others have finished every row), and never more
// than there are rows.
TEST_F(NormAutoDevice, PipelinedForwardGridIsWhatTheDeviceHoldsAtOnce) {
  setenv("FAKE_CUDA_CLUSTER_SHORTFALL", "3", 1);  // 30 clusters of 4 resident, not 132 / 4 = 33
  constexpr std::int64_t n = 131072;
  auto args = [&](std::int64_t rows) {
    RmsNormFwdArgs a;
    a.shape = {rows, n, 0};
    a.x = Rows::strided(on(0, 0), DType::kBFloat16, n);
    a.out = Rows::strided(on(0, 1ULL << 30), DType::kBFloat16, n);
    return a;
  };
  unsigned grid = 0, cluster = 0;
  int pdl = 0, device = -1;
  rmsnorm_fwd(args(4096));
  probe_.last_launch(&grid, &cluster, &pdl, &device);
  EXPECT_EQ(cluster, 4u);
  EXPECT_EQ(grid, 30u * 4u);
  rmsnorm_fwd(args(8));  // fewer rows than resident clusters: one cluster per row
  probe_.last_launch(&grid, &cluster, &pdl, &device);
  EXPECT_EQ(grid, 8u * 4u);
  unsetenv("FAKE_CUDA_CLUSTER_SHORTFALL");
}

// NORMKIT_FORWARD_PLAN's occ=: the kernel asks for enough dynamic shared memory that
// at most occ= CTAs share an SM (the plan without it asks for none): fp32 rows of
// N=16384, one 512-thread CTA a row, keep their grid of one CTA a row; the pipelined
// bf16 rows of N=32768 without a weight (1024 threads, persistent) launch occ= CTAs an
// SM, not the driver's four.
TEST_F(NormAutoDevice, ForwardSmCtasCapOccupancyAndGrid) {
  unsigned grid = 0, cluster = 0;
  int pdl = 0, device = -1;
  for (const int occ : {0, 1, 2}) {
    const std::string plan = occ ? "occ=" + std::to_string(occ) : "";
    ScopedEnv env{{"FAKE_CUDA_BLOCKS_PER_SM", "4"}, {"NORMKIT_FORWARD_PLAN", plan.c_str()}};
    rmsnorm_fwd(plain_rows(16384, DType::kFloat32, true));
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    const unsigned shared = probe_.last_launch_shared_bytes();
    EXPECT_EQ(grid, 4096u) << plan;
    if (occ == 0) EXPECT_EQ(shared, 0u);
    // occ CTAs fit an SM's 228 KB with their 1 KB reserves; occ + 1 do not.
    if (occ) EXPECT_LE(occ * (shared + 2048), 228u * 1024) << plan;
    if (occ) EXPECT_GT((occ + 1) * (shared + 1024), 228u * 1024) << plan;
    EXPECT_EQ(probe_.last_launch_carveout(), -1) << plan;
    rmsnorm_fwd(plain_rows(32768, DType::kBFloat16, false));
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    EXPECT_EQ(grid, 132u * (occ ? occ : 4)) << plan;
    EXPECT_EQ(probe_.last_launch_shared_bytes(), occ ? shared : 0u) << plan;
  }
}

// occ= with l1=max: the launch carries its preferred carveout, the smallest of sm_90's
// that holds occ= CTAs (8 KB: 3 %), and asks for padding against that carveout rather
// than the SM's 228 KB. The occupancy API does not see a launch's carveout (the fake's
// says four CTAs an SM here): the persistent grid is capped at occ= CTAs an SM itself.
TEST_F(NormAutoDevice, ForwardSmCtasWithinTheSmallestCarveout) {
  unsigned grid = 0, cluster = 0;
  int pdl = 0, device = -1;
  for (const int occ : {1, 2}) {
    const std::string plan = "occ=" + std::to_string(occ) + ",l1=max";
    ScopedEnv env{{"FAKE_CUDA_BLOCKS_PER_SM", "4"}, {"NORMKIT_FORWARD_PLAN", plan.c_str()}};
    rmsnorm_fwd(plain_rows(16384, DType::kFloat32, true));
    EXPECT_EQ(probe_.last_launch_carveout(), 3) << plan;
    const unsigned shared = probe_.last_launch_shared_bytes();
    EXPECT_LE(occ * (shared + 2048), 8u * 1024) << plan;
    EXPECT_GT((occ + 1) * (shared + 1024), 8u * 1024) << plan;
    rmsnorm_fwd(plain_rows(32768, DType::kBFloat16, false));
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    EXPECT_EQ(grid, 132u * occ) << plan;
    EXPECT_EQ(probe_.last_launch_carveout(), 3) << plan;
  }
}

// NORMKIT_SMEM_SUMS: the backward's shared-memory sums are planned by default
// and not under NORMKIT_SMEM_SUMS=0; a value that is not a switch is refused.
TEST_F(NormAutoDevice, SmemSumsSwitchReachesThePlan) {
  using normkit::rt::Runtime;
  EXPECT_TRUE(Runtime::instance().config().smem_sums);
  setenv("NORMKIT_SMEM_SUMS", "0", 1);
  Runtime::instance().reload_config();
  EXPECT_FALSE(Runtime::instance().config().smem_sums);
  EXPECT_FALSE(Runtime::instance().switches().smem_sums);  // what the calls read
  setenv("NORMKIT_SMEM_SUMS", "sometimes", 1);
  try {
    Runtime::instance().reload_config();
    ADD_FAILURE() << "NORMKIT_SMEM_SUMS=sometimes was accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NORMKIT_SMEM_SUMS"), std::string::npos) << e.what();
  }
  unsetenv("NORMKIT_SMEM_SUMS");
  Runtime::instance().reload_config();
  EXPECT_TRUE(Runtime::instance().config().smem_sums);
  EXPECT_TRUE(Runtime::instance().switches().smem_sums);
}

// Norm kernels go out with programmatic dependent launch on an sm_90 device (the
// fake one), and without it under NORMKIT_PDL=0 (the forward here; the backward's
// launches take the same flag from its memo entry, rmsnorm_cuda.cpp).
TEST_F(NormAutoDevice, NormKernelsUsePdlUnlessTurnedOff) {
  auto launch_pdl = [&]() {
    rmsnorm_fwd(fwd(on(0, 0), on(0, 1 << 20), on(0, 2 << 20), reinterpret_cast<float*>(on(0, 3 << 20))));
    unsigned grid = 0, cluster = 0;
    int pdl = -1, device = -1;
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    return pdl;
  };
  EXPECT_EQ(launch_pdl(), 1);
  setenv("NORMKIT_PDL", "0", 1);
  normkit::rt::Runtime::instance().reload_config();
  EXPECT_EQ(launch_pdl(), 0);
  setenv("NORMKIT_PDL", "maybe", 1);
  try {
    normkit::rt::Runtime::instance().reload_config();
    ADD_FAILURE() << "NORMKIT_PDL=maybe was accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NORMKIT_PDL"), std::string::npos) << e.what();
  }
  unsetenv("NORMKIT_PDL");
  normkit::rt::Runtime::instance().reload_config();
  EXPECT_EQ(launch_pdl(), 1);
}

// Backwards whose row kernel takes dynamic shared memory (bf16 with dw: N=4096
// the cp.async ring's 48 KB, N=16384 the shared-memory sums' 64 KB, which needs
// the opt-in above 48 KB): the function's static shared memory is read from the
// driver once, at load, and the opt-in set once, instead of a driver call or two
// at every launch (host time per call).
TEST_F(NormAutoDevice, SharedMemoryOptInOncePerKernel) {
  for (const std::int64_t n : {4096, 16384}) {
    RmsNormBwdArgs a;
    a.shape = {64, n, 0};
    a.x = Rows::strided(on(0, 0), DType::kBFloat16, n);
    a.dout = Rows::strided(on(0, 16ull << 20), DType::kBFloat16, n);
    a.dx = Rows::strided(on(0, 32ull << 20), DType::kBFloat16, n);
    a.weight = {on(0, 48ull << 20), DType::kBFloat16};
    a.dweight = on(0, 49ull << 20);
    a.rstd = reinterpret_cast<const float*>(on(0, 50ull << 20));
    a.workspace_bytes = rmsnorm_bwd_workspace_bytes(a);
    a.workspace = on(0, 64ull << 20);
    a.device = Device::cuda(0);
    const int before = probe_.func_attribute_calls();
    rmsnorm_bwd(a);  // compiles and loads (one attribute read per kernel), opts in where needed
    const int after_first = probe_.func_attribute_calls();
    EXPECT_GT(after_first, before) << n;
    for (int i = 0; i < 5; ++i) rmsnorm_bwd(a);
    EXPECT_EQ(probe_.func_attribute_calls(), after_first) << n;
  }
}

// The grouped backward (norm_bwd_group_kernel under NORMKIT_BACKWARD_PLAN=row=group,
// no dw here so the row kernel is the last launch): as many groups of the row's 128
// slices (fp32 N=262144, 256 threads x 8 columns) as the device holds at once (the
// driver's two CTAs an SM: 264 / 128 = 2) and there are rows, and a workspace of one
// 64-bit slot per row and slice. Where row=group does not apply (N not a multiple
// of the slice), a warning says so.
TEST_F(NormAutoDevice, GroupedBackwardGridAndSlots) {
  setenv("FAKE_CUDA_BLOCKS_PER_SM", "2", 1);
  setenv("NORMKIT_BACKWARD_PLAN", "row=group", 1);
  normkit::rt::Runtime::instance().reload_config();
  auto args = [&](std::int64_t rows, std::int64_t n) {
    RmsNormBwdArgs a;
    a.shape = {rows, n, 0};
    a.x = Rows::strided(on(0, 0), DType::kFloat32, n);
    a.dout = Rows::strided(on(0, 64ull << 20), DType::kFloat32, n);
    a.dx = Rows::strided(on(0, 128ull << 20), DType::kFloat32, n);
    a.rstd = reinterpret_cast<const float*>(on(0, 192ull << 20));
    a.device = Device::cuda(0);
    return a;
  };
  unsigned grid = 0, cluster = 0;
  int pdl = 0, device = -1;
  for (const auto& [rows, groups] : {std::pair<std::int64_t, unsigned>{5, 2}, {1, 1}}) {
    RmsNormBwdArgs a = args(rows, 262144);
    a.workspace_bytes = rmsnorm_bwd_workspace_bytes(a);
    EXPECT_EQ(a.workspace_bytes, static_cast<std::size_t>(rows) * 128 * 8) << rows;
    a.workspace = on(0, 256ull << 20);
    rmsnorm_bwd(a);
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    EXPECT_EQ(grid, groups * 128u) << rows;
    EXPECT_EQ(cluster, 0u) << rows;
  }
  RmsNormBwdArgs odd = args(5, 262144 + 1024);
  odd.workspace_bytes = rmsnorm_bwd_workspace_bytes(odd);
  odd.workspace = on(0, 256ull << 20);
  ::testing::internal::CaptureStderr();
  rmsnorm_bwd(odd);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("row=group does not apply to rows of N=263168"), std::string::npos) << log;
  unsetenv("NORMKIT_BACKWARD_PLAN");
  unsetenv("FAKE_CUDA_BLOCKS_PER_SM");
  normkit::rt::Runtime::instance().reload_config();
}

// The in-place fused add (out over x, residual_out over the residual) on the grouped
// rows (fp32 N=262144 with a residual, planned grouped on sm_90): its kernel is launched
// cooperatively and without PDL, which the same rows out of place keep (with PDL, not
// cooperative). The forward's grouped rows take their slots from a memory pool
// (FAKE_CUDA_MEMORY_POOLS=1).
TEST_F(NormAutoDevice, InPlaceGroupedRowsLaunchCooperatively) {
  const ScopedEnv env{{"FAKE_CUDA_MEMORY_POOLS", "1"}, {"FAKE_CUDA_BLOCKS_PER_SM", "2"}};
  unsigned grid = 0, cluster = 0;
  int pdl = -1, device = -1;
  for (const bool in_place : {false, true}) {
    rmsnorm_fwd(grouped_fused_add(in_place));
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    EXPECT_EQ(probe_.last_launch_cooperative(), in_place ? 1 : 0) << in_place;
    EXPECT_EQ(pdl, in_place ? 0 : 1) << in_place;
    EXPECT_EQ(cluster, 0u) << in_place;
    EXPECT_EQ(grid % 128, 0u) << "whole groups of the row's slices, in place " << in_place;
  }
}

// A driver that holds fewer CTAs at once than the occupancy said (a process given part
// of the SMs, as under MPS) refuses the in-place grouped rows' cooperative grid: the
// call then runs without grouped rows, says so once, and later calls go there directly.
TEST_F(NormAutoDevice, RefusedCooperativeInPlaceRowsFallBackWithAWarning) {
  const ScopedEnv env{
      {"FAKE_CUDA_MEMORY_POOLS", "1"}, {"FAKE_CUDA_BLOCKS_PER_SM", "2"}, {"FAKE_CUDA_COOPERATIVE_MAX_CTAS", "64"}};
  const RmsNormFwdArgs a = grouped_fused_add(true);
  unsigned grid = 0, cluster = 0;
  int pdl = -1, device = -1;
  for (int call = 0; call < 2; ++call) {
    const long before = probe_.launches(0);
    ::testing::internal::CaptureStderr();
    rmsnorm_fwd(a);
    const std::string log = ::testing::internal::GetCapturedStderr();
    probe_.last_launch(&grid, &cluster, &pdl, &device);
    EXPECT_EQ(probe_.last_launch_cooperative(), 0) << "call " << call;
    EXPECT_EQ(probe_.launches(0) - before, 1) << "call " << call << ": one kernel launched, nothing else";
    const bool warned = log.find("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE") != std::string::npos &&
                        log.find("planned without grouped rows") != std::string::npos;
    EXPECT_EQ(warned, call == 0) << "call " << call << ": " << log;
  }
}

// An MPS client limited to fewer SMs than the device has: the context's SM-count affinity
// sizes the grids. The in-place rows at fp32 N=262144 group 128 CTAs (2 a SM here): on 64
// SMs their cooperative grid fits the driver's limit; on 32 the plan leaves the grouping
// out before launching (a refused launch would come too late under graph capture).
namespace {
void expect_in_place_rows_on_context_sms(const nktest::FakeProbe& probe, const RmsNormFwdArgs& a,
                                         const char* context_sms, const char* max_ctas, int expect_cooperative) {
  const ScopedEnv env{{"FAKE_CUDA_CONTEXT_SMS", context_sms},
                      {"FAKE_CUDA_MEMORY_POOLS", "1"},
                      {"FAKE_CUDA_BLOCKS_PER_SM", "2"},
                      {"FAKE_CUDA_COOPERATIVE_MAX_CTAS", max_ctas}};
  ::testing::internal::CaptureStderr();
  const normkit::rt::DeviceInfo info = normkit::rt::Runtime::instance().device_info(0);
  const std::string info_log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(info.sm_count, std::atoi(context_sms));
  EXPECT_EQ(info.device_sm_count, 132);
  EXPECT_NE(info_log.find(std::string("may use ") + context_sms + " of its 132 SMs"), std::string::npos) << info_log;
  const long before = probe.launches(0);
  ::testing::internal::CaptureStderr();
  rmsnorm_fwd(a);
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsigned grid = 0, cluster = 0;
  int pdl = -1, device = -1;
  probe.last_launch(&grid, &cluster, &pdl, &device);
  EXPECT_EQ(probe.launches(0) - before, 1) << "one launch, none refused: " << log;
  EXPECT_EQ(probe.last_launch_cooperative(), expect_cooperative) << log;
  if (expect_cooperative) EXPECT_LE(grid, static_cast<unsigned>(std::atoi(max_ctas)));
  EXPECT_EQ(log.find("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"), std::string::npos) << log;
  EXPECT_EQ(log.find("more than this device holds") != std::string::npos, expect_cooperative == 0) << log;
}
}  // namespace

TEST_F(NormAutoDevice, ContextSmLimitSizesTheCooperativeGrid) {
  expect_in_place_rows_on_context_sms(probe_, grouped_fused_add(true), "64", "128", 1);
}

TEST_F(NormAutoDevice, ContextSmLimitTooSmallForTheGroupPlansWithoutIt) {
  expect_in_place_rows_on_context_sms(probe_, grouped_fused_add(true), "32", "64", 0);
}

// Without the query (a GPU not under MPS) the device's count stands.
TEST_F(NormAutoDevice, NoContextSmLimitKeepsTheDeviceCount) {
  unsetenv("FAKE_CUDA_CONTEXT_SMS");
  const normkit::rt::DeviceInfo info = normkit::rt::Runtime::instance().device_info(1);
  EXPECT_EQ(info.sm_count, 132);
  EXPECT_EQ(info.device_sm_count, 132);
}

// NORMKIT_MEMORY_GBPS: the plans read the bandwidth it gives instead of the driver's (the
// fake reports none: unknown, so the H200's plans). RMSNorm fp32
// forward at N=16384 takes rows of 512 threads on the H200's class and of 1024 on the
// H100's (rmsnorm_heuristics_fwd.cpp, test_memory_class_plans.cpp); device_info keeps the
// driver's beside it. The values it refuses: RuntimeConfig.MemoryGbpsIsABandwidthOrAClearError.
TEST_F(NormAutoDevice, MemoryGbpsReachesThePlans) {
  using normkit::rt::Runtime;
  auto block = [&] {
    rmsnorm_fwd(plain_rows(16384, DType::kFloat32, true));
    return probe_.last_launch_block();
  };
  const int driver = Runtime::instance().device_info(0).driver_memory_gbps;
  ASSERT_FALSE(normkit::rt::slower_memory(driver)) << driver;
  EXPECT_EQ(Runtime::instance().device_info(0).memory_gbps, driver);
  EXPECT_EQ(block(), 512u);
  {
    ScopedEnv env({{"NORMKIT_MEMORY_GBPS", "3352"}});
    testing::internal::CaptureStderr();
    const normkit::rt::DeviceInfo info = Runtime::instance().device_info(0);
    Runtime::instance().device_info(0);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("device 0: the plans read NORMKIT_MEMORY_GBPS=3352 GB/s (an H100's memory class)"),
              std::string::npos)
        << said;
    EXPECT_EQ(said.find("NORMKIT_MEMORY_GBPS", said.find("NORMKIT_MEMORY_GBPS") + 1), std::string::npos) << said;
    EXPECT_EQ(info.memory_gbps, 3352);
    EXPECT_EQ(info.driver_memory_gbps, driver);
    EXPECT_EQ(block(), 1024u);
  }
  EXPECT_EQ(Runtime::instance().device_info(0).memory_gbps, driver);
  EXPECT_EQ(block(), 512u);
}
