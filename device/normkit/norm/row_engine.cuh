// How the norm kernels map rows to threads; shared by every norm's forward and
// backward so that they differ only in their per-element epilogue.
//
// Shape of the mapping (all compile-time, chosen per (N, dtypes, arch) by the host
// heuristics):
//  - A row of N elements is VEC-wide vectors, NV = N / VEC of them (VEC divides N).
//  - A CTA holds ROWS rows at once, TPR threads per row (THREADS = ROWS * TPR).
//    Small N uses many rows per CTA so that a CTA still moves enough bytes.
//  - Large N splits one row over a cluster of CLUSTER CTAs (sm_90+): CTA rank c
//    owns the contiguous slice [c * SLICE_V, (c + 1) * SLICE_V) of vectors, and the
//    row's sums meet in distributed shared memory (reduce.cuh).
//  - Within a slice, thread `lane` owns vectors lane, lane + TPR, ... (ITEMS of
//    them): consecutive threads touch consecutive 16-byte chunks, so every warp
//    access is fully coalesced.
//  - REGS: the thread's ITEMS vectors stay in registers between the reduction and
//    the epilogue, so HBM is read once. Without REGS (rows too long for the
//    register file on targets without clusters) the epilogue re-reads its inputs,
//    which then mostly come from L2.
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/reduce.cuh"
#include "normkit/common/vector_io.cuh"
#include "normkit/norm/params.cuh"

namespace nk {

template <int N_, int VEC_, int TPR_, int ROWS_, int CLUSTER_, bool REGS_, int MIN_BLOCKS_>
struct RowConfig {
  static constexpr int N = N_;
  static constexpr int VEC = VEC_;
  static constexpr int TPR = TPR_;
  static constexpr int ROWS = ROWS_;
  static constexpr int CLUSTER = CLUSTER_;
  static constexpr bool REGS = REGS_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int THREADS = TPR * ROWS;
  static constexpr int NV = N / VEC;
  static constexpr int SLICE_V = (NV + CLUSTER - 1) / CLUSTER;
  static constexpr int ITEMS = (SLICE_V + TPR - 1) / TPR;
  // Every thread owns all ITEMS vectors (TPR divides the slice, the slices tile the
  // row): RowThread::owns is true for every item, known at compile time.
  static constexpr bool ALL_OWNED = SLICE_V % TPR == 0 && SLICE_V * CLUSTER == NV;

  static_assert(N % VEC == 0, "VEC must divide N");
  static_assert((TPR & (TPR - 1)) == 0 && TPR <= 1024, "TPR is a power of two <= 1024");
  static_assert(THREADS <= 1024, "at most 1024 threads per CTA");
  static_assert(CLUSTER >= 1 && CLUSTER <= 16, "cluster of 1..16 CTAs");
  using Reduce = RowReduceStorage<ROWS, TPR, CLUSTER>;
};

// One thread's place in the mapping.
template <class Cfg>
struct RowThread {
  int sub;        // which of the CTA's ROWS rows
  int lane;       // index among the row's TPR threads in this CTA
  unsigned rank;  // CTA rank within the cluster (0 without clusters)

