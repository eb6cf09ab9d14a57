// The runtime opens CUDA lazily: compile-only work needs no driver, and a GPU call
// without a driver fails with an error that says what is missing. Each check runs
// in a forked child because the driver is opened once per process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/selftest.hpp"
#include "test_helpers.hpp"

using namespace normkit::rt;

namespace {

// CUDA libraries are opened once per process, and a forked child would inherit
// this process's state; so each check re-executes this test binary, filtered to
// the one test, in a fresh process with NKTEST_CHILD set. Returns the exit code.
int rerun_in_fresh_process(const std::string& test, const std::string& env) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const auto log = nktest::make_temp_dir("child") / "out.txt";
  const std::string cmd =
      "NKTEST_CHILD=1 " + env + " '" + self + "' --gtest_filter=" + test + " >'" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream f(log);
    ADD_FAILURE() << "child process failed (" << cmd << "):\n" << std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::filesystem::remove_all(log.parent_path());
  return rc;
}

bool in_child() { return std::getenv("NKTEST_CHILD") != nullptr; }

// The mapping of a library whose file name contains `needle`, or "" (printed on failure).
std::string mapped(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(needle) != std::string::npos) return line;
  return "";
}
bool maps_contain(const std::string& needle) { return !mapped(needle).empty(); }

}  // namespace

TEST(LazyCuda, MissingDriverIsAClearErrorNamingWhatIsMissing) {
  if (!in_child()) {
    EXPECT_EQ(rerun_in_fresh_process("LazyCuda.MissingDriverIsAClearErrorNamingWhatIsMissing",
                                     "NORMKIT_CUDA_DRIVER_PATH=/nonexistent/libcuda.so.1"),
              0);
    return;
  }
  try {
    Runtime::instance().device_count();
    FAIL() << "device_count() must fail without a driver";
  } catch (const normkit::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("NVIDIA driver"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/nonexistent/libcuda.so.1"), std::string::npos) << msg;
  }
  // Reported again, not a crash, on the next GPU call.
  EXPECT_THROW(Runtime::instance().device_info(0), normkit::Error);
  EXPECT_FALSE(Runtime::instance().driver_error().empty());
}

// Compile-only work must not need a driver. (NVRTC itself may map libcuda where one
// is installed, so the check hides the driver rather than inspecting the process.)
TEST(LazyCuda, CompileOnlyNeedsNoDriverAndNothingOpensAtStartup) {
  if (!in_child()) {
    const auto dir = nktest::make_temp_dir("lazy");
    EXPECT_EQ(rerun_in_fresh_process("LazyCuda.CompileOnlyNeedsNoDriverAndNothingOpensAtStartup",
                                     "NORMKIT_CUDA_DRIVER_PATH=/nonexistent/libcuda.so.1 NORMKIT_CACHE_DIR=" + dir.string()),
              0);
    std::filesystem::remove_all(dir);
    return;
  }
  EXPECT_FALSE(maps_contain("libnvrtc")) << mapped("libnvrtc");
  EXPECT_FALSE(maps_contain("libcuda.so")) << mapped("libcuda.so");
  auto k = Runtime::instance().compile(selftest::axpy_source(1), Target::parse("sm_90a"));
  EXPECT_FALSE(k->binary.empty());
  EXPECT_TRUE(maps_contain("libnvrtc")) << "NVRTC opens on the first compile";
  EXPECT_FALSE(Runtime::instance().driver_error().empty()) << "the driver stayed unavailable throughout";
}
