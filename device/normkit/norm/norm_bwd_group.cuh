// Backward of RMSNorm and LayerNorm (the formulas of rmsnorm_bwd_row.cuh) for long
// rows cut into slices that independent CTAs take: a group of S CTAs (no cluster)
// shares each row, and the slices' sums meet in global memory, as the forward's
// norm_fwd_group_kernel does.
//
// Why it is shaped this way: the long-row backward plans either keep a row over a
// cluster (register rows, the bulk ring: a cluster must fit in a GPC, so clusters of
// 8-16 leave 20 of 132 SMs idle) or read h and dout twice (the split kernels), and
// stay at 0.51-0.80x copy from N=65536 (fp32 at N=262144 the lowest). Here every SM
// works and each byte is read once:
//  - A CTA's slices of a row (h, dout, dresidual_out) arrive by cp.async.bulk in a
//    ring of STAGES shared-memory stages and stay there until dx is written.
//    DRO_DIRECT: dresidual_out, read only by dx's add, skips the ring: each thread loads
//    its vectors into registers at the top of the step that writes the row's dx, so
//    the stages hold h and dout alone and more of them fit.
//  - Step j reads row j's slice once: its share of the row's sums of g * xhat (and
//    LayerNorm's of g), published in global slots, and its columns' dw/db, which
//    need only the saved rstd and mean and so do not wait for anyone.
//  - The same step writes dx of row j - LOOKAHEAD, whose other slices' sums have had
//    LOOKAHEAD steps to arrive; warp 0 asks for them a whole step ahead.
//  - A slot is a 64-bit word (1 << 32) | float bits: never zero once published, so
//    a zeroed slot reads as "not yet" (no count, no fence; group_sum_slot, params.cuh).
//  - dw/db stay in registers (ITEMS * VEC each) over all the group's rows; the
//    group's partial row [group][N] is written once and param_grad_reduce adds the
//    groups' partials in a fixed order: deterministic.
// Sums: every CTA of the group adds the same S slots in the same order (lane l takes
// slices l, l + 32, ..., then a butterfly, as mean_of_chunk_sums), so every slice of
// a row uses the same bits. A CTA that waited sync_timeout_ns for a slot (a process
// given fewer SMs than the device has) computes every slice's sums of that row from
// global memory with the same thread layout and arithmetic: the same bits.
// Grid: persistent, G groups of S CTAs, one head (the host plans it only there);
// group g takes rows g, g + G, ...; CTA c of a group slice c of each.
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/norm/rmsnorm_bwd_row.cuh"

