// Asynchronous global -> shared copies (cp.async, sm_80+), for kernels that keep
// rows in a shared-memory ring instead of registers, L2 prefetches of rows a CTA
// reads next, and bulk copies completed on an mbarrier (sm_90+).
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

// Bulk copies (cp.async.bulk, sm_90+): one thread moves a whole contiguous slice
// into this CTA's shared memory, holding no registers while it is in flight, and
// the bytes complete on an mbarrier the readers wait on. The barrier's phase
// completes when its one arrival (mbarrier_expect_bytes, made before the copies)
// and all the bytes it announced have landed.
// Invariants the callers keep: addresses 16-byte aligned and sizes multiples of 16;
// the barrier initialized (mbarrier_init, then fence_barrier_init and a CTA
// barrier) before any copy or wait uses it; a buffer is copied into again only
// after every thread's reads of it are ordered before the copy (a CTA barrier
// between them: the reads' values are in registers by then).
// Plans ask for them only on sm_90+; below, the functions trap.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))),
               "r"(arrivals) : "memory");
}

// Makes the thread's mbarrier_init visible to the cluster and to the bulk copies.
__device__ __forceinline__ void fence_barrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// One thread's set-up of a kernel's bulk-copy barriers: each takes one arrival a phase.
template <int N>
__device__ __forceinline__ void init_bulk_barriers(unsigned long long (&bars)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) mbarrier_init(&bars[i], 1);
  fence_barrier_init();
}

// The barrier's one arrival of this phase, announcing the bytes its copies bring.
__device__ __forceinline__ void mbarrier_expect_bytes(unsigned long long* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Orders this thread's (and, after a CTA barrier, the CTA's) earlier generic reads
// of shared memory before a later bulk copy's writes to it (the async proxy).
// The ring kernels refill a stage after the CTA barrier alone, which orders every
// thread's reads of the stage before thread 0's copy (as a pipeline's "empty" barrier
// does). The fence compiles to MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S, and the MEMBAR may
// wait for the fencing thread's outstanding loads and stores: once a step in the grouped
// kernels it cost LayerNorm's fp32 backward at N=262144 3% (0.871 without, 0.844 with;
// docs/perf/h200-2026-12-03e.md). NK_GROUP_PROXY_FENCE=1 puts it back before the
// grouped kernels' refill: a build switch for measuring, default 0.
#ifndef NK_GROUP_PROXY_FENCE
#define NK_GROUP_PROXY_FENCE 0
#endif
__device__ __forceinline__ void fence_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// How the bulk copies ask L2 to keep what they read: a build switch for measuring (the
// README's NORMKIT_NVRTC_FLAGS, -DNK_BULK_LOAD_CACHE=M). 0 (default): no hint, the code
// every measurement in docs/perf/ ran. 1: an L2::cache_hint of an evict-first policy
// (createpolicy.fractional, the whole range), so that rows read once give up their lines
// before the outputs' and the next rows' do: the loads' side of NK_STORE_CACHE, which
// measured +1-6 % on an H100's backward rows (docs/perf/h200-2026-12-07c.md).
#ifndef NK_BULK_LOAD_CACHE
#define NK_BULK_LOAD_CACHE 0
#endif
static_assert(NK_BULK_LOAD_CACHE == 0 || NK_BULK_LOAD_CACHE == 1, "NK_BULK_LOAD_CACHE is 0 or 1");

__device__ __forceinline__ void bulk_load(void* shared_dst, const void* global_src, unsigned bytes,
                                          unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if NK_BULK_LOAD_CACHE == 1
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(shared_dst))),
      "l"(__cvta_generic_to_global(global_src)), "r"(bytes),
      "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "l"(policy)
      : "memory");
#else
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(shared_dst))),
               "l"(__cvta_generic_to_global(global_src)), "r"(bytes),
               "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
               : "memory");
#endif
#else
  __trap();
#endif
}

// Waits for the completion of the barrier's phase of parity `parity` (0 for its
// first phase, then alternating); its bytes are then visible to the waiting thread.
// A phase that has not completed after kBulkWaitLimitNs traps (the kernel fails with
// an error) instead of spinning for ever: a copy that never lands is a bug (an
// address or size the host should have refused), and a hang would hold the GPU.
constexpr unsigned long long kBulkWaitLimitNs = 10ull * 1000 * 1000 * 1000;
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  unsigned long long since = 0;
  for (;;) {
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    if (done) break;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (since == 0) {
      since = now;
    } else if (now - since > kBulkWaitLimitNs) {
      __trap();
    }
  }
#else
  __trap();
#endif
}

// Copies `count` elements from global memory into shared memory, every thread of the
// CTA (thread `tid` of `threads`) a strided share, by plain loads and stores (none of
// the alignment above needed): the fallback where a bulk copy cannot take the data
// (its source not 16-byte aligned). Not unrolled: unrolled, it spilled 4 bytes of a
// 128-register row loop after it (NVRTC 13.0). The caller synchronizes the CTA before
// the copy is read.
template <class T>
__device__ __forceinline__ void copy_by_threads(T* shared_dst, const T* global_src, int count, int tid, int threads) {
#pragma unroll 1
  for (int i = tid; i < count; i += threads) shared_dst[i] = global_src[i];
}

}  // namespace nk
