// Disk compile cache, filesystem side: paths, exact round trip through store and
// load, misplaced entries being a miss that the next store repairs, listing and
// clearing, degradation of unusable directories, and the multi-process guarantees
// (atomic publish, per-key lock). No GPU or NVRTC involved.
//
// Anything that degrades a cache runs in a forked child, so this process never
// uses up its one degradation warning. Other test files in the same binary may
// have used it already, though; the checks ask first (warning_still_pending()).
//
// Byte-level format tests (layout, serialize/deserialize, bit flips, truncation)
// are in test_cache_entry_format.cpp; both files share disk_cache_test_helpers.hpp.
#include "normkit/runtime/disk_cache.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "disk_cache_test_helpers.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/log.hpp"

namespace {

using namespace nktest::disk;

// --- paths and round trip -------------------------------------------------

TEST_F(DiskCacheTest, ConstructorAndReadsDoNotTouchTheFilesystem) {
  DiskCache cache(root_);
  EXPECT_EQ(cache.root(), root_);
  EXPECT_EQ(cache.entry_dir(), root_ / "v1");
  const std::string key = key_for("a");
  EXPECT_EQ(cache.entry_path(key), root_ / "v1" / (key + ".nkc"));
  DiskLookup outcome = DiskLookup::hit;
  EXPECT_FALSE(cache.load(key, &outcome).has_value());
  EXPECT_EQ(outcome, DiskLookup::absent);
  EXPECT_TRUE(cache.list(true).empty());
  EXPECT_EQ(cache.clear(), 0u);
  EXPECT_TRUE(cache.usable());
  EXPECT_FALSE(fs::exists(root_));
}

TEST_F(DiskCacheTest, EntryPathRejectsAnythingButLowercaseHexKeys) {
  DiskCache cache(root_);
  const std::string good = key_for("a");
  std::string upper = good;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) { return static_cast<char>(std::toupper(c)); });
  const std::vector<std::string> bad = {
      "",    "abc", good + "0", good.substr(1), upper, "../" + good.substr(3), good.substr(0, 63) + "/",
      good.substr(0, 63) + "g", std::string(64, '.')};
  for (const auto& key : bad) {
    SCOPED_TRACE(key);
    EXPECT_THROW(cache.entry_path(key), normkit::Error);
    EXPECT_THROW(cache.load(key), normkit::Error);
    EXPECT_THROW(cache.lock(key), normkit::Error);
    CompiledKernel k = make_kernel("a");
    k.key = key;
    EXPECT_THROW(cache.store(k), normkit::Error);
  }
  EXPECT_NO_THROW(cache.entry_path(good));
  EXPECT_FALSE(fs::exists(root_));
}

TEST_F(DiskCacheTest, RoundTripPreservesEveryField) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("roundtrip");
  ASSERT_TRUE(cache.store(k));
  EXPECT_TRUE(fs::is_regular_file(cache.entry_path(k.key)));

  DiskLookup outcome = DiskLookup::absent;
  const auto loaded = cache.load(k.key, &outcome);
  EXPECT_EQ(outcome, DiskLookup::hit);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, k);

  // A fresh object (another process, in practice) sees the same entry.
  const auto again = DiskCache(root_).load(k.key);
  ASSERT_TRUE(again.has_value());
  expect_same(*again, k);

  // The other shape of kernel: PTX, no resource report, empty log and meta.
  CompiledKernel ptx = make_kernel("ptx", 1);
  ptx.target = Target::parse("compute_90");
  ptx.registers = ptx.spill_store_bytes = ptx.spill_load_bytes = ptx.stack_frame_bytes = -1;
  ptx.ptxas_log.clear();
  ptx.meta.clear();
  ASSERT_TRUE(cache.store(ptx));
  const auto loaded_ptx = cache.load(ptx.key);
  ASSERT_TRUE(loaded_ptx.has_value());
  expect_same(*loaded_ptx, ptx);

  // store() publishes exactly what serialize() produces.
  EXPECT_TRUE(read_bytes(cache.entry_path(k.key)) == DiskCache::serialize(k));
  expect_same(DiskCache::deserialize(DiskCache::serialize(k), k.key), k);
}