  __device__ static RowThread make() {
    RowThread t;
    t.sub = static_cast<int>(threadIdx.x) / Cfg::TPR;
    t.lane = static_cast<int>(threadIdx.x) % Cfg::TPR;
    if constexpr (Cfg::CLUSTER > 1) {
      t.rank = cluster_rank();
    } else {
      t.rank = 0;
    }
    return t;
  }
  // Vector k of this thread within the CTA's slice (may be past the slice's end).
  __device__ int slice_vector(int k) const { return k * Cfg::TPR + lane; }
  __device__ bool owns(int k) const {
    const int v = slice_vector(k);
    return v < Cfg::SLICE_V && static_cast<int>(rank) * Cfg::SLICE_V + v < Cfg::NV;
  }
  // owns(k), true at compile time where every item is owned (ALL_OWNED): the compiler
  // cannot see lane < TPR and kept a compare and a branch a vector. The forward
  // kernels take it. The backward's keep owns(): their SASS, tuned by measurement,
  // spilled with it (LayerNorm bf16 bulk rings, 8-44 bytes, NVRTC 13.0) or ran 2-6 %
  // slower (RMSNorm bf16 rows over 2-8 CTAs; H200, docs/perf/h200-2026-12-02d.md).
  // Not on sm_100 and later (not measured there): 512-thread rows held in fp32 with a
  // residual over a cluster spilled 8-16 bytes with the fold (NVRTC 13.0, sm_100a).
  __device__ bool owns_folded(int k) const {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 1000
    if constexpr (Cfg::ALL_OWNED) return true;
#endif
    return owns(k);
  }
  // First element of vector k in the row.
  __device__ int column(int k) const { return (static_cast<int>(rank) * Cfg::SLICE_V + slice_vector(k)) * Cfg::VEC; }
};

// Rows cut into column chunks of TPR * ITEMS vectors (split_chunks / split_vector in
// params.cuh), each taken by a CTA of its own: the split backward
// (rmsnorm_bwd_split.cuh) and the grouped rows (norm_fwd_group.cuh, norm_bwd_group.cuh).
template <int N_, int VEC_, int TPR_, int ITEMS_, int MIN_BLOCKS_>
struct SplitConfig {
  static constexpr int N = N_;
  static constexpr int VEC = VEC_;
  static constexpr int TPR = TPR_;
  static constexpr int ITEMS = ITEMS_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int NV = N / VEC;
  static constexpr int CHUNKS = static_cast<int>(split_chunks(NV, TPR, ITEMS));
  // Every chunk full (the usual power-of-two N): no bounds test, and so no branch
  // between a load and its use for the compiler to schedule around.
  static constexpr bool FULL = NV % (TPR * ITEMS) == 0;
  static_assert(N % VEC == 0, "VEC must divide N");
  static_assert(TPR % 32 == 0 && (TPR & (TPR - 1)) == 0 && TPR <= 1024, "TPR: whole warps, a power of two");

