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

// Reads a float from the same shared-memory variable in CTA `rank` of the cluster.
__device__ __forceinline__ float cluster_load(const float* local, unsigned rank) {
  unsigned addr, remote;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(local));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Writes v to the same shared-memory variable in CTA `rank` of the cluster.
__device__ __forceinline__ void cluster_store(float* local, unsigned rank, float v) {
  unsigned addr, remote;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(local));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

// Shared scratch of one row reduction of K sums at once: ROWS independent groups
// of TPR threads (TPR threads per row, a power of two), each row possibly spread
// over CLUSTER CTAs.
template <int ROWS, int TPR, int CLUSTER, int K = 1>
struct RowReduceStorage {
  static constexpr int WARPS = TPR > 32 ? TPR / 32 : 1;
  float warp_partial[4][ROWS][WARPS][K];  // [SLOT]: ONCE reductions of one kernel use their own
  float cta_partial[ROWS][K];
  // ONCE reductions: slot c holds CTA c's partial, written by CTA c into every
  // CTA; one set per reduction of the kernel (LayerNorm's forward has two), and
  // two such pairs for kernels that walk rows and alternate between them.
  float cta_partials[4][ROWS][CLUSTER][K];
};

// Sums of v[0..K) over the TPR threads of row `sub` (and over the cluster's CTAs),
// each in the order a single sum would take: K sums cost one set of barriers.
//
// ONCE: the kernel calls it at most once per SLOT (0-3) in each CTA (one row
// per CTA, then exits), or alternates between slot sets from one row to the next
// (a pipelined kernel: a CTA reuses a slot two rows later, after a barrier of the
// row between that every CTA reaches only once it has read the slot). The cluster step then pushes each CTA's partial into
// every CTA's shared memory and needs one cluster barrier instead of two: after
// it no CTA reads or writes that slot set remotely again, so any CTA may go on or
// exit. Kernels that reduce again in one slot (walking rows) must not use it,
// since a fast CTA's next push could overwrite a value a slower one has not read
// yet; they pull, with a second barrier.
template <int ROWS, int TPR, int CLUSTER, bool ONCE = false, int SLOT = 0, int K>
__device__ __forceinline__ void row_sums(float (&v)[K], int sub, int lane_in_row,
                                         RowReduceStorage<ROWS, TPR, CLUSTER, K>& s) {
  constexpr int WIDTH = TPR < 32 ? TPR : 32;
  static_assert(SLOT >= 0 && SLOT < 4, "four slot sets");
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = group_sum<WIDTH>(v[k]);
  if constexpr (TPR > 32) {
    constexpr int WARPS = TPR / 32;
    if ((lane_in_row & 31) == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) s.warp_partial[SLOT][sub][lane_in_row / 32][k] = v[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) v[k] += s.warp_partial[SLOT][sub][w][k];
    }
  }
  if constexpr (CLUSTER > 1 && ONCE) {
    if (lane_in_row < CLUSTER) {
#pragma unroll
      for (int k = 0; k < K; ++k) cluster_store(&s.cta_partials[SLOT][sub][cluster_rank()][k], lane_in_row, v[k]);
    }
    cluster_sync();  // every push has landed; nothing remote is touched after this
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0.f;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) v[k] += s.cta_partials[SLOT][sub][r][k];
    }
  } else if constexpr (CLUSTER > 1) {
    if (lane_in_row == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) s.cta_partial[sub][k] = v[k];
    }
    cluster_sync();  // every CTA's partial is visible cluster-wide
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0.f;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) v[k] += cluster_load(&s.cta_partial[sub][k], r);
    }
    cluster_sync();  // nobody overwrites (or exits with) a partial another CTA still reads
  } else if constexpr (TPR > 32 && !ONCE) {
    __syncthreads();  // warp_partial is reused by the next call
  }
}

// One sum (row_sums with K = 1).
template <int ROWS, int TPR, int CLUSTER, bool ONCE = false, int SLOT = 0>
__device__ __forceinline__ float row_sum(float v, int sub, int lane_in_row, RowReduceStorage<ROWS, TPR, CLUSTER, 1>& s) {
  float one[1] = {v};
  row_sums<ROWS, TPR, CLUSTER, ONCE, SLOT>(one, sub, lane_in_row, s);
  return one[0];
}

}  // namespace nk