// --- misplaced and rejected entries on disk ---------------------------------

TEST_F(DiskCacheTest, EntryUnderAnotherKeysNameIsInvalidAndRepairedByStore) {
  DiskCache cache(root_);
  const CompiledKernel a = make_kernel("A");
  const CompiledKernel b = make_kernel("B");
  ASSERT_TRUE(cache.store(a));
  fs::copy_file(cache.entry_path(a.key), cache.entry_path(b.key));

  DiskLookup outcome = DiskLookup::hit;
  EXPECT_FALSE(cache.load(b.key, &outcome).has_value());
  EXPECT_EQ(outcome, DiskLookup::invalid);
  const auto still_a = cache.load(a.key, &outcome);  // the original is unaffected
  EXPECT_EQ(outcome, DiskLookup::hit);
  ASSERT_TRUE(still_a.has_value());
  expect_same(*still_a, a);

  expect_invalid_then_repaired(cache, b, read_bytes(cache.entry_path(a.key)), "A's entry at B's path");
}

TEST_F(DiskCacheTest, InvalidEntriesAreLoggedAtInfoLevel) {
  DiskCache cache(root_);
  const CompiledKernel k = make_kernel("logged");
  ASSERT_TRUE(cache.store(k));
  write_bytes(cache.entry_path(k.key), {'N', 'K'});
  const auto saved = normkit::rt::log_level();
  normkit::rt::set_log_level(normkit::rt::LogLevel::info);
  StderrCapture capture;
  EXPECT_FALSE(cache.load(k.key).has_value());
  const std::string text = capture.finish();
  normkit::rt::set_log_level(saved);
  EXPECT_NE(text.find(k.key + ".nkc"), std::string::npos) << text;
  EXPECT_NE(text.find("too short"), std::string::npos) << text;
  EXPECT_NE(text.find("info"), std::string::npos) << text;
}

// --- listing and clearing --------------------------------------------------

TEST_F(DiskCacheTest, LeftoverTempAndLockFilesAreIgnoredAndCleared) {
  DiskCache cache(root_);
  const CompiledKernel a = make_kernel("A");
  const CompiledKernel b = make_kernel("B");
  ASSERT_TRUE(cache.store(a));
  EXPECT_TRUE(cache.lock(a.key).held());
  EXPECT_TRUE(cache.lock(b.key).held());
  const fs::path v1 = cache.entry_dir();
  write_bytes(v1 / (a.key + ".nkc.tmp.999.deadbeefdeadbeef"), {'j', 'u', 'n', 'k'});
  // A complete but unpublished write: only a rename makes an entry visible.
  write_bytes(v1 / (b.key + ".nkc.tmp.123.0123456789abcdef"), DiskCache::serialize(b));
  write_bytes(v1 / "README", {'h', 'i'});
  EXPECT_TRUE(fs::exists(v1 / (a.key + ".lock")));
  EXPECT_TRUE(fs::exists(v1 / (b.key + ".lock")));

  DiskLookup outcome = DiskLookup::hit;
  EXPECT_FALSE(cache.load(b.key, &outcome).has_value());
  EXPECT_EQ(outcome, DiskLookup::absent);
  EXPECT_TRUE(cache.load(a.key, &outcome).has_value());
  EXPECT_EQ(outcome, DiskLookup::hit);

  for (const bool verify : {true, false}) {
    const auto entries = cache.list(verify);
    ASSERT_EQ(entries.size(), 1u) << "verify=" << verify;
    EXPECT_EQ(entries[0].key, a.key);
    EXPECT_TRUE(entries[0].valid);
  }

  EXPECT_EQ(cache.clear(), 1u);
  EXPECT_EQ(files_in(v1), std::vector<std::string>{"README"});  // only cache files are ours to remove
  EXPECT_FALSE(cache.load(a.key, &outcome).has_value());
  EXPECT_EQ(outcome, DiskLookup::absent);
  EXPECT_EQ(cache.clear(), 0u);
}

