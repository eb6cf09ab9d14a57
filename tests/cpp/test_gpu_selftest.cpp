// GPU smoke test of the whole runtime path; skipped (with the reason) without a GPU.
#include <gtest/gtest.h>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/selftest.hpp"

using namespace normkit::rt;

TEST(GpuSelftest, AxpyOnEveryDevice) {
  int count = 0;
  try {
    count = Runtime::instance().device_count();
  } catch (const normkit::Error& e) {
    GTEST_SKIP() << "no CUDA driver: " << e.message();
  }
  if (count == 0) GTEST_SKIP() << "no CUDA device";
  for (int d = 0; d < count; ++d) {
    const DeviceInfo info = Runtime::instance().device_info(d);
    EXPECT_EQ(info.target, resolve_target(info.cc_major, info.cc_minor, Runtime::instance().toolchain(true)));
    EXPECT_EQ(selftest::run_on_device(d), "") << "device " << d << " (" << info.name << ", " << info.target.str() << ")";
  }
}
