// The JIT kernel runtime: KernelSource -> cache key -> (memory | disk | NVRTC) ->
// per-device module -> launch on the caller's stream.
//
// One process-wide Runtime owns the CUDA driver and NVRTC (both dlopen()ed on
// first GPU use; nothing here links against them), the memory cache of compiled
// binaries (shared by all devices of one target) and the per-device loaded
// functions (never shared between devices). It is thread-safe. Operator
// libraries wrap it in one small object per kernel family that turns their
// arguments into a KernelSource and a LaunchConfig.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/kernel.hpp"
#include "normkit/runtime/target.hpp"

namespace normkit::rt {

using Stream = void*;  // a CUstream / cudaStream_t; nullptr is the legacy default stream

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid, block;
  unsigned shared_bytes = 0;   // dynamic shared memory
  Dim3 cluster{0, 0, 0};       // thread-block cluster dims; x == 0 means no cluster attribute
  bool pdl = false;            // programmatic dependent launch (programmatic stream serialization)
  // Cooperative launch: every CTA of the grid resident at once, or the launch fails
  // (CU_LAUNCH_ATTRIBUTE_COOPERATIVE), for kernels whose CTAs wait on each other with
  // no way out. Not with pdl: such a grid may not start early beside the kernel ahead.
  bool cooperative = false;
  // The launch's preferred share of the SM's unified L1 and shared memory that is shared
  // memory, in percent (CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT; the driver
  // rounds it up to a size the SM supports, and past it where one CTA needs more); -1:
  // the driver's own choice.
  int carveout_percent = -1;
  Stream stream = nullptr;
};

struct Counters {
  std::uint64_t compiles = 0;       // NVRTC compiles done by this process
  std::uint64_t memory_hits = 0;    // binaries served from the in-process cache
  std::uint64_t disk_hits = 0;      // binaries read from the disk cache
  std::uint64_t disk_invalid = 0;   // disk entries rejected as corrupt/mismatched (recompiled)
  std::uint64_t module_loads = 0;   // modules loaded into a device context
  std::uint64_t launches = 0;
  std::uint64_t compile_ns = 0;     // wall time spent in NVRTC
  std::uint64_t disk_read_ns = 0;   // wall time spent reading + validating disk entries
  std::uint64_t load_ns = 0;        // wall time spent in cuModuleLoadData + cuModuleGetFunction
};

// Peak DRAM bandwidth in GB/s of memory clocked at `memory_khz` (the driver's
// CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) on a `bus_bits` wide bus, two transfers a
// clock (HBM, GDDR as the driver reports them): H100 SXM 2619 MHz x 5120 bits -> 3352,
// H200 3201 MHz x 6144 bits -> 4916. 0 for a clock or width that is not positive.
inline int memory_gbps(int memory_khz, int bus_bits) {
  if (memory_khz <= 0 || bus_bits <= 0) return 0;
  return static_cast<int>(static_cast<long long>(memory_khz) * bus_bits / 4000000);
}

// The memory class the norm plans read (RowPlanInputs::slower_memory, `normkit doctor`):
// under 4 TB/s, an H100's (SXM/PCIe/NVL) rather than an H200's; 0 (unknown) is not.
inline bool slower_memory(int memory_gbps) { return memory_gbps > 0 && memory_gbps < 4000; }

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  // The SMs this process's context may use: what the plans and every grid are sized for.
  // Fewer than device_sm_count under MPS with an active-thread limit (runtime_device.cpp).
  int sm_count = 0;
  int device_sm_count = 0;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  // Peak DRAM bandwidth, GB/s, from the driver's memory clock and bus width (0 where the
  // driver reports neither): the plans tell an H100 (~3350) from an H200 (~4900), two
  // sm_90 parts of 132 SMs whose best plans differ (rmsnorm_heuristics.hpp).
  // NORMKIT_MEMORY_GBPS replaces it where set (Config::memory_gbps); the driver's is then
  // still driver_memory_gbps.
  int memory_gbps = 0;
  int driver_memory_gbps = 0;
  Target target;  // resolved compile target
};

// A kernel loaded into one device's primary context.
struct LoadedKernel {
  int device = -1;
  void* function = nullptr;          // CUfunction
  std::shared_ptr<const CompiledKernel> compiled;
  void* context = nullptr;           // CUcontext the function was loaded in (device's primary context)
  // Read once at load rather than at every launch (a driver call each): the
  // function's static shared memory, and the dynamic shared memory it has been
  // allowed so far (the opt-in above 48 KB; shared by the copies of this handle).
  int static_shared_bytes = 0;
  std::shared_ptr<std::atomic<int>> dynamic_shared_allowed;
};

class Runtime {
 public:
  static Runtime& instance();