TEST_F(DiskCacheTest, ListReportsValidityProblemsAndMeta) {
  DiskCache cache(root_);
  const CompiledKernel a = make_kernel("A");
  const CompiledKernel b = make_kernel("B");
  const CompiledKernel c = make_kernel("C");
  for (const auto* k : {&a, &b, &c}) ASSERT_TRUE(cache.store(*k));
  // b: damaged binary (header intact); c: cut inside the header.
  std::vector<char> bytes = read_bytes(cache.entry_path(b.key));
  bytes[bytes.size() - kChecksumSize - 10] ^= 0x40;
  write_bytes(cache.entry_path(b.key), bytes);
  bytes = read_bytes(cache.entry_path(c.key));
  bytes.resize(kPrefixSize + 10);
  write_bytes(cache.entry_path(c.key), bytes);
  write_bytes(cache.entry_dir() / "not-a-key.nkc", {'x'});

  const auto find = [](const std::vector<DiskEntryInfo>& list, const std::string& key) -> const DiskEntryInfo* {
    for (const auto& e : list)
      if (e.key == key) return &e;
    return nullptr;
  };

  const auto verified = cache.list(true);
  ASSERT_EQ(verified.size(), 4u);
  const DiskEntryInfo* ea = find(verified, a.key);
  ASSERT_NE(ea, nullptr);
  EXPECT_TRUE(ea->valid);
  EXPECT_TRUE(ea->problem.empty());
  EXPECT_EQ(ea->path, cache.entry_path(a.key));
  EXPECT_EQ(ea->size, fs::file_size(cache.entry_path(a.key)));
  EXPECT_EQ(ea->meta.at("family"), "selftest_axpy");
  EXPECT_EQ(ea->meta.at("target"), "sm_90a");
  EXPECT_EQ(ea->meta.at("registers"), "40");
  EXPECT_EQ(ea->meta.at("note"), a.meta.at("note"));

  const DiskEntryInfo* eb = find(verified, b.key);
  ASSERT_NE(eb, nullptr);
  EXPECT_FALSE(eb->valid);
  EXPECT_NE(eb->problem.find("checksum"), std::string::npos) << eb->problem;
  EXPECT_EQ(eb->meta.at("family"), "selftest_axpy");  // the header is still readable

  const DiskEntryInfo* ec = find(verified, c.key);
  ASSERT_NE(ec, nullptr);
  EXPECT_FALSE(ec->valid);
  EXPECT_NE(ec->problem.find("too short"), std::string::npos) << ec->problem;

  const DiskEntryInfo* stray = find(verified, "not-a-key");
  ASSERT_NE(stray, nullptr);
  EXPECT_FALSE(stray->valid);
  EXPECT_FALSE(stray->problem.empty());

  // Unverified: framing and header only, so b's damaged binary passes.
  const auto quick = cache.list(false);
  ASSERT_EQ(quick.size(), 4u);
  EXPECT_TRUE(find(quick, a.key)->valid);
  EXPECT_EQ(find(quick, a.key)->meta.at("family"), "selftest_axpy");
  EXPECT_EQ(find(quick, a.key)->size, fs::file_size(cache.entry_path(a.key)));
  EXPECT_TRUE(find(quick, b.key)->valid);
  EXPECT_FALSE(find(quick, c.key)->valid);
  EXPECT_FALSE(find(quick, c.key)->problem.empty());

  EXPECT_EQ(cache.clear(), 4u);
  EXPECT_TRUE(cache.list(true).empty());
}

// --- unusable directories --------------------------------------------------