  __device__ static int vector(int chunk, int k) {
    return static_cast<int>(split_vector(chunk, k, static_cast<int>(threadIdx.x), TPR, ITEMS));
  }
  __device__ static bool in_row(int v) { return FULL || v < NV; }
};

// Runs f(k) for the thread's items: fully unrolled when the row lives in
// registers (k must be a compile-time index there), a loop otherwise.
template <class Cfg, class F>
__device__ __forceinline__ void for_each_item(F&& f) {
  if constexpr (Cfg::REGS) {
#pragma unroll
    for (int k = 0; k < Cfg::ITEMS; ++k) f(k);
  } else {
    // Two loads in flight per thread and four CTAs per SM; unrolled 4x the loop
    // needed more than the 64 registers that occupancy allows (ptxas spilled).
#pragma unroll 2
    for (int k = 0; k < Cfg::ITEMS; ++k) f(k);
  }
}

template <class T>
__device__ __forceinline__ const T* row_ptr(const RowsParam& t, const RowsShape& s, long long r) {
  return static_cast<const T*>(t.data) + row_offset(t, s, r);
}
template <class T>
__device__ __forceinline__ T* row_ptr_mut(const RowsParam& t, const RowsShape& s, long long r) {
  return static_cast<T*>(t.data) + row_offset(t, s, r);
}

// Asks L2 for this CTA's slice of row r of t (the CTA's rank in its cluster, of
// vectors of Cfg::VEC elements of T), a row that this CTA or a later one reads
// soon (RowPlan::l2_next). The plans ask for it only where T's vectors are whole
// 16-byte chunks, as the bulk prefetch needs; nothing for an absent tensor.
template <class Cfg, class T>
__device__ __forceinline__ void prefetch_slice_l2(const RowsParam& t, const RowsShape& s, long long r, unsigned rank) {
  if constexpr (!is_none<T>) {
    static_assert(sizeof(T) * Cfg::VEC % 16 == 0, "the bulk prefetch takes whole 16-byte chunks");
    constexpr bool WHOLE = Cfg::CLUSTER == 1 || Cfg::SLICE_V * Cfg::CLUSTER == Cfg::NV;  // every slice SLICE_V long
    const int v0 = static_cast<int>(rank) * Cfg::SLICE_V;
    const int vectors = WHOLE ? Cfg::SLICE_V : (Cfg::NV - v0 < Cfg::SLICE_V ? Cfg::NV - v0 : Cfg::SLICE_V);
    if (vectors > 0)
      prefetch_l2_bulk(row_ptr<T>(t, s, r) + v0 * Cfg::VEC, vectors * static_cast<unsigned>(sizeof(T) * Cfg::VEC));
  }
}

// The offset argument of a parameter that takes none. x + (-0.f) is x for every x
// (-0 and NaN included), so the compiler drops the add; x + 0.f turns -0 into +0 and
// is kept: one FADD an element for nothing (16 of the 89 SASS instructions of a
// vector in LayerNorm's forward epilogue went to its bias's and its weight's).
constexpr float kNoOffset = -0.f;

// The offset added to the weight: RMSNorm's weight_offset; LayerNorm (CENTER) takes
// none (its host refuses one), so its kernels add nothing.
template <bool CENTER, class P>
__device__ __forceinline__ float weight_offset_of(const P& p) {
  return CENTER ? kNoOffset : p.weight_offset;
}

// The forward's output element, (h - mean) * rstd * w + b (mean 0 for RMSNorm), for
// every forward kernel's epilogue. FOLD (LayerNorm rows written in a 16-bit dtype):
// fma(fma(h, rstd, -mean * rstd), w, b), one add an element fewer. The inner product
// may cancel against -mean * rstd where |mean| >> std: an error of ~|mean| / std *
// 2^-24 in the normalized value, far below a 16-bit output's rounding (2^-9 of it).
// fp32 outputs keep the subtraction. ALLOW_FOLD false keeps it too: the register
// rows storing mean and rstd hold mean beside -mean * rstd to the end of the row, and
// at 64 registers (1024-thread CTAs, 64 elements a thread) that spilled 16 bytes
// (LayerNorm bf16 with an fp32 weight, N=131072-262144, sm_90a); the fold was measured
// without the statistics stored only. NK_FWD_NO_MEAN_FOLD compiles it out, to measure.
template <bool CENTER, class O, bool ALLOW_FOLD = true>
struct OutputAffine {
#ifdef NK_FWD_NO_MEAN_FOLD
  static constexpr bool FOLD = false;
#else
  static constexpr bool FOLD = ALLOW_FOLD && CENTER && sizeof(O) <= 2;
#endif
  float mean;
  float rstd;
  float neg_mean_rstd;
  __device__ static OutputAffine make(float mean, float rstd) { return OutputAffine{mean, rstd, -mean * rstd}; }
  __device__ __forceinline__ float operator()(float h, float w, float b) const {
    if constexpr (FOLD) return fmaf(fmaf(h, rstd, neg_mean_rstd), w, b);
    return (CENTER ? h - mean : h) * rstd * w + b;
  }
};

// Element `offset` of a parameter of element type T (base itself when absent).
template <class T>
__device__ __forceinline__ const void* param_at(const void* base, long long offset) {
  if constexpr (is_none<T>) {
    return base;
  } else {
    return static_cast<const T*>(base) + offset;
  }
}

// Per-column parameter (weight/bias) scaled for the epilogue: (p + offset), or
// `fallback` when the parameter is absent (kNoOffset: nothing added).
template <int VEC, class T>
__device__ __forceinline__ void load_param(const void* base, long long head_offset, int col, float offset,
                                           float fallback, float (&v)[VEC]) {
  if constexpr (is_none<T>) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = fallback;
  } else {
    load_vec<VEC>(static_cast<const T*>(base) + head_offset + col, v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] += offset;
  }
}

// The weight and bias of the forward's register rows, read from global memory from
// `first` elements on (a row's head, or a thread's first vector: then item k's are a
// compile-time offset on, which the loads take as an immediate): packed, for loads
// issued ahead of their use (EARLY_PARAMS, LATE_GROUP, PARAMS_AHEAD in
// norm_fwd_kernel), then widened; or widened as loaded. w + weight_offset_of, and b;
// 1 and 0 where absent.
template <int VEC, class W, class B, bool CENTER>
struct RowParams {
  using WP = Packed<typename or_type<W, float>::type, VEC>;
  using BP = Packed<typename or_type<B, float>::type, VEC>;
  const NormFwdParams& p;
  const void* w;
  const void* b;

