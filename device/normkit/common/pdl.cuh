// Programmatic dependent launch (PDL, sm_90+).
//
// The host launches norm kernels with the programmatic-stream-serialization
// attribute (NORMKIT_PDL, on by default where the device has it), so that a kernel
// may be scheduled onto SMs before the kernel ahead of it in the stream has fully
// finished, which hides the launch gap between back-to-back kernels (decode
// calls are a few microseconds each, so that gap is a large share of them).
//
// Invariant: every kernel launched that way calls wait_for_prerequisite_grids()
// before its first global-memory access. The wait returns once the grids it
// depends on have completed and their writes are visible; without the attribute
// (or below sm_90) it returns at once, so the same binary serves both launches.
// None of the kernels signals its dependents early (griddepcontrol.launch_dependents):
// a dependent's CTAs, resident and waiting, would take SM slots from the kernel's
// later waves, and the synced backward needs all of its CTAs resident.
#pragma once

namespace nk {

__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace nk
