// Multi-device behaviour of the runtime against the fake driver (two devices of
// one architecture; see fake_cuda_driver.cpp). CTest runs each test in its own
// process with NORMKIT_CUDA_DRIVER_PATH pointing at the fake.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include <cuda.h>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/selftest.hpp"
#include "fake_probe.hpp"

using namespace normkit::rt;

namespace {

using nktest::FakeProbe;

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    nktest::open_fake_driver(&probe_);
    if (HasFatalFailure()) return;
    rt().reload_config();
    rt().reset_counters();
  }
  Runtime& rt() { return Runtime::instance(); }
  float* on(int device, unsigned long long offset = 0) {
    return reinterpret_cast<float*>(probe_.device_pointer(device, offset));
  }
  FakeProbe probe_{};
};

}  // namespace

TEST_F(MultiDevice, SeesTwoDevicesWithExactTargets) {
  ASSERT_EQ(rt().device_count(), 2);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(rt().device_info(d).target.str(), "sm_90a");
    EXPECT_EQ(rt().device_info(d).name, "Fake GPU " + std::to_string(d));
  }
}

TEST_F(MultiDevice, DeviceComesFromTheDataNotTheCurrentDevice) {
  selftest::axpy(on(1), on(1, 4096), 1000, 2.f, nullptr);
  int dev = -1;
  unsigned grid = 0, cluster = 0;
  int pdl = 0;
  probe_.last_launch(&grid, &cluster, &pdl, &dev);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(probe_.launches(0), 0);
}

TEST_F(MultiDevice, BinarySharedHandleLoadedPerDevice) {
  selftest::axpy(on(1), on(1, 4096), 1000, 2.f, nullptr);
  selftest::axpy(on(0), on(0, 4096), 1000, 2.f, nullptr);
  selftest::axpy(on(1), on(1, 4096), 1000, 2.f, nullptr);
  selftest::axpy(on(0), on(0, 4096), 1000, 2.f, nullptr);
  const Counters c = rt().counters();
  EXPECT_EQ(c.compiles, 1u) << "both devices are sm_90a: one binary";
  EXPECT_EQ(c.module_loads, 2u) << "one module per device";
  EXPECT_EQ(probe_.module_loads(0), 1);
  EXPECT_EQ(probe_.module_loads(1), 1);
  // The fake rejects a function launched outside the context it was loaded in,
  // so four successful launches prove no handle crossed devices.
  EXPECT_EQ(probe_.launches(0), 2);
  EXPECT_EQ(probe_.launches(1), 2);
  EXPECT_EQ(c.launches, 4u);
}

TEST_F(MultiDevice, TwoThreadsOnTwoDevices) {
  auto work = [&](int device) {
    for (int i = 0; i < 200; ++i) selftest::axpy(on(device), on(device, 1 << 20), 4096, 1.f, nullptr, 1 + i % 3);
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(rt().counters().compiles, 3u);
  EXPECT_EQ(probe_.module_loads(0), 3);
  EXPECT_EQ(probe_.module_loads(1), 3);
  EXPECT_EQ(probe_.launches(0), 200);
  EXPECT_EQ(probe_.launches(1), 200);
}

TEST_F(MultiDevice, MixedDevicesAndHostPointersAreClearErrors) {
  try {
    selftest::axpy(on(0), on(1), 16, 1.f, nullptr);
    FAIL();
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x' is on cuda:0 but 'y' is on cuda:1"), std::string::npos) << e.what();
  }
  float host[16];
  try {
    selftest::axpy(host, on(0), 16, 1.f, nullptr);
    FAIL();
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x' is not CUDA device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt().counters().launches, 0u);
}

TEST_F(MultiDevice, ColdKernelUnderCaptureAsksForWarmUpAndPrepareFixesIt) {
  auto capturing = reinterpret_cast<Stream>(probe_.capturing_stream());
  try {
    selftest::axpy(on(1), on(1, 4096), 100, 1.f, capturing);
    FAIL() << "a cold kernel must not compile or load during capture";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Warm up first"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt().counters().compiles, 0u);
  EXPECT_EQ(probe_.module_loads(1), 0);
  rt().prepare(selftest::axpy_source(1), {1});
  EXPECT_NO_THROW(selftest::axpy(on(1), on(1, 4096), 100, 1.f, capturing));
  // Prepared for device 1 only: device 0 is still cold under capture.
  EXPECT_THROW(selftest::axpy(on(0), on(0, 4096), 100, 1.f, capturing), normkit::Error);
}

TEST_F(MultiDevice, ClusterAndPdlReachTheDriverAndErrorsNameTheKernel) {
  selftest::axpy(on(0), on(0, 1 << 20), 100000, 1.f, nullptr, 1, 4, true);
  unsigned grid = 0, cluster = 0;
  int pdl = 0, dev = -1;
  probe_.last_launch(&grid, &cluster, &pdl, &dev);
  EXPECT_EQ(cluster, 4u);
  EXPECT_EQ(grid % 4, 0u) << "grid rounded up to whole clusters";
  EXPECT_EQ(pdl, 1);
  try {
    selftest::axpy(on(0), on(0, 1 << 20), 100000, 1.f, nullptr, 1, 32, false);
    FAIL();
  } catch (const normkit::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("launch of kernel 'selftest_axpy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cluster 32x1x1"), std::string::npos) << msg;
  }
  EXPECT_EQ(probe_.last_launch_cooperative(), 0);
}

// A cooperative launch (every CTA resident at once: the in-place fused add's grouped
// rows) reaches the driver as its attribute, and is refused together with PDL, which
// would let the grid start beside the kernel ahead of it.
TEST_F(MultiDevice, CooperativeReachesTheDriverAndIsNotPdl) {
  selftest::axpy(on(0), on(0, 1 << 20), 100000, 1.f, nullptr, 1, 0, false, true);
  EXPECT_EQ(probe_.last_launch_cooperative(), 1);
  unsigned grid = 0, cluster = 0;
  int pdl = -1, dev = -1;
  probe_.last_launch(&grid, &cluster, &pdl, &dev);
  EXPECT_EQ(pdl, 0);
  try {
    selftest::axpy(on(0), on(0, 1 << 20), 100000, 1.f, nullptr, 1, 0, true, true);
    FAIL() << "a cooperative launch with PDL was accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cooperative"), std::string::npos) << e.what();
  }
}

