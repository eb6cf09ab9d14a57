// Backward of RMSNorm and (CENTER) LayerNorm. For each row (h = the forward's
// x + residual; rstd and LayerNorm's mean saved):
//   xhat = (h - mean) * rstd,   g = dout * (w + weight_offset)
//   dx   = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dresidual_out);  dresidual = dx
// (RMSNorm: mean = 0 and no mean(g) term), and across rows, per column (per head
// in per-head mode):
//   dw = sum dout * xhat,   db = sum dout.
//
// Why it is shaped this way: the grid is persistent — `parts` CTAs (clusters) per
// head walk the rows of their head with a fixed stride — so each thread keeps its
// columns' dw/db running sums in registers across many rows and writes them once,
// as fp32 partials [parts][heads][N]. param_grad_reduce.cuh then sums the partials
// in a fixed order: no float atomics anywhere, so dw/db are bitwise reproducible.
// Rows in one CTA (ROWS > 1) are combined through shared memory in row order
// before the partial is written, which keeps `parts` (and the final reduction)
// small for short rows. Long rows need their registers for the row itself: then
// (ROW_SUMS false) the row kernel only produces dx, and norm_bwd_param_kernel
// computes dw/db in a separate column-wise pass (dw needs only rstd, not the
// row's dot product). For 16-bit rows of that length (SMEM_SUMS) the CTA keeps the
// running sums in shared memory instead, one fp32 per column: the column pass
// read h and dout a second time (10 bytes per element moved instead of 6; bf16
// N=16384 with dw ran at 0.53-0.59x copy that way), shared memory has the room
// (4 bytes per column and sum, 64 KB at N=16384) and ~8x the bandwidth needed.
// Rows beyond one CTA's registers may instead stay in registers over a cluster
// of CTAs that walk rows together (fp32 rows from N=32768, some 16-bit ones: the
// host's plan_cluster_rows): each row's sums reach every CTA through
// row_sums_walk's st.async pushes and mbarrier waits (reduce.cuh), without a
// cluster barrier, whose release made every row wait for the loads in flight.
// Rows too long even for registers (REGS false) are split over a
// cluster whose CTAs keep their slice of h and dout in shared memory (STASH):
// HBM is still read once, and the slice is small enough for three CTAs per SM,
// so that one CTA's loads overlap another's reduction. dw/db then come from the
// column pass (running sums kept in shared memory next to the stash measured
// slower on H200: bf16 N=32768 1098 us against ~500 us for the stash alone plus
// ~250 us for the column pass; and in 2-8 CTA clusters sized for three CTAs per
// SM, 0.27-0.47x copy against 0.50-0.66 with the column pass, bf16 N=32768-65536,
// 8e1deac). Rows beyond what the stash holds well take the split kernels of
// rmsnorm_bwd_split.cuh.
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/norm/rmsnorm_bwd_row.cuh"

namespace nk {

// SMEM_SUMS: a CTA's fp32 running sums per column (dw or db) in shared memory.
// A thread's VEC sums of vector v are kept in groups of HALF (4 floats, 16 bytes)
// at v * HALF within their group's plane, so a warp's 16-byte accesses, 32
// consecutive vectors, are contiguous and conflict-free. Every entry is read and
// written only by the thread that owns its column (the same for every row of
// the CTA): no barrier guards it, and each column's sum is added in row order.
template <int VEC, int NV>
struct SharedColumnSums {
  static constexpr int HALF = VEC < 4 ? VEC : 4;
  static constexpr int GROUPS = VEC / HALF;
  static constexpr int FLOATS = NV * VEC;  // one row's columns
  float* base;

  __device__ __forceinline__ float* group(int v, int g) const { return base + g * (NV * HALF) + v * HALF; }
  __device__ __forceinline__ void zero(int v) const {
#pragma unroll
    for (int g = 0; g < GROUPS; ++g)
#pragma unroll
      for (int j = 0; j < HALF; ++j) group(v, g)[j] = 0.f;
  }
  __device__ __forceinline__ void add(int v, const float (&x)[VEC]) const {
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
      float* s = group(v, g);
      if constexpr (HALF == 4) {
        float4 q = *reinterpret_cast<float4*>(s);
        q.x += x[g * 4];
        q.y += x[g * 4 + 1];
        q.z += x[g * 4 + 2];
        q.w += x[g * 4 + 3];
        *reinterpret_cast<float4*>(s) = q;
      } else {
#pragma unroll
        for (int j = 0; j < HALF; ++j) s[j] += x[g * HALF + j];
      }
    }
  }
  __device__ __forceinline__ void read(int v, float (&x)[VEC]) const {
#pragma unroll
    for (int g = 0; g < GROUPS; ++g)
#pragma unroll
      for (int j = 0; j < HALF; ++j) x[g * HALF + j] = group(v, g)[j];
  }
};

