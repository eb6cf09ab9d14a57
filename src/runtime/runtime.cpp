// The runtime object: memory cache -> disk cache (under a per-key lock) -> NVRTC,
// then a per-device module load, then launches.
//
// Locking: `mutex` guards the maps; compiles and disk I/O happen outside it under
// a per-key in-process mutex (threads) plus the disk cache's per-key flock
// (processes), so N concurrent cold callers of one key compile it exactly once
// while callers of other keys proceed. Loaded handles are keyed by (device, key):
// a binary is shared by devices of one target, a CUfunction never is.
#include "normkit/runtime/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <unordered_map>

#include "compiler.hpp"
#include "cuda_driver.hpp"
#include "normkit/runtime/cache_key.hpp"
#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/log.hpp"

namespace normkit::rt {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t elapsed_ns(Clock::time_point start) {
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

std::string describe(const KernelSource& k) { return "'" + k.family + "' " + k.template_args; }

// The SMs `ctx` is limited to (CU_EXEC_AFFINITY_TYPE_SM_COUNT), 0 where the driver or
// device does not say (CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY): no limit known.
int context_sm_count(CUcontext ctx) {
  const DriverApi& d = driver();
  ContextGuard guard(ctx);
  CUexecAffinityParam affinity{};
  if (d.cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) != CUDA_SUCCESS) return 0;
  return static_cast<int>(affinity.param.smCount.val);
}

}  // namespace

struct Runtime::Impl {
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
      counters.disk_read_ns += elapsed_ns(start);
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
      NK_THROW("NORMKIT_RUN_ONLY is set and kernel ", describe(kernel), " for ", target.str(),
               " is not in the cache (key ", key, ", cache ",
               dc ? dc->root().string() : std::string("memory-only"),
               "). Precompile it for this target (Runtime::compile with an explicit target, or prepare() on a machine with this GPU) or unset NORMKIT_RUN_ONLY.");
    }
    const auto start = Clock::now();
    CompiledKernel compiled = nvrtc_compile(kernel, target, key, cfg);
    counters.compile_ns += elapsed_ns(start);
    counters.compiles++;
    if (dc != nullptr) dc->store(compiled);
    return publish(std::move(compiled));
  }
};

Runtime::Runtime() : impl_(std::make_unique<Impl>()) { impl_->apply_config(Config::from_environment()); }
Runtime::~Runtime() = default;

Runtime& Runtime::instance() {
  // Never destroyed: kernels may be launched from other static destructors, and
  // driver teardown order at exit is not ours to control.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

void Runtime::reload_config() {
  Config c = Config::from_environment();
  reload_log_level();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->apply_config(std::move(c));
  impl_->generation.fetch_add(1, std::memory_order_release);
}

std::uint64_t Runtime::generation() const { return impl_->generation.load(std::memory_order_acquire); }

Config Runtime::config() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->config;
}

CallSwitches Runtime::switches() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Config& c = impl_->config;
  return CallSwitches{c.smem_sums, c.async_rows, c.params_smem, c.group_rows, c.pdl, c.sync_timeout_us, c.forward_plan,
                      c.backward_plan};
}

ToolchainInfo Runtime::toolchain(bool need_driver) {
  const NvrtcApi& api = nvrtc();
  ToolchainInfo t;
  t.nvrtc_major = api.major;
  t.nvrtc_minor = api.minor;
  t.nvrtc_archs = api.archs;
  if (need_driver) t.driver_version = driver().version;
  return t;
}

int Runtime::device_count() {
  int n = 0;
  const CUresult r = driver().cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE) return 0;
  NK_CU_CHECK(r);
  return n;
}