  // Re-reads NORMKIT_* variables (tests and front ends that change the environment).
  void reload_config();
  Config config() const;
  // config()'s per-call switches alone (no allocation).
  CallSwitches switches() const;

  // --- target resolution -------------------------------------------------
  // The device all non-null pointers live on; throws if they disagree, if one is
  // host memory, or if all are null (`what` names the arguments in errors).
  int device_of(const std::vector<const void*>& pointers, const std::vector<std::string>& names);
  // The CUDA ordinal of device memory `pointer`, or nullopt for memory CUDA does
  // not map as device memory (ordinary or pinned host memory) and when no driver
  // can be loaded. Never throws for an unknown pointer.
  std::optional<int> pointer_device(const void* pointer);
  DeviceInfo device_info(int device);  // cached per ordinal
  int device_count();
  // The compile target for `device`: NORMKIT_ARCH if set, else resolved from its capability.
  Target target_for_device(int device);
  ToolchainInfo toolchain(bool need_driver);

  // --- compile & load ----------------------------------------------------
  // Compile-only (no GPU needed): an explicit target is required.
  std::shared_ptr<const CompiledKernel> compile(const KernelSource& kernel, const Target& target);
  // The target for compile-only use: `arch` if given, else NORMKIT_ARCH, else an
  // error (there is no default architecture).
  Target compile_only_target(const std::string& arch = "");
  // Binary for `device`'s target, loaded into its primary context. If the kernel is
  // not yet loaded there and `stream` is being captured into a CUDA graph, this
  // throws ("warm up first") instead of compiling or loading during capture.
  // A repeat call for a kernel already loaded on `device` is a single map lookup
  // keyed by (device, family, template_args, entry, options): by contract those
  // determine the generated source within one build, so no source is hashed again.
  LoadedKernel get(const KernelSource& kernel, int device, Stream stream = nullptr);
  // Changes whenever loaded handles or the configuration are forgotten/changed
  // (clear_memory_cache, reload_config). Operators that memoize LoadedKernel
  // handles for their hot path must drop them when it changes.
  std::uint64_t generation() const;
  // Warms a kernel for each device (compile/load now, so later launches and graph capture need neither).
  void prepare(const KernelSource& kernel, const std::vector<int>& devices);

  // Launches `kernel` on config.stream under a guard for kernel.device.
  // args: pointers to each kernel parameter, as for cuLaunchKernel.
  void launch(const LoadedKernel& kernel, const LaunchConfig& config, void** args);
  // launch(), except that a cooperative launch the driver refuses as too large for the
  // CTAs it can hold at once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: a process given
  // fewer SMs than the device has, as under MPS) returns false, nothing launched, so
  // the caller can launch another plan. Every other failure throws, as launch() does.
  bool launch_unless_cooperative_refused(const LoadedKernel& kernel, const LaunchConfig& config, void** args);
  // How many CTAs of `kernel` launched as `config` (block, cluster, dynamic shared
  // memory; grid and stream are not read) the device holds at once, in whole
  // clusters: the driver's occupancy answer, for persistent grids (a persistent
  // cluster that is not resident would run only after the others finish).
  std::int64_t max_resident_ctas(const LoadedKernel& kernel, const LaunchConfig& config);
  // True when `stream` is being captured into a CUDA graph.
  bool stream_is_capturing(Stream stream, int device);
  // Zeroes `words` 32-bit words of device memory at `pointer` on `stream`
  // (asynchronous; captured like a kernel under CUDA-graph capture).
  void zero_async(int device, void* pointer, std::size_t words, Stream stream);
  // Scratch of `bytes` bytes of device memory, stream-ordered: from a memory pool of
  // the runtime's own for `device` (cuMemAllocFromPoolAsync; it keeps up to 64 MB
  // between calls; captured as an allocation node under CUDA-graph capture), usable by
  // work queued on `stream` after this call and given back by free_async on the same
  // stream after that work. For kernels whose public entry point takes no workspace.
  void* alloc_async(int device, std::size_t bytes, Stream stream);
  void free_async(int device, void* pointer, Stream stream);
  // Whether `device` has the memory pools alloc_async needs (cached per device).
  bool memory_pools_supported(int device);

  // --- diagnostics -------------------------------------------------------
  Counters counters() const;
  void reset_counters();
  // Forgets loaded modules and the memory cache (tests: simulate a fresh process).
  void clear_memory_cache();
  std::string cache_dir() const;
  bool disk_cache_usable() const;
  std::string driver_error() const;  // why the driver is unavailable ("" if it loaded)

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  Runtime();
  ~Runtime();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Extra directories searched for libnvrtc before CUDA_HOME and the system loader
// (after NORMKIT_NVRTC_PATH). The Python package passes the NVIDIA pip wheels' lib dirs.
void add_nvrtc_search_dirs(const std::vector<std::string>& dirs);

}  // namespace normkit::rt