namespace nk {

// Steps between publishing a row's slice sums and writing its dx: the slack the
// group's CTAs have to drift apart before one waits for another's slot. The ring holds
// the rows in between, so it is at most STAGES - 2; 4 where that fits (fp32 without
// dresidual_out, six stages): LayerNorm at N=262144 0.871 -> 0.882 of copy against 2,
// RMSNorm level (0.924 / 0.922; docs/perf/h200-2026-12-03e.md); 1 measured slower.
// NK_BWD_GROUP_LOOKAHEAD=D is a build switch for measuring (a larger one needs stages=
// forced to D + 2 or more); 0 (the default) picks min(STAGES - 2, 4).
#ifndef NK_BWD_GROUP_LOOKAHEAD
#define NK_BWD_GROUP_LOOKAHEAD 0
#endif
template <int STAGES>
constexpr int bwd_group_lookahead() {
  return NK_BWD_GROUP_LOOKAHEAD > 0 ? NK_BWD_GROUP_LOOKAHEAD : (STAGES - 2 < 4 ? STAGES - 2 : 4);
}

template <class Cfg, class X, class W, class DY, class DRO, class DX, class DR, bool DBIAS, bool CENTER, bool W_SMEM,
          bool DRO_DIRECT, int STAGES>
__global__ void __launch_bounds__(Cfg::TPR, Cfg::MIN_BLOCKS) norm_bwd_group_kernel(const NormBwdParams p) {
  constexpr int VEC = Cfg::VEC;
  constexpr int TPR = Cfg::TPR;
  constexpr int ITEMS = Cfg::ITEMS;
  constexpr int S = Cfg::CHUNKS;
  constexpr int SLICE_ELEMS = TPR * ITEMS * VEC;
  constexpr int D = bwd_group_lookahead<STAGES>();
  constexpr int K = CENTER ? 2 : 1;  // the row's sums: of g * xhat, and LayerNorm's of g
  constexpr int SLOTS_PER_LANE = (S + 31) / 32;
  constexpr bool DW = !is_none<W>;
  static_assert(Cfg::FULL, "every slice TPR * ITEMS vectors (the host plans N a multiple of the slice)");
  static_assert(VEC * sizeof(X) == 16 && VEC * sizeof(DY) % 16 == 0 && VEC * size_or_zero<DRO> % 16 == 0,
                "16-byte vectors of h, whole 16-byte items of dout and dresidual_out");
  static_assert(S <= 128, "a warp reads a row's slots, four a lane at most");
  static_assert(STAGES >= D + 2, "the ring holds the rows between publish and dx, and one loading");
  // A stage: the slice of h, then dout's, then dresidual_out's (the layout's "residual").
  constexpr bool DRO_STAGED = !is_none<DRO> && !DRO_DIRECT;
  constexpr BulkRowsLayout L = bulk_rows_layout(TPR * ITEMS, VEC, sizeof(X),
                                                sizeof(DY) + (DRO_STAGED ? size_or_zero<DRO> : 0),
                                                W_SMEM ? size_or_zero<W> : 0, 0, STAGES);
  constexpr unsigned DY_AT = L.x_bytes;
  constexpr unsigned DRO_AT = L.x_bytes + SLICE_ELEMS * sizeof(DY);
  using Row = NormBwdRow<VEC, X, W, DY, DRO, DX, DR, CENTER>;
  extern __shared__ __align__(128) unsigned char bulk_memory[];
  __shared__ unsigned long long bulk_barriers[STAGES + 1];  // the stages', then the weight's
  unsigned long long* const stage_full = bulk_barriers;
  unsigned long long& weight_full = bulk_barriers[STAGES];
  __shared__ RowReduceStorage<1, TPR, 1, K> cta_storage;
  __shared__ float stage_stats[STAGES][2];  // rstd and mean of the row in each stage
  __shared__ RowDots row_means;             // the row whose dx is being written
  __shared__ int timed_out_shared;
  __shared__ float fallback_sums[K][S];     // a timed-out CTA's own sums of the row's slices

  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  const int rank = static_cast<int>(blockIdx.x % S);
  const long long group = blockIdx.x / S;
  const long long groups = gridDim.x / S;
  const long long my_rows = group < p.shape.rows ? (p.shape.rows - 1 - group) / groups + 1 : 0;
  const long long slice_begin = static_cast<long long>(rank) * SLICE_ELEMS;
  auto stage = [&](int s) { return bulk_memory + s * L.slice_bytes; };
  auto row_of = [&](long long j) { return group + j * groups; };
  // One thread's copies of this CTA's slices of its j-th row into stage s.
  auto issue_row = [&](long long j, int s) {
    if (j >= my_rows) return;
    const long long r = row_of(j);
    unsigned char* const at = stage(s);
    mbarrier_expect_bytes(&stage_full[s], L.slice_bytes);
    bulk_load(at, row_ptr<X>(p.x, p.shape, r) + slice_begin, L.x_bytes, &stage_full[s]);
    bulk_load(at + DY_AT, row_ptr<DY>(p.dout, p.shape, r) + slice_begin, SLICE_ELEMS * sizeof(DY), &stage_full[s]);
    if constexpr (DRO_STAGED)
      bulk_load(at + DRO_AT, row_ptr<DRO>(p.dresidual_out, p.shape, r) + slice_begin,
                SLICE_ELEMS * size_or_zero<DRO>, &stage_full[s]);
  };
  const W* w_global = DW ? static_cast<const W*>(p.weight) + slice_begin : nullptr;
  // With W_SMEM this CTA's weight slice is always in shared memory (one bulk copy where
  // 16-byte aligned, else copied by every thread once), read there unconditionally.
  constexpr bool W_SHARED = L.weight_bytes > 0;
  const bool w_bulk = W_SHARED && reinterpret_cast<unsigned long long>(w_global) % 16 == 0;
  using WT = typename or_type<W, float>::type;
  WT* const w_smem = reinterpret_cast<WT*>(bulk_memory + STAGES * L.slice_bytes);
  if (threadIdx.x == 0) {
    init_bulk_barriers(bulk_barriers);
    if (w_bulk) {
      mbarrier_expect_bytes(&weight_full, L.weight_bytes);
      bulk_load(bulk_memory + STAGES * L.slice_bytes, w_global, L.weight_bytes, &weight_full);
    }
#pragma unroll 1
    for (int s = 0; s < STAGES; ++s) issue_row(s, s);
  }
  if constexpr (W_SHARED) {
    if (!w_bulk) copy_by_threads(w_smem, w_global, SLICE_ELEMS, threadIdx.x, TPR);
  }
  __syncthreads();  // the stages' barriers initialized before any thread waits on them
  if (w_bulk) mbarrier_wait(&weight_full, 0);

  float dw_acc[DW ? ITEMS : 1][VEC];
  float db_acc[DBIAS ? ITEMS : 1][VEC];
#pragma unroll
  for (int k = 0; k < (DW ? ITEMS : 1); ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw_acc[k][i] = 0.f;
#pragma unroll
  for (int k = 0; k < (DBIAS ? ITEMS : 1); ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) db_acc[k][i] = 0.f;

  // xhat (xh_scaled false: h - mean), g and dout of vector k of a slice of h and dout
  // that starts at hs and ds (a stage, or a timed-out CTA's global rows), at element
  // col0 of the row; the weight from its shared copy where `own` (this CTA's slice).
  auto expand_item = [&](const Row& row, const X* hs, const DY* ds, long long col0, bool own, bool xh_scaled, int k,
                         float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) {
    const int v = k * TPR + tid;
    if (W_SHARED && own) {
      if (xh_scaled) {
        row.template expand_shared<true>(w_smem + v * VEC, hs + v * VEC, ds + v * VEC, xh, g, d);
      } else {
        row.template expand_shared<false>(w_smem + v * VEC, hs + v * VEC, ds + v * VEC, xh, g, d);
      }
    } else {
      const WT* const no_copy = nullptr;
      const int col = static_cast<int>(col0) + v * VEC;
      if (xh_scaled) {
        row.template expand_at<true>(col, no_copy, hs + v * VEC, ds + v * VEC, xh, g, d);
      } else {
        row.template expand_at<false>(col, no_copy, hs + v * VEC, ds + v * VEC, xh, g, d);
      }
    }
  };
  // One CTA barrier a sum: the warps' partials go to alternating slot sets.
  unsigned sums_taken = 0;
  // The slice's sums (every thread gets them), and (own: this CTA's slice in a stage)
  // its dw/db.
  auto slice_sums = [&](const Row& row, const X* hs, const DY* ds, long long col0, bool own, float (&sums)[K]) {
    DotAccumulator<CENTER> dot;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      float xh[VEC], g[VEC], d[VEC];
      expand_item(row, hs, ds, col0, own, true, k, xh, g, d);
      dot.add(xh, g);
      if (own) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          if constexpr (DW) dw_acc[k][i] += d[i] * xh[i];
          if constexpr (DBIAS) db_acc[k][i] += d[i];
        }
      }
    }
    sums[0] = dot.gx;
    if constexpr (CENTER) sums[K - 1] = dot.g;
    if (sums_taken++ & 1u) {
      row_sums<1, TPR, 1, true, 1>(sums, 0, tid, cta_storage);
    } else {
      row_sums<1, TPR, 1, true, 0>(sums, 0, tid, cta_storage);
    }
  };

  // Where the ask goes: NK_GROUP_ASK_EARLY (row_engine.cuh).
  // Warp 0's slots of the row whose dx comes next (lane l: slices l, l + 32, ...),
  // asked a step ahead; 0 where not yet published (a later poll asks again). Two sets,
  // the steps alternating between them (the loop below runs two steps an iteration):
  // measured faster than one set (backward RMSNorm fp32 N=262144 0.876 -> 0.919, forward
  // LayerNorm fp32 with a residual 0.914 -> 0.926; docs/perf/h200-2026-12-03d.md; which
  // SASS difference does it was not isolated).
  using Slots = unsigned long long[K][SLOTS_PER_LANE];
  Slots slots_even, slots_odd;