TEST_F(DiskCacheTest, RootBelowARegularFileDegradesWithOneWarning) {
  write_bytes(dir_ / "file", {'x'});
  const fs::path root = dir_ / "file" / "cache";
  const CompiledKernel k = make_kernel("enotdir");
  const int status = run_child([&] {
    normkit::rt::set_log_level(normkit::rt::LogLevel::warn);
    const bool pending = warning_still_pending();
    DiskCache cache(root);
    EXPECT_TRUE(cache.usable());
    EXPECT_FALSE(cache.load(k.key).has_value());  // reading alone does not degrade
    EXPECT_TRUE(cache.usable());
    StderrCapture capture;
    EXPECT_FALSE(cache.store(k));
    EXPECT_FALSE(cache.usable());
    EXPECT_FALSE(cache.store(k));
    EXPECT_FALSE(cache.lock(k.key).held());
    DiskCache other(root);  // a second object warns no more: the process already knows
    EXPECT_FALSE(other.lock(k.key).held());
    EXPECT_FALSE(other.usable());
    expect_one_degradation_warning(pending, capture.finish(), {root.string(), std::strerror(ENOTDIR)});
    DiskLookup outcome = DiskLookup::hit;
    EXPECT_FALSE(cache.load(k.key, &outcome).has_value());
    EXPECT_EQ(outcome, DiskLookup::absent);
    EXPECT_TRUE(cache.list(true).empty());
    EXPECT_EQ(cache.clear(), 0u);
  });
  EXPECT_TRUE(child_ok(status)) << describe(status);
}

// Drops to an unprivileged user when run as root (chmod does not stop root); skip
// (exit 77) when that is impossible.
void become_unprivileged() {
  if (::geteuid() != 0) return;
  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(77);
}

TEST_F(DiskCacheTest, ReadOnlyDirectoryDegrades) {
  const CompiledKernel present = make_kernel("present");
  const CompiledKernel fresh = make_kernel("fresh");
  {
    DiskCache cache(root_);
    ASSERT_TRUE(cache.store(present));
  }
  // The unprivileged child must be able to reach the directory, not write to it.
  fs::permissions(dir_, fs::perms(0755));
  fs::permissions(root_, fs::perms(0555));
  fs::permissions(root_ / "v1", fs::perms(0555));

  int status = run_child([&] {
    become_unprivileged();
    normkit::rt::set_log_level(normkit::rt::LogLevel::warn);
    const bool pending = warning_still_pending();
    DiskCache cache(root_);
    const auto hit = cache.load(present.key);  // a read-only cache still serves what it has
    ASSERT_TRUE(hit.has_value());
    expect_same(*hit, present);
    StderrCapture capture;
    EXPECT_FALSE(cache.store(fresh));
    EXPECT_FALSE(cache.usable());
    EXPECT_FALSE(cache.store(fresh));
    expect_one_degradation_warning(pending, capture.finish(),
                                   {(root_ / "v1").string(), std::strerror(EACCES)});
    EXPECT_FALSE(cache.lock(fresh.key).held());
    EXPECT_TRUE(cache.load(present.key).has_value());  // degraded stops writes only: what is there still serves
  });
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot drop root privileges";
  EXPECT_TRUE(child_ok(status)) << describe(status);

  // Taking a lock needs a lock file; failing to create one degrades instead of throwing.
  status = run_child([&] {
    become_unprivileged();
    normkit::rt::set_log_level(normkit::rt::LogLevel::warn);
    const bool pending = warning_still_pending();
    DiskCache cache(root_);
    DiskCache::KeyLock lock;
    StderrCapture capture;
    EXPECT_NO_THROW(lock = cache.lock(fresh.key));
    EXPECT_FALSE(lock.held());
    EXPECT_FALSE(cache.usable());
    EXPECT_FALSE(cache.store(fresh));
    expect_one_degradation_warning(pending, capture.finish(), {fresh.key + ".lock", std::strerror(EACCES)});
  });
  EXPECT_TRUE(child_ok(status)) << describe(status);
  EXPECT_EQ(files_in(root_ / "v1"), std::vector<std::string>{present.key + ".nkc"});
}