DeviceInfo Runtime::device_info(int device) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->devices.find(device); it != impl_->devices.end()) return it->second;
  }
  const int count = device_count();
  NK_CHECK(device >= 0 && device < count, "device ", device, " does not exist (", count, " CUDA device(s) visible)");
  const DriverApi& d = driver();
  CUdevice dev;
  NK_CU_CHECK(d.cuDeviceGet(&dev, device));
  DeviceInfo info;
  info.ordinal = device;
  char name[256] = {};
  NK_CU_CHECK(d.cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  NK_CU_CHECK(d.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  NK_CU_CHECK(d.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  NK_CU_CHECK(d.cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  info.device_sm_count = info.sm_count;
  // Under MPS with an active-thread limit the primary context runs on fewer SMs than the
  // device attribute says, and the grids that need every CTA resident at once (the synced
  // split rows, the cooperative grouped rows) must be sized for those: the driver refuses a
  // cooperative grid that does not fit, and a synced one would wait out its timeout. The
  // context's SM-count affinity says how many; a driver or device without the query keeps
  // the attribute.
  if (const int context_sms = context_sm_count(impl_->context(device));
      context_sms > 0 && context_sms < info.sm_count) {
    info.sm_count = context_sms;
    warn_once("context-sm-count-" + std::to_string(device),
              "device " + std::to_string(device) + ": this process's context may use " + std::to_string(context_sms) +
                  " of its " + std::to_string(info.device_sm_count) +
                  " SMs (MPS active-thread limit or an SM-count affinity); grids are sized for " +
                  std::to_string(context_sms));
  }
  int memory_khz = 0, bus_bits = 0;
  // Not checked: a driver without these attributes leaves the plans on their defaults.
  if (d.cuDeviceGetAttribute(&memory_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev) == CUDA_SUCCESS)
    info.memory_gbps = memory_gbps(memory_khz, bus_bits);
  info.target = resolve_target(info.cc_major, info.cc_minor, toolchain(true));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->devices.emplace(device, info).first->second;
}

Target Runtime::target_for_device(int device) {
  const Config cfg = config();
  if (cfg.arch) return Target::parse(*cfg.arch);
  return device_info(device).target;
}

Target Runtime::compile_only_target(const std::string& arch) {
  if (!arch.empty()) return Target::parse(arch);
  const Config cfg = config();
  NK_CHECK(cfg.arch.has_value(),
           "compile-only use needs an explicit target: pass one (e.g. sm_90a) or set NORMKIT_ARCH; "
           "normkit has no default architecture");
  return Target::parse(*cfg.arch);
}

int Runtime::device_of(const std::vector<const void*>& pointers, const std::vector<std::string>& names) {
  const DriverApi& d = driver();
  int device = -1;
  std::string first;
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (pointers[i] == nullptr) continue;
    const std::string name = i < names.size() ? names[i] : "argument " + std::to_string(i);
    CUmemorytype type = static_cast<CUmemorytype>(0);
    int ordinal = -1;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void* values[] = {&type, &ordinal};
    const CUresult r = d.cuPointerGetAttributes(2, attrs, values, reinterpret_cast<CUdeviceptr>(pointers[i]));
    NK_CHECK(r == CUDA_SUCCESS && type != 0, "argument '", name,
             "' is not CUDA device memory (host pointer, or memory CUDA does not know)");
    NK_CHECK(type != CU_MEMORYTYPE_HOST, "argument '", name, "' is pinned host memory; a device pointer is required");
    if (device < 0) {
      device = ordinal;
      first = name;
    } else {
      NK_CHECK(ordinal == device, "arguments are on different devices: '", first, "' is on cuda:", device, " but '",
               name, "' is on cuda:", ordinal);
    }
  }
  NK_CHECK(device >= 0, "no device pointer among the arguments; cannot tell which GPU to run on");
  return device;
}

std::optional<int> Runtime::pointer_device(const void* pointer) {
  if (pointer == nullptr || !driver_unavailable_reason().empty()) return std::nullopt;
  const DriverApi& d = driver();
  CUmemorytype type = static_cast<CUmemorytype>(0);
  int ordinal = -1;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* values[] = {&type, &ordinal};
  const CUresult r = d.cuPointerGetAttributes(2, attrs, values, reinterpret_cast<CUdeviceptr>(pointer));
  if (r != CUDA_SUCCESS || type == 0 || type == CU_MEMORYTYPE_HOST || ordinal < 0) return std::nullopt;
  return ordinal;
}

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSource& kernel, const Target& target) {
  const Config cfg = config();
  const std::string key = impl_->key_for(kernel, target, cfg);
  return impl_->binary(kernel, target, key, cfg);
}

bool Runtime::stream_is_capturing(Stream stream, int device) {
  ContextGuard guard(impl_->context(device));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = driver().cuStreamIsCapturing(static_cast<CUstream>(stream), &status);
  // A query that fails because some capture forbids it counts as capturing: loading now would break it.
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return true;
  NK_CU_CHECK(r);
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void Runtime::zero_async(int device, void* pointer, std::size_t words, Stream stream) {
  if (words == 0) return;
  ContextGuard guard(impl_->context(device));
  NK_CU_CHECK(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(pointer), 0u, words,
                                        static_cast<CUstream>(stream)));
}

namespace {
// Scratch that alloc_async hands out stays in this pool between calls: the default
// pool gives its memory back at every synchronization (release threshold 0), and
// mapping it again on the next call took ~50 us of the call's time on the H200
// (docs/perf/h200-2026-12-01e.md). Our own pool, so the process's default pool
// keeps its settings.
constexpr std::uint64_t kScratchPoolKeepBytes = 64ull << 20;
}  // namespace

void* Runtime::alloc_async(int device, std::size_t bytes, Stream stream) {
  ContextGuard guard(impl_->context(device));
  const DriverApi& d = driver();
  static std::mutex mutex;
  static std::map<int, CUmemoryPool> pools;
  CUmemoryPool pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = pools.find(device); it != pools.end()) {
      pool = it->second;
    } else {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = device;
      NK_CU_CHECK(d.cuMemPoolCreate(&pool, &props));
      std::uint64_t keep = kScratchPoolKeepBytes;
      NK_CU_CHECK(d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
      pools[device] = pool;
    }
  }
  CUdeviceptr p = 0;
  NK_CU_CHECK(d.cuMemAllocFromPoolAsync(&p, bytes, pool, static_cast<CUstream>(stream)));
  return reinterpret_cast<void*>(p);
}

