// Cache-key sensitivity: every input that changes the binary changes the key;
// irrelevant changes (option order, headers the source does not include) do not.
#include <gtest/gtest.h>

#include "normkit/runtime/cache_key.hpp"

using namespace normkit::rt;

namespace {

struct Fixture {
  KernelSource kernel{"fam", "T=float", "#include \"a.cuh\"\n__global__ void k() {}\n", "k", {"-DX=1"}};
  std::map<std::string, std::string> headers{
      {"a.cuh", "#include \"b.cuh\"\n// a\n"}, {"b.cuh", "// b\n"}, {"unused.cuh", "// unused\n"}};
  KeyInputs inputs() const {
    KeyInputs in;
    in.kernel = &kernel;
    in.options = {"-std=c++17", "-DX=1", "--ptxas-options=-v"};
    in.target = Target::parse("sm_90a");
    in.nvrtc_major = 13;
    in.nvrtc_minor = 0;
    in.codegen_env = {{"NORMKIT_LINEINFO", "0"}, {"NORMKIT_NVRTC_FLAGS", ""}};
    in.headers = &headers;
    return in;
  }
  std::string key() const { return compute_cache_key(inputs()); }
};

}  // namespace

TEST(CacheKey, IsStableHex) {
  Fixture f;
  const std::string k = f.key();
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(k.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(k, f.key());
}

TEST(CacheKey, EachInputChangesTheKey) {
  const std::string base = Fixture{}.key();
  auto differs = [&](auto&& mutate, const char* what) {
    Fixture f;
    KeyInputs in = f.inputs();
    mutate(f, in);
    EXPECT_NE(compute_cache_key(in), base) << what;
  };
  differs([](Fixture& f, KeyInputs&) { f.kernel.family = "other"; }, "family");
  differs([](Fixture& f, KeyInputs&) { f.kernel.template_args = "T=half"; }, "template args");
  differs([](Fixture& f, KeyInputs&) { f.kernel.source += " "; }, "source");
  differs([](Fixture& f, KeyInputs&) { f.kernel.entry = "k2"; }, "entry");
  differs([](Fixture& f, KeyInputs&) { f.headers["a.cuh"] += "x"; }, "directly included header");
  differs([](Fixture& f, KeyInputs&) { f.headers["b.cuh"] += "x"; }, "transitively included header");
  differs([](Fixture&, KeyInputs& in) { in.options.push_back("-DY=2"); }, "added option");
  differs([](Fixture&, KeyInputs& in) { in.options[1] = "-DX=2"; }, "option value");
  differs([](Fixture&, KeyInputs& in) { in.target = Target::parse("sm_90"); }, "target suffix");
  differs([](Fixture&, KeyInputs& in) { in.target = Target::parse("sm_100a"); }, "target arch");
  differs([](Fixture&, KeyInputs& in) { in.target = Target::parse("compute_90"); }, "ptx vs cubin");
  differs([](Fixture&, KeyInputs& in) { in.nvrtc_minor = 1; }, "NVRTC version");
  differs([](Fixture&, KeyInputs& in) { in.format_version = kCacheFormatVersion + 1; }, "format version");
  differs([](Fixture&, KeyInputs& in) { in.codegen_env[0].second = "1"; }, "NORMKIT_LINEINFO");
  differs([](Fixture&, KeyInputs& in) { in.codegen_env[1].second = "-G"; }, "NORMKIT_NVRTC_FLAGS");
}

TEST(CacheKey, IrrelevantChangesKeepTheKey) {
  const std::string base = Fixture{}.key();
  {
    Fixture f;
    KeyInputs in = f.inputs();
    std::reverse(in.options.begin(), in.options.end());
    in.options.push_back("-DX=1");  // duplicate
    EXPECT_EQ(compute_cache_key(in), base) << "option order / duplicates";
  }
  {
    Fixture f;
    f.headers["unused.cuh"] = "// changed, but nobody includes it\n";
    f.headers["new.cuh"] = "// new\n";
    EXPECT_EQ(f.key(), base) << "headers the source does not include";
  }
  {
    Fixture f;
    KeyInputs in = f.inputs();
    std::reverse(in.codegen_env.begin(), in.codegen_env.end());
    EXPECT_EQ(compute_cache_key(in), base) << "env var order";
  }
}

TEST(CacheKey, FieldBoundariesAreUnambiguous) {
  Fixture a, b;
  // Moved-in strings: assigning the literals made GCC 12 at -O3 warn -Wrestrict
  // (a false positive inside libstdc++'s char_traits copy).
  a.kernel.family = std::string("ab");
  a.kernel.template_args = std::string("c");
  b.kernel.family = std::string("a");
  b.kernel.template_args = std::string("bc");
  EXPECT_NE(a.key(), b.key());
}

TEST(CacheKey, IncludedHeadersAreTransitiveAndDeduplicated) {
  Fixture f;
  f.headers["b.cuh"] = "#include \"a.cuh\"\n";  // cycle
  const auto names = included_headers(f.kernel.source, f.headers);
  EXPECT_EQ(names, (std::vector<std::string>{"a.cuh", "b.cuh"}));
}

TEST(CacheKey, NormalizeOptionsSortsAndDeduplicates) {
  EXPECT_EQ(normalize_options({"-b", "-a", "-b"}), (std::vector<std::string>{"-a", "-b"}));
}
