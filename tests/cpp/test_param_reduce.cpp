// param_grad_reduce, the last kernel of every norm backward: the CTA shape the host
// gives it by the number of dw/db parts (param_reduce_shape, host only) and the SASS
// of its batched loads (NVRTC, no GPU).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "normkit/runtime/runtime.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernels.hpp"
#include "rmsnorm_test_specs.hpp"
#include "test_helpers.hpp"

using namespace normkit::norm::detail;
using normkit::rt::Target;
using namespace rmsnorm_test;

namespace {
class ParamReduceKernel : public nktest::FreshRuntime, public ::testing::WithParamInterface<std::string> {};
}  // namespace

// param_grad_reduce's batch: every load of a batch (8 parts of dweight, and of dbias)
// issued before the first add, in the SASS. The bare __launch_bounds__(1024) let ptxas
// sm_90a interleave them, each add waiting on its load (LayerNorm's backward 0.7-1.6 %
// slower on an H100; param_grad_reduce.cuh). Needs the toolkit's cuobjdump for
// NORMKIT_DUMP_DIR's .sass (CI sets NORMKIT_TEST_REQUIRE_NVRTC=1, which makes its
// absence a failure).
TEST_P(ParamReduceKernel, IssuesEachBatchBeforeAdding) {
  const auto dump = nktest::make_temp_dir("dump");
  setenv("NORMKIT_DUMP_DIR", dump.c_str(), 1);
  setenv("NORMKIT_CACHE_MODE", "off", 1);  // compiled here, so the dump is written
  fresh();
  struct Case {
    ParamReduceSpec spec;
    int loads;
  };
  for (const Case& c : {Case{{bf16, bf16}, 16}, Case{{f32, {}}, 8}}) {
    auto k = rt().compile(param_reduce_source(c.spec), Target::parse(GetParam()));
    const std::filesystem::path sass = dump / ("param_grad_reduce-" + k->key.substr(0, 16) + ".sass");
    if (!std::filesystem::exists(sass)) {
      const char* require = std::getenv("NORMKIT_TEST_REQUIRE_NVRTC");
      EXPECT_FALSE(require != nullptr && std::string(require) == "1") << "no SASS dumped (cuobjdump) at " << sass;
      continue;
    }
    std::ifstream in(sass);
    int leading_loads = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("FADD") != std::string::npos) break;
      if (line.find("LDG") != std::string::npos) ++leading_loads;
    }
    EXPECT_GE(leading_loads, c.loads) << sass << " on " << GetParam();
  }
  unsetenv("NORMKIT_DUMP_DIR");
  unsetenv("NORMKIT_CACHE_MODE");
  std::filesystem::remove_all(dump);
}

// param_reduce_shape: a CTA the kernel can take (at most kReduceThreads = 1024
// threads, whole warps of columns), at most ~32 parts a lane, and lanes only where
// the parts ask for them.
TEST(ParamReduceShape, FitsTheKernelAndGrowsLanesWithTheParts) {
  int last_lanes = 1;
  for (std::int64_t parts = 1; parts <= 4096; ++parts) {
    const ParamReduceShape s = param_reduce_shape(parts);
    const std::string what = "parts=" + std::to_string(parts);
    EXPECT_EQ(s.width % 32, 0) << what;
    EXPECT_LE(s.width * s.lanes, 1024) << what;
    EXPECT_GE(s.width * s.lanes, 256) << what;
    EXPECT_TRUE(s.lanes == 32 || (parts + s.lanes - 1) / s.lanes <= 32) << what;
    EXPECT_TRUE(s.lanes == 1 || (parts + s.lanes / 2 - 1) / (s.lanes / 2) > 32) << what;  // no lane too many
    EXPECT_GE(s.lanes, last_lanes) << what;
    last_lanes = s.lanes;
  }
  EXPECT_EQ(param_reduce_shape(8).lanes, 1);     // long rows over clusters
  EXPECT_EQ(param_reduce_shape(8).width, 256);
  EXPECT_EQ(param_reduce_shape(132).lanes, 8);   // one CTA an SM
  EXPECT_EQ(param_reduce_shape(924).lanes, 32);  // short register rows, 7 CTAs an SM
}

INSTANTIATE_TEST_SUITE_P(Targets, ParamReduceKernel, ::testing::Values("sm_80", "sm_90a", "sm_100a"),
                         [](const auto& info) { return info.param; });
