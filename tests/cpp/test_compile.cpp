// Compile-only path through NVRTC (no GPU): every target class, PTX fallback,
// diagnostics (dump, spill assertion), errors with the NVRTC log attached.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "../../src/runtime/compiler.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/selftest.hpp"
#include "test_helpers.hpp"

using namespace normkit::rt;
using nktest::FreshRuntime;

namespace {

// Many values live at once under a 32-register cap: ptxas has to spill. `scale`
// makes each call's PTX unique: with a driver present NVRTC serves a repeated
// PTX->cubin step from the CUDA compute cache, without the ptxas report.
KernelSource spilling_kernel(float scale) {
  KernelSource k;
  k.family = "test_spill";
  k.template_args = "cap=32 scale=" + std::to_string(scale);
  k.source = R"(
__global__ void spill(const float* __restrict__ in, float* __restrict__ out) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[threadIdx.x + i * 128];
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 96; ++i) acc += v[i] * v[95 - i] * v[(i * 7) % 96];
  out[threadIdx.x] = acc * SCALE;
}
)";
  k.source = "#define SCALE " + std::to_string(scale) + "f\n" + k.source;
  k.entry = "spill";
  k.options = {"-maxrregcount=32"};
  return k;
}

}  // namespace

class Compile : public FreshRuntime {};

TEST_F(Compile, EveryTargetClassGivesAnElfCubinWithoutSpills) {
  for (const char* target : {"sm_80", "sm_90a", "sm_100a", "sm_120a"}) {
    auto k = rt().compile(selftest::axpy_source(4), Target::parse(target));
    ASSERT_GT(k->binary.size(), 4u) << target;
    EXPECT_EQ(std::string(k->binary.data(), 4), "\x7f" "ELF") << target;
    EXPECT_EQ(k->target.str(), target);
    EXPECT_GT(k->registers, 0) << target;
    EXPECT_EQ(k->spill_store_bytes, 0) << target;
    EXPECT_EQ(k->spill_load_bytes, 0) << target;
    EXPECT_NE(k->lowered_name.find("axpy_kernel"), std::string::npos);
    EXPECT_EQ(k->lowered_name.rfind("_Z", 0), 0u) << "entry should be a mangled template instance";
  }
  EXPECT_EQ(rt().counters().compiles, 4u);
}

TEST_F(Compile, PtxTargetGivesPtxText) {
  auto k = rt().compile(selftest::axpy_source(1), Target::parse("compute_90"));
  const std::string text(k->binary.begin(), k->binary.end());
  EXPECT_NE(text.find(".target sm_90"), std::string::npos);
  EXPECT_EQ(text.find(".target sm_90a"), std::string::npos);
  EXPECT_EQ(k->registers, -1) << "ptxas does not run for PTX targets";
}

TEST_F(Compile, CompileOnlyNeedsAnExplicitTarget) {
  try {
    rt().compile_only_target();
    FAIL() << "expected an error without NORMKIT_ARCH";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no default architecture"), std::string::npos) << e.what();
  }
  setenv("NORMKIT_ARCH", "sm_80", 1);
  fresh();
  EXPECT_EQ(rt().compile_only_target().str(), "sm_80");
  EXPECT_EQ(rt().compile_only_target("sm_100a").str(), "sm_100a") << "an argument beats the environment";
  unsetenv("NORMKIT_ARCH");
}

