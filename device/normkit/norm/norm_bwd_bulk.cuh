// Backward of RMSNorm and LayerNorm (the formulas of rmsnorm_bwd_row.cuh) with its
// rows fed by bulk copies into a ring of shared-memory stages, as the forward's
// norm_fwd_bulk_kernel.
//
// Why it is shaped this way: the register kernels' long rows (N >= 32768) stay at
// 0.48-0.87x copy. Their CTAs hold h and dout of one row in registers beside the
// dw/db running sums, so an SM has one row's loads in flight at most, and none
// while the row waits for its cluster's sums or stores dx. Here one thread of each
// CTA copies the CTA's slices of a row (h, dout, dresidual_out) with one
// cp.async.bulk each into a stage; the registers hold only the dw/db sums (ITEMS *
// VEC each), and the ring keeps STAGES - 1 rows loading while the CTA finishes one.
// Both passes read the row from its stage (shared memory has the bandwidth), so a
// stage is freed only after the second, at a CTA barrier that ends the row (over a
// cluster, the next row's pass 1 runs while the row's sums cross the cluster, and
// that row's warp-sum barrier is the one that frees the stage: OVERLAP_EXCHANGE). The
// weight's slice (the CTA's head's) is copied once per CTA (W_SMEM, where it is a
// whole number of 16-byte chunks and 16-byte aligned; else read from global memory
// per row, as the register kernels do). rstd and LayerNorm's mean of the next row
// are loaded a row ahead, so that their latency is off each row's critical path.
// Grid: as the register kernels' (norm_bwd_kernel): blockIdx.y is the head, each
// cluster (`part`) walks rows part, part + parts, ... of its head, keeps its dw/db
// sums in registers across them and writes them once as an fp32 partial [part][head]
// (or dweight itself when it is its head's only part), which param_grad_reduce sums
// in a fixed order: deterministic.
// Measured on the H200 (docs/perf/h200-2026-12-01c.md): 10-57 % faster than the
// register rows from N=32768 (LayerNorm from 16384) without dresidual_out, and for
// LayerNorm with it; the plans take it there (bulk_backward_rows_measured).
// Short rows (ROWS > 1, no cluster): a stage holds ROWS whole rows, one per group of
// TPR threads, copied by one bulk copy per tensor where the rows are consecutive (one
// per row and tensor otherwise). LayerNorm's 16-bit short
// rows held h, dout and two sets of dw/db sums in registers (127 registers, four
// 128-thread CTAs an SM, no next row in flight: ncu at N=2048, 74 % of DRAM
// bandwidth, 0.83-0.86x copy); here registers hold only the sums, the ring keeps
// the loads in flight, and one CTA an SM writes a quarter of the fp32 partials.
// Measured (docs/perf/h200-2026-12-01d.md): a stage's latency bounds the one CTA, so
// short rows want two to four vectors a thread (0.87-0.95x copy for LayerNorm bf16,
// 3-16 % over the register rows) and lose at one (0.54-0.77x); one copy per row
// instead of per group of rows lost far more (0.2-0.5x at N=256-2048).
// bf16 rows are bound by instruction issue as much as by memory (ncu, one 512-thread
// CTA an SM: 55-68 % of issue slots busy, 32-38 instructions an element,
// docs/perf/h200-2026-12-02b.md), so the stages are read through load_vec, which
// widens bf16 pairs as words, and where it measured faster (SHARED_READS below) the
// weight slice is always in shared memory and read with h and dout without a pointer
// test (docs/perf/h200-2026-12-02c.md).
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/norm/rmsnorm_bwd_row.cuh"