void Runtime::free_async(int device, void* pointer, Stream stream) {
  if (pointer == nullptr) return;
  ContextGuard guard(impl_->context(device));
  NK_CU_CHECK(driver().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(pointer), static_cast<CUstream>(stream)));
}

bool Runtime::memory_pools_supported(int device) {
  static std::mutex mutex;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  const DriverApi& d = driver();
  CUdevice dev = 0;
  NK_CU_CHECK(d.cuDeviceGet(&dev, device));
  int supported = 0;
  NK_CU_CHECK(d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
  return known[device] = supported != 0;
}

LoadedKernel Runtime::get(const KernelSource& kernel, int device, Stream stream) {
  const std::string warm_key = Impl::warm_key(kernel, device);
  const std::size_t source_hash = std::hash<std::string>{}(kernel.source);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->warm.find(warm_key); it != impl_->warm.end()) {
      NK_CHECK(it->second.source_hash == source_hash, "kernel family '", kernel.family, "' generated two different sources for ",
               "the same template arguments '", kernel.template_args,
               "': template_args must name everything the source depends on");
      return it->second.kernel;
    }
  }
  const Config cfg = config();
  const Target target = target_for_device(device);
  const std::string key = impl_->key_for(kernel, target, cfg);
  const bool reuse = cfg.cache_mode != CacheMode::off;
  if (reuse) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->loaded.find({device, key}); it != impl_->loaded.end()) {
      impl_->warm[warm_key] = {source_hash, it->second};
      return it->second;
    }
  }
  NK_CHECK(!stream_is_capturing(stream, device), "kernel ", describe(kernel), " is not loaded on cuda:", device,
           " and the stream is being captured into a CUDA graph, where compiling or loading a module is not "
           "allowed. Warm up first: run the operation once before capture, or call prepare() for this device.");
  auto compiled = impl_->binary(kernel, target, key, cfg);

  auto kmutex = impl_->key_mutex(key);
  std::lock_guard<std::mutex> key_lock(*kmutex);
  if (reuse) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->loaded.find({device, key}); it != impl_->loaded.end()) return it->second;
  }
  const DriverApi& d = driver();
  ContextGuard guard(impl_->context(device));
  const auto start = Clock::now();
  CUmodule module = nullptr;
  std::vector<char> image = compiled->binary;
  if (compiled->target.ptx) image.push_back('\0');  // the driver reads PTX as a C string
  const CUresult r = d.cuModuleLoadData(&module, image.data());
  NK_CHECK(r == CUDA_SUCCESS, "loading kernel ", describe(kernel), " (", compiled->target.str(), ") on cuda:", device,
           " failed: ", d.error_text(r));
  CUfunction function = nullptr;
  NK_CU_CHECK(d.cuModuleGetFunction(&function, module, compiled->lowered_name.c_str()));
  if (cfg.assert_no_spills) {
    // Covers binaries whose ptxas report was unavailable at compile time (see compiler.cpp):
    // the driver knows the per-thread local memory of what it loaded, spills included.
    int local_bytes = 0;
    NK_CU_CHECK(d.cuFuncGetAttribute(&local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function));
    NK_CHECK(local_bytes == 0, "NORMKIT_ASSERT_NO_SPILLS: kernel ", describe(kernel), " uses ", local_bytes,
             " bytes of local memory per thread on cuda:", device, " (spills or a stack frame)");
  }
  impl_->counters.load_ns += elapsed_ns(start);
  impl_->counters.module_loads++;
  int static_shared_bytes = 0;
  NK_CU_CHECK(d.cuFuncGetAttribute(&static_shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function));
  LoadedKernel out{device, function, compiled, impl_->context(device), static_shared_bytes,
                   std::make_shared<std::atomic<int>>(0)};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->modules.push_back(module);
  if (reuse) {
    impl_->loaded[{device, key}] = out;
    impl_->warm[warm_key] = {source_hash, out};
  }
  return out;
}

