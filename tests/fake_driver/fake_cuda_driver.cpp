// A stand-in libcuda for CPU-only CI: N devices of one compute capability,
// per-device primary contexts, modules bound to the context they were loaded in,
// and launches that fail unless the function belongs to the current context.
//
// It exists to test the runtime's multi-device logic (binary shared per target,
// handle never shared per device, device guard, capture check, launch attributes)
// on machines without GPUs. Only what the runtime calls is implemented; the rest
// of the driver is not pretended. Device pointers are fabricated addresses that
// encode their device: kFakeBase + device * kDeviceSpan + offset.
#include <cuda.h>
#include <elf.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr unsigned long long kFakeBase = 0x7f0000000000ull;
constexpr unsigned long long kDeviceSpan = 1ull << 36;
constexpr int kMaxDevices = 8;
constexpr uintptr_t kCapturingStream = 0xCA97;  // a stream handle the fake reports as capturing

struct FakeContext {
  int device;
};
struct FakeModule {
  int device;
  std::vector<char> image;
};
struct FakeFunction {
  FakeModule* module;
  std::string name;
};

FakeContext g_contexts[kMaxDevices];
std::atomic<int> g_module_loads[kMaxDevices];
std::atomic<int> g_launches[kMaxDevices];
std::atomic<int> g_func_attribute_calls{0};  // cuFuncGetAttribute + cuFuncSetAttribute
thread_local std::vector<CUcontext> t_stack;

struct LastLaunch {
  unsigned grid = 0, block = 0, cluster = 0;
  int pdl = 0;
  int cooperative = 0;
  unsigned shared_bytes = 0;  // dynamic shared memory a CTA
  int carveout_percent = -1;  // CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, -1: not given
  unsigned long long stream = 0;
  int device = -1;
};
std::mutex g_last_mutex;
LastLaunch g_last;

bool fake_pools() {
  const char* env = std::getenv("FAKE_CUDA_MEMORY_POOLS");
  return env != nullptr && std::string(env) == "1";
}

int device_count() {
  const char* env = std::getenv("FAKE_CUDA_DEVICES");
  const int n = env ? std::atoi(env) : 2;
  return n < 0 ? 0 : (n > kMaxDevices ? kMaxDevices : n);
}
int current_device() { return t_stack.empty() ? -1 : static_cast<FakeContext*>(static_cast<void*>(t_stack.back()))->device; }

}  // namespace