TEST_F(DiskCacheTest, FullDiskDegradesWithOneWarningAndNoTempFile) {
  const CompiledKernel k = make_kernel("full", 8192);
  const int status = run_child([&] {
    normkit::rt::set_log_level(normkit::rt::LogLevel::warn);
    const bool pending = warning_still_pending();
    // EFBIG from write() stands in for ENOSPC: same code path, no full disk needed.
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &limit), 0);
    limit.rlim_cur = 300;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
    DiskCache cache(root_);
    StderrCapture capture;
    EXPECT_FALSE(cache.store(k));
    EXPECT_FALSE(cache.usable());
    EXPECT_FALSE(cache.store(k));
    DiskCache second(root_);  // degrades on its own, but the process has warned already
    EXPECT_FALSE(second.store(k));
    EXPECT_FALSE(second.usable());
    expect_one_degradation_warning(pending, capture.finish(), {cache.entry_dir().string(), std::strerror(EFBIG)});
  });
  EXPECT_TRUE(child_ok(status)) << describe(status);
  EXPECT_EQ(count_temp_files(root_ / "v1"), 0u);
  EXPECT_TRUE(files_in(root_ / "v1").empty());
  // The directory itself is fine for a process without the limit.
  DiskCache cache(root_);
  ASSERT_TRUE(cache.store(k));
  EXPECT_TRUE(cache.load(k.key).has_value());
}

// --- processes ---------------------------------------------------------------

TEST_F(DiskCacheTest, WriterKilledMidWriteLeavesNoEntry) {
  // Several write chunks, so "after the first chunk" is really mid-write.
  const CompiledKernel k = make_kernel("killed", 300 * 1024);
  const CompiledKernel other = make_kernel("bystander");
  {
    DiskCache cache(root_);
    ASSERT_TRUE(cache.store(other));
  }
  // Killed after the first chunk, and after the last chunk but before the rename.
  for (const bool at_end : {false, true}) {
    SCOPED_TRACE(at_end ? "killed after the last chunk" : "killed after the first chunk");
    const int status = run_child([&] {
      DiskCache::set_write_hook([at_end](std::size_t written, std::size_t total) {
        if (at_end ? written == total : written < total) ::raise(SIGKILL);
      });
      DiskCache(root_).store(k);
      ::_exit(5);  // the hook did not fire
    });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << describe(status);

    DiskCache cache(root_);
    DiskLookup outcome = DiskLookup::hit;
    EXPECT_FALSE(cache.load(k.key, &outcome).has_value());
    EXPECT_EQ(outcome, DiskLookup::absent);
    const auto entries = cache.list(true);
    ASSERT_EQ(entries.size(), 1u);  // only the bystander
    EXPECT_EQ(entries[0].key, other.key);
    EXPECT_TRUE(entries[0].valid);
    EXPECT_EQ(count_temp_files(cache.entry_dir()), 1u);  // the write did start
    EXPECT_TRUE(cache.usable());

    ASSERT_TRUE(cache.store(k));
    const auto loaded = cache.load(k.key, &outcome);
    EXPECT_EQ(outcome, DiskLookup::hit);
    ASSERT_TRUE(loaded.has_value());
    expect_same(*loaded, k);

    EXPECT_EQ(cache.clear(), 2u);
    EXPECT_TRUE(files_in(cache.entry_dir()).empty());
    ASSERT_TRUE(cache.store(other));
  }
}

TEST_F(DiskCacheTest, WriteHookSeesEveryChunk) {
  const CompiledKernel k = make_kernel("hook", 200 * 1024);
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  DiskCache::set_write_hook([&](std::size_t written, std::size_t total) { calls.emplace_back(written, total); });
  DiskCache cache(root_);
  ASSERT_TRUE(cache.store(k));
  DiskCache::set_write_hook(nullptr);
  const std::size_t size = DiskCache::serialize(k).size();
  ASSERT_GE(calls.size(), 2u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, size);
    if (i > 0) {
      EXPECT_GT(calls[i].first, calls[i - 1].first);
    }
  }
  EXPECT_EQ(calls.back().first, size);
}

TEST_F(DiskCacheTest, LockExcludesOtherProcessesUntilReleased) {
  const std::string key = key_for("contended");
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    {
      DiskCache cache(root_);
      const auto lock = cache.lock(key);
      if (!lock.held()) ::_exit(2);
      if (::write(ready[1], "x", 1) != 1) ::_exit(3);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    // Stay alive until the parent has the lock (or 3 s pass), so that a lock only
    // released at process exit would show up as a long wait in the parent.
    pollfd p{done[0], POLLIN, 0};
    ::poll(&p, 1, 3000);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);  // the child holds the lock now
  ::close(ready[0]);

  DiskCache cache(root_);
  const auto t0 = std::chrono::steady_clock::now();
  const auto lock = cache.lock(key);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  ::close(done[1]);
  EXPECT_TRUE(lock.held());
  EXPECT_GE(waited.count(), 250) << "acquired while the other process held it";
  EXPECT_LT(waited.count(), 2000) << "not released when the KeyLock was destroyed";
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(child_ok(status)) << describe(status);
}

