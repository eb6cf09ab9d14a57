// The runtime's cache behaviour end to end (compile-only, no GPU): memory and
// disk hits, modes, corrupt entries recompiled and overwritten, degraded disk.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <initializer_list>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/log.hpp"
#include "normkit/runtime/selftest.hpp"
#include "test_helpers.hpp"

using namespace normkit::rt;
using nktest::FreshRuntime;

namespace {
const Target kTarget = Target::parse("sm_90a");

std::size_t count_entries(const std::filesystem::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); it != decltype(it){}; ++it)
    n += it->path().extension() == ".nkc";
  return n;
}
}  // namespace

class RuntimeCache : public FreshRuntime {};

TEST_F(RuntimeCache, MemoryThenDiskHits) {
  auto first = rt().compile(selftest::axpy_source(2), kTarget);
  auto second = rt().compile(selftest::axpy_source(2), kTarget);
  EXPECT_EQ(first.get(), second.get()) << "memory hit returns the same binary object";
  Counters c = rt().counters();
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(c.memory_hits, 1u);
  EXPECT_EQ(count_entries(dir_), 1u);

  fresh();  // as a second process would
  auto third = rt().compile(selftest::axpy_source(2), kTarget);
  c = rt().counters();
  EXPECT_EQ(c.compiles, 0u);
  EXPECT_EQ(c.disk_hits, 1u);
  EXPECT_EQ(third->binary, first->binary);
  EXPECT_EQ(third->lowered_name, first->lowered_name);
  EXPECT_EQ(third->registers, first->registers);
}

TEST_F(RuntimeCache, MemoryModeWritesNothingToDisk) {
  setenv("NORMKIT_CACHE_MODE", "memory", 1);
  fresh();
  rt().compile(selftest::axpy_source(1), kTarget);
  rt().compile(selftest::axpy_source(1), kTarget);
  EXPECT_EQ(rt().counters().compiles, 1u);
  EXPECT_EQ(rt().counters().memory_hits, 1u);
  EXPECT_EQ(count_entries(dir_), 0u);
  unsetenv("NORMKIT_CACHE_MODE");
}

TEST_F(RuntimeCache, OffModeCompilesEveryTime) {
  setenv("NORMKIT_CACHE_MODE", "off", 1);
  fresh();
  rt().compile(selftest::axpy_source(1), kTarget);
  rt().compile(selftest::axpy_source(1), kTarget);
  EXPECT_EQ(rt().counters().compiles, 2u);
  EXPECT_EQ(count_entries(dir_), 0u);
  unsetenv("NORMKIT_CACHE_MODE");
}

TEST_F(RuntimeCache, BadModeIsAClearError) {
  setenv("NORMKIT_CACHE_MODE", "sometimes", 1);
  EXPECT_THROW(rt().reload_config(), normkit::Error);
  unsetenv("NORMKIT_CACHE_MODE");
}

