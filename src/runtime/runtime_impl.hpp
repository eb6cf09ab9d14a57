// Runtime::Impl and the helpers the runtime's translation units share (runtime.cpp:
// compile, cache, load, launch; runtime_device.cpp: devices, contexts, memory). Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler.hpp"
#include "cuda_driver.hpp"
#include "normkit/runtime/cache_key.hpp"
#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/runtime.hpp"

namespace normkit::rt {
namespace detail {

using Clock = std::chrono::steady_clock;

inline std::uint64_t elapsed_ns(Clock::time_point start) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

// Makes `ctx` current for the scope unless it already is (the common case when a
// framework drives the same primary context), so launches pay for no push/pop.
class ContextGuard {
 public:
  explicit ContextGuard(CUcontext ctx) {
    const DriverApi& d = driver();
    CUcontext current = nullptr;
    NK_CU_CHECK(d.cuCtxGetCurrent(&current));
    if (current != ctx) {
      NK_CU_CHECK(d.cuCtxPushCurrent(ctx));
      pushed_ = true;
    }
  }
  ~ContextGuard() {
    if (pushed_) {
      CUcontext popped = nullptr;
      driver().cuCtxPopCurrent(&popped);
    }
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  bool pushed_ = false;
};

inline std::string describe(const KernelSource& k) { return "'" + k.family + "' " + k.template_args; }

}  // namespace detail

struct Runtime::Impl {
  using Clock = detail::Clock;
  mutable std::mutex mutex;
  std::atomic<std::uint64_t> generation{1};
  Config config;
  std::shared_ptr<DiskCache> disk;  // copied out under `mutex`, so a reload never pulls it from under a caller

  std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>> binaries;  // key -> binary
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> key_mutexes;
  std::map<std::pair<int, std::string>, LoadedKernel> loaded;  // (device, key) -> handle
  // Fast path in front of `loaded`: (device, family, template args, entry, options)
  // -> handle, so a warm get() neither rebuilds the cache key nor SHA-hashes the
  // source. A cheap hash of the source guards the contract that those fields
  // determine the source: a family breaking it gets an error, not a wrong kernel.
  struct WarmEntry {
    std::size_t source_hash;
    LoadedKernel kernel;
  };
  std::unordered_map<std::string, WarmEntry> warm;
  std::vector<CUmodule> modules;                                // kept for the process lifetime
  std::map<int, DeviceInfo> devices;
  std::map<int, CUcontext> contexts;

  struct AtomicCounters {
    std::atomic<std::uint64_t> compiles{0}, memory_hits{0}, disk_hits{0}, disk_invalid{0}, module_loads{0},
        launches{0}, compile_ns{0}, disk_read_ns{0}, load_ns{0};
  } counters;

  static std::string warm_key(const KernelSource& k, int device) {
    std::string key = std::to_string(device);
    for (const std::string* part : {&k.family, &k.template_args, &k.entry}) (key += '\0') += *part;
    for (const auto& opt : k.options) (key += '\0') += opt;
    return key;
  }

  void apply_config(Config c) {
    warm.clear();  // codegen settings or the target override may have changed
    config = std::move(c);
    disk = config.cache_mode == CacheMode::disk ? std::make_shared<DiskCache>(config.cache_dir) : nullptr;
  }

  std::shared_ptr<std::mutex> key_mutex(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto& m = key_mutexes[key];
    if (!m) m = std::make_shared<std::mutex>();
    return m;
  }

  CUcontext context(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (auto it = contexts.find(device); it != contexts.end()) return it->second;
    }
    const DriverApi& d = driver();
    CUdevice dev;
    NK_CU_CHECK(d.cuDeviceGet(&dev, device));
    CUcontext ctx = nullptr;
    // The primary context is the one PyTorch, JAX and the CUDA runtime use, so their
    // pointers and streams are valid in our launches. Retained for the process lifetime.
    NK_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx, dev));
    std::lock_guard<std::mutex> lock(mutex);
    return contexts.emplace(device, ctx).first->second;
  }

  std::string key_for(const KernelSource& kernel, const Target& target, const Config& cfg) {
    const NvrtcApi& api = nvrtc();
    KeyInputs in;
    in.kernel = &kernel;
    in.options = compile_options(kernel, target, cfg);
    in.target = target;
    in.nvrtc_major = api.major;
    in.nvrtc_minor = api.minor;
    in.codegen_env = cfg.codegen_environment();
    return compute_cache_key(in);
  }

  std::shared_ptr<const CompiledKernel> binary(const KernelSource& kernel, const Target& target,
                                               const std::string& key, const Config& cfg) {
    const bool use_memory = cfg.cache_mode != CacheMode::off;
    auto from_memory = [&]() -> std::shared_ptr<const CompiledKernel> {
      if (!use_memory) return nullptr;
      std::lock_guard<std::mutex> lock(mutex);
      auto it = binaries.find(key);
      return it == binaries.end() ? nullptr : it->second;
    };
    if (auto hit = from_memory()) {
      counters.memory_hits++;
      return hit;
    }
    auto kmutex = key_mutex(key);
    std::lock_guard<std::mutex> key_lock(*kmutex);
    if (auto hit = from_memory()) {  // another thread finished it while we waited
      counters.memory_hits++;
      return hit;
    }
    std::shared_ptr<DiskCache> dc;
    {
      std::lock_guard<std::mutex> lock(mutex);
      dc = disk;
    }
    auto publish = [&](CompiledKernel&& k) {
      auto shared = std::make_shared<const CompiledKernel>(std::move(k));
      if (use_memory) {
        std::lock_guard<std::mutex> lock(mutex);
        binaries[key] = shared;
      }
      return shared;
    };
    bool invalid_seen = false;  // the re-read under the lock sees the same bad file: count it once
    auto from_disk = [&]() -> std::optional<CompiledKernel> {
      if (dc == nullptr) return std::nullopt;  // an unwritable cache still serves what it holds
      const auto start = Clock::now();
      DiskLookup outcome = DiskLookup::absent;
      auto entry = dc->load(key, &outcome);
      counters.disk_read_ns += detail::elapsed_ns(start);
      if (outcome == DiskLookup::invalid && !invalid_seen) {
        invalid_seen = true;
        counters.disk_invalid++;
      }
      return entry;
    };
    if (auto entry = from_disk()) {
      counters.disk_hits++;
      return publish(std::move(*entry));
    }
    DiskCache::KeyLock file_lock;
    if (dc != nullptr && dc->usable()) {
      file_lock = dc->lock(key);
      if (auto entry = from_disk()) {  // another process published it while we waited
        counters.disk_hits++;
        return publish(std::move(*entry));
      }
    }
    if (cfg.run_only) {
      NK_THROW("NORMKIT_RUN_ONLY is set and kernel ", detail::describe(kernel), " for ", target.str(),
               " is not in the cache (key ", key, ", cache ",
               dc ? dc->root().string() : std::string("memory-only"),
               "). Precompile it for this target (Runtime::compile with an explicit target, or prepare() on a machine with this GPU) or unset NORMKIT_RUN_ONLY.");
    }
    const auto start = Clock::now();
    CompiledKernel compiled = nvrtc_compile(kernel, target, key, cfg);
    counters.compile_ns += detail::elapsed_ns(start);
    counters.compiles++;
    if (dc != nullptr) dc->store(compiled);
    return publish(std::move(compiled));
  }
};

}  // namespace normkit::rt