TEST_F(MultiDevice, LaunchLeavesTheCallersContextAlone) {
  // A framework made device 0 current; a launch on device 1's data pushes device
  // 1's context only for the call and leaves device 0 current afterwards.
  void* h = dlopen(std::getenv("NORMKIT_CUDA_DRIVER_PATH"), RTLD_NOW | RTLD_LOCAL);
  auto retain = reinterpret_cast<CUresult (*)(void**, int)>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  auto push = reinterpret_cast<CUresult (*)(void*)>(dlsym(h, "cuCtxPushCurrent_v2"));
  auto current = reinterpret_cast<CUresult (*)(void**)>(dlsym(h, "cuCtxGetCurrent"));
  ASSERT_TRUE(retain && push && current);
  void* ctx0 = nullptr;
  ASSERT_EQ(retain(&ctx0, 0), 0);
  ASSERT_EQ(push(ctx0), 0);
  selftest::axpy(on(1), on(1, 4096), 100, 1.f, nullptr);
  EXPECT_EQ(probe_.launches(1), 1);
  void* now = nullptr;
  current(&now);
  EXPECT_EQ(now, ctx0);
  selftest::axpy(on(0), on(0, 4096), 100, 1.f, nullptr);  // already current: no push needed
  EXPECT_EQ(probe_.launches(0), 1);
  current(&now);
  EXPECT_EQ(now, ctx0);
}

TEST_F(MultiDevice, AssertNoSpillsChecksLocalMemoryAtLoad) {
  // When NVRTC served the cubin from the CUDA compute cache there is no ptxas
  // report; the loaded function's local memory size is then what is checked.
  setenv("NORMKIT_ASSERT_NO_SPILLS", "1", 1);
  setenv("FAKE_CUDA_LOCAL_BYTES", "64", 1);
  rt().reload_config();
  try {
    selftest::axpy(on(0), on(0, 4096), 100, 1.f, nullptr);
    FAIL() << "64 bytes of local memory must be rejected";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("64 bytes of local memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(probe_.launches(0), 0);
  setenv("FAKE_CUDA_LOCAL_BYTES", "0", 1);
  EXPECT_NO_THROW(selftest::axpy(on(0), on(0, 4096), 100, 1.f, nullptr));
  unsetenv("NORMKIT_ASSERT_NO_SPILLS");
  unsetenv("FAKE_CUDA_LOCAL_BYTES");
}

TEST_F(MultiDevice, WarmGetIsALookupButCatchesAFamilyThatBreaksItsContract) {
  KernelSource k = selftest::axpy_source(2);
  const LoadedKernel first = rt().get(k, 0);
  const Counters before = rt().counters();
  const LoadedKernel again = rt().get(k, 0);
  EXPECT_EQ(again.function, first.function);
  EXPECT_EQ(again.context, first.context);
  const Counters after = rt().counters();
  EXPECT_EQ(after.memory_hits, before.memory_hits) << "a warm get() does not even reach the binary cache";
  EXPECT_EQ(after.module_loads, before.module_loads);
  EXPECT_NE(rt().get(k, 1).function, first.function) << "another device gets its own handle";
  k.source += "// same template arguments, different source\n";
  EXPECT_THROW(rt().get(k, 0), normkit::Error);
}
