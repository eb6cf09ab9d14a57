// Lazily opened CUDA driver (libcuda.so.1) and NVRTC. Internal to the runtime.
//
// cuda.h / nvrtc.h are used for types and for their versioned-name macros only:
// each entry point is looked up with dlsym() under the name the header maps it
// to (cuMemAlloc -> cuMemAlloc_v2), so the signatures we call through are exactly
// the header's. Nothing links against libcuda or libnvrtc, so importing normkit on
// a machine without a driver works and only a GPU call reports what is missing.
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "normkit/runtime/error.hpp"

namespace normkit::rt {

#define NK_STRINGIZE_(x) #x
#define NK_STRINGIZE(x) NK_STRINGIZE_(x)

#define NK_DRIVER_FUNCTIONS(X)                                                                       \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)         \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)             \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetCurrent) X(cuCtxGetExecAffinity)                 \
  X(cuPointerGetAttributes)                                                                         \
  X(cuModuleLoadData) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute)            \
  X(cuLaunchKernelEx) X(cuStreamIsCapturing) X(cuStreamCreate) X(cuStreamDestroy)                   \
  X(cuStreamSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoHAsync)          \
  X(cuMemsetD32Async) X(cuMemFreeAsync) X(cuMemPoolCreate) X(cuMemPoolSetAttribute) \
  X(cuMemAllocFromPoolAsync) X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

#define NK_NVRTC_FUNCTIONS(X)                                                                        \
  X(nvrtcVersion) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs) X(nvrtcGetErrorString)      \
  X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)      \
  X(nvrtcAddNameExpression) X(nvrtcGetLoweredName)

#define NK_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;

struct DriverApi {
  NK_DRIVER_FUNCTIONS(NK_DECLARE_MEMBER)
  std::string library;  // path or soname that was opened
  int version = 0;      // cuDriverGetVersion
  std::string error_text(CUresult r) const;
};

struct NvrtcApi {
  NK_NVRTC_FUNCTIONS(NK_DECLARE_MEMBER)
  std::string library;
  int major = 0, minor = 0;
  std::vector<int> archs;
};

// Open on first use (thread-safe); throw normkit::Error saying what is missing and
// where it was looked for. A failed open is remembered and reported again.
const DriverApi& driver();
const NvrtcApi& nvrtc();
// "" when the driver opened and initialized; otherwise the reason (no throw).
std::string driver_unavailable_reason();
void add_nvrtc_search_dir(const std::string& dir);

}  // namespace normkit::rt

// Thin checks: the failing call's text, the driver's name and description of the error.
#define NK_CU_CHECK(call)                                                                        \
  do {                                                                                           \
    const CUresult nk_result_ = (call);                                                          \
    if (nk_result_ != CUDA_SUCCESS)                                                              \
      NK_THROW("CUDA driver call ", #call, " failed: ", ::normkit::rt::driver().error_text(nk_result_)); \
  } while (0)

#define NK_NVRTC_CHECK(call)                                                                      \
  do {                                                                                            \
    const nvrtcResult nk_result_ = (call);                                                        \
    if (nk_result_ != NVRTC_SUCCESS)                                                              \
      NK_THROW("NVRTC call ", #call, " failed: ", ::normkit::rt::nvrtc().nvrtcGetErrorString(nk_result_)); \
  } while (0)
