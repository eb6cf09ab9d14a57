// Sums over the threads that share one row: a sub-warp / warp butterfly, then the
// warps of the row through shared memory, then the CTAs of a thread-block cluster
// through distributed shared memory (sm_90+).
//
// Invariants:
//  - Every thread of the group gets the same bits. fp32 addition is commutative,
//    so at each butterfly stage lanes i and i^m compute the same sum; later stages
//    read fixed slots in a fixed order.
//  - The order of additions depends only on the configuration (WIDTH, WARPS,
//    CLUSTER), never on timing: results are bitwise reproducible run to run.
//  - All threads of the CTA (all CTAs of the cluster) must call block/cluster
//    reductions the same number of times: they contain barriers.
//
// Rows over a cluster (the backward's, which walk rows, and the forward's) reduce
// through row_sums_walk: each CTA pushes its partial into every CTA of the cluster
// with st.async, which counts its bytes on the receiver's mbarrier, and waits on its
// own mbarrier; no cluster barrier per row.
// A cluster barrier's arrive has release semantics, so it waited for every load the
// CTA had in flight, the next row's prefetch included: with it, register rows in
// clusters that prefetched ran at 0.27-0.31x copy (rmsnorm_heuristics.cpp). The
// push is one-way and weak, and the wait is an acquire: loads stay in flight.
#pragma once

namespace nk {

// Butterfly over aligned groups of WIDTH lanes (WIDTH a power of two, <= 32).
template <int WIDTH>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int m = WIDTH / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m, WIDTH);
  return v;
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared-memory address of a generic pointer into this CTA's shared memory.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  unsigned addr;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(p));
  return addr;
}

// The same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned cluster_address(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
  return remote;
}

// Shared scratch of one row reduction of K sums at once: ROWS independent groups
// of TPR threads (TPR threads per row, a power of two), each row possibly spread
// over CLUSTER CTAs (whose partials meet in ClusterPushes).
template <int ROWS, int TPR, int CLUSTER, int K = 1>
struct RowReduceStorage {
  static constexpr int WARPS = TPR > 32 ? TPR / 32 : 1;
  float warp_partial[4][ROWS][WARPS][K];  // [SLOT]: ONCE reductions of one kernel use their own
};

// row_sums_walk's cluster step: step s's partials of the cluster's CTAs arrive in
// pushed[s % 2] (CTA c's at [c]), counted on arrived[s % 2]. Apart from
// RowReduceStorage, whose 4-byte alignment the kernels of one CTA a row keep (with
// the mbarriers inside it, its 8-byte alignment let the compiler pair the warps'
// partial reads, and the cp.async-ring kernels changed).
template <int ROWS, int CLUSTER, int K>
struct ClusterPushes {
  float pushed[2][ROWS][CLUSTER][K];
  unsigned long long arrived[2];
};

// Thread 0 initializes the CTA's two push mbarriers (one arrival each) and makes the
// initialization visible to the cluster before any barrier that follows it.
template <int ROWS, int CLUSTER, int K>
__device__ __forceinline__ void init_push_barriers(ClusterPushes<ROWS, CLUSTER, K>& pushes) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int d = 0; d < 2; ++d)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&pushes.arrived[d])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}

// Kernels that call row_sums_walk with CLUSTER > 1 call this first, with every
// thread of every CTA of the cluster (it has a cluster barrier): no CTA pushes
// into an mbarrier before its owner has initialized it.
template <int ROWS, int CLUSTER, int K>
__device__ __forceinline__ void row_sums_walk_init(ClusterPushes<ROWS, CLUSTER, K>& pushes) {
  if constexpr (CLUSTER > 1) {
    init_push_barriers(pushes);
    cluster_sync();
  }
}

