// The runtime object: memory cache -> disk cache (under a per-key lock) -> NVRTC,
// then a per-device module load, then launches.
//
// Locking: `mutex` guards the maps; compiles and disk I/O happen outside it under
// a per-key in-process mutex (threads) plus the disk cache's per-key flock
// (processes), so N concurrent cold callers of one key compile it exactly once
// while callers of other keys proceed. Loaded handles are keyed by (device, key):
// a binary is shared by devices of one target, a CUfunction never is.
// Runtime::Impl is in runtime_impl.hpp; devices, contexts and memory in runtime_device.cpp.
#include "normkit/runtime/runtime.hpp"

#include <algorithm>

#include "normkit/runtime/log.hpp"
#include "runtime_impl.hpp"

namespace normkit::rt {
namespace {
using Clock = detail::Clock;
using detail::ContextGuard;
using detail::describe;
using detail::elapsed_ns;
}  // namespace

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

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSource& kernel, const Target& target) {
  const Config cfg = config();
  const std::string key = impl_->key_for(kernel, target, cfg);
  return impl_->binary(kernel, target, key, cfg);
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
  CUlaunchAttribute attrs[4];
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
  if (cfg.carveout_percent >= 0) {
    NK_CHECK(cfg.carveout_percent <= 100, "launch: carveout_percent ", cfg.carveout_percent, " is not from 0 to 100");
    attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
    attrs[n_attrs].value.sharedMemCarveout = static_cast<unsigned>(cfg.carveout_percent);
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
           cfg.pdl ? ", PDL" : "", cfg.cooperative ? ", cooperative" : "",
           cfg.carveout_percent >= 0 ? ", carveout " + std::to_string(cfg.carveout_percent) + " %" : std::string(), "]");
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