extern "C" {

// Test-side probes (looked up with dlsym by the tests).
int fake_cuda_module_loads(int device) { return g_module_loads[device].load(); }
int fake_cuda_launches(int device) { return g_launches[device].load(); }
int fake_cuda_func_attribute_calls() { return g_func_attribute_calls.load(); }
void fake_cuda_last_launch(unsigned* grid, unsigned* cluster, int* pdl, int* device) {
  std::lock_guard<std::mutex> lock(g_last_mutex);
  *grid = g_last.grid;
  *cluster = g_last.cluster;
  *pdl = g_last.pdl;
  *device = g_last.device;
}
int fake_cuda_last_launch_cooperative() {
  std::lock_guard<std::mutex> lock(g_last_mutex);
  return g_last.cooperative;
}
unsigned fake_cuda_last_launch_shared_bytes() {
  std::lock_guard<std::mutex> lock(g_last_mutex);
  return g_last.shared_bytes;
}
unsigned fake_cuda_last_launch_block() {
  std::lock_guard<std::mutex> lock(g_last_mutex);
  return g_last.block;
}
int fake_cuda_last_launch_carveout() {
  std::lock_guard<std::mutex> lock(g_last_mutex);
  return g_last.carveout_percent;
}
unsigned long long fake_cuda_device_pointer(int device, unsigned long long offset) {
  return kFakeBase + device * kDeviceSpan + offset;
}
unsigned long long fake_cuda_capturing_stream() { return kCapturingStream; }

CUresult CUDAAPI cuInit(unsigned int) { return device_count() ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE; }
CUresult CUDAAPI cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_INVALID_HANDLE ? "CUDA_ERROR_INVALID_HANDLE" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_INVALID_HANDLE ? "function used in a context it was not loaded in" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* n) {
  *n = device_count();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice d) {
  std::snprintf(name, len, "Fake GPU %d", static_cast<int>(d));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  const char* cc = std::getenv("FAKE_CUDA_CC");
  const int major = cc ? cc[0] - '0' : 9, minor = cc ? cc[2] - '0' : 0;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = major; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = minor; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = fake_pools() ? 1 : 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  g_contexts[d].device = d;
  *ctx = reinterpret_cast<CUcontext>(&g_contexts[d]);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  t_stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* ctx) {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx) *ctx = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = t_stack.empty() ? nullptr : t_stack.back();
  return CUDA_SUCCESS;
}
// FAKE_CUDA_CONTEXT_SMS: the SMs each context is limited to (an MPS client with an
// active-thread limit); unset, the query is unsupported, as on a device without MPS.
CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam* p, CUexecAffinityType type) {
  const char* sms = std::getenv("FAKE_CUDA_CONTEXT_SMS");
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (sms == nullptr || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  p->type = type;
  p->param.smCount.val = static_cast<unsigned>(std::atoi(sms));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** values, CUdeviceptr p) {
  const bool fake = p >= kFakeBase && p < kFakeBase + kMaxDevices * kDeviceSpan;
  const int device = fake ? static_cast<int>((p - kFakeBase) / kDeviceSpan) : -2;
  for (unsigned i = 0; i < n; ++i) {
    if (attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
      *static_cast<CUmemorytype*>(values[i]) = fake ? CU_MEMORYTYPE_DEVICE : static_cast<CUmemorytype>(0);
    else if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
      *static_cast<int*>(values[i]) = device;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadData(CUmodule* m, const void* image) {
  const int device = current_device();
  if (device < 0) return CUDA_ERROR_INVALID_CONTEXT;
  // Cubins are ELF64; the section header table ends the file, which gives its size.
  const char* bytes = static_cast<const char*>(image);
  if (std::memcmp(bytes, ELFMAG, SELFMAG) != 0) return CUDA_ERROR_INVALID_IMAGE;
  Elf64_Ehdr header;
  std::memcpy(&header, bytes, sizeof header);
  const size_t size = header.e_shoff + static_cast<size_t>(header.e_shnum) * header.e_shentsize;
  auto* mod = new FakeModule{device, std::vector<char>(bytes, bytes + size)};
  g_module_loads[device]++;
  *m = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  auto* mod = reinterpret_cast<FakeModule*>(m);
  if (current_device() != mod->device) return CUDA_ERROR_INVALID_CONTEXT;
  const std::string_view image(mod->image.data(), mod->image.size());
  if (image.find(name) == std::string_view::npos) return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(new FakeFunction{mod, name});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) {
  g_func_attribute_calls++;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction) {
  g_func_attribute_calls++;
  const char* local = std::getenv("FAKE_CUDA_LOCAL_BYTES");
  *v = a == CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES && local ? std::atoi(local) : 0;
  return CUDA_SUCCESS;
}
// Occupancy: FAKE_CUDA_BLOCKS_PER_SM CTAs per SM (default 1), at most as many as an
// sm_90 SM's 228 KB of shared memory holds with 1 KB reserved a CTA; clusters: the fake
// device's 132 SMs / CTAs per cluster, less FAKE_CUDA_CLUSTER_SHORTFALL clusters
// (the GPC remainder a real GPU leaves: 30 clusters of 4 on an H200, not 33).
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction, int, size_t shared_bytes) {
  const char* v = std::getenv("FAKE_CUDA_BLOCKS_PER_SM");
  const int by_shared = static_cast<int>(228 * 1024 / (shared_bytes + 1024));
  *n = std::min(v ? std::atoi(v) : 1, by_shared);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* n, CUfunction, const CUlaunchConfig* cfg) {
  unsigned cluster = 0;
  for (unsigned i = 0; i < cfg->numAttrs; ++i)
    if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) cluster = cfg->attrs[i].value.clusterDim.x;
  if (cluster == 0 || cfg->gridDimX % cluster) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  const char* shortfall = std::getenv("FAKE_CUDA_CLUSTER_SHORTFALL");
  *n = 132 / static_cast<int>(cluster) - (shortfall ? std::atoi(shortfall) : 0);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void**, void**) {
  auto* fn = reinterpret_cast<FakeFunction*>(f);
  const int device = current_device();
  if (device != fn->module->device) return CUDA_ERROR_INVALID_HANDLE;
  LastLaunch last;
  last.grid = cfg->gridDimX;
  last.block = cfg->blockDimX;
  last.shared_bytes = cfg->sharedMemBytes;
  last.stream = reinterpret_cast<unsigned long long>(cfg->hStream);
  last.device = device;
  for (unsigned i = 0; i < cfg->numAttrs; ++i) {
    if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) last.cluster = cfg->attrs[i].value.clusterDim.x;
    if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      last.pdl = cfg->attrs[i].value.programmaticStreamSerializationAllowed;
    if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
      last.carveout_percent = static_cast<int>(cfg->attrs[i].value.sharedMemCarveout);
    if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) last.cooperative = cfg->attrs[i].value.cooperative;
  }
  if (last.cluster > 16 || (last.cluster && last.grid % last.cluster)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  // FAKE_CUDA_COOPERATIVE_MAX_CTAS: the most CTAs a cooperative grid may have (a process
  // given fewer SMs than the device reports, as under MPS); more is refused.
  if (const char* most = std::getenv("FAKE_CUDA_COOPERATIVE_MAX_CTAS");
      most && last.cooperative && last.grid > static_cast<unsigned>(std::atoi(most)))
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  {
    std::lock_guard<std::mutex> lock(g_last_mutex);
    g_last = last;
  }
  g_launches[device]++;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  *status = reinterpret_cast<uintptr_t>(s) == kCapturingStream ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                                : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
// Memory and stream management are not simulated.
CUresult CUDAAPI cuStreamCreate(CUstream*, unsigned) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuStreamDestroy(CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemAlloc(CUdeviceptr*, size_t) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemFree(CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr, const void*, size_t) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoHAsync(void*, CUdeviceptr, size_t, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
// A memset is accepted (nothing is written): the grouped backward zeroes its slots in
// the workspace before its launch.
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) { return CUDA_SUCCESS; }
// Stream-ordered pools only under FAKE_CUDA_MEMORY_POOLS=1 (the forward's grouped rows
// take their slots from one): allocations are fake pointers high in the device's span,
// never read or written, and never given back.
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr, CUstream) { return fake_pools() ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!fake_pools()) return CUDA_ERROR_NOT_SUPPORTED;
  *pool = reinterpret_cast<CUmemoryPool>(static_cast<uintptr_t>(0x1000 + props->location.id));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void*) {
  return fake_pools() ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream) {
  if (!fake_pools()) return CUDA_ERROR_NOT_SUPPORTED;
  const int device = static_cast<int>(reinterpret_cast<uintptr_t>(pool) - 0x1000);
  static std::atomic<unsigned long long> next{0};
  const unsigned long long at = next.fetch_add((bytes + 255) / 256 * 256);
  *p = kFakeBase + device * kDeviceSpan + (kDeviceSpan / 2) + at % (kDeviceSpan / 2);
  return CUDA_SUCCESS;
}

}  // extern "C"