// The dynamic shared memory of a STASH kernel, per CTA (host: stash_bytes()):
// SLICE_V vectors of h, then SLICE_V of dout. A thread's 16-byte vectors sit at
// its slice_vector() index, so a warp's accesses are conflict-free, and every
// entry is written and read by the same thread: no barrier guards it.
template <class Cfg, class X, class DY>
struct RowStash {
  static constexpr int VEC = Cfg::VEC;
  Packed<X, VEC>* h;
  Packed<DY, VEC>* dy;

  __device__ static RowStash make(unsigned char* base) {
    RowStash s;
    s.h = reinterpret_cast<Packed<X, VEC>*>(base);
    s.dy = reinterpret_cast<Packed<DY, VEC>*>(base + Cfg::SLICE_V * sizeof(Packed<X, VEC>));
    return s;
  }
};

// Stash kernels load this many items of h and dout (16-byte vectors each) before
// using them: 6 loads in flight per thread, 24 registers, within the 85-register
// cap of three 256-thread CTAs per SM (3 x 256 x 96 bytes in flight per SM). At 4
// items the kernel sat exactly at 80 registers and spilled once its row loop
// moved into the lambdas that the prefetching row kernel shares.
inline constexpr int kStashGroup = 3;

// PREFETCH (REGS only): the rows a CTA walks are pipelined two deep. Row i+1's
// loads are issued before row i's arithmetic, reduction and stores, into a
// second register set, so the SM's loads stay in flight through every row's
// barrier and epilogue. Without it a persistent CTA stops loading from the end
// of its loads to the start of the next row's: ncu on H200, bf16 N=4096 with
// dw, 2 CTAs of 256 threads per SM: 55% of DRAM peak, 0.70x copy.
// ASYNC (instead of PREFETCH): the rows a CTA walks are copied by cp.async into a
// three-stage ring in shared memory, two rows ahead of the one being finished, and
// read from there (each thread its own vectors, as with the stash). The register
// pipeline holds one row ahead in registers, which capped the loads in flight:
// bf16 N=4096 with dw took 122 registers, two CTAs of 256 threads per SM, 32 KB in
// flight per SM, about what H200's latency needs per SM at full bandwidth (0.73-0.78x
// copy). The ring holds them without registers: three CTAs per SM, ~96 KB in flight.
// Not measured on a GPU yet.
template <class Cfg, class X, class W, class DY, class DRO, class DX, class DR, bool DBIAS, bool ROW_SUMS, bool STASH,
          bool PREFETCH, bool CENTER, bool SMEM_SUMS, bool ASYNC, bool W_SMEM, bool L2_NEXT>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) norm_bwd_kernel(const NormBwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  static_assert(!STASH || (!Cfg::REGS && Cfg::ROWS == 1), "the stash replaces registers, one row per CTA");
  static_assert(Cfg::REGS || STASH, "rows beyond registers and the stash take rmsnorm_bwd_split.cuh");
  static_assert(!PREFETCH || Cfg::REGS, "the pipeline keeps rows in registers");
  static_assert(!SMEM_SUMS || (Cfg::REGS && ROW_SUMS && !PREFETCH && Cfg::ROWS == 1),
                "shared-memory sums: one register-resident row per CTA at a time");
  static_assert(!ASYNC || (Cfg::REGS && !PREFETCH && !STASH && !SMEM_SUMS && Cfg::CLUSTER == 1 &&
                           sizeof(Packed<X, Cfg::VEC>) == 16 && sizeof(Packed<DY, Cfg::VEC>) == 16),
                "the cp.async ring: no cluster, 16-byte vectors of h and dout");
  static_assert(!L2_NEXT || (!PREFETCH && !ASYNC), "the L2 prefetch of the next row: rows loaded one at a time");
  constexpr int VEC = Cfg::VEC;
  // ROW_SUMS: dw/db accumulate here, in registers; otherwise (long rows, whose
  // registers or stash go to the row itself) norm_bwd_param_kernel computes them.
  constexpr bool DW = !is_none<W> && Cfg::REGS && ROW_SUMS;
  constexpr bool SUM_DB = DBIAS && Cfg::REGS && ROW_SUMS;
  constexpr int ACC = Cfg::REGS ? Cfg::ITEMS : 1;
  constexpr int SUMS = (DW || SUM_DB) && !SMEM_SUMS ? ACC : 1;
  __shared__ RowReduceStorage<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER, CENTER ? 2 : 1> reduce_storage;
  __shared__ ClusterPushes<Cfg::ROWS, Cfg::CLUSTER, CENTER ? 2 : 1> cluster_pushes;  // CLUSTER > 1 only
  __shared__ BwdCombineStorage<Cfg> combine;
  // W_SMEM (RowPlan::weight_smem): the CTA's slice of the weight (a CTA works on one
  // head) copied once into the dynamic shared memory, ahead of the stash, sums or
  // ring, and read there by both passes of every row. Read from global memory per
  // item, each load waited for the previous item's use (register pressure) in pass 1
  // and for the previous dx store (possible aliasing) in pass 2: two chains of ITEMS
  // L2 round trips a row (SASS of LayerNorm bf16 N=4096, sm_90a). A thread reads only
  // the entries it wrote (its own items), so no barrier orders them.
  static_assert(!W_SMEM || (!is_none<W> && Cfg::REGS), "a weight, register rows");
  using WPacked = Packed<typename or_type<W, float>::type, VEC>;
  constexpr int W_ENTRY = (static_cast<int>(sizeof(WPacked)) + 15) / 16 * 16;
  constexpr int W_BYTES = W_SMEM ? Cfg::SLICE_V * W_ENTRY : 0;
  extern __shared__ __align__(16) unsigned char stash_memory[];
  unsigned char* const dyn_memory = stash_memory + W_BYTES;
  using Stash = RowStash<Cfg, X, DY>;
  const Stash stash = Stash::make(dyn_memory);
  using ColumnSums = SharedColumnSums<VEC, Cfg::SLICE_V>;  // the CTA's columns (its slice of a cluster's row)
  const ColumnSums dw_smem{reinterpret_cast<float*>(dyn_memory)};
  const ColumnSums db_smem{reinterpret_cast<float*>(dyn_memory) + (DW ? ColumnSums::FLOATS : 0)};

  const RowThread<Cfg> t = RowThread<Cfg>::make();
  row_sums_walk_init(cluster_pushes);
  unsigned step = 0;  // row_sums_walk's count of this CTA's reductions
  const long long heads = p.shape.heads;
  const long long head = blockIdx.y;
  const long long part = blockIdx.x / Cfg::CLUSTER;
  const long long parts = gridDim.x / Cfg::CLUSTER;
  const long long rows_per_head = p.shape.rows / heads;
  const long long head_offset = head * Cfg::N;
  const long long stride = parts * Cfg::ROWS;
  auto w_entry = [&](int k) { return reinterpret_cast<WPacked*>(stash_memory + t.slice_vector(k) * W_ENTRY); };
  if constexpr (W_SMEM) {
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      *w_entry(k) = load_packed<VEC>(static_cast<const W*>(p.weight) + head_offset + t.column(k));
    });
  }
  // xhat, g and dout of item k (row.expand), its weight from shared memory under W_SMEM.
  // The row's type is spelled out: a generic lambda here (const auto& row) crashed the
  // front end of NVRTC and nvcc 13 (segmentation fault).
  using Row = NormBwdRow<VEC, X, W, DY, DRO, DX, DR, CENTER>;
  auto expand_item = [&](const Row& row, int k, const Packed<X, VEC>& hp, const Packed<DY, VEC>& dp, float (&xh)[VEC],
                    float (&g)[VEC], float (&d)[VEC]) {
    if constexpr (W_SMEM) {
      const WPacked wp = *w_entry(k);
      row.expand_packed(wp, hp, dp, xh, g, d);
    } else {
      row.expand(t.column(k), hp, dp, xh, g, d);
    }
  };
  float* dw_partial = DW ? p.dweight_partial + (part * heads + head) * Cfg::N : nullptr;
  float* db_partial = SUM_DB ? p.dbias_partial + (part * heads + head) * Cfg::N : nullptr;

  float dw_acc[SUMS][VEC], db_acc[SUMS][VEC];