void Runtime::prepare(const KernelSource& kernel, const std::vector<int>& devices) {
  for (int device : devices) get(kernel, device);
}

namespace {

CUlaunchAttribute cluster_attribute(const Dim3& cluster) {
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = cluster.x;
  attr.value.clusterDim.y = cluster.y;
  attr.value.clusterDim.z = cluster.z;
  return attr;
}

// cfg's block and shared memory over `grid`; no stream, no attributes.
CUlaunchConfig driver_launch_config(const LaunchConfig& cfg, const Dim3& grid) {
  CUlaunchConfig lc{};
  lc.gridDimX = grid.x;
  lc.gridDimY = grid.y;
  lc.gridDimZ = grid.z;
  lc.blockDimX = cfg.block.x;
  lc.blockDimY = cfg.block.y;
  lc.blockDimZ = cfg.block.z;
  lc.sharedMemBytes = cfg.shared_bytes;
  return lc;
}

void allow_dynamic_shared(const LoadedKernel& kernel, unsigned bytes) {
  if (bytes == 0) return;
  // Static plus dynamic shared memory above 48 KB needs the opt-in, also when
  // the dynamic part alone stays below it: set once per size the handle has not
  // yet been allowed (the static part was read at load).
  const int wanted = static_cast<int>(bytes);
  if (bytes + static_cast<unsigned>(kernel.static_shared_bytes) <= 48 * 1024 ||
      kernel.dynamic_shared_allowed->load(std::memory_order_acquire) >= wanted)
    return;
  // Under a lock, to the largest size asked so far: two threads raising it at
  // once must not leave it at the smaller of their sizes.
  static std::mutex raise_mutex;
  std::lock_guard<std::mutex> lock(raise_mutex);
  const int allowed = std::max(wanted, kernel.dynamic_shared_allowed->load(std::memory_order_relaxed));
  NK_CU_CHECK(driver().cuFuncSetAttribute(static_cast<CUfunction>(kernel.function),
                                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, allowed));
  kernel.dynamic_shared_allowed->store(allowed, std::memory_order_release);
}

}  // namespace

std::int64_t Runtime::max_resident_ctas(const LoadedKernel& kernel, const LaunchConfig& cfg) {
  NK_CHECK(kernel.function != nullptr && kernel.compiled && kernel.dynamic_shared_allowed,
           "max_resident_ctas: kernel handle is empty");
  const DriverApi& d = driver();
  const auto fn = static_cast<CUfunction>(kernel.function);
  ContextGuard guard(kernel.context ? static_cast<CUcontext>(kernel.context) : impl_->context(kernel.device));
  const unsigned cluster_size = cfg.cluster.x * cfg.cluster.y * cfg.cluster.z;
  const unsigned threads = cfg.block.x * cfg.block.y * cfg.block.z;
  // The occupancy of a kernel not yet allowed its dynamic shared memory is zero.
  allow_dynamic_shared(kernel, cfg.shared_bytes);
  if (cfg.cluster.x == 0) {
    int per_sm = 0;
    NK_CU_CHECK(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, static_cast<int>(threads),
                                                              cfg.shared_bytes));
    return static_cast<std::int64_t>(per_sm) * device_info(kernel.device).sm_count;
  }
  if (cluster_size > 8) NK_CU_CHECK(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  CUlaunchAttribute attr = cluster_attribute(cfg.cluster);
  // The grid must be a whole number of clusters; its size does not matter here.
  CUlaunchConfig lc = driver_launch_config(cfg, cfg.cluster);
  lc.attrs = &attr;
  lc.numAttrs = 1;
  int clusters = 0;
  NK_CU_CHECK(d.cuOccupancyMaxActiveClusters(&clusters, fn, &lc));
  return static_cast<std::int64_t>(clusters) * cluster_size;
}