  __device__ static RowParams from(const NormFwdParams& p, long long first) {
    return RowParams{p, param_at<W>(p.weight, first), param_at<B>(p.bias, first)};
  }
  __device__ void load_packed_at(int col, WP& wp, BP& bp) const {
    if constexpr (!is_none<W>) wp = load_packed<VEC>(static_cast<const W*>(w) + col);
    if constexpr (!is_none<B>) bp = load_packed<VEC>(static_cast<const B*>(b) + col);
  }
  __device__ static void widen(const NormFwdParams& p, const WP& wp, const BP& bp, float (&wv)[VEC],
                               float (&bv)[VEC]) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      wv[i] = is_none<W> ? 1.f : to_float(wp.v[i]) + weight_offset_of<CENTER>(p);
      bv[i] = is_none<B> ? 0.f : to_float(bp.v[i]);
    }
  }
  __device__ void load_at(int col, float (&wv)[VEC], float (&bv)[VEC]) const {
    load_param<VEC, W>(w, 0, col, weight_offset_of<CENTER>(p), 1.f, wv);
    load_param<VEC, B>(b, 0, col, kNoOffset, 0.f, bv);
  }
};

// One thread's bulk copies of a CTA's slices of row r that start at element
// slice_begin (x's, then the residual's) into stage `dst`, counted on `full`: the
// forward ring kernels' refill (norm_fwd_bulk_kernel, norm_fwd_group_kernel).
template <class X, class R>
__device__ __forceinline__ void copy_row_slices(unsigned char* dst, const NormFwdParams& p, long long r,
                                                long long slice_begin, const BulkRowsLayout& L,
                                                unsigned long long* full) {
  mbarrier_expect_bytes(full, L.slice_bytes);
  bulk_load(dst, row_ptr<X>(p.x, p.shape, r) + slice_begin, L.x_bytes, full);
  if constexpr (!is_none<R>)
    bulk_load(dst + L.x_bytes, row_ptr<R>(p.residual, p.shape, r) + slice_begin, L.slice_bytes - L.x_bytes, full);
}

// The grouped kernels (norm_fwd_group, norm_bwd_group) ask for the slots of the row
// they finish next at the end of a step. NK_GROUP_ASK_EARLY=1 (a build switch for
// measuring, default 0) asks right after publishing their own instead. That measured
// slower, with the proxy fence before a refill (docs/perf/h200-2026-12-03d.md) and
// without it (LayerNorm fp32 backward N=262144 0.871 -> 0.508, h200-2026-12-03e.md):
// an early ask finds some slices unpublished and asks again at the check.
#ifndef NK_GROUP_ASK_EARLY
#define NK_GROUP_ASK_EARLY 0
#endif

// The weight and bias slices of a CTA's share of a row, for the forward's ring kernels
// (norm_fwd_bulk_kernel, norm_fwd_group_kernel): copied once into shared memory after
// the stages (one bulk copy each; `L`'s weight_bytes and params_bytes) where the layout
// has room for them, there is one head and both are 16-byte aligned, as the bulk copy
// needs; otherwise read from global memory for each vector (load_param).
// RingParams::for_each_item's AHEAD_BYTES for a CTA of THREADS threads, MIN_BLOCKS an
// SM: 128 bytes (NK_RING_PARAMS_AHEAD_BYTES, a build switch for measuring) where a
// thread has more than 64 registers; none under that cap (1024-thread rings: ptxas
// sm_90a spilled 56-172 bytes with 128, N=200000).
#ifndef NK_RING_PARAMS_AHEAD_BYTES
#define NK_RING_PARAMS_AHEAD_BYTES 128
#endif
template <int THREADS, int MIN_BLOCKS>
constexpr int ring_params_ahead_bytes() {
  return 65536 / (THREADS * (MIN_BLOCKS > 0 ? MIN_BLOCKS : 1)) > 64 ? NK_RING_PARAMS_AHEAD_BYTES : 0;
}

template <int VEC, class W, class B>
struct RingParams {
  bool cached;
  const W* w;  // the shared-memory copies (cached only)
  const B* b;

