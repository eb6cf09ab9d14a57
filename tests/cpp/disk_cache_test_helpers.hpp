// Shared helpers for the disk cache tests (test_cache_entry_format.cpp and
// test_disk_cache.cpp).
//
// Why a header: both test files drive the same DiskCacheTest fixture (so their
// tests keep the one suite name, DiskCacheTest.*) and build the same kernels and
// byte buffers. gtest requires every test of a suite to use the same fixture
// type, so the fixture lives in a named namespace here, not in an anonymous one
// per file; everything is inline. The fork / stderr-capture helpers for the
// degradation and multi-process tests live here too, to keep each test file to
// its tests.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/hash.hpp"
#include "normkit/runtime/log.hpp"

namespace nktest::disk {

namespace fs = std::filesystem;
using normkit::rt::CompiledKernel;
using normkit::rt::DiskCache;
using normkit::rt::DiskEntryInfo;
using normkit::rt::DiskLookup;
using normkit::rt::Target;

inline constexpr std::size_t kPrefixSize = 20;  // magic + u32 version + u64 header length
inline constexpr std::size_t kChecksumSize = 32;

inline std::string key_for(const std::string& seed) { return normkit::rt::to_hex(normkit::rt::sha256(seed)); }

inline CompiledKernel make_kernel(const std::string& seed, std::size_t binary_size = 4096) {
  CompiledKernel k;
  k.key = key_for(seed);
  k.target = Target::parse("sm_90a");
  k.lowered_name = "_Z4axpyIfLi4EEvPfPKfS2_i";
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(seed)));
  k.binary.resize(binary_size);
  for (char& c : k.binary) c = static_cast<char>(rng() & 0xff);
  k.registers = 40;
  k.spill_store_bytes = 8;
  k.spill_load_bytes = 12;
  k.stack_frame_bytes = 24;
  // Newlines, a literal backslash-n, '=' and CR: all must survive the line-based header.
  k.ptxas_log =
      "ptxas info    : Compiling entry function '_Z4axpyIfLi4EEvPfPKfS2_i' for 'sm_90a'\n"
      "ptxas info    : Used 40 registers, 8 bytes spill stores\n"
      "literal \\n and \\\\ and a=b\r\n\n";
  k.meta = {{"family", "selftest_axpy"},
            {"nvrtc", "12.8"},
            {"created", "2025-01-01T00:00:00Z"},
            {"seed", seed},
            {"note", "multi\nline \\ value = x"},
            {"empty", ""}};
  return k;
}

inline void expect_same(const CompiledKernel& a, const CompiledKernel& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.lowered_name, b.lowered_name);
  EXPECT_TRUE(a.binary == b.binary) << "binary differs (" << a.binary.size() << " vs " << b.binary.size() << " bytes)";
  EXPECT_EQ(a.registers, b.registers);
  EXPECT_EQ(a.spill_store_bytes, b.spill_store_bytes);
  EXPECT_EQ(a.spill_load_bytes, b.spill_load_bytes);
  EXPECT_EQ(a.stack_frame_bytes, b.stack_frame_bytes);
  EXPECT_EQ(a.ptxas_log, b.ptxas_log);
  EXPECT_EQ(a.meta, b.meta);
}

inline std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
  // Unlink rather than truncate: ext4 flushes a file truncated and rewritten in
  // place on close, which makes hundreds of corruption rounds slow.
  std::error_code ec;
  fs::remove(p, ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

inline std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::size_t count_temp_files(const fs::path& dir) {
  const auto names = files_in(dir);
  return std::count_if(names.begin(), names.end(),
                       [](const std::string& n) { return n.find(".nkc.tmp.") != std::string::npos; });
}

inline std::size_t count_occurrences(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
  return n;
}

inline void reseal(std::vector<char>& entry) {
  const auto digest = normkit::rt::sha256(entry.data(), entry.size() - kChecksumSize);
  std::copy(digest.begin(), digest.end(), entry.end() - kChecksumSize);
}

inline std::uint64_t header_length(const std::vector<char>& entry) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(entry[12 + i]);
  return v;
}

// Runs `body` in a forked child and returns its wait status. gtest failures in the
// child are printed by the child and turn into exit code 1; `body` may _exit()
// itself with another code (77 = skip).
inline int run_child(const std::function<void()>& body) {
  std::fflush(nullptr);  // or buffered output is written twice
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child threw: %s\n", e.what());
      std::fflush(nullptr);
      ::_exit(3);
    }
    std::fflush(nullptr);
    ::_exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

inline std::string describe(int status) {
  if (WIFEXITED(status)) return "child exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "child killed by signal " + std::to_string(WTERMSIG(status));
  return "child status " + std::to_string(status);
}

inline bool child_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Whether this process would still print the disk cache's degradation warning.
// Asked in a throwaway child, because asking warn_once() here would use it up.
inline bool warning_still_pending() {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    ::_exit(normkit::rt::warn_once("disk-cache-degraded", "probe") ? 0 : 1);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return child_ok(status);
}

// `text` (captured stderr) holds exactly the one expected degradation warning, and
// it names every string in `mentions`; or none at all if the process had already warned.
inline void expect_one_degradation_warning(bool pending, const std::string& text,
                                           const std::vector<std::string>& mentions) {
  EXPECT_EQ(count_occurrences(text, "not usable"), pending ? 1u : 0u) << text;
  if (!pending) return;
  for (const auto& m : mentions) EXPECT_NE(text.find(m), std::string::npos) << "'" << m << "' not in: " << text;
}

// Redirects fd 2 into a pipe (not a file: RLIMIT_FSIZE must not apply to it).
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int p[2];
    if (::pipe(p) != 0) std::abort();
    read_end_ = p[0];
    ::dup2(p[1], 2);
    ::close(p[1]);
  }
  std::string finish() {
    std::fflush(stderr);
    ::dup2(saved_, 2);  // closes the last write end, so the read below ends
    ::close(saved_);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(read_end_, buf, sizeof(buf))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(read_end_);
    return text;
  }

 private:
  int saved_ = -1;
  int read_end_ = -1;
};

class DiskCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(testing::TempDir()) / "normkit_disk_cache_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    root_ = dir_ / "cache";
    DiskCache::set_write_hook(nullptr);
  }
  void TearDown() override {
    DiskCache::set_write_hook(nullptr);
    // Tests chmod directories read-only; undo that so the tree can be removed.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  // Writes `bytes` as the entry of `good`, expects an invalid miss, then expects a
  // store to replace it with a hit.
  void expect_invalid_then_repaired(DiskCache& cache, const CompiledKernel& good, const std::vector<char>& bytes,
                                    const std::string& what) {
    SCOPED_TRACE(what);
    write_bytes(cache.entry_path(good.key), bytes);
    DiskLookup outcome = DiskLookup::hit;
    EXPECT_FALSE(cache.load(good.key, &outcome).has_value());
    EXPECT_EQ(outcome, DiskLookup::invalid);
    ASSERT_TRUE(cache.store(good));
    const auto loaded = cache.load(good.key, &outcome);
    EXPECT_EQ(outcome, DiskLookup::hit);
    ASSERT_TRUE(loaded.has_value());
    expect_same(*loaded, good);
  }

  fs::path dir_;
  fs::path root_;
};

}  // namespace nktest::disk