void Runtime::launch(const LoadedKernel& kernel, const LaunchConfig& cfg, void** args) {
  const bool launched = launch_unless_cooperative_refused(kernel, cfg, args);
  NK_CHECK(launched, "launch of kernel '", kernel.compiled->lowered_name, "' on cuda:", kernel.device,
           " failed: the driver refused its cooperative grid of ", cfg.grid.x * cfg.grid.y * cfg.grid.z,
           " CTAs as more than it holds at once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)");
}

bool Runtime::launch_unless_cooperative_refused(const LoadedKernel& kernel, const LaunchConfig& cfg, void** args) {
  NK_CHECK(kernel.function != nullptr && kernel.compiled && kernel.dynamic_shared_allowed,
           "launch: kernel handle is empty (use Runtime::get first)");
  const DriverApi& d = driver();
  const auto fn = static_cast<CUfunction>(kernel.function);
  ContextGuard guard(kernel.context ? static_cast<CUcontext>(kernel.context) : impl_->context(kernel.device));

  NK_CHECK(!(cfg.cooperative && cfg.pdl), "launch: a cooperative launch cannot also be a programmatic dependent one");
  CUlaunchAttribute attrs[3];
  unsigned n_attrs = 0;
  const unsigned cluster_size = cfg.cluster.x * cfg.cluster.y * cfg.cluster.z;
  if (cfg.cluster.x != 0) {
    attrs[n_attrs++] = cluster_attribute(cfg.cluster);
    // Clusters above 8 CTAs are "non-portable" and must be enabled per function.
    if (cluster_size > 8) NK_CU_CHECK(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  }
  if (cfg.pdl) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  if (cfg.cooperative) {
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n_attrs].value.cooperative = 1;
    ++n_attrs;
  }
  allow_dynamic_shared(kernel, cfg.shared_bytes);
  CUlaunchConfig lc = driver_launch_config(cfg, cfg.grid);
  lc.hStream = static_cast<CUstream>(cfg.stream);
  lc.attrs = n_attrs ? attrs : nullptr;
  lc.numAttrs = n_attrs;
  const CUresult r = d.cuLaunchKernelEx(&lc, fn, args, nullptr);
  if (cfg.cooperative && r == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) return false;
  NK_CHECK(r == CUDA_SUCCESS, "launch of kernel '", kernel.compiled->meta.count("family") ? kernel.compiled->meta.at("family") : "",
           "' (", kernel.compiled->lowered_name, ") on cuda:", kernel.device, " failed: ", d.error_text(r), " [grid ",
           cfg.grid.x, "x", cfg.grid.y, "x", cfg.grid.z, ", block ", cfg.block.x, "x", cfg.block.y, "x", cfg.block.z,
           ", shared ", cfg.shared_bytes, " B, cluster ", cfg.cluster.x, "x", cfg.cluster.y, "x", cfg.cluster.z,
           cfg.pdl ? ", PDL" : "", cfg.cooperative ? ", cooperative" : "", "]");
  impl_->counters.launches++;
  return true;
}

Counters Runtime::counters() const {
  const auto& c = impl_->counters;
  Counters out;
  out.compiles = c.compiles;
  out.memory_hits = c.memory_hits;
  out.disk_hits = c.disk_hits;
  out.disk_invalid = c.disk_invalid;
  out.module_loads = c.module_loads;
  out.launches = c.launches;
  out.compile_ns = c.compile_ns;
  out.disk_read_ns = c.disk_read_ns;
  out.load_ns = c.load_ns;
  return out;
}

void Runtime::reset_counters() {
  auto& c = impl_->counters;
  for (auto* a : {&c.compiles, &c.memory_hits, &c.disk_hits, &c.disk_invalid, &c.module_loads, &c.launches,
                  &c.compile_ns, &c.disk_read_ns, &c.load_ns})
    a->store(0);
}

void Runtime::clear_memory_cache() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->binaries.clear();
  // Modules stay loaded (kept in `modules`): in-flight work may still use them.
  impl_->loaded.clear();
  impl_->warm.clear();
  impl_->generation.fetch_add(1, std::memory_order_release);
}

std::string Runtime::cache_dir() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->config.cache_dir.string();
}

bool Runtime::disk_cache_usable() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->disk && impl_->disk->usable();
}

std::string Runtime::driver_error() const { return driver_unavailable_reason(); }

void add_nvrtc_search_dirs(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) add_nvrtc_search_dir(d);
}

}  // namespace normkit::rt
