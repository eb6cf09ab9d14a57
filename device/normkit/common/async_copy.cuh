// Asynchronous global -> shared copies (cp.async, sm_80+), for kernels that keep
// rows in a shared-memory ring instead of registers, and L2 prefetches of rows a
// CTA reads next.
//
// Invariants the callers keep: both addresses are 16-byte aligned; a thread reads
// only the shared-memory entries it copied itself, after cp_async_wait<N>() has
// retired the group that copied them (so no barrier is needed between copy and
// use), and issues a new copy into an entry only after its own reads of that
// entry (program order; the reads' results were consumed before the copy issues).
#pragma once

namespace nk {

__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src) : "memory");
}

// Closes the copies issued since the last commit into one group (possibly empty).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most PENDING of this thread's groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// Asks L2 for [global_src, global_src + bytes) ahead of its use: one bulk prefetch
// (sm_90+), holding no registers or shared memory while it is in flight, and not
// ordered with anything (a hint; the lines may be evicted before they are read).
// global_src 16-byte aligned, bytes a multiple of 16. A no-op before sm_90, where
// the plans never ask for it.
__device__ __forceinline__ void prefetch_l2_bulk(const void* global_src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(global_src)), "r"(bytes)
               : "memory");
#endif
}

}  // namespace nk