TEST_F(Compile, CompileErrorCarriesTheNvrtcLog) {
  KernelSource bad{"test_bad", "", "__global__ void broken() { this_is_not_declared = 1; }\n", "broken", {}};
  try {
    rt().compile(bad, Target::parse("sm_90a"));
    FAIL() << "expected a compile error";
  } catch (const normkit::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("NVRTC log"), std::string::npos) << msg;
    EXPECT_NE(msg.find("this_is_not_declared"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_bad"), std::string::npos) << msg;
  }
}

TEST_F(Compile, SpillsAreReportedAndCanBeFatal) {
  setenv("NORMKIT_CACHE_MODE", "off", 1);  // every compile below really runs NVRTC
  fresh();
  std::random_device seed;
  const float scale = 1.0f + static_cast<float>(seed() % 100000) / 7.0f;
  auto k = rt().compile(spilling_kernel(scale), Target::parse("sm_90a"));
  ASSERT_GT(k->spill_store_bytes, 0) << k->ptxas_log;
  setenv("NORMKIT_ASSERT_NO_SPILLS", "1", 1);
  fresh();
  try {
    auto again = rt().compile(spilling_kernel(scale + 1.0f), Target::parse("sm_90a"));
    FAIL() << "expected NORMKIT_ASSERT_NO_SPILLS to reject the kernel; spill stores " << again->spill_store_bytes
           << ", ptxas report:\n" << again->ptxas_log << "\nfirst report:\n" << k->ptxas_log;
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("spills to local memory"), std::string::npos) << e.what();
  }
  // The self-test kernel does not spill and passes the same check.
  EXPECT_NO_THROW(rt().compile(selftest::axpy_source(2), Target::parse("sm_90a")));
  unsetenv("NORMKIT_ASSERT_NO_SPILLS");
  unsetenv("NORMKIT_CACHE_MODE");
}

TEST_F(Compile, DumpDirGetsSourcePtxCubinAndReport) {
  const auto dump = nktest::make_temp_dir("dump");
  setenv("NORMKIT_DUMP_DIR", dump.c_str(), 1);
  fresh();
  auto k = rt().compile(selftest::axpy_source(3), Target::parse("sm_90a"));
  unsetenv("NORMKIT_DUMP_DIR");
  const std::string base = (dump / ("selftest_axpy-" + k->key.substr(0, 16))).string();
  for (const char* ext : {".cu", ".ptx", ".cubin", ".ptxas.txt"})
    EXPECT_TRUE(std::filesystem::exists(base + ext)) << base << ext;
  // SASS where the toolkit's cuobjdump (and the nvdisasm it runs) work, else no file.
  if (std::filesystem::exists(base + ".sass")) {
    EXPECT_GT(std::filesystem::file_size(base + ".sass"), 0u) << base;
  }
  std::ifstream ptx(base + ".ptx");
  std::string text((std::istreambuf_iterator<char>(ptx)), {});
  EXPECT_NE(text.find(".entry"), std::string::npos);
  std::filesystem::remove_all(dump);
}

TEST_F(Compile, LogSettingsDoNotChangeTheKeyButCodegenVariablesDo) {
  const Target t = Target::parse("sm_90a");
  const std::string base = rt().compile(selftest::axpy_source(1), t)->key;
  setenv("NORMKIT_LOG_COMPILES", "1", 1);
  setenv("NORMKIT_PTXAS_VERBOSE", "1", 1);
  fresh();
  EXPECT_EQ(rt().compile(selftest::axpy_source(1), t)->key, base);
  unsetenv("NORMKIT_LOG_COMPILES");
  unsetenv("NORMKIT_PTXAS_VERBOSE");
  setenv("NORMKIT_LINEINFO", "1", 1);
  fresh();
  EXPECT_NE(rt().compile(selftest::axpy_source(1), t)->key, base);
  unsetenv("NORMKIT_LINEINFO");
  setenv("NORMKIT_NVRTC_FLAGS", "-DNORMKIT_TEST_FLAG=1", 1);
  fresh();
  EXPECT_NE(rt().compile(selftest::axpy_source(1), t)->key, base);
  unsetenv("NORMKIT_NVRTC_FLAGS");
}

TEST(PtxasReport, ParsesEntryRegistersAndSumsSpills) {
  const std::string log =
      "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z3fooPf\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "ptxas         .     0 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads\n";
  CompiledKernel k;
  parse_ptxas_report(log, "_Z3fooPf", k);
  EXPECT_EQ(k.registers, 40);
  EXPECT_EQ(k.stack_frame_bytes, 16);
  EXPECT_EQ(k.spill_store_bytes, 20);
  EXPECT_EQ(k.spill_load_bytes, 16);
}