TEST_F(DiskCacheTest, KeyLockMovesAndReleases) {
  DiskCache cache(root_);
  const std::string key = key_for("moved");
  const auto probe = [&] {  // true when someone else holds the lock
    const int fd = ::open((cache.entry_dir() / (key + ".lock")).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return busy;
  };

  DiskCache::KeyLock a = cache.lock(key);
  ASSERT_TRUE(a.held());
  EXPECT_TRUE(probe());
  DiskCache::KeyLock b(std::move(a));
  EXPECT_FALSE(a.held());
  EXPECT_TRUE(b.held());
  EXPECT_TRUE(probe());
  DiskCache::KeyLock c;
  c = std::move(b);
  EXPECT_FALSE(b.held());
  EXPECT_TRUE(probe());
  {
    const auto other_key = cache.lock(key_for("unrelated"));  // per key, not per cache
    EXPECT_TRUE(other_key.held());
  }
  c = DiskCache::KeyLock();
  EXPECT_FALSE(c.held());
  EXPECT_FALSE(probe());
  EXPECT_TRUE(cache.lock(key).held());
}

TEST_F(DiskCacheTest, ConcurrentWritersNeverExposeAPartialEntry) {
  const CompiledKernel k = make_kernel("concurrent", 150 * 1024);
  constexpr int kWriters = 4;
  constexpr int kStoresEach = 50;

  int stop[2], report[2];
  ASSERT_EQ(::pipe(stop), 0);
  ASSERT_EQ(::pipe(report), 0);
  std::fflush(nullptr);
  const pid_t reader = ::fork();
  if (reader == 0) {
    ::close(stop[1]);
    ::close(report[0]);
    DiskCache cache(root_);
    long counts[3] = {0, 0, 0};  // hit, absent, invalid
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (bool last = false;;) {
      pollfd p{stop[0], POLLIN, 0};
      if (::poll(&p, 1, 0) > 0 || std::chrono::steady_clock::now() > deadline) last = true;
      DiskLookup outcome = DiskLookup::invalid;
      const auto got = cache.load(k.key, &outcome);
      ++counts[static_cast<int>(outcome)];
      if (outcome == DiskLookup::hit && got->binary != k.binary) ++counts[2];
      if (last) break;  // one load after the writers finished: that one must hit
    }
    const bool wrote = ::write(report[1], counts, sizeof(counts)) == static_cast<ssize_t>(sizeof(counts));
    ::_exit(wrote ? 0 : 2);
  }
  ::close(stop[0]);
  ::close(report[1]);

  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      DiskCache cache(root_);
      for (int i = 0; i < kStoresEach; ++i)
        if (!cache.store(k)) ::_exit(1);
      ::_exit(0);
    }
    writers.push_back(pid);
  }
  for (const pid_t pid : writers) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(child_ok(status)) << "writer: " << describe(status);
  }
  ::close(stop[1]);  // readable EOF: the reader's cue to finish

  long counts[3] = {0, 0, 0};
  ASSERT_EQ(::read(report[0], counts, sizeof(counts)), static_cast<ssize_t>(sizeof(counts)));
  ::close(report[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(reader, &status, 0), reader);
  EXPECT_TRUE(child_ok(status)) << "reader: " << describe(status);
  EXPECT_EQ(counts[2], 0) << "invalid loads seen while writers raced";
  EXPECT_GT(counts[0], 0) << "the reader never saw the entry";

  DiskCache cache(root_);
  const auto loaded = cache.load(k.key);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, k);
  EXPECT_EQ(count_temp_files(cache.entry_dir()), 0u);
  EXPECT_EQ(cache.list(true).size(), 1u);
}

}  // namespace
