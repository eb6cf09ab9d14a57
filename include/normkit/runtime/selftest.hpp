// A tiny kernel that exercises the whole runtime path (source generation, key,
// compile, cache, per-device load, launch) without knowing any operator. Used by
// `normkit doctor --selftest`, the runtime's tests and the GPU proof.
#pragma once

#include <cstdint>

#include "normkit/runtime/kernel.hpp"
#include "normkit/runtime/runtime.hpp"

namespace normkit::rt::selftest {

// y[i] = a * x[i] + y[i] for fp32 x, y of length n. `unroll` only changes the
// generated instantiation (so tests can ask for distinct keys cheaply).
KernelSource axpy_source(int unroll = 1);

// Launches axpy on `stream` on the device that x and y live on. `cluster` > 0 launches
// thread-block clusters of that many CTAs, `pdl` sets programmatic dependent launch
// and `cooperative` a cooperative one, so the tests can prove the launch attributes
// reach the driver.
void axpy(const float* x, float* y, std::int64_t n, float a, Stream stream, int unroll = 1, unsigned cluster = 0,
          bool pdl = false, bool cooperative = false);

// Allocates device memory on `device` through the driver, runs axpy on a fresh
// non-default stream against a host reference, and returns "" on success or a
// description of the mismatch. Needs no framework (used by `normkit doctor --selftest`).
std::string run_on_device(int device);

}  // namespace normkit::rt::selftest