// Each value of `variable` makes Config::from_environment() throw an error that names
// the variable; the variable is unset afterwards.
static void expect_each_rejected(const char* variable, std::initializer_list<const char*> values) {
  for (const char* bad : values) {
    setenv(variable, bad, 1);
    try {
      Config::from_environment();
      ADD_FAILURE() << variable << "=" << bad << " was accepted";
    } catch (const normkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
  }
  unsetenv(variable);
}

TEST(RuntimeConfig, SyncTimeoutIsWholeMicrosecondsOrAClearError) {
  unsetenv("NORMKIT_SYNC_TIMEOUT_US");
  EXPECT_EQ(Config::from_environment().sync_timeout_us, 2000u);
  setenv("NORMKIT_SYNC_TIMEOUT_US", "0", 1);
  EXPECT_EQ(Config::from_environment().sync_timeout_us, 0u);
  setenv("NORMKIT_SYNC_TIMEOUT_US", "150", 1);
  EXPECT_EQ(Config::from_environment().sync_timeout_us, 150u);
  expect_each_rejected("NORMKIT_SYNC_TIMEOUT_US", {"-1", "1.5", "2ms", "x", " 5"});
}

// NORMKIT_MEMORY_GBPS: a bandwidth of 1-100000 GB/s the plans read instead of the driver's
// (how it reaches them: the fake-driver test NormAutoDevice.MemoryGbpsReachesThePlans).
TEST(RuntimeConfig, MemoryGbpsIsABandwidthOrAClearError) {
  unsetenv("NORMKIT_MEMORY_GBPS");
  EXPECT_EQ(Config::from_environment().memory_gbps, 0);
  setenv("NORMKIT_MEMORY_GBPS", "3352", 1);
  EXPECT_EQ(Config::from_environment().memory_gbps, 3352);
  expect_each_rejected("NORMKIT_MEMORY_GBPS", {"0", "-3352", "fast", "3352GB", "200000"});
}

TEST(RuntimeConfig, PlanOverridesParseTheirKeysOrAreAClearError) {
  for (const char* variable : {"NORMKIT_FORWARD_PLAN", "NORMKIT_BACKWARD_PLAN"}) {
    const bool forward = std::string(variable) == "NORMKIT_FORWARD_PLAN";
    auto parsed = [&] {
      const Config c = Config::from_environment();
      return forward ? c.forward_plan : c.backward_plan;
    };
    unsetenv(variable);
    EXPECT_FALSE(parsed().any());
    setenv(variable, "ept=64,cta=512,minb=2,prefetch=0", 1);
    const normkit::rt::PlanOverride o = parsed();
    EXPECT_EQ(o.elems_per_thread, 64);
    EXPECT_EQ(o.cta_threads, 512);
    EXPECT_EQ(o.min_blocks, 2);
    EXPECT_TRUE(o.no_prefetch);
    // Each variable sets its own direction only.
    EXPECT_FALSE((forward ? Config::from_environment().backward_plan : Config::from_environment().forward_plan).any());
    setenv(variable, "prefetch=1", 1);
    EXPECT_FALSE(parsed().any());  // the plan's own choice
    expect_each_rejected(variable, {"ept=48", "ept=512", "cta=16", "cta=2048", "minb=0", "minb=17", "prefetch=2",
                                    "tpr=512", "ept", "ept=6x", "cta=-512", "cluster=1", "cluster=12", "cluster=32"});
    // cluster= (register rows over a cluster) is the backward's only.
    if (forward) {
      expect_each_rejected(variable, {"cluster=8", "sums=smem", "row=shared", "row=1", "w=smem"});
      setenv(variable, "row=smem,cta=256", 1);
      EXPECT_TRUE(parsed().smem_row == 1 && parsed().any());
      setenv(variable, "row=regs", 1);  // refused where the plan would take it
      EXPECT_TRUE(parsed().smem_row == -1 && parsed().any());
    } else {
      expect_each_rejected(variable, {"row=smem", "w=shared"});  // row= is the forward's only
      setenv(variable, "w=smem", 1);
      EXPECT_TRUE(parsed().weight_smem == 1 && parsed().any());
      setenv(variable, "w=global", 1);  // refused where the plan would take it
      EXPECT_TRUE(parsed().weight_smem == -1 && parsed().any());
      setenv(variable, "cluster=16,cta=1024", 1);
      EXPECT_EQ(parsed().cluster, 16);
      EXPECT_TRUE(parsed().any());
      setenv(variable, "cluster=8,sums=smem", 1);
      EXPECT_TRUE(parsed().smem_sums);
      setenv(variable, "sums=smem", 1);  // rows of one CTA
      EXPECT_TRUE(parsed().smem_sums && parsed().any());
      expect_each_rejected(variable, {"sums=shared", "cluster=8,sums=1"});
    }
    unsetenv(variable);
  }
}

TEST_F(RuntimeCache, RunOnlyMissIsAnErrorAndHitWorks) {
  setenv("NORMKIT_RUN_ONLY", "1", 1);
  fresh();
  try {
    rt().compile(selftest::axpy_source(5), kTarget);
    FAIL() << "a miss must be an error in run-only mode";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("NORMKIT_RUN_ONLY"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt().counters().compiles, 0u);
  unsetenv("NORMKIT_RUN_ONLY");
  fresh();
  rt().compile(selftest::axpy_source(5), kTarget);  // precompile
  setenv("NORMKIT_RUN_ONLY", "1", 1);
  fresh();
  EXPECT_NO_THROW(rt().compile(selftest::axpy_source(5), kTarget));
  EXPECT_EQ(rt().counters().disk_hits, 1u);
  EXPECT_EQ(rt().counters().compiles, 0u);
  unsetenv("NORMKIT_RUN_ONLY");
}

TEST_F(RuntimeCache, CorruptEntryIsRecompiledAndOverwritten) {
  auto good = rt().compile(selftest::axpy_source(3), kTarget);
  const auto path = DiskCache(dir_).entry_path(good->key);
  ASSERT_TRUE(std::filesystem::exists(path));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    c ^= 0x10;
    f.write(&c, 1);
  }
  fresh();
  auto again = rt().compile(selftest::axpy_source(3), kTarget);
  Counters c = rt().counters();
  EXPECT_EQ(c.disk_invalid, 1u);
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(again->binary, good->binary);
  fresh();
  rt().compile(selftest::axpy_source(3), kTarget);
  EXPECT_EQ(rt().counters().disk_hits, 1u) << "the recompiled entry overwrote the corrupt one";
}

TEST_F(RuntimeCache, UnwritableDirectoryDegradesToMemoryOnly) {
  const auto file = dir_ / "not-a-directory";
  std::ofstream(file) << "x";
  setenv("NORMKIT_CACHE_DIR", (file / "cache").c_str(), 1);
  fresh();
  auto k = rt().compile(selftest::axpy_source(1), kTarget);
  EXPECT_FALSE(k->binary.empty());
  EXPECT_FALSE(rt().disk_cache_usable());
  rt().compile(selftest::axpy_source(1), kTarget);
  EXPECT_EQ(rt().counters().memory_hits, 1u);
}

TEST(CacheDirectory, Precedence) {
  setenv("HOME", "/home/someone", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("NORMKIT_CACHE_DIR", "/explicit", 1);
  EXPECT_EQ(default_cache_dir(), "/explicit");
  unsetenv("NORMKIT_CACHE_DIR");
  EXPECT_EQ(default_cache_dir(), "/xdg/normkit");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/home/someone/.cache/normkit");
}

// A deployment ships a filled cache on a read-only path and runs with
// NORMKIT_RUN_ONLY=1: the entries must still load though nothing can be written
// (not even lock files). Root ignores permissions, so as root the check runs in a
// child that drops to an unprivileged user first.
TEST_F(RuntimeCache, ReadOnlyPrefilledCacheServesRunOnly) {
  rt().compile(selftest::axpy_source(7), kTarget);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                         std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                         std::filesystem::perms::others_exec);
  for (auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    const bool is_dir = e.is_directory();
    std::filesystem::permissions(e.path(), is_dir ? std::filesystem::perms(0555) : std::filesystem::perms(0444));
  }
  std::filesystem::permissions(dir_, std::filesystem::perms(0555));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(10);
    setenv("NORMKIT_RUN_ONLY", "1", 1);
    try {
      fresh();
      rt().compile(selftest::axpy_source(7), kTarget);
      const Counters c = rt().counters();
      _exit(c.disk_hits == 1 && c.compiles == 0 ? 0 : 11);
    } catch (const std::exception& e) {
      fprintf(stderr, "%s\n", e.what());
      _exit(12);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all);
  for (auto& e : std::filesystem::recursive_directory_iterator(dir_))
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_all);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not drop privileges, 11: not served from disk, 12: error";
}

TEST(Logging, ReloadConfigRereadsTheLogLevel) {
  setenv("NORMKIT_LOG", "debug", 1);
  Runtime::instance().reload_config();
  EXPECT_TRUE(log_enabled(LogLevel::debug));
  setenv("NORMKIT_LOG", "error", 1);
  Runtime::instance().reload_config();
  EXPECT_FALSE(log_enabled(LogLevel::warn));
  EXPECT_TRUE(log_enabled(LogLevel::error));
  setenv("NORMKIT_LOG", "warn", 1);
  Runtime::instance().reload_config();
}
