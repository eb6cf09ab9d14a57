// The runtime's devices, contexts and memory: what each device is (its SMs as this
// process's context may use them, its memory class, its compile target), where a
// pointer lives, stream capture, and the scratch pool of the grouped and split rows.
#include "normkit/runtime/runtime.hpp"

#include "normkit/runtime/log.hpp"
#include "runtime_impl.hpp"

namespace normkit::rt {
namespace {

using detail::ContextGuard;

// The SMs `ctx` is limited to (CU_EXEC_AFFINITY_TYPE_SM_COUNT), 0 where the driver or
// device does not say (CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY): no limit known.
int context_sm_count(CUcontext ctx) {
  const DriverApi& d = driver();
  ContextGuard guard(ctx);
  CUexecAffinityParam affinity{};
  if (d.cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) != CUDA_SUCCESS) return 0;
  return static_cast<int>(affinity.param.smCount.val);
}

// `info` as the plans read it: NORMKIT_MEMORY_GBPS (`forced`, 0 where unset) in place of
// the driver's bandwidth, said once per device and value where the two differ. Applied
// at each read rather than cached, so that a reloaded configuration takes effect on
// devices already seen.
DeviceInfo with_memory_override(DeviceInfo info, int forced) {
  if (forced <= 0) return info;
  if (forced != info.driver_memory_gbps)
    warn_once("memory-gbps-" + std::to_string(info.ordinal) + "-" + std::to_string(forced),
              "device " + std::to_string(info.ordinal) + ": the plans read NORMKIT_MEMORY_GBPS=" +
                  std::to_string(forced) + " GB/s (" + (slower_memory(forced) ? "an H100's" : "an H200's") +
                  " memory class) instead of the driver's " +
                  (info.driver_memory_gbps > 0 ? std::to_string(info.driver_memory_gbps) : std::string("unknown")));
  info.memory_gbps = forced;
  return info;
}

}  // namespace

int Runtime::device_count() {
  int n = 0;
  const CUresult r = driver().cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE) return 0;
  NK_CU_CHECK(r);
  return n;
}

DeviceInfo Runtime::device_info(int device) {
  {
    std::unique_lock<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->devices.find(device); it != impl_->devices.end()) {
      DeviceInfo known = it->second;
      const int forced = impl_->config.memory_gbps;
      lock.unlock();
      return with_memory_override(std::move(known), forced);
    }
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
  info.driver_memory_gbps = info.memory_gbps;
  info.target = resolve_target(info.cc_major, info.cc_minor, toolchain(true));
  int forced = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    info = impl_->devices.emplace(device, info).first->second;
    forced = impl_->config.memory_gbps;
  }
  return with_memory_override(std::move(info), forced);
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

}  // namespace normkit::rt
