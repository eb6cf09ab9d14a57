// Forward of RMSNorm and (CENTER) LayerNorm:
//   h = x (+ residual);  residual_out = h
//   RMSNorm:   rstd = rsqrt(mean(h^2) + eps);            out = h * rstd * (w + weight_offset) (+ b)
//   LayerNorm: mean = mean(h); rstd = rsqrt(mean((h - mean)^2) + eps);
//              out = (h - mean) * rstd * w (+ b)
//
// Why it is shaped this way: the op is memory-bound, so the only goal is to move
// each byte once at full width. The row is read once into registers (REGS), its
// sums reduced across the row's threads (and the cluster's CTAs for long rows),
// and the epilogue writes from registers. LayerNorm's variance is a second pass
// over the register-resident row around its mean (stable where E[h^2] - mean^2
// cancels), one more reduction and no more memory traffic; rows of a cluster
// (where each reduction is a cluster barrier) take one reduction of two sums
// around a sample of the row instead (SHIFT). residual_out is
// stored while the row is loaded, before the reduction, so its store overlaps the
// reduction's latency. Every optional tensor is a template type (`none` when
// absent): absent features cost no instructions and no registers.
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/common/shifted_moments.cuh"
#include "normkit/norm/row_engine.cuh"

namespace nk {

// A compile-time int passed to a generic lambda.
template <int V>
struct IntTag {
  static constexpr int value = V;
};

// PREFETCH (register-resident rows without a residual): the grid is persistent,
// a CTA (cluster) walks rows with a fixed stride and loads its next row into a
// second register set before it reduces and stores the current one, so its SM
// keeps loads in flight through every row's barrier and stores. Without it a
// 1024-thread CTA, alone on its SM, stops loading from the end of its row's loads
// to the next CTA's start (bf16 N=32768: 0.81x copy; ncu at N=131072: 48%
// achieved occupancy, DRAM at 46% of peak).
// EARLY (plans for calls of few rows): weight and bias are loaded with the row,
// not after its reduction (see EARLY_PARAMS below).
// PARAMS_SMEM (rows of 1024-thread CTAs, RowPlan::params_smem): the CTA's slice of
// weight and bias is copied by cp.async into dynamic shared memory with the row
// (once per kernel in the pipeline, where all rows share one head), and the
// epilogue reads it there instead of one global load per item after the reduction,
// each waiting for the store before it.
template <class Cfg, class X, class R, class RO, class W, class B, class O, bool STORE_RSTD, bool CENTER,
          bool PREFETCH, bool EARLY, bool PARAMS_SMEM, bool SMEM_ROW>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) norm_fwd_kernel(const NormFwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  constexpr int VEC = Cfg::VEC;
  // RAW (REGS without a residual, or RAW_RES): the row stays in registers as loaded (its storage
  // dtype: half the registers of fp32 for 16-bit data), and all of a thread's
  // loads are issued before any is used. Loaded and converted item by item, the
  // compiler reused one load's registers for the next: one 16-byte load in flight
  // per thread instead of ITEMS (the SASS of 16-bit rows, e.g. bf16 N=131072,
  // showed it). With a residual, h = x + residual is kept in fp32 as before:
  // both raw rows spilled under the 64 registers of 1024-thread CTAs.
  // RAW_RES: calls of few rows (EARLY, <= 256 threads, so registers to spare)
  // keep the residual raw too, both rows loaded before either is used. Built as
  // h32 item by item, each item's two loads were waited on before the next item's
  // were issued: a residual decode call (M=1, N=4096 bf16) took 5.3 us by graph
  // replay against 2.4 without the residual. fp32 rows too: two raw fp32 rows
  // cost twice the registers of h, which a call of few rows has (its plan asks
  // one CTA per SM of the compiler, RowPlan::early_params); H200, M=1 N=4096 fp32
  // with a residual by graph replay (6683edb -> 09050e3): 8.6 -> 3.1 us.
  constexpr bool RAW_RES = Cfg::REGS && !is_none<R> && EARLY && !PREFETCH && Cfg::THREADS <= 256 &&
                           sizeof(X) + size_or_zero<R> <= 8 && !SMEM_ROW;
  constexpr bool RAW = Cfg::REGS && (is_none<R> || RAW_RES) && !SMEM_ROW;
  constexpr bool H32 = Cfg::REGS && !RAW && !SMEM_ROW;
  // SMEM_ROW (RowPlan::smem_row): the thread's items of x (and the residual) are
  // copied by cp.async into dynamic shared memory as the row is read, and both
  // passes read them there: the row is read from DRAM once, as RAW, but held in
  // shared memory, not registers, so a thread needs few registers and an SM holds
  // as many CTAs as their slices fit. Faster where registers held few CTAs an SM
  // (LayerNorm's fp32 rows with a residual, 16 elements in 512-1024-thread CTAs:
  // with_staged_rows); slower for RAW's rows of two 512-thread CTAs an SM (H200,
  // docs/perf/h200-2026-11-30l.md). Entry k of thread i is at (k * THREADS + i) *
  // item bytes: a warp's reads of one item are contiguous. A thread reads only what
  // it copied itself (async_copy.cuh), so cp_async_wait orders them and no barrier
  // is needed.
  constexpr int X_ITEM = VEC * static_cast<int>(sizeof(X));
  constexpr int R_ITEM = VEC * size_or_zero<R>;
  static_assert(!SMEM_ROW || (Cfg::REGS && !PREFETCH && !EARLY && !PARAMS_SMEM && X_ITEM % 16 == 0 && R_ITEM % 16 == 0),
                "a staged row: one row a CTA, 16-byte items, no other use of the dynamic shared memory");
  constexpr bool BATCH_LOADS =
      H32 && Cfg::THREADS < 1024 && (sizeof(X) + size_or_zero<R> <= 4 || Cfg::ROWS > 1);  // finish_row
  // LOOKAHEAD: 1024-thread rows held in fp32 registers, where all of a row's loads at
  // once spilled, issue item k+1's loads before item k's residual_out store, so that
  // two items' loads are in flight instead of one. Only with residual_out (whose
  // stores are what held the loads back): without it, LayerNorm bf16 N=32768 with
  // bias and rstd spilled 24 bytes (ptxas sm_90a). H200, ratio to copy without ->
  // with (a1a09e4 -> b7e2621, one run): RMSNorm bf16 N=32768 0.854 -> 0.950, 65536
  // 0.800 -> 0.898, fp32 N=32768 0.801 -> 0.882 (LayerNorm's 1024-thread rows take
  // SHIFT, which sums in its own pass).
  constexpr bool LOOKAHEAD = H32 && !is_none<RO> && Cfg::THREADS == 1024 && Cfg::ALL_OWNED && Cfg::ITEMS > 1;  // finish_row
  static_assert(!PREFETCH || (RAW && is_none<R>), "the pipeline keeps raw rows without a residual");
  // SHIFT: LayerNorm rows of a cluster take their statistics from one reduction of
  // two sums around a sample of the row (shifted_moments.cuh), where the two-pass
  // form takes two reductions, each a cluster barrier on the row's critical path.
  // H200, M*N = 2^27, bf16 without residual, GB/s two-pass -> shifted (1942939 ->
  // 5edfd83): N=65536 2428 -> 2801, N=131072 2203 -> 2604, N=262144 2111 -> 2500.
  // Rows of one CTA lost with it (N=16384: 3709 -> 3430; with a residual 3586 ->
  // 2631 at 72 registers instead of two CTAs' 64), and so keep the two passes.
  // Not on sm_100 and later: ptxas spilled 144-552 bytes there with it, and it is
  // not measured there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  constexpr bool SHIFT = false;
#else
  // Also rows of one 1024-thread CTA (N=32768 for 16-bit rows), where one CTA per SM
  // leaves no other to cover the second reduction's barrier. H200, a1a09e4 ->
  // b7e2621 in one run: LayerNorm bf16 N=32768 0.688 -> 0.731x copy, with a residual
  // 0.767 -> 0.782; fp32 N=32768 0.834 -> 0.848 (with a residual 0.796 -> 0.790).
  constexpr bool SHIFT = CENTER && (Cfg::CLUSTER > 1 || Cfg::THREADS == 1024);
#endif
  static_assert(!SHIFT || Cfg::ROWS == 1, "one row per cluster: its CTAs make one decision on the same sums");
  __shared__ RowReduceStorage<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER, SHIFT ? 2 : 1> reduce_storage;
  __shared__ ClusterPushes<Cfg::ROWS, Cfg::CLUSTER, SHIFT ? 2 : 1> cluster_pushes;  // CLUSTER > 1 only
  const RowThread<Cfg> t = RowThread<Cfg>::make();
  // Rows over a cluster reduce through row_sums_walk's pushes (reduce.cuh): a cluster
  // barrier a row (row_sums' ONCE step) put a MEMBAR.ALL.GPU before its arrive, which
  // waits for the CTA's stores in flight (residual_out's, stored before the
  // reduction), and a CCTL.IVALL after its wait (ptxas sm_90a, nvdisasm 13.2). The
  // barrier that orders the mbarriers' init before the first push is split: arrived
  // at here, waited for just before the first push, after the row's loads.
  unsigned step = 0;  // row_sums_walk's count of this CTA's reductions
  row_sums_walk_arrive(cluster_pushes);
  // Sums of v over the row: row_sums' ONCE step in SLOT (one CTA a row), or
  // row_sums_walk (a cluster).
  auto reduce = [&](auto slot_tag, auto& v) {
    if constexpr (Cfg::CLUSTER > 1) {
      if (step == 0) row_sums_walk_ready<Cfg::CLUSTER>();
      row_sums_walk(v, t.sub, t.lane, reduce_storage, cluster_pushes, step++);
    } else {
      row_sums<Cfg::ROWS, Cfg::TPR, 1, true, decltype(slot_tag)::value>(v, t.sub, t.lane, reduce_storage);
    }
  };

  // PARAMS_SMEM: the slice's weight, then its bias, each owned item's vector at its
  // slice_vector (host: RowPlan::smem_bytes = SLICE_V * (W_ITEM + B_ITEM) bytes).
  // A thread reads back only what it copied itself, so no barrier orders them.
  constexpr int W_ITEM = VEC * size_or_zero<W>;
  constexpr int B_ITEM = VEC * size_or_zero<B>;
  static_assert(!PARAMS_SMEM || (Cfg::REGS && !EARLY && W_ITEM % 16 == 0 && B_ITEM % 16 == 0 && W_ITEM + B_ITEM > 0),
                "parameters in shared memory: register-resident rows, whole 16-byte chunks");
  extern __shared__ __align__(16) unsigned char params_memory[];
  // The pipeline's persistent CTAs copy them once: only where every row has the same head.
  [[maybe_unused]] const bool params_cached = PARAMS_SMEM && (!PREFETCH || p.shape.heads == 1);
  auto copy_params = [&](long long r) {
    if constexpr (PARAMS_SMEM) {
      const long long head_offset = (r % p.shape.heads) * Cfg::N;
      for_each_item<Cfg>([&](int k) {
        if (!t.owns_folded(k)) return;
        const int v = t.slice_vector(k);
        if constexpr (W_ITEM > 0) {
          const auto* src = reinterpret_cast<const unsigned char*>(static_cast<const W*>(p.weight) + head_offset + t.column(k));
#pragma unroll
          for (int c = 0; c < W_ITEM; c += 16) cp_async_16(params_memory + v * W_ITEM + c, src + c);
        }
        if constexpr (B_ITEM > 0) {
          const auto* src = reinterpret_cast<const unsigned char*>(static_cast<const B*>(p.bias) + head_offset + t.column(k));
#pragma unroll
          for (int c = 0; c < B_ITEM; c += 16) cp_async_16(params_memory + Cfg::SLICE_V * W_ITEM + v * B_ITEM + c, src + c);
        }
      });
      cp_async_commit();
    }
  };
  struct RawRow {
    RawVec<X, VEC> x[RAW ? Cfg::ITEMS : 1];
    RawVec<typename or_type<R, X>::type, VEC> res[RAW_RES ? Cfg::ITEMS : 1];
  };

  // The thread's row of the step starting at `base` (uniform across the CTA).
  struct RowAt {
    long long r;
    bool active;  // threads past the last row still take part in the (barrier-carrying) reductions
  };
  auto locate = [&](long long base) {
    const long long row = base + t.sub;
    return RowAt{row < p.shape.rows ? row : 0, row < p.shape.rows};
  };
  // SMEM_ROW: item k's entries of this thread in the dynamic shared memory, x's, then
  // (after all of x's) the residual's.
  auto staged_x = [&](int k) { return params_memory + (k * Cfg::THREADS + static_cast<int>(threadIdx.x)) * X_ITEM; };
  auto staged_res = [&](int k) {
    return params_memory + Cfg::ITEMS * Cfg::THREADS * X_ITEM +
           (k * Cfg::THREADS + static_cast<int>(threadIdx.x)) * R_ITEM;
  };
  auto load_raw = [&](const RowAt& at, RawRow& raw) {
    if constexpr (SMEM_ROW) {
      const auto* x = reinterpret_cast<const unsigned char*>(row_ptr<X>(p.x, p.shape, at.r));
      [[maybe_unused]] const unsigned char* res = nullptr;
      if constexpr (!is_none<R>) res = reinterpret_cast<const unsigned char*>(row_ptr<R>(p.residual, p.shape, at.r));
      for_each_item<Cfg>([&](int k) {
        if (!at.active || !t.owns_folded(k)) return;
#pragma unroll
        for (int c = 0; c < X_ITEM; c += 16) cp_async_16(staged_x(k) + c, x + t.column(k) * static_cast<int>(sizeof(X)) + c);
        if constexpr (!is_none<R>) {
#pragma unroll
          for (int c = 0; c < R_ITEM; c += 16) cp_async_16(staged_res(k) + c, res + t.column(k) * size_or_zero<R> + c);
        }
      });
      cp_async_commit();
    }
    if constexpr (RAW) {
      const X* x = row_ptr<X>(p.x, p.shape, at.r);
      for_each_item<Cfg>([&](int k) {
        if (!at.active || !t.owns_folded(k)) return;
        raw.x[k].load(x + t.column(k));
      });
      if constexpr (RAW_RES) {
        const R* res = row_ptr<R>(p.residual, p.shape, at.r);
        for_each_item<Cfg>([&](int k) {
          if (!at.active || !t.owns_folded(k)) return;
          raw.res[k].load(res + t.column(k));
        });
      }
    }
  };

  // Reductions, statistics and stores of one row, all reductions ONCE (one
  // cluster barrier each): the kernel's only row per CTA, or, in the pipeline,
  // with SLOT0 alternating between 0 and 2 from row to row, so that a CTA pushing
  // the next row's partials never overwrites slots another CTA of the cluster has
  // yet to read (reduce.cuh).
  auto finish_row = [&](auto slot_tag, const RowAt& at, const RawRow& raw) {
    constexpr int SLOT0 = decltype(slot_tag)::value;
    if constexpr (SMEM_ROW) cp_async_wait<0>();
    const long long r = at.r;
    const bool active = at.active;
    const X* x = row_ptr<X>(p.x, p.shape, r);
    const R* res = nullptr;
    if constexpr (!is_none<R>) res = row_ptr<R>(p.residual, p.shape, r);
    float h[H32 ? Cfg::ITEMS : 1][VEC];
    auto load_h = [&](int k, float (&v)[VEC]) {
      const int col = t.column(k);
      load_vec<VEC>(x + col, v);
      if constexpr (!is_none<R>) {
        float rv[VEC];
        load_vec<VEC>(res + col, rv);
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] += rv[i];
      }
    };
    // h = x (+ residual) of item k, in fp32. `first`: its first use (pass 1).
    auto get_h = [&](int k, float (&v)[VEC], bool first) {
      if constexpr (RAW) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] = first ? raw.x[k].get(i) : raw.x[k].get_again(i);
        if constexpr (RAW_RES) {
          // The same fp32 sum as load_h's, so residual_out has the same bits.
#pragma unroll
          for (int i = 0; i < VEC; ++i) v[i] += first ? raw.res[k].get(i) : raw.res[k].get_again(i);
        }
      } else if constexpr (SMEM_ROW) {
        RawVec<X, VEC> xv;
        xv.pk = *reinterpret_cast<const decltype(xv.pk)*>(staged_x(k));
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] = xv.get(i);
        if constexpr (!is_none<R>) {
          RawVec<R, VEC> rv;
          rv.pk = *reinterpret_cast<const decltype(rv.pk)*>(staged_res(k));
          // The same fp32 sum as load_h's, so residual_out has the same bits.
#pragma unroll
          for (int i = 0; i < VEC; ++i) v[i] += rv.get(i);
        }
      } else if constexpr (H32) {
        if (first) {
          load_h(k, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) h[k][i] = v[i];
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) v[i] = h[k][i];
        }
      } else {
        load_h(k, v);
      }
    };

    // Calls of few rows (EARLY) whose row is raw in registers load weight and bias
    // with the row instead of after the reduction: such a call is a chain of memory
    // latencies (row, then parameters), and this takes one link out (decode: M=1,
    // N=4096 bf16 took 3.9 us by graph replay where a copy took 1.6 and three peers
    // 2.2). It costs registers (bf16 N=4096: 72 instead of 40), which a call of few
    // rows has (its plan asks one CTA per SM of the compiler, RowPlan::early_params).
    // Loaded after the reduction item by item next to its store, each load waits
    // for the store before it (the pointers may alias, so neither compiler moves a
    // load above a store; the SASS: LDG, STG, LDG, STG, ...): the epilogue is ITEMS
    // memory latencies in a row. H200, M=1 N=4096 by graph replay: fp32 RMSNorm
    // 5.3 -> 2.4 us with up to 128 bytes a thread (09050e3), fp32 LayerNorm with
    // weight and bias 5.9 -> 2.6 us with up to 256 (0d78d91); Liger 2.3 and 2.6.
    constexpr int PARAM_BYTES = VEC * (size_or_zero<W> + size_or_zero<B>);  // per item
    constexpr bool EARLY_PARAMS = EARLY && RAW && !PREFETCH && Cfg::THREADS <= 256 && PARAM_BYTES > 0 &&
                                  Cfg::ITEMS * PARAM_BYTES <= 256;
    // Calls of few rows whose parameters are too many to load with the row load
    // them after the reduction in groups of 64 bytes a thread (16 registers).
    // Calls of many rows keep one item at a time: other CTAs hide its latencies,
    // and the registers cost them CTAs per SM (H200, M*N = 2^27, bf16 ratio to
    // copy with groups in every plan, 0d78d91: N=16384 0.96 -> 0.65, with a
    // residual N=256-8192 0.94-0.98 -> 0.87-0.92). Not in 1024-thread CTAs either
    // (ptxas spilled 20-548 bytes under their 64-register cap with groups of 32
    // bytes), nor for scalar items (odd N: spilled on sm_80).
    constexpr int LATE_BYTES = EARLY && Cfg::THREADS < 1024 && VEC > 1 ? 64 : 0;
    constexpr int LATE_GROUP = !Cfg::REGS || PARAM_BYTES == 0 || PARAM_BYTES >= LATE_BYTES ? 1
                               : LATE_BYTES / PARAM_BYTES < Cfg::ITEMS ? LATE_BYTES / PARAM_BYTES
                                                                       : Cfg::ITEMS;
    using Params = RowParams<VEC, W, B, CENTER>;
    using WP = typename Params::WP;
    using BP = typename Params::BP;
    const long long head_offset = (r % p.shape.heads) * Cfg::N;
    auto load_params = [&](int k, WP& w, BP& b) { Params::from(p, head_offset).load_packed_at(t.column(k), w, b); };
    // PARAMS_AHEAD: raw rows over a cluster load the next item's weight and bias before
    // storing this item's output (the epilogue below). H200, M*N = 2^27, ratio to copy,
    // each item's after the store before it -> ahead, two rounds in one call
    // (plan_cases/forward-params-ahead.txt at b254296, docs/perf/h200-2026-12-02d.md):
    // LayerNorm bf16 N=65536 0.869 -> 0.913, 131072 0.830 -> 0.856, 262144 0.807 ->
    // 0.839; RMSNorm bf16 N=131072 0.899 -> 0.912, 262144 0.849 -> 0.883; LayerNorm fp32
    // N=131072 0.850 -> 0.883; RMSNorm fp32 N=32768 0.940 -> 0.966. Not elsewhere: rows
    // of one CTA lost up to 8 % (LayerNorm fp32 N=16384 0.958 -> 0.878, with a residual
    // 0.935 -> 0.707; N=4096 -5.5 %), rows with a residual over a cluster within +-1 %.
    // Not measured, so not taken: the 1024-thread clusters of calls of few rows, rows
    // that store rstd (the training forward: LayerNorm fp32 N=131072 spilled 12-16 bytes
    // with it) and parameters wider than the row's elements (fp32 weight and bias
    // beside 16-bit rows, 64 bytes an item: 32-48 bytes spilled; NVRTC 13.0, sm_90a and
    // sm_100a).
    constexpr bool PARAMS_AHEAD = RAW && !RAW_RES && Cfg::CLUSTER > 1 && Cfg::THREADS <= 512 && Cfg::ALL_OWNED &&
                                  !EARLY && !STORE_RSTD && Cfg::ITEMS > 1 && PARAM_BYTES > 0 && PARAM_BYTES <= 32;
    WP w_early[EARLY_PARAMS ? Cfg::ITEMS : 1];
    BP b_early[EARLY_PARAMS ? Cfg::ITEMS : 1];
    if constexpr (EARLY_PARAMS) {
      for_each_item<Cfg>([&](int k) {
        if (!active || !t.owns_folded(k)) return;
        load_params(k, w_early[k], b_early[k]);
      });
    }
    // The output rows, found once, after the loads above and before the reduction.
    // residual_out's, found at each store, was found again after every store
    // before it (the stores may alias the parameters' memory, so the row offset's
    // division was redone: four divisions in a row in the SASS of a decode call,
    // M=1 N=4096 bf16 with a residual); out's, found after the reduction, put a
    // division between the row's barrier and its first store. Not out's in the
    // pipeline (PREFETCH): held through the reduction beside the next row, it
    // spilled 12 bytes (fp16 rows storing rstd, ptxas sm_90a).
    using ROut = typename or_type<RO, X>::type;
    [[maybe_unused]] ROut* const res_out = is_none<RO> ? nullptr : row_ptr_mut<ROut>(p.residual_out, p.shape, r);
    [[maybe_unused]] O* const out_early = PREFETCH ? nullptr : row_ptr_mut<O>(p.out, p.shape, r);

    // SHIFT: h of the row's first column, loaded by every thread of the row (one
    // broadcast transaction per warp, in flight with the row's loads).
    float shift = 0.f;
    if constexpr (SHIFT) {
      shift = to_float(x[0]);
      if constexpr (!is_none<R>) shift += to_float(res[0]);
    }
    // BATCH_LOADS: rows held in fp32 registers (H32: a residual beside x) issue all
    // of their loads at once. Stored item by item between them, residual_out kept
    // the compiler from issuing the next item's loads before the store (residual_out
    // may be the residual itself: the in-place fused add), and the per-item branch
    // on the row being past the last kept it from issuing them before the previous
    // item's were consumed: the row arrived in ITEMS memory round trips in a row
    // (SASS of bf16 N=16384 with a residual: LDG x, LDG r, STG residual_out, LDG x,
    // ...), where Liger's fused add issues all of its loads at once. So such rows
    // load and sum even past the last row (locate points them at row 0; their sums
    // are discarded), which with every item owned (ALL_OWNED) leaves the loop no
    // branch, and store residual_out after the loads. H200, M*N = 2^27, ratio to
    // copy before -> after in one run (9c0c39d -> 99fc797, docs/perf/h200-2026-11-30.md):
    // bf16 RMSNorm N=256 0.945 -> 0.973, 4096 0.931 -> 0.963, 16384 0.901 -> 0.956;
    // LayerNorm 0.881 -> 0.970, 0.913 -> 0.968, 0.837 -> 0.907. fp32 rows gained up
    // to 3 % where a CTA holds several rows (N <= 4096) and not beyond, where their
    // registers (56 -> 94) cost CTAs: LayerNorm N=16384 0.931 -> 0.851, so rows of
    // fp32 x or residual keep the loads item by item there. Not in 1024-thread CTAs:
    // under their 64 registers it spilled 8 bytes (bf16 N=32768, ptxas sm_90a).
    // Column 0 waits for the output under SHIFT (below).
    auto store_held_residual_out = [&]() {
      if constexpr (BATCH_LOADS && !is_none<RO>) {
        for_each_item<Cfg>([&](int k) {
          if (!active || !t.owns_folded(k) || (SHIFT && t.column(k) == 0)) return;
          float v[VEC];
          get_h(k, v, false);
          store_vec<VEC>(res_out + t.column(k), v);
        });
      }
    };
    // Sums of h - around and of its square (SHIFT) over the thread's elements.
    auto shifted_sums = [&](float around, bool first, float (&acc)[2]) {
      for_each_item<Cfg>([&](int k) {
        if constexpr (BATCH_LOADS) {
          if (!Cfg::ALL_OWNED && !t.owns_folded(k)) return;
        } else {
          if (!active || !t.owns_folded(k)) return;
        }
        float v[VEC];
        get_h(k, v, first);
        // residual_out may be the residual itself (the in-place fused add), whose
        // column 0 every thread reads for the shift: that vector is stored with the
        // output, after the reduction, which no thread leaves before its shift has
        // been loaded (the sums depend on it).
        if constexpr (!is_none<RO> && !BATCH_LOADS) {
          if (first && t.column(k) != 0) store_vec<VEC>(res_out + t.column(k), v);
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float c = v[i] - around;
          acc[0] += c;
          acc[1] += c * c;
        }
      });
    };
    float mean = 0.f;
    float sum = 0.f;  // RMSNorm: sum of h^2; LayerNorm: M2
    if constexpr (SHIFT) {
      float sums[2] = {0.f, 0.f};
      shifted_sums(shift, true, sums);
      store_held_residual_out();
      reduce(IntTag<SLOT0>{}, sums);
      ShiftedMoments m = moments_from_shifted_sums(shift, sums[0], sums[1], static_cast<float>(Cfg::N));
      if (m.exact_needed) {
        // The shift was too far from the mean (an outlier first column, a constant
        // row): the sums again around the mean just found, now close to the row's,
        // accurate whatever the guard says (its loss scales with the square of the
        // first mean's rounding error over the std). Uniform: every thread of the
        // cluster has the same sums.
        float again[2] = {0.f, 0.f};
        shifted_sums(m.mean, false, again);
        reduce(IntTag<SLOT0 + 1>{}, again);
        m = moments_from_shifted_sums(m.mean, again[0], again[1], static_cast<float>(Cfg::N));
        m.m2 = fmaxf(m.m2, 0.f);
      }
      mean = m.mean;
      sum = m.m2;
    } else {
      // Pass 1 sums h (LayerNorm) or h^2 (RMSNorm).
      if constexpr (LOOKAHEAD) {
        // Rows past the last load row 0 (locate), as under BATCH_LOADS.
        RawVec<X, VEC> xs[2];
        RawVec<R, VEC> rs[2];
        xs[0].load(x + t.column(0));
        rs[0].load(res + t.column(0));
#pragma unroll
        for (int k = 0; k < Cfg::ITEMS; ++k) {
          if (k + 1 < Cfg::ITEMS) {
            xs[(k + 1) % 2].load(x + t.column(k + 1));
            rs[(k + 1) % 2].load(res + t.column(k + 1));
          }
          // The same fp32 sum as load_h's, so residual_out has the same bits.
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            h[k][i] = xs[k % 2].get(i) + rs[k % 2].get(i);
            sum += CENTER ? h[k][i] : h[k][i] * h[k][i];
          }
          if constexpr (!is_none<RO>) {
            if (active) store_vec<VEC>(res_out + t.column(k), h[k]);
          }
        }
      } else
      for_each_item<Cfg>([&](int k) {
        if constexpr (BATCH_LOADS) {
          if (!Cfg::ALL_OWNED && !t.owns_folded(k)) return;
        } else {
          if (!active || !t.owns_folded(k)) return;
        }
        float v[VEC];
        get_h(k, v, true);
        if constexpr (!is_none<RO> && !BATCH_LOADS) store_vec<VEC>(res_out + t.column(k), v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) sum += CENTER ? v[i] : v[i] * v[i];
      });
      store_held_residual_out();
      float one[1] = {sum};
      reduce(IntTag<SLOT0>{}, one);
      sum = one[0];
      if constexpr (CENTER) {
        // The variance around the mean: a second pass over the register-resident row.
        mean = sum / static_cast<float>(Cfg::N);
        float sq = 0.f;
        for_each_item<Cfg>([&](int k) {
          if (!active || !t.owns_folded(k)) return;
          float v[VEC];
          get_h(k, v, false);
#pragma unroll
          for (int i = 0; i < VEC; ++i) sq += (v[i] - mean) * (v[i] - mean);
        });
        float sq1[1] = {sq};
        reduce(IntTag<SLOT0 + 1>{}, sq1);
        sum = sq1[0];
      }
    }
    // rsqrtf is approximate (2 ulp); 1/sqrtf is correctly rounded and still cheap per row.
    const float rstd = 1.f / sqrtf(sum / static_cast<float>(Cfg::N) + p.eps);
    // The row statistics asked for (LayerNorm: mean and rstd, each optional). A row of
    // one register set stores them after its outputs, once its registers are free:
    // before them, their pointers and row index took registers beside the whole row
    // (NVRTC 13.2 spilled 16 bytes at 64 registers: LayerNorm fp32 N=32768 over two
    // 512-thread CTAs; and 12 bytes for the pipeline's RMSNorm 16-bit rows over a
    // cluster, N=50000-200000; sm_90a). The pipeline's rows of one CTA (PREFETCH) store
    // them here: after the outputs they were held beside the next row's loads (13.2
    // spilled 12 bytes: RMSNorm bf16 with an fp32 weight, N=32768, 1024 threads).
    auto store_stats = [&] {
      if constexpr (STORE_RSTD) {
        if (active && t.lane == 0 && t.rank == 0) {
          if (p.rstd != nullptr) p.rstd[r] = rstd;
          if constexpr (CENTER) {
            if (p.mean != nullptr) p.mean[r] = mean;
          }
        }
      }
    };
    if constexpr (PREFETCH && Cfg::CLUSTER == 1) store_stats();
    if (!active) return;

    O* const out = PREFETCH ? row_ptr_mut<O>(p.out, p.shape, r) : out_early;
    // Item k's output; `params(w, b)` gives its weight and bias (widened).
    const auto affine = OutputAffine<CENTER, O, !STORE_RSTD>::make(mean, rstd);
    auto store_item = [&](int k, auto&& params) {
      const int col = t.column(k);
      float v[VEC];
      get_h(k, v, false);
      if constexpr (SHIFT && !is_none<RO>) {
        if (col == 0) store_vec<VEC>(res_out, v);
      }
      float w[VEC], b[VEC];
      params(w, b);
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[i] = affine(v[i], w[i], b[i]);
      store_vec<VEC>(out + col, v);
    };
    if constexpr (EARLY_PARAMS) {
      for_each_item<Cfg>([&](int k) {
        if (!t.owns_folded(k)) return;
        store_item(k, [&](float (&w)[VEC], float (&b)[VEC]) { Params::widen(p, w_early[k], b_early[k], w, b); });
      });
    } else if constexpr (LATE_GROUP > 1) {
#pragma unroll
      for (int g = 0; g < Cfg::ITEMS; g += LATE_GROUP) {
        WP wg[LATE_GROUP];
        BP bg[LATE_GROUP];
#pragma unroll
        for (int j = 0; j < LATE_GROUP; ++j) {
          if (g + j < Cfg::ITEMS && t.owns_folded(g + j)) load_params(g + j, wg[j], bg[j]);
        }
#pragma unroll
        for (int j = 0; j < LATE_GROUP; ++j) {
          if (g + j >= Cfg::ITEMS || !t.owns_folded(g + j)) continue;
          store_item(g + j, [&](float (&w)[VEC], float (&b)[VEC]) { Params::widen(p, wg[j], bg[j], w, b); });
        }
      }
    } else {
      if constexpr (PARAMS_SMEM) {
        if (params_cached) {
          cp_async_wait<0>();
          for_each_item<Cfg>([&](int k) {
            if (!t.owns_folded(k)) return;
            const int v = t.slice_vector(k);
            store_item(k, [&](float (&w)[VEC], float (&b)[VEC]) {
              WP wp;
              BP bp;
              if constexpr (W_ITEM > 0) wp = *reinterpret_cast<const WP*>(params_memory + v * W_ITEM);
              if constexpr (B_ITEM > 0) bp = *reinterpret_cast<const BP*>(params_memory + Cfg::SLICE_V * W_ITEM + v * B_ITEM);
              Params::widen(p, wp, bp, w, b);
            });
            // Item by item, as the global path: hoisted above the stores, the reads of
            // all items held their registers at once (ptxas spilled 8-88 bytes at
            // N=32768 and for fp32 rows).
            asm volatile("" ::: "memory");
          });
          if constexpr (!PREFETCH || Cfg::CLUSTER > 1) store_stats();
          return;
        }
      }
      // Raw rows find the thread's first parameter vectors once: item k's are k * TPR
      // vectors on, a constant the loads take as an immediate offset. Found from
      // head_offset + column(k) at each item, a 64-bit add with a sign extension took 9
      // of the 64 SASS instructions of a vector of LayerNorm bf16's epilogue
      // (N=262144). Other rows still do that: the two pointers held through the
      // epilogue of rows held in fp32 (H32) spilled 8 bytes (1024-thread rows with a
      // residual and fp32 parameters, N=262144, NVRTC 13.0).
      const Params thread_params = Params::from(p, head_offset + t.column(0));
      auto item_col = [&](int k) { return t.column(k) - t.column(0); };  // k * TPR * VEC
      if constexpr (PARAMS_AHEAD) {
        // Item k + 1's parameters are loaded before item k's output is stored: the
        // loads may alias the stores, so neither compiler hoists a load above a store,
        // and each item's parameters were an L2 round trip after the store before it.
        WP w_next;
        BP b_next;
        thread_params.load_packed_at(item_col(0), w_next, b_next);
#pragma unroll
        for (int k = 0; k < Cfg::ITEMS; ++k) {
          const WP w_this = w_next;
          const BP b_this = b_next;
          if (k + 1 < Cfg::ITEMS) thread_params.load_packed_at(item_col(k + 1), w_next, b_next);
          store_item(k, [&](float (&w)[VEC], float (&b)[VEC]) { Params::widen(p, w_this, b_this, w, b); });
        }
        if constexpr (!PREFETCH || Cfg::CLUSTER > 1) store_stats();
        return;
      }
      for_each_item<Cfg>([&](int k) {
        if (!t.owns_folded(k)) return;
        store_item(k, [&](float (&w)[VEC], float (&b)[VEC]) {
          if constexpr (RAW) {
            thread_params.load_at(item_col(k), w, b);
          } else {
            Params::from(p, head_offset).load_at(t.column(k), w, b);
          }
        });
      });
    }
    if constexpr (!PREFETCH || Cfg::CLUSTER > 1) store_stats();
  };

  const long long first = static_cast<long long>(blockIdx.x / Cfg::CLUSTER) * Cfg::ROWS;
  RawRow raw_a;
  if constexpr (!PREFETCH) {
    // One row (group) per CTA: each reduction once (one cluster barrier, not two).
    const RowAt at = locate(first);
    // The copies before the row's loads: after them, their addresses competed with
    // the raw row for registers (ptxas spilled 12-88 bytes at N=32768).
    copy_params(at.r);
    load_raw(at, raw_a);
    finish_row(IntTag<0>{}, at, raw_a);
  } else {
    // Two register sets with alternating roles, unrolled by two so that no set is
    // copied (a copy would wait for the loads it is meant to overlap), and the
    // slot sets of the reductions alternating with them.
    const long long stride = static_cast<long long>(gridDim.x / Cfg::CLUSTER) * Cfg::ROWS;
    RawRow raw_b;
    RowAt at_a = locate(first);
    if (params_cached) copy_params(at_a.r);
    load_raw(at_a, raw_a);
    for (long long base = first; base < p.shape.rows; base += 2 * stride) {
      const RowAt at_b = locate(base + stride);
      load_raw(at_b, raw_b);
      finish_row(IntTag<0>{}, at_a, raw_a);
      if (base + stride >= p.shape.rows) break;
      at_a = locate(base + 2 * stride);
      load_raw(at_a, raw_a);
      finish_row(IntTag<2>{}, at_b, raw_b);
    }
  }
  // A cluster that had no row (the grid never has more than the rows, but in case)
  // still waits once on the barrier it arrived at.
  if constexpr (Cfg::CLUSTER > 1) {
    if (step == 0) row_sums_walk_ready<Cfg::CLUSTER>();
  }
}

}  // namespace nk