#pragma unroll
  for (int q = 0; q < K; ++q)
#pragma unroll
    for (int c = 0; c < SLOTS_PER_LANE; ++c) slots_even[q][c] = slots_odd[q][c] = 0;
  auto slot_address = [&](long long r, int q, int c) { return p.group_slots + (r * K + q) * S + c; };
  auto ask_slots = [&](long long j, Slots& slot) {
    if (threadIdx.x >= 32 || j < 0 || j >= my_rows) return;
#pragma unroll
    for (int q = 0; q < K; ++q)
#pragma unroll
      for (int c = 0; c < SLOTS_PER_LANE; ++c)
        if (lane + 32 * c < S)
          asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];"
                       : "=l"(slot[q][c])
                       : "l"(slot_address(row_of(j), q, lane + 32 * c))
                       : "memory");
  };
  // The row's means from its slices' sums (sum_of(q, c): sum q of slice c), by warp
  // 0 in a fixed order: the same bits in every CTA.
  auto combine = [&](auto&& sum_of) {
    float total[K];
#pragma unroll
    for (int q = 0; q < K; ++q) {
      total[q] = 0.f;
#pragma unroll
      for (int c = 0; c < SLOTS_PER_LANE; ++c)
        if (lane + 32 * c < S) total[q] += sum_of(q, c);
      total[q] = group_sum<32>(total[q]) / static_cast<float>(Cfg::N);
    }
    if (lane == 0) row_means = RowDots{total[0], CENTER ? total[K - 1] : 0.f};
  };

  // rstd and mean of the CTA's next row to publish, loaded a step ahead.
  float rstd_next = 0.f, mean_next = 0.f;
  auto stats_of = [&](long long j) {
    if (j >= my_rows) return;
    rstd_next = p.rstd[row_of(j)];
    if constexpr (CENTER) mean_next = p.mean[row_of(j)];
  };
  stats_of(0);
  // Step j: publish row j's slice sums, write dx of row j - D (its slots in `slot`),
  // ask for row j + 1 - D's slots into `next`.
  auto step = [&](long long j, Slots& slot, Slots& next) {
    // DRO_DIRECT: this thread's dresidual_out vectors of row j - D, in flight while row
    // j's sums are made.
    typename Row::DroPacked dro_direct[DRO_DIRECT ? ITEMS : 1];
    if constexpr (DRO_DIRECT && !is_none<DRO>) {
      if (j >= D) {
        const Row early = Row::make(p, row_of(j - D), 0, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) dro_direct[k] = early.load_dro(static_cast<int>(slice_begin) + (k * TPR + tid) * VEC);
      }
    }
    if (j < my_rows) {  // row j: its slice sums published, its dw/db added
      const long long r = row_of(j);
      const int s = static_cast<int>(j % STAGES);
      const float rstd = rstd_next, mean = mean_next;
      stats_of(j + 1);
      const Row row = Row::make(p, r, 0, rstd, mean);
      mbarrier_wait(&stage_full[s], static_cast<unsigned>((j / STAGES) & 1));
      float sums[K];
      slice_sums(row, reinterpret_cast<const X*>(stage(s)), reinterpret_cast<const DY*>(stage(s) + DY_AT),
                 slice_begin, true, sums);
      if (threadIdx.x == 0) {
#pragma unroll
        for (int q = 0; q < K; ++q)
          asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(slot_address(r, q, rank)),
                       "l"(group_sum_slot(__float_as_uint(sums[q])))
                       : "memory");
        stage_stats[s][0] = rstd;
        stage_stats[s][1] = mean;
      }
    }
    if (NK_GROUP_ASK_EARLY) ask_slots(j + 1 - D, next);
    if (j >= D) {  // row j - D: dx
      const long long jd = j - D;
      const long long r = row_of(jd);
      const int s = static_cast<int>(jd % STAGES);
      if (threadIdx.x < 32) {
        int late = p.sync_timeout_ns == 0;  // NORMKIT_SYNC_TIMEOUT_US=0: never wait
        int missing = 0;
#pragma unroll
        for (int q = 0; q < K; ++q)
#pragma unroll
          for (int c = 0; c < SLOTS_PER_LANE; ++c) missing |= lane + 32 * c < S && slot[q][c] == 0;
        // The clock only where a slot is still missing (asked a step ahead, most are in).
        if (missing && !late) {
          unsigned deadline;
          asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(deadline));
          deadline += p.sync_timeout_ns;
#pragma unroll
          for (int q = 0; q < K; ++q)
#pragma unroll
            for (int c = 0; c < SLOTS_PER_LANE; ++c) {
              while (lane + 32 * c < S && slot[q][c] == 0 && !late) {
                asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];"
                             : "=l"(slot[q][c])
                             : "l"(slot_address(r, q, lane + 32 * c))
                             : "memory");
                unsigned now;
                asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(now));
                late = static_cast<int>(now - deadline) >= 0 && slot[q][c] == 0;
              }
            }
        }
        late = __any_sync(0xffffffffu, late);
        if (!late) combine([&](int q, int c) { return __uint_as_float(static_cast<unsigned>(slot[q][c])); });
        if (lane == 0) timed_out_shared = late;
      }
      __syncthreads();
      const Row row = Row::make(p, r, 0, stage_stats[s][0], stage_stats[s][1]);
      if (timed_out_shared) {
        // Every slice's sums of the row from global memory, by this CTA alone (one
        // block reduction each), then combined as the slots would have been.
        const X* h_row = row_ptr<X>(p.x, p.shape, r);
        const DY* dy_row = row_ptr<DY>(p.dout, p.shape, r);
#pragma unroll 1
        for (int c = 0; c < S; ++c) {
          float sums[K];
          slice_sums(row, h_row + c * SLICE_ELEMS, dy_row + c * SLICE_ELEMS, static_cast<long long>(c) * SLICE_ELEMS,
                     false, sums);
          if (threadIdx.x == 0) {
#pragma unroll
            for (int q = 0; q < K; ++q) fallback_sums[q][c] = sums[q];
          }
        }
        __syncthreads();
        if (threadIdx.x < 32) combine([&](int q, int c) { return fallback_sums[q][lane + 32 * c]; });
        __syncthreads();
      }
      const RowDots means = row_means;
      const X* hs = reinterpret_cast<const X*>(stage(s));
      const DY* ds = reinterpret_cast<const DY*>(stage(s) + DY_AT);
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        float xh[VEC], g[VEC], d[VEC];
        expand_item(row, hs, ds, slice_begin, true, false, k, xh, g, d);
        const int v = k * TPR + tid;
        const int col = static_cast<int>(slice_begin) + v * VEC;
        if constexpr (DRO_DIRECT) {
          row.template store_dx_at<false>(col, xh, g, means, dro_direct[k]);
        } else {
          row.template store_dx_at<false>(col, xh, g, means,
                                          reinterpret_cast<const DRO*>(stage(s) + DRO_AT + v * (VEC * size_or_zero<DRO>)));
        }
      }
      __syncthreads();  // every thread's reads of stage s (and of row_means) done
      if (threadIdx.x == 0) {
        if (NK_GROUP_PROXY_FENCE) fence_async_shared();  // the stage's generic-proxy reads before the copy's writes
        issue_row(jd + STAGES, s);
      }
    }
    if (!NK_GROUP_ASK_EARLY) ask_slots(j + 1 - D, next);
  };
  for (long long j = 0; j < my_rows + D; j += 2) {
    step(j, slots_even, slots_odd);
    if (j + 1 < my_rows + D) step(j + 1, slots_odd, slots_even);
  }

  // The group's partial of this slice's columns: [group][N], 16-byte stores
  // (store_vec_at: through the element pointer they came out as scalar stores).
  const long long first_vector = (group * Cfg::N + slice_begin) / VEC;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if constexpr (DW) store_vec_at<VEC>(p.dweight_partial, first_vector + k * TPR + tid, dw_acc[k]);
    if constexpr (DBIAS) store_vec_at<VEC>(p.dbias_partial, first_vector + k * TPR + tid, db_acc[k]);
  }
}

}  // namespace nk