#pragma unroll
  for (int k = 0; k < SUMS; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw_acc[k][i] = db_acc[k][i] = 0.f;
  if constexpr (SMEM_SUMS) {
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      if constexpr (DW) dw_smem.zero(t.slice_vector(k));
      if constexpr (SUM_DB) db_smem.zero(t.slice_vector(k));
    });
  }

  // A row of this thread: `base` is the CTA's first row of the step (uniform
  // across the CTA), r the batch row, rstd its saved rstd.
  struct RowAt {
    long long r;
    bool active;
    float rstd;
    float mean;
  };
  // The row stays in registers in its storage dtype (half the registers of fp32
  // for 16-bit data); xhat and g are recomputed from it in the epilogue.
  using HRow = Packed<X, VEC>[ASYNC ? 1 : ACC];  // ASYNC: the row is in the ring instead
  using DRow = Packed<DY, VEC>[ASYNC ? 1 : ACC];
  // ASYNC's ring: stage s holds h, then dout, of the CTA's ROWS rows; a thread's
  // vector k sits at ring_index(k) (its row's block, then its slice_vector()).
  constexpr int kStages = 3;
  constexpr int kRingVectors = Cfg::ROWS * Cfg::SLICE_V;
  constexpr int kStageBytes = kRingVectors * static_cast<int>(sizeof(Packed<X, VEC>) + sizeof(Packed<DY, VEC>));
  auto ring_h = [&](int s) { return reinterpret_cast<Packed<X, VEC>*>(dyn_memory + s * kStageBytes); };
  auto ring_dy = [&](int s) {
    return reinterpret_cast<Packed<DY, VEC>*>(dyn_memory + s * kStageBytes +
                                              kRingVectors * static_cast<int>(sizeof(Packed<X, VEC>)));
  };
  auto ring_index = [&](int k) { return t.sub * Cfg::SLICE_V + t.slice_vector(k); };
  // Loads are issued before the arithmetic that uses them: every load of the row
  // (REGS), or kStashGroup items at a time. Loaded and used item by item, the
  // compiler reused one load's registers for the next and serialized them (see
  // rmsnorm_fwd.cuh).
  auto load_row = [&](long long base, HRow& hb, DRow& db, int stage = 0) {
    const long long j = base + t.sub;
    RowAt at;
    at.active = j < rows_per_head;
    at.r = head + heads * (at.active ? j : 0);
    at.rstd = at.active ? p.rstd[at.r] : 0.f;
    at.mean = CENTER && at.active ? p.mean[at.r] : 0.f;
    if constexpr (ASYNC) {
      const X* h = row_ptr<X>(p.x, p.shape, at.r);
      const DY* dy = row_ptr<DY>(p.dout, p.shape, at.r);
      for_each_item<Cfg>([&](int k) {
        if (!at.active || !t.owns(k)) return;
        const int col = t.column(k);
        cp_async_16(ring_h(stage) + ring_index(k), h + col);
        cp_async_16(ring_dy(stage) + ring_index(k), dy + col);
      });
    } else if constexpr (Cfg::REGS) {
      const X* h = row_ptr<X>(p.x, p.shape, at.r);
      const DY* dy = row_ptr<DY>(p.dout, p.shape, at.r);
      for_each_item<Cfg>([&](int k) {
        if (!at.active || !t.owns(k)) return;
        const int col = t.column(k);
        hb[k] = load_packed<VEC>(h + col);
        db[k] = load_packed<VEC>(dy + col);
      });
    }
    return at;
  };

  // Pass 1 (the row's dot product and dw/db sums, or the stash), the reduction,
  // then dx. Every thread of the CTA calls it (the reduction has barriers).
  auto finish_row = [&](const RowAt& at, const HRow& hb, const DRow& db, int stage = 0) {
    const auto row = NormBwdRow<VEC, X, W, DY, DRO, DX, DR, CENTER>::make(p, at.r, head_offset, at.rstd, at.mean);
    DotAccumulator<CENTER> dot;
    auto consume = [&](int k, const Packed<X, VEC>& hp, const Packed<DY, VEC>& dp) {
      float xh[VEC], g[VEC], d[VEC];
      expand_item(row, k, hp, dp, xh, g, d);
      dot.add(xh, g);
      if constexpr (STASH) {
        stash.h[t.slice_vector(k)] = hp;
        stash.dy[t.slice_vector(k)] = dp;
      }
      if constexpr (SMEM_SUMS) {
        if constexpr (DW) {
          float prod[VEC];
#pragma unroll
          for (int i = 0; i < VEC; ++i) prod[i] = d[i] * xh[i];
          dw_smem.add(t.slice_vector(k), prod);
        }
        if constexpr (SUM_DB) db_smem.add(t.slice_vector(k), d);
      } else if constexpr (DW || SUM_DB) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          dw_acc[k][i] += d[i] * xh[i];
          db_acc[k][i] += d[i];
        }
      }
    };
    if constexpr (ASYNC) {
      for_each_item<Cfg>([&](int k) {
        if (at.active && t.owns(k)) consume(k, ring_h(stage)[ring_index(k)], ring_dy(stage)[ring_index(k)]);
      });
    } else if constexpr (Cfg::REGS) {
      for_each_item<Cfg>([&](int k) {
        if (at.active && t.owns(k)) consume(k, hb[k], db[k]);
      });
    } else {
      const X* h = row_ptr<X>(p.x, p.shape, at.r);
      const DY* dy = row_ptr<DY>(p.dout, p.shape, at.r);
      constexpr int G = kStashGroup;
      for (int k0 = 0; k0 < Cfg::ITEMS; k0 += G) {
        Packed<X, VEC> hg[G];
        Packed<DY, VEC> dg[G];
#pragma unroll
        for (int q = 0; q < G; ++q) {
          const int k = k0 + q;
          if (k < Cfg::ITEMS && at.active && t.owns(k)) {
            hg[q] = load_packed<VEC>(h + t.column(k));
            dg[q] = load_packed<VEC>(dy + t.column(k));
          }
        }
#pragma unroll
        for (int q = 0; q < G; ++q) {
          const int k = k0 + q;
          if (k < Cfg::ITEMS && at.active && t.owns(k)) consume(k, hg[q], dg[q]);
        }
      }
    }

    // Register-resident rows load dresidual_out before the reduction, all items at
    // once: loaded next to each item's dx store, each load waited for the stores
    // before it (they may alias), a memory round trip per item after the barrier.
    // H200, M*N = 2^27, ratio to copy without -> with (9c0c39d -> 1702858, one run,
    // docs/perf/h200-2026-11-30.md): RMSNorm fp32 N=256 0.852 -> 0.971, 8192 0.803 ->
    // 0.994, bf16 N=16384 0.739 -> 0.893; LayerNorm fp32 N=4096 0.678 -> 0.873, bf16
    // N=8192 0.693 -> 0.843. Its registers cost 16-bit rows below N=8192 CTAs per SM:
    // LayerNorm bf16 N=256 0.812 -> 0.746, RMSNorm bf16 N=4096 0.868 -> 0.815. As
    // limited here (a1a09e4 -> b7e2621, one run): RMSNorm fp32 N=1024 0.823 -> 0.959,
    // 8192 0.801 -> 0.994, bf16 N=16384 0.742 -> 0.899; LayerNorm fp32 N=256 0.847 ->
    // 0.984, 4096 0.679 -> 0.872, bf16 N=8192 0.694 -> 0.836; 16-bit rows below N=8192
    // within 1 % or better (LayerNorm bf16 N=4096 0.682 -> 0.703).
    constexpr bool DRO_EARLY = Cfg::REGS && !is_none<DRO> && backward_dro_early(Cfg::N, sizeof(X) > sizeof(DY) ? sizeof(X) : sizeof(DY));
    typename decltype(row)::DroPacked dro_early[DRO_EARLY ? Cfg::ITEMS : 1];
    if constexpr (DRO_EARLY) {
      for_each_item<Cfg>([&](int k) {
        if (at.active && t.owns(k)) dro_early[k] = row.load_dro(t.column(k));
      });
    }

    // LayerNorm's two sums in one reduction: one set of barriers per row.
    float sums[CENTER ? 2 : 1];
    sums[0] = dot.gx;
    if constexpr (CENTER) sums[CENTER ? 1 : 0] = dot.g;
    row_sums_walk(sums, t.sub, t.lane, reduce_storage, cluster_pushes, step++);
    RowDots means;
    means.gx_mean = sums[0] / static_cast<float>(Cfg::N);
    means.g_mean = CENTER ? sums[CENTER ? 1 : 0] / static_cast<float>(Cfg::N) : 0.f;
    if (!at.active) return;

    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      const int col = t.column(k);
      float xh[VEC], g[VEC], d[VEC];
      if constexpr (ASYNC) {
        expand_item(row, k, ring_h(stage)[ring_index(k)], ring_dy(stage)[ring_index(k)], xh, g, d);
      } else if constexpr (Cfg::REGS) {
        expand_item(row, k, hb[k], db[k], xh, g, d);
      } else {
        expand_item(row, k, stash.h[t.slice_vector(k)], stash.dy[t.slice_vector(k)], xh, g, d);
      }
      if constexpr (DRO_EARLY) {
        row.store_dx(col, xh, g, means, dro_early[k]);
      } else {
        row.store_dx(col, xh, g, means);
      }
    });
  };

  // L2_NEXT: before this CTA loads its rows, its first thread asks L2 for the CTA's
  // slices of the rows it takes next (h, dout, dresidual_out), so that
  // those loads come from L2. Rows loaded one at a time (no register prefetch,
  // no ring) otherwise wait on HBM's latency with nothing in flight behind them:
  // ncu on H200, LayerNorm bf16 N=2048 with dw and db, four 128-thread CTAs per SM
  // (127 registers), found no eligible warp in ~40% of issue slots.
  auto prefetch_next_rows = [&](long long base) {
    if constexpr (L2_NEXT) {  // instantiated only then: it takes 16-byte vectors
      if (threadIdx.x != 0) return;
#pragma unroll 1
      for (int s = 0; s < Cfg::ROWS; ++s) {
        const long long j = base + s;
        if (j >= rows_per_head) return;
        const long long r = head + heads * j;
        prefetch_slice_l2<Cfg, X>(p.x, p.shape, r, t.rank);
        prefetch_slice_l2<Cfg, DY>(p.dout, p.shape, r, t.rank);
        prefetch_slice_l2<Cfg, DRO>(p.dresidual_out, p.shape, r, t.rank);
      }
    }
  };

  HRow h_a;
  DRow d_a;
  const long long first = part * Cfg::ROWS;
  if constexpr (ASYNC) {
    // Unrolled by the ring's three stages, so that every stage index is a
    // constant. Each row's copies are one commit group (empty past the last
    // row); waiting until two groups are pending retires the row to finish.
    static_assert(kStages == 3, "the loop below is unrolled for three stages");
    RowAt at0 = load_row(first, h_a, d_a, 0);
    cp_async_commit();
    RowAt at1 = load_row(first + stride, h_a, d_a, 1);
    cp_async_commit();
    for (long long base = first; base < rows_per_head; base += 3 * stride) {
      const RowAt at2 = load_row(base + 2 * stride, h_a, d_a, 2);
      cp_async_commit();
      cp_async_wait<2>();
      finish_row(at0, h_a, d_a, 0);
      if (base + stride >= rows_per_head) break;
      at0 = load_row(base + 3 * stride, h_a, d_a, 0);
      cp_async_commit();
      cp_async_wait<2>();
      finish_row(at1, h_a, d_a, 1);
      if (base + 2 * stride >= rows_per_head) break;
      at1 = load_row(base + 4 * stride, h_a, d_a, 1);
      cp_async_commit();
      cp_async_wait<2>();
      finish_row(at2, h_a, d_a, 2);
    }
    cp_async_wait<0>();  // nothing in flight at exit (the groups past the last row are empty)
  } else if constexpr (PREFETCH) {
    // Two register sets, alternating roles, unrolled by two so that no set is
    // copied (a copy would wait for the loads it is meant to overlap).
    HRow h_b;
    DRow d_b;
    RowAt at_a = load_row(first, h_a, d_a);
    for (long long base = first; base < rows_per_head; base += 2 * stride) {
      const RowAt at_b = load_row(base + stride, h_b, d_b);
      finish_row(at_a, h_a, d_a);
      if (base + stride >= rows_per_head) break;
      at_a = load_row(base + 2 * stride, h_a, d_a);
      finish_row(at_b, h_b, d_b);
    }
  } else {
    for (long long base = first; base < rows_per_head; base += stride) {
      prefetch_next_rows(base + stride);  // nothing unless L2_NEXT
      finish_row(load_row(base, h_a, d_a), h_a, d_a);
    }
  }

  // The sums as the one writer takes them: the registers, or (SMEM_SUMS) the
  // shared-memory sums read back into registers, which the row no longer needs.
  auto write_sums = [&](const auto& dw_sums, const auto& db_sums) {
    if constexpr (DW) {
      if (p.dweight_final != nullptr) {
        write_partial<Cfg, false>(t, dw_sums, static_cast<W*>(p.dweight_final) + head_offset, combine);
      } else {
        write_partial<Cfg, true>(t, dw_sums, dw_partial, combine);
      }
    }
    if constexpr (SUM_DB) write_partial<Cfg, true>(t, db_sums, db_partial, combine);
  };
  if constexpr (SMEM_SUMS) {
    float dw_sums[ACC][VEC], db_sums[ACC][VEC];
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      if constexpr (DW) dw_smem.read(t.slice_vector(k), dw_sums[k]);
      if constexpr (SUM_DB) db_smem.read(t.slice_vector(k), db_sums[k]);
    });
    write_sums(dw_sums, db_sums);
  } else {
    write_sums(dw_acc, db_acc);
  }
  row_sums_walk_exit<Cfg::CLUSTER>();
}