  __device__ static RingParams make(const NormFwdParams& p, const BulkRowsLayout& L, unsigned char* copies) {
    const bool aligned =
        (reinterpret_cast<unsigned long long>(p.weight) | reinterpret_cast<unsigned long long>(p.bias)) % 16 == 0;
    return RingParams{L.params_bytes > 0 && p.shape.heads == 1 && aligned, reinterpret_cast<const W*>(copies),
                      reinterpret_cast<const B*>(copies + L.weight_bytes)};
  }
  // One thread's copies of the slice that starts at element slice_begin, counted on `full`.
  __device__ void issue(const NormFwdParams& p, const BulkRowsLayout& L, long long slice_begin,
                        unsigned long long* full) const {
    if (!cached) return;
    mbarrier_expect_bytes(full, L.params_bytes);
    if constexpr (!is_none<W>)
      bulk_load(const_cast<W*>(w), static_cast<const W*>(p.weight) + slice_begin, L.weight_bytes, full);
    if constexpr (!is_none<B>)
      bulk_load(const_cast<B*>(b), static_cast<const B*>(p.bias) + slice_begin, L.params_bytes - L.weight_bytes, full);
  }
  // The epilogue's walk over a thread's ITEMS vectors: body(k, w, b) with w (+ w_offset:
  // weight_offset_of) and b of item k, 1 and 0 where absent, for each k that owns(k).
  // at(k) is the item's element in the slice (the shared-memory copies), col(k) in the
  // row (global memory, from element head_offset of the parameters).
  // Not cached, items k + 1 .. k + AHEAD's vectors are loaded before body(k) stores
  // item k's output: the loads may alias the stores, so no compiler hoists a load above
  // a store, and loaded after it each item waited an L2 round trip (the SASS: LDG w,
  // LDG b, STG, LDG w, ...). Those are the rings whose slices of weight and bias do not
  // fit beside their stages: several CTAs an SM over a cluster of 16, LayerNorm with
  // its bias. H200, bf16, ratio to copy with each item loaded after the store before it
  // (scripts/proto/fwd_param_probe.py, 2026-12-03): LayerNorm N=131072 in four
  // 128-thread CTAs an SM 0.659 (0.915 without a bias), N=262144 in two of 256 0.642
  // (0.910 without). AHEAD_BYTES of parameters a thread in flight (128: 32 registers;
  // one item ahead only took the store's latency out of each round trip); 0: each item's
  // loaded at its use.
  template <int ITEMS, int AHEAD_BYTES, class Owns, class At, class Col, class Body>
  __device__ void for_each_item(const NormFwdParams& p, float w_offset, long long head_offset, Owns&& owns, At&& at,
                                Col&& col, Body&& body) const {
    if (cached) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        if (!owns(k)) continue;
        float wv[VEC], bv[VEC];
        load_param<VEC, W>(w, 0, at(k), w_offset, 1.f, wv);
        load_param<VEC, B>(b, 0, at(k), kNoOffset, 0.f, bv);
        body(k, wv, bv);
      }
      return;
    }
    using WP = Packed<typename or_type<W, float>::type, VEC>;
    using BP = Packed<typename or_type<B, float>::type, VEC>;
    auto load = [&](int k, WP& wp, BP& bp) {
      if constexpr (!is_none<W>) wp = load_packed<VEC>(static_cast<const W*>(p.weight) + head_offset + col(k));
      if constexpr (!is_none<B>) bp = load_packed<VEC>(static_cast<const B*>(p.bias) + head_offset + col(k));
    };
    constexpr int ITEM_BYTES = static_cast<int>(sizeof(WP) * !is_none<W> + sizeof(BP) * !is_none<B>);
    if constexpr (AHEAD_BYTES == 0 || ITEM_BYTES == 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        if (!owns(k)) continue;
        float wv[VEC], bv[VEC];
        load_param<VEC, W>(p.weight, head_offset, col(k), w_offset, 1.f, wv);
        load_param<VEC, B>(p.bias, head_offset, col(k), kNoOffset, 0.f, bv);
        body(k, wv, bv);
      }
      return;
    }
    constexpr int IN_FLIGHT = ITEM_BYTES == 0 ? 1 : AHEAD_BYTES / ITEM_BYTES;
    constexpr int AHEAD = IN_FLIGHT < 1 ? 1 : IN_FLIGHT < ITEMS ? IN_FLIGHT : ITEMS;
    WP wq[AHEAD];
    BP bq[AHEAD];
#pragma unroll
    for (int k = 0; k < AHEAD; ++k) {
      if (owns(k)) load(k, wq[k], bq[k]);
    }
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (!owns(k)) continue;
      const WP w_this = wq[k % AHEAD];
      const BP b_this = bq[k % AHEAD];
      if (k + AHEAD < ITEMS && owns(k + AHEAD)) load(k + AHEAD, wq[k % AHEAD], bq[k % AHEAD]);
      float wv[VEC], bv[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        wv[i] = is_none<W> ? 1.f : to_float(w_this.v[i]) + w_offset;
        bv[i] = is_none<B> ? 0.f : to_float(b_this.v[i]);
      }
      body(k, wv, bv);
    }
  }
};

}  // namespace nk
