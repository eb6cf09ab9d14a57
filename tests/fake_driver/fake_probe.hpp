// The fake driver's test hooks (fake_cuda_driver.cpp), for the tests that run
// against it: how many modules each fake device loaded and kernels it launched,
// the last launch, and fake device pointers.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

namespace nktest {

struct FakeProbe {
  int (*module_loads)(int) = nullptr;
  int (*launches)(int) = nullptr;
  void (*last_launch)(unsigned*, unsigned*, int*, int*) = nullptr;
  unsigned long long (*device_pointer)(int, unsigned long long) = nullptr;
  unsigned long long (*capturing_stream)() = nullptr;
  int (*func_attribute_calls)() = nullptr;  // cuFuncGetAttribute + cuFuncSetAttribute so far
  int (*last_launch_cooperative)() = nullptr;  // the last launch's cooperative attribute
  unsigned (*last_launch_shared_bytes)() = nullptr;  // the last launch's dynamic shared memory a CTA
  int (*last_launch_carveout)() = nullptr;  // the last launch's preferred carveout, percent (-1: none)
  unsigned (*last_launch_block)() = nullptr;  // the last launch's threads a CTA (x)
};

// Fills `probe` from the fake driver the runtime opens (NORMKIT_CUDA_DRIVER_PATH,
// set by ctest) and points NORMKIT_CACHE_DIR at a fresh directory. Fatal gtest
// failures when either is impossible (check HasFatalFailure() after).
inline void open_fake_driver(FakeProbe* probe) {
  const char* path = std::getenv("NORMKIT_CUDA_DRIVER_PATH");
  ASSERT_NE(path, nullptr) << "run through ctest: NORMKIT_CUDA_DRIVER_PATH must name the fake driver";
  // The runtime opened (or will open) the same file; dlopen returns that handle.
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  probe->module_loads = reinterpret_cast<int (*)(int)>(dlsym(h, "fake_cuda_module_loads"));
  probe->launches = reinterpret_cast<int (*)(int)>(dlsym(h, "fake_cuda_launches"));
  probe->last_launch = reinterpret_cast<void (*)(unsigned*, unsigned*, int*, int*)>(dlsym(h, "fake_cuda_last_launch"));
  probe->device_pointer =
      reinterpret_cast<unsigned long long (*)(int, unsigned long long)>(dlsym(h, "fake_cuda_device_pointer"));
  probe->capturing_stream = reinterpret_cast<unsigned long long (*)()>(dlsym(h, "fake_cuda_capturing_stream"));
  probe->func_attribute_calls = reinterpret_cast<int (*)()>(dlsym(h, "fake_cuda_func_attribute_calls"));
  probe->last_launch_cooperative = reinterpret_cast<int (*)()>(dlsym(h, "fake_cuda_last_launch_cooperative"));
  probe->last_launch_shared_bytes = reinterpret_cast<unsigned (*)()>(dlsym(h, "fake_cuda_last_launch_shared_bytes"));
  probe->last_launch_carveout = reinterpret_cast<int (*)()>(dlsym(h, "fake_cuda_last_launch_carveout"));
  probe->last_launch_block = reinterpret_cast<unsigned (*)()>(dlsym(h, "fake_cuda_last_launch_block"));
  ASSERT_TRUE(probe->module_loads && probe->launches && probe->last_launch && probe->device_pointer &&
              probe->capturing_stream && probe->func_attribute_calls && probe->last_launch_cooperative &&
              probe->last_launch_shared_bytes && probe->last_launch_carveout && probe->last_launch_block);
  char dir[] = "/tmp/normkit-fake-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("NORMKIT_CACHE_DIR", dir, 1);
}

}  // namespace nktest
