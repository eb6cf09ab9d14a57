// Shared fixtures for runtime tests: each test gets a private cache directory and
// a runtime whose memory cache and counters start empty, as in a fresh process.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "normkit/runtime/runtime.hpp"

namespace nktest {

inline std::filesystem::path make_temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("normkit-" + tag + "-XXXXXX")).string();
  char* made = mkdtemp(pattern.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed");
  return made;
}

class FreshRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("rt");
    setenv("NORMKIT_CACHE_DIR", dir_.c_str(), 1);
    for (const char* v : {"NORMKIT_CACHE_MODE", "NORMKIT_RUN_ONLY", "NORMKIT_ARCH", "NORMKIT_LINEINFO",
                          "NORMKIT_NVRTC_FLAGS", "NORMKIT_ASSERT_NO_SPILLS", "NORMKIT_DUMP_DIR"})
      unsetenv(v);
    fresh();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Forget everything in memory, as a new process would.
  void fresh() {
    auto& rt = normkit::rt::Runtime::instance();
    rt.reload_config();
    rt.clear_memory_cache();
    rt.reset_counters();
  }
  normkit::rt::Runtime& rt() { return normkit::rt::Runtime::instance(); }
  std::filesystem::path dir_;
};

}  // namespace nktest