// row_sums_walk_init split in two, for kernels of few rows a CTA (the forward), so
// that the cluster barrier's latency hides behind the row's loads: _arrive first,
// then _ready before the first row_sums_walk. Every thread of every CTA calls each
// once. Such kernels need no row_sums_walk_exit: every CTA makes the same calls and
// waits for every push of its last one, so none can arrive after it.
template <int ROWS, int CLUSTER, int K>
__device__ __forceinline__ void row_sums_walk_arrive(ClusterPushes<ROWS, CLUSTER, K>& pushes) {
  if constexpr (CLUSTER > 1) {
    init_push_barriers(pushes);
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
}
template <int CLUSTER>
__device__ __forceinline__ void row_sums_walk_ready() {
  if constexpr (CLUSTER > 1) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// ... and this last (a cluster barrier): no CTA exits while another may still
// push into it.
template <int CLUSTER>
__device__ __forceinline__ void row_sums_walk_exit() {
  if constexpr (CLUSTER > 1) cluster_sync();
}

// The warps' partials of row `sub` (TPR > 32 threads) added in warp order through
// warp_partial[slot]; every thread of the row gets the sums. Has a CTA barrier.
template <int ROWS, int TPR, int CLUSTER, int K>
__device__ __forceinline__ void warp_partials_sum(float (&v)[K], int sub, int lane_in_row,
                                                  RowReduceStorage<ROWS, TPR, CLUSTER, K>& s, int slot) {
  constexpr int WARPS = TPR / 32;
  if ((lane_in_row & 31) == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) s.warp_partial[slot][sub][lane_in_row / 32][k] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) v[k] += s.warp_partial[slot][sub][w][k];
  }
}

// Sums of v[0..K) over the TPR threads of row `sub` of one CTA, each in the order a
// single sum would take: K sums cost one set of barriers. Rows over a cluster take
// row_sums_walk.
//
// ONCE: the kernel calls it at most once per SLOT (0-3) in each CTA (one row per
// CTA, then exits), or alternates between slot sets from one row to the next (a
// pipelined kernel: a CTA reuses a slot two rows later, after a barrier of the row
// between): no barrier ends the call.
template <int ROWS, int TPR, int CLUSTER, bool ONCE = false, int SLOT = 0, int K>
__device__ __forceinline__ void row_sums(float (&v)[K], int sub, int lane_in_row,
                                         RowReduceStorage<ROWS, TPR, CLUSTER, K>& s) {
  constexpr int WIDTH = TPR < 32 ? TPR : 32;
  static_assert(SLOT >= 0 && SLOT < 4, "four slot sets");
  static_assert(CLUSTER == 1, "rows over a cluster reduce with row_sums_walk");
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = group_sum<WIDTH>(v[k]);
  if constexpr (TPR > 32) warp_partials_sum(v, sub, lane_in_row, s, SLOT);
  if constexpr (TPR > 32 && !ONCE) __syncthreads();  // warp_partial is reused by the next call
}


// row_sums_walk's cluster step in two halves, for kernels that act between them
// (norm_fwd_bulk_kernel refills its stage after the CTA barrier and before the
// cluster wait, and combines its CTAs' pairs itself). Step `step`'s K sums of this
// CTA (every thread of row `sub` holds them, after a CTA barrier that follows the
// reads of step - 1's slot) go into pushed[step % 2][sub][this CTA's rank] of every
// CTA of the cluster, their bytes counted on that CTA's arrived[step % 2].
template <int ROWS, int CLUSTER, int K>
__device__ __forceinline__ void cluster_push_partials(const float (&v)[K], int sub, int lane_in_row,
                                                      ClusterPushes<ROWS, CLUSTER, K>& pushes, unsigned step) {
  static_assert(K == 1 || K == 2, "one or two sums a push");
  const int slot = static_cast<int>(step & 1u);
  unsigned long long* arrived = &pushes.arrived[slot];
  if (threadIdx.x == 0) {
    constexpr unsigned kBytes = ROWS * CLUSTER * K * 4;
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(arrived)), "n"(kBytes) : "memory");
  }
  if (lane_in_row < CLUSTER) {
    const unsigned to = static_cast<unsigned>(lane_in_row);
    const unsigned dst = cluster_address(&pushes.pushed[slot][sub][cluster_rank()][0], to);
    const unsigned bar = cluster_address(arrived, to);
    if constexpr (K == 1) {
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                   ::"r"(dst), "r"(__float_as_uint(v[0])), "r"(bar) : "memory");
    } else {
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
                   ::"r"(dst), "r"(__float_as_uint(v[0])), "r"(__float_as_uint(v[K - 1])), "r"(bar) : "memory");
    }
  }
}