namespace nk {

template <class Cfg, class X, class W, class DY, class DRO, class DX, class DR, bool DBIAS, bool CENTER, bool W_SMEM,
          bool SHARED_READS, int STAGES, bool EARLY_REFILL = false>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) norm_bwd_bulk_kernel(const NormBwdParams p) {
  constexpr int VEC = Cfg::VEC;
  constexpr int CLUSTER = Cfg::CLUSTER;
  constexpr int ROWS = Cfg::ROWS;
  static_assert(Cfg::REGS && (ROWS == 1 || CLUSTER == 1), "several rows a CTA only without a cluster");
  static_assert(CLUSTER == 1 || Cfg::TPR > 32, "a cluster's exchange follows the warps' CTA barrier");
  static_assert(Cfg::THREADS >= 64, "at least two warps");
  static_assert(VEC * sizeof(X) == 16 && VEC * sizeof(DY) % 16 == 0 && VEC * size_or_zero<DRO> % 16 == 0,
                "16-byte vectors of h, whole 16-byte items of dout and dresidual_out");
  static_assert(Cfg::SLICE_V * CLUSTER == Cfg::NV, "every CTA's slice is SLICE_V vectors");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  // EARLY_REFILL: pass 1 keeps the row's h, dout and dresidual_out (16 bytes a vector
  // each) in registers, so its stage is refilled at the CTA barrier of the row's sums,
  // before pass 2 and the stores, not after them: the ring's next copy is in flight
  // for pass 2's time too.
  static_assert(!EARLY_REFILL || (sizeof(DY) == sizeof(X) && (is_none<DRO> || sizeof(DRO) == sizeof(X))),
                "an early refill keeps 16-byte vectors in registers: dout and dresidual_out of h's width");
  constexpr int SLICE_ELEMS = Cfg::SLICE_V * VEC;
  constexpr bool DW = !is_none<W>;
  constexpr int K = CENTER ? 2 : 1;  // the row's sums: of g * xhat, and LayerNorm's of g
  // A stage: ROWS row slices of h's, dout's and dresidual_out's (the layout's
  // "residual" part) each; the layout counts STAGES * ROWS such slices.
  constexpr BulkRowsLayout L = bulk_rows_layout(Cfg::SLICE_V, VEC, sizeof(X), sizeof(DY) + size_or_zero<DRO>,
                                                W_SMEM ? size_or_zero<W> : 0, 0, STAGES * ROWS);
  constexpr unsigned RING_BYTES = STAGES * ROWS * L.slice_bytes;
  // write_partial combines the ROWS rows' sums in the ring once every row is done.
  static_assert(ROWS == 1 || Cfg::SLICE_V * VEC * sizeof(float) <= RING_BYTES, "the combine fits the ring");
  // Within a stage: the ROWS slices of h, then of dout, then of dresidual_out, so that
  // a group of whole consecutive rows arrives by one copy per tensor.
  constexpr unsigned DY_BYTES = SLICE_ELEMS * sizeof(DY);
  constexpr unsigned DRO_BYTES = SLICE_ELEMS * size_or_zero<DRO>;
  constexpr unsigned DY_AT = ROWS * L.x_bytes;
  constexpr unsigned DRO_AT = ROWS * (L.x_bytes + DY_BYTES);
  extern __shared__ __align__(128) unsigned char bulk_memory[];
  __shared__ unsigned long long bulk_barriers[STAGES + 1];  // the stages', then the parameters'
  unsigned long long* const stage_full = bulk_barriers;
  unsigned long long& params_full = bulk_barriers[STAGES];
  __shared__ RowReduceStorage<ROWS, Cfg::TPR, 1, K> cta_storage;
  __shared__ ClusterPushes<1, CLUSTER, K> cluster_pushes;  // CLUSTER > 1 only

  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  const RowThread<Cfg> t = RowThread<Cfg>::make();
  const int sub = ROWS == 1 ? 0 : t.sub;  // the thread's row of a stage's group
  const long long heads = p.shape.heads;
  const long long head = blockIdx.y;
  const long long part = blockIdx.x / CLUSTER;
  const long long parts = gridDim.x / CLUSTER;
  const long long rows_per_head = p.shape.rows / heads;
  const long long groups = (rows_per_head + ROWS - 1) / ROWS;  // the head's row groups, ROWS rows each
  const long long head_offset = head * Cfg::N;
  const long long slice_begin = static_cast<long long>(t.rank) * SLICE_ELEMS;
  auto stage = [&](int s) { return bulk_memory + s * ROWS * L.slice_bytes; };
  // Whether a group's rows lie back to back in every input (one head, rows N apart):
  // then one copy per tensor brings the group. Otherwise one per row and tensor, which
  // measured far slower for short rows (a bulk copy's cost is per copy: bf16 N=256, 16
  // rows a stage, 0.2x copy).
  const bool packed_rows = ROWS > 1 && heads == 1 && p.shape.rows_inner >= p.shape.rows &&
                           p.x.stride_inner == Cfg::N && p.dout.stride_inner == Cfg::N &&
                           (is_none<DRO> || p.dresidual_out.stride_inner == Cfg::N);
  // One thread's copies of the CTA's slices of the head's g-th row group (its rows
  // g * ROWS + q that exist) into stage s.
  auto issue_group = [&](long long g, int s) {
    if (g >= groups) return;
    const long long first = g * ROWS;
    const int count = ROWS == 1 || rows_per_head - first >= ROWS ? ROWS : static_cast<int>(rows_per_head - first);
    mbarrier_expect_bytes(&stage_full[s], count * L.slice_bytes);
    unsigned char* const at = stage(s);
    const int copies = ROWS == 1 || packed_rows ? 1 : count;
    const unsigned rows_each = packed_rows ? static_cast<unsigned>(count) : 1u;
#pragma unroll 1
    for (int q = 0; q < copies; ++q) {
      const long long r = head + heads * (first + q);
      bulk_load(at + q * L.x_bytes, row_ptr<X>(p.x, p.shape, r) + slice_begin, rows_each * L.x_bytes,
                &stage_full[s]);
      bulk_load(at + DY_AT + q * DY_BYTES, row_ptr<DY>(p.dout, p.shape, r) + slice_begin, rows_each * DY_BYTES,
                &stage_full[s]);
      if constexpr (!is_none<DRO>)
        bulk_load(at + DRO_AT + q * DRO_BYTES, row_ptr<DRO>(p.dresidual_out, p.shape, r) + slice_begin,
                  rows_each * DRO_BYTES, &stage_full[s]);
    }
  };
  const W* w_global = DW ? static_cast<const W*>(p.weight) + head_offset + slice_begin : nullptr;
  constexpr bool W_SHARED = L.params_bytes > 0;  // W_SMEM with a weight
  // How the row loop reads a vector (RowPlan::shared_reads; where the plans take it,
  // and its measurements: rmsnorm_heuristics_bwd_bulk.cpp). SHARED_READS: h, dout and the
  // weight straight from shared memory (Row::expand_shared, 15-25 % fewer instructions
  // in the loop) and pass 2 with h - mean (rstd folded into dx's coefficient); the
  // weight slice is then always in shared memory (copied by the threads where the bulk
  // copy cannot take it). Otherwise 00f2f32's code, byte for byte in SASS: the weight
  // through a pointer that is null where the slice was not bulk-copied, plain loads.
  // (Forming that pointer from another test moved those rows by 5-7 % either way,
  // docs/perf/h200-2026-12-02c.md.)
  static_assert(!SHARED_READS || W_SMEM, "shared reads need the weight's slice beside the stages");
  constexpr bool SHARED_EXPAND = SHARED_READS && W_SHARED;
  const bool w_bulk = W_SHARED && reinterpret_cast<unsigned long long>(w_global) % 16 == 0;
  using WT = typename or_type<W, float>::type;
  WT* const w_smem = reinterpret_cast<WT*>(bulk_memory + RING_BYTES);
  const auto* w_vectors = reinterpret_cast<const Packed<WT, VEC>*>(bulk_memory + RING_BYTES);  // as 00f2f32 read it
  if (threadIdx.x == 0) {
    init_bulk_barriers(bulk_barriers);
    if (w_bulk) {
      mbarrier_expect_bytes(&params_full, L.weight_bytes);
      bulk_load(bulk_memory + RING_BYTES, w_global, L.weight_bytes, &params_full);
    }
#pragma unroll 1
    for (int s = 0; s < STAGES; ++s) issue_group(part + s * parts, s);
  }
  if constexpr (SHARED_EXPAND) {
    if (!w_bulk) copy_by_threads(w_smem, w_global, SLICE_ELEMS, threadIdx.x, Cfg::THREADS);
  }
  __syncthreads();  // the stages' barriers initialized before any thread waits on them
  unsigned step = 0;  // cluster exchanges so far (the same count in every CTA of the cluster)
  row_sums_walk_arrive(cluster_pushes);
  if (w_bulk) mbarrier_wait(&params_full, 0);

  // LayerNorm's 16-bit rows fold h - mean into their multiply-adds (NormBwdRow::FOLD_MEAN)
  // where a row has 64 threads or more. H200, LayerNorm bf16, ratio to copy without -> with,
  // two runs each in one call (scripts/plan_cases/backward-mean-fold.txt,
  // docs/perf/h200-2026-12-02e.md): N=2048 0.906 -> 0.934, 4096 0.902 -> 0.933, 8192 0.887
  // -> 0.910, 65536 0.897 -> 0.912, 131072 0.886 -> 0.910, 262144 0.804 -> 0.815; with
  // dresidual_out N=16384 0.962 -> 0.974, 32768 0.872 -> 0.885, 65536 0.871 -> 0.879,
  // 131072 (the grouped ring) 0.778 -> 0.800; level within the runs' spread elsewhere
  // (N=16384 0.874 -> 0.857, its runs 0.866-0.882 and 0.853-0.860). Rows of 32 threads
  // lost (N=1024, 16 rows a CTA: 0.883 -> 0.834), so they keep the subtraction.
  using Row = NormBwdRow<VEC, X, W, DY, DRO, DX, DR, CENTER, (Cfg::TPR >= 64)>;
  // xhat (xh_scaled false: h - mean), g and dout of item k of the thread's row in stage s.
  // (A generic lambda taking the flag as a type crashed NVRTC 13.2's front end.)
  auto expand_item = [&](const Row& row, int s, int k, bool xh_scaled, float (&xh)[VEC], float (&g)[VEC],
                         float (&d)[VEC]) {
    const int v = t.slice_vector(k);
    const unsigned char* const at = stage(s);
    const X* const hs = reinterpret_cast<const X*>(at + sub * L.x_bytes + v * 16);
    const DY* const ds = reinterpret_cast<const DY*>(at + DY_AT + sub * DY_BYTES + v * (VEC * sizeof(DY)));
    if constexpr (SHARED_EXPAND) {
      if (xh_scaled) {
        row.template expand_shared<true>(w_smem + v * VEC, hs, ds, xh, g, d);
      } else {
        row.template expand_shared<false>(w_smem + v * VEC, hs, ds, xh, g, d);
      }
    } else {
      row.expand_at(t.column(k), w_bulk ? w_vectors[v].v : nullptr, hs, ds, xh, g, d);
    }
  };

  // EARLY_REFILL: the thread's vectors of h, dout and dresidual_out of the row, as
  // pass 1 read them.
  constexpr int HELD = EARLY_REFILL ? Cfg::ITEMS : 1;
  constexpr int HELD_DRO = EARLY_REFILL && !is_none<DRO> ? Cfg::ITEMS : 1;
  unsigned held_h[HELD][4], held_d[HELD][4], held_dro[HELD_DRO][4];
  auto expand_held = [&](const Row& row, int k, bool xh_scaled, float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) {
    const int v = t.slice_vector(k);
    if constexpr (SHARED_EXPAND) {
      if (xh_scaled) {
        row.template expand_words<true, true>(0, w_smem + v * VEC, held_h[k], held_d[k], xh, g, d);
      } else {
        row.template expand_words<false, true>(0, w_smem + v * VEC, held_h[k], held_d[k], xh, g, d);
      }
    } else {
      row.template expand_words<true, false>(t.column(k), w_bulk ? w_vectors[v].v : nullptr, held_h[k], held_d[k],
                                             xh, g, d);
    }
  };

  float dw_acc[DW ? Cfg::ITEMS : 1][VEC];
  float db_acc[DBIAS ? Cfg::ITEMS : 1][VEC];
#pragma unroll
  for (int k = 0; k < (DW ? Cfg::ITEMS : 1); ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw_acc[k][i] = 0.f;
#pragma unroll
  for (int k = 0; k < (DBIAS ? Cfg::ITEMS : 1); ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) db_acc[k][i] = 0.f;

  // The statistics of the thread's row of group g, loaded a group ahead.
  auto stats_of = [&](long long g, float& rstd, float& mean) {
    const long long j = g * ROWS + sub;
    if (g >= groups || j >= rows_per_head) return;
    const long long r = head + heads * j;
    rstd = p.rstd[r];
    if constexpr (CENTER) mean = p.mean[r];
  };
  float rstd_next = 0.f, mean_next = 0.f;
  stats_of(part, rstd_next, mean_next);
  unsigned cta_sums = 0;
  int s = 0;           // the stage of this CTA's i-th group: i % STAGES
  unsigned phase = 0;  // (i / STAGES) % 2, the parity of that stage's use
  constexpr int WIDTH = Cfg::TPR < 32 ? Cfg::TPR : 32;
  // Pass 1 over a row in stage s: the columns' dw/db, and the row's sums (of g * xhat,
  // LayerNorm's of g) over the thread's group of lanes.
  auto pass1 = [&](const Row& row, int s, bool active, float (&sums)[K]) {
    DotAccumulator<CENTER> dot;
    for_each_item<Cfg>([&](int k) {
      if (!active || !t.owns(k)) return;
      float xh[VEC], gv[VEC], d[VEC];
      if constexpr (EARLY_REFILL) {
        const int v = t.slice_vector(k);
        load_shared_words(stage(s) + sub * L.x_bytes + v * 16, held_h[k]);
        load_shared_words(stage(s) + DY_AT + sub * DY_BYTES + v * 16, held_d[k]);
        if constexpr (!is_none<DRO>) load_shared_words(stage(s) + DRO_AT + sub * DRO_BYTES + v * 16, held_dro[k]);
        expand_held(row, k, true, xh, gv, d);
      } else {
        expand_item(row, s, k, true, xh, gv, d);
      }
      dot.add(xh, gv);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if constexpr (DW) dw_acc[k][i] += d[i] * xh[i];
        if constexpr (DBIAS) db_acc[k][i] += d[i];
      }
    });
    sums[0] = dot.gx;
    if constexpr (CENTER) sums[K - 1] = dot.g;
#pragma unroll
    for (int q = 0; q < K; ++q) sums[q] = group_sum<WIDTH>(sums[q]);
  };
  // The warps' sums of a row added over the CTA (a CTA barrier), in alternating slots.
  auto cta_row_sums = [&](float (&sums)[K]) {
    warp_partials_sum(sums, sub, t.lane, cta_storage, static_cast<int>(cta_sums++ & 1u));
  };
  // Over a cluster: this CTA's sums of a row pushed to every CTA of it; then, once
  // every CTA's have arrived, the row's sums.
  auto push_cta_sums = [&](float (&sums)[K]) {
    if constexpr (CLUSTER > 1) {
      cta_row_sums(sums);
      if (step == 0) row_sums_walk_ready<CLUSTER>();
      cluster_push_partials(sums, 0, t.lane, cluster_pushes, step);
    }
  };
  auto await_cluster_sums = [&](float (&sums)[K]) {
    if constexpr (CLUSTER > 1) {
      cluster_await_partials(cluster_pushes, step);
      const float (&pushed)[CLUSTER][K] = cluster_pushes.pushed[step++ & 1u][0];
#pragma unroll
      for (int q = 0; q < K; ++q) {
        sums[q] = 0.f;
#pragma unroll
        for (int c = 0; c < CLUSTER; ++c) sums[q] += pushed[c][q];
      }
    }
  };
  auto means_of = [](const float (&sums)[K]) {
    RowDots means;
    means.gx_mean = sums[0] / static_cast<float>(Cfg::N);
    means.g_mean = CENTER ? sums[K - 1] / static_cast<float>(Cfg::N) : 0.f;
    return means;
  };
  // Pass 2: dx (and dresidual) of a row in stage s, from the stage again (under
  // EARLY_REFILL from the registers pass 1 filled: the stage may be refilling).
  auto pass2 = [&](const Row& row, int s, bool active, const RowDots& means) {
    for_each_item<Cfg>([&](int k) {
      if (!active || !t.owns(k)) return;
      float xh[VEC], gv[VEC], d[VEC];
      if constexpr (EARLY_REFILL) {
        expand_held(row, k, !SHARED_EXPAND, xh, gv, d);
        float dro[VEC] = {};
        if constexpr (!is_none<DRO>) widen_words<DRO, VEC>(held_dro[k], dro);
        row.template store_dx_fused<!SHARED_EXPAND>(t.column(k), xh, gv, means, dro);
        return;
      }
      expand_item(row, s, k, !SHARED_EXPAND, xh, gv, d);
      row.template store_dx_at<!SHARED_EXPAND>(t.column(k), xh, gv, means,
                      reinterpret_cast<const DRO*>(stage(s) + DRO_AT + sub * DRO_BYTES +
                                                   t.slice_vector(k) * (VEC * size_or_zero<DRO>)));
    });
  };
  // Rows over a cluster with a ring of three stages or more overlap one row's cluster
  // exchange with the next row's pass 1: pass 1 of row i + 1, then the wait for row i's
  // sums (whose pushes are in flight), pass 2 of row i, and the CTA barrier of row i + 1's
  // warp sums, which also frees row i's stage. One CTA barrier a row instead of two, and
  // no idle wait on the other CTAs' pushes while a row's next stage is in. The cost: the
  // ring holds two rows while it computes, so a refilled stage is waited for one row
  // later rather than two (with two stages, at once: those keep the plain order).
  // H200, ratio to copy, same-call A/B 48ee5e0 -> 48e2511, two runs each
  // (docs/perf/h200-2026-12-03.md section 4): LayerNorm bf16 N=32768 0.897 -> 0.930,
  // 131072 0.909 -> 0.915, 262144 0.816 -> 0.869; LayerNorm fp32 N=131072 0.942 -> 0.966;
  // RMSNorm fp32 N=131072 0.963 -> 0.976; RMSNorm bf16 N=131072-262144 level. Every ring
  // it ran on reads through SHARED_READS, so only those take it (the pointer reads' rings,
  // RMSNorm over 2-8 CTAs, were not run with it). Not over fewer than 8 CTAs: at N=16384
  // (clusters of 4) it lost, same call, two runs each, overlapped -> plain
  // (plan_cases/backward-overlap-16k.txt at 7f91806, docs/perf/h200-2026-12-03c.md):
  // LayerNorm bf16 0.910 -> 0.918, with dresidual_out 0.975 -> 0.984, RMSNorm bf16 with
  // dresidual_out 0.962 -> 0.989; at N=32768 (over 8) it won (LayerNorm 0.897 -> 0.928,
  // with dresidual_out 0.930 -> 0.960). NK_BWD_OVERLAP_MIN_CLUSTER (a build switch for
  // measuring) moves that bound.
#ifndef NK_BWD_OVERLAP_MIN_CLUSTER
#define NK_BWD_OVERLAP_MIN_CLUSTER 8
#endif
  constexpr bool OVERLAP_EXCHANGE = !EARLY_REFILL && CLUSTER >= NK_BWD_OVERLAP_MIN_CLUSTER && CLUSTER > 1 &&
                                    ROWS == 1 && STAGES >= 3 && SHARED_EXPAND;
  if constexpr (OVERLAP_EXCHANGE) {
    auto row_of = [&](long long g, float rstd, float mean) {
      return Row::make(p, head + heads * g, head_offset, rstd, mean);
    };
    long long g = part;
    float rstd = rstd_next, mean = mean_next;  // of group g
    if (g < groups) {
      stats_of(g + parts, rstd_next, mean_next);
      mbarrier_wait(&stage_full[s], phase);
      float sums[K];
      pass1(row_of(g, rstd, mean), s, true, sums);
      push_cta_sums(sums);
    }
    for (; g < groups; g += parts) {
      const long long next = g + parts;  // the same in every CTA of the cluster
      const int s_next = s + 1 == STAGES ? 0 : s + 1;
      const unsigned phase_next = s + 1 == STAGES ? phase ^ 1u : phase;
      const float rstd_n = rstd_next, mean_n = mean_next;
      float sums_next[K];
      if (next < groups) {
        stats_of(next + parts, rstd_next, mean_next);
        mbarrier_wait(&stage_full[s_next], phase_next);
        pass1(row_of(next, rstd_n, mean_n), s_next, true, sums_next);
      }
      float sums[K];
      await_cluster_sums(sums);
      pass2(row_of(g, rstd, mean), s, true, means_of(sums));
      // The CTA barrier after every thread's reads of stage s: the next row's warp sums',
      // or, after the last row, one of its own.
      if (next < groups) {
        cta_row_sums(sums_next);
      } else {
        __syncthreads();
      }
      if (threadIdx.x == 0) issue_group(g + STAGES * parts, s);
      if (next < groups) cluster_push_partials(sums_next, 0, t.lane, cluster_pushes, step);
      s = s_next;
      phase = phase_next;
      rstd = rstd_n;
      mean = mean_n;
    }
  } else {
    for (long long g = part; g < groups; g += parts) {
      // A group past the head's last row leaves its threads idle but at every barrier.
      const long long j = g * ROWS + sub;
      const bool active = ROWS == 1 || j < rows_per_head;
      const long long r = head + heads * (active ? j : g * ROWS);
      const float rstd = rstd_next, mean = mean_next;
      stats_of(g + parts, rstd_next, mean_next);
      const Row row = Row::make(p, r, head_offset, rstd, mean);
      mbarrier_wait(&stage_full[s], phase);
      float sums[K];
      pass1(row, s, active, sums);
      // Under EARLY_REFILL the CTA barrier after pass 1 (the row's sums', or one of its
      // own for rows of a warp) ends every read of stage s.
      auto refill_early = [&] {
        if constexpr (EARLY_REFILL) {
          if (threadIdx.x == 0) issue_group(g + STAGES * parts, s);
        }
      };
      if constexpr (CLUSTER > 1) {
        push_cta_sums(sums);
        refill_early();
        await_cluster_sums(sums);
      } else if constexpr (Cfg::TPR > 32) {
        cta_row_sums(sums);
        refill_early();
      } else if constexpr (EARLY_REFILL) {
        __syncthreads();
        refill_early();
      }
      pass2(row, s, active, means_of(sums));
      if constexpr (!EARLY_REFILL) {
        __syncthreads();  // every thread's reads of stage s are done: it takes the group STAGES groups on
        if (threadIdx.x == 0) issue_group(g + STAGES * parts, s);
      }
      if (++s == STAGES) {
        s = 0;
        phase ^= 1u;
      }
    }
  }
  // The ring is idle now (every group copied was waited for, and read before the last
  // barrier): write_partial adds the ROWS rows' sums there.
  BwdCombineStorage<Cfg>& combine = *reinterpret_cast<BwdCombineStorage<Cfg>*>(bulk_memory);
  if constexpr (DW) {
    if (p.dweight_final != nullptr) {
      write_partial<Cfg, false>(t, dw_acc, static_cast<W*>(p.dweight_final) + head_offset, combine);
    } else {
      write_partial<Cfg, true>(t, dw_acc, p.dweight_partial + (part * heads + head) * Cfg::N, combine);
    }
  }
  if constexpr (DBIAS) write_partial<Cfg, true>(t, db_acc, p.dbias_partial + (part * heads + head) * Cfg::N, combine);
  // A cluster that had no row still waits once on the barrier it arrived at.
  if constexpr (CLUSTER > 1) {
    if (step == 0) row_sums_walk_ready<CLUSTER>();
  }
}

}  // namespace nk
