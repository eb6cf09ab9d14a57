// Concurrent cold starts (compile-only): threads and processes asking for the same
// and different keys at once compile each key once; a process killed while
// publishing leaves nothing that is ever loaded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <map>
#include <thread>

#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/selftest.hpp"
#include "test_helpers.hpp"

using namespace normkit::rt;
using nktest::FreshRuntime;

namespace {
const Target kTarget = Target::parse("sm_80");
}

class Concurrency : public FreshRuntime {};

TEST_F(Concurrency, EightThreadsCompileEachKeyOnce) {
  constexpr int kThreads = 8, kKeys = 4;
  std::barrier start(kThreads);
  std::vector<std::vector<std::shared_ptr<const CompiledKernel>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kKeys; ++i) {
        const int unroll = 1 + (i + t) % kKeys;  // each thread walks the keys in its own order
        got[t].push_back(rt().compile(selftest::axpy_source(unroll), kTarget));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(rt().counters().compiles, static_cast<std::uint64_t>(kKeys));
  // Every thread holds the very same binary object for a key: one compile, shared.
  std::map<int, const CompiledKernel*> by_unroll;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeys; ++i) {
      const int unroll = 1 + (i + t) % kKeys;
      auto [it, first] = by_unroll.emplace(unroll, got[t][i].get());
      EXPECT_EQ(it->second, got[t][i].get()) << "thread " << t << " unroll " << unroll;
      EXPECT_EQ(got[t][i]->meta.at("template_args"), "unroll=" + std::to_string(unroll));
      EXPECT_FALSE(got[t][i]->binary.empty());
    }
  }
  EXPECT_EQ(by_unroll.size(), static_cast<std::size_t>(kKeys));
}

TEST_F(Concurrency, FourProcessesCompileSharedKeysOnce) {
  constexpr int kProcs = 4;
  int go[2], report[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(report), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(90);  // start together
      int status = 0;
      try {
        fresh();
        // Two keys every process wants, one that only this process wants.
        for (int unroll : {7, 8, 9 + p}) {
          auto k = rt().compile(selftest::axpy_source(unroll), kTarget);
          if (k->binary.empty() || k->meta.at("template_args") != "unroll=" + std::to_string(unroll)) status = 91;
        }
      } catch (...) {
        status = 92;
      }
      const unsigned char compiles = static_cast<unsigned char>(rt().counters().compiles);
      if (write(report[1], &compiles, 1) != 1) status = 93;
      _exit(status);
    }
    pids.push_back(pid);
  }
  close(go[0]);
  const char start[kProcs] = {};
  ASSERT_EQ(write(go[1], start, kProcs), kProcs);
  close(go[1]);
  int total = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  close(report[1]);
  unsigned char c;
  while (read(report[0], &c, 1) == 1) total += c;
  close(report[0]);
  EXPECT_EQ(total, 2 + kProcs) << "each shared key compiled once across processes, each private key once";
  EXPECT_EQ(DiskCache(dir_).list(true).size(), static_cast<std::size_t>(2 + kProcs));
  for (const auto& e : DiskCache(dir_).list(true)) EXPECT_TRUE(e.valid) << e.path << ": " << e.problem;
}

TEST_F(Concurrency, ProcessKilledMidWriteLeavesNothingLoadable) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Dies after the first chunk reached the temp file, before fsync and rename
    // (the self-test cubin fits in one chunk, so that is also "all bytes, unpublished").
    DiskCache::set_write_hook([](std::size_t, std::size_t) { raise(SIGKILL); });
    try {
      fresh();
      rt().compile(selftest::axpy_source(6), kTarget);
    } catch (...) {
    }
    _exit(0);  // only reached if the hook never fired
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child should have died mid-write";
  fresh();
  auto k = rt().compile(selftest::axpy_source(6), kTarget);
  const Counters c = rt().counters();
  EXPECT_EQ(c.disk_hits, 0u) << "a torn write must never be loaded";
  EXPECT_EQ(c.disk_invalid, 0u) << "the torn temp file is never even looked at";
  EXPECT_EQ(c.compiles, 1u);
  auto entries = DiskCache(dir_).list(true);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(entries[0].valid);
  EXPECT_EQ(entries[0].key, k->key);
}