// Waits until every CTA's partials of step `step` are in pushed[step % 2].
// The wait acquires at CTA scope: the partials land in this CTA's shared memory
// and complete on this CTA's mbarrier. At cluster scope (as before) ptxas sm_90a
// put a CCTL.IVALL after every successful wait, an invalidation of the SM's whole
// L1 once per row (the other CTA's lines on the SM too), which the cluster rows'
// time per row and their lost prefetch (rmsnorm_heuristics.cpp) may owe to it:
// not yet measured.
template <int ROWS, int CLUSTER, int K>
__device__ __forceinline__ void cluster_await_partials(ClusterPushes<ROWS, CLUSTER, K>& pushes, unsigned step) {
  const int slot = static_cast<int>(step & 1u);
  unsigned long long* arrived = &pushes.arrived[slot];
  const unsigned parity = (step >> 1) & 1u;
  for (;;) {
    unsigned done;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done) : "r"(shared_address(arrived)), "r"(parity) : "memory");
    if (done) break;
  }
}

// row_sums for kernels that walk rows, `step` counting the calls (0, 1, 2, ...; the
// same in every CTA of the cluster, which walk the same rows). Over a cluster, the
// warps' partials alternate between two slots, so no barrier ends the call, and each
// CTA's partial of row `sub` is pushed into pushed[step % 2][sub][rank] of every
// CTA (st.async, its 4 * K bytes counted on that CTA's arrived[step % 2]), and the
// CTA sums the slots in rank order once its mbarrier has seen them all: the same
// bits everywhere.
// Why two slots suffice: a CTA pushes step s + 2 only after it has every partial
// of step s + 1, and each CTA pushes step s + 1 only after its threads are past
// the CTA barrier of step s + 1's warp partials, so after their reads of slot
// s % 2. Likewise the mbarrier of slot s % 2 has completed step s's phase before
// any thread arrives on it for step s + 2.
template <int ROWS, int TPR, int CLUSTER, int K>
__device__ __forceinline__ void row_sums_walk(float (&v)[K], int sub, int lane_in_row,
                                              RowReduceStorage<ROWS, TPR, CLUSTER, K>& s,
                                              ClusterPushes<ROWS, CLUSTER, K>& pushes, unsigned step) {
  if constexpr (CLUSTER == 1) {
    // One CTA a row: row_sums as before. Alternating two slots without its last
    // barrier lost 1.5-3 % for bf16 rows of N=2048-16384 on H200 (A/B eb7894f ->
    // 44a522f), measured together with the 8-byte-aligned storage (ClusterPushes'
    // comment), so which of the two cost it is not known.
    row_sums<ROWS, TPR, 1>(v, sub, lane_in_row, s);
  } else {
    static_assert(TPR > 32, "the cluster step relies on the warps' CTA barrier");
    static_assert(K == 1 || K == 2, "one or two sums a push");
    const int slot = static_cast<int>(step & 1u);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = group_sum<32>(v[k]);
    warp_partials_sum(v, sub, lane_in_row, s, slot);
    cluster_push_partials(v, sub, lane_in_row, pushes, step);
    cluster_await_partials(pushes, step);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0.f;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) v[k] += pushes.pushed[slot][sub][r][k];
    }
  }
}

}  // namespace nk