// Column-wise dw/db for rows too long for the register-resident kernel:
//   dw[c] = sum_r dout[r, c] * (h[r, c] - mean[r]) * rstd[r],   db[c] = sum_r dout[r, c]
// (mean = 0 for RMSNorm).
// Block (x: column chunk of THREADS * VEC columns, y: part = a contiguous chunk of
// the head's rows, z: head); each thread walks its part's rows in order, so the
// partial [part][head][N] is deterministic. A warp reads 32 adjacent vectors of a
// row: coalesced, and each row's slice is touched by exactly one thread.
template <int N, int VEC, int THREADS, class X, class DY, bool DW, bool DBIAS, bool CENTER>
__global__ void __launch_bounds__(THREADS) norm_bwd_param_kernel(const NormBwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  const int col = (static_cast<int>(blockIdx.x) * THREADS + static_cast<int>(threadIdx.x)) * VEC;
  if (col >= N) return;
  const long long heads = p.shape.heads;
  const long long head = blockIdx.z;
  const long long part = blockIdx.y;
  const long long parts = gridDim.y;
  const long long rows_per_head = p.shape.rows / heads;
  const long long chunk = (rows_per_head + parts - 1) / parts;
  const long long j_end = (part + 1) * chunk < rows_per_head ? (part + 1) * chunk : rows_per_head;
  float dw[VEC], db[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) dw[i] = db[i] = 0.f;
  // Unrolled further, the 64-bit row-offset divisions made ptxas spill on sm_80;
  // unrolled by two, on sm_100 (12 bytes, LayerNorm bf16 N=32768 with dw alone).
  // Two rows in flight per thread are measured on sm_90 only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  constexpr int kRowsUnrolled = 1;
#else
  constexpr int kRowsUnrolled = 2;
#endif
#pragma unroll kRowsUnrolled
  for (long long j = part * chunk; j < j_end; ++j) {
    const long long r = head + heads * j;
    float d[VEC];
    load_vec<VEC>(row_ptr<DY>(p.dout, p.shape, r) + col, d);
    if constexpr (DW) {
      float h[VEC];
      load_vec<VEC>(row_ptr<X>(p.x, p.shape, r) + col, h);
      const float rstd = p.rstd[r];
      const float mean = CENTER ? p.mean[r] : 0.f;
#pragma unroll
      for (int i = 0; i < VEC; ++i) dw[i] += d[i] * ((CENTER ? h[i] - mean : h[i]) * rstd);
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) db[i] += d[i];
  }
  const long long base = (part * heads + head) * N + col;  // VEC-aligned (write_partial)
  if constexpr (DW) store_vec<VEC>(p.dweight_partial + base, dw);
  if constexpr (DBIAS) store_vec<VEC>(p.dbias_partial + base, db);
}

}  // namespace nk
