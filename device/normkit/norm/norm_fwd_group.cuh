// Forward of RMSNorm and LayerNorm (the formulas of rmsnorm_fwd.cuh, residual and
// residual_out included) for long rows cut into slices that independent CTAs take:
// a group of S CTAs (no thread-block cluster) shares each row, and the group's
// slices' sums meet in global memory.
//
// Why it is shaped this way: a cluster must fit in one GPC, so on the H200 clusters
// of 4 keep 120 of 132 SMs busy and clusters of 8 or 16 only 112 (ncu "Max Active
// Clusters"), which caps the long rows of norm_fwd_kernel and norm_fwd_bulk_kernel
// near 0.85-0.91x copy; fp32 rows with a residual at N=262144, whose slices fill a
// 16-CTA cluster's shared memory one stage deep, ran at 0.68-0.71x. Plain CTAs
// run on every SM. What a cluster gives for free, a cheap exchange of each row's
// sums, costs here a round trip through L2 (~1-2 us under load), so the kernel is
// built to keep that round trip out of every row's chain:
//  - Rows arrive by cp.async.bulk in a ring of STAGES shared-memory stages (one
//    thread copies the CTA's slice of x and of the residual), and stay there: no
//    registers hold a row across a wait.
//  - Step j publishes row j's slice moments and normalizes row j - LOOKAHEAD, so a
//    row's other slices have had LOOKAHEAD steps to arrive before anyone waits.
//  - The slot of a slice is a 64-bit word whose value is its own "published" flag
//    (group_slot_pack, params.cuh): a store with no fence (a fence would wait for
//    the CTA's stores in flight) and loads with no count to acquire.
//  - Warp 0 asks for the slots of the row it normalizes next one whole step
//    ahead, so the L2 round trip overlaps a step's work.
//  - out and residual_out go out as one 16-byte store a vector (store_vec_at): built as
//    a cast of the slice's element pointer, they came out as four scalar stores, and the
//    kernel ran 10-17 % below its standalone prototype until they did not.
// Measured (docs/perf/h200-2026-12-01e.md): fp32 rows at N=262144, RMSNorm's with a
// residual 0.70 -> 0.93x copy, LayerNorm's with one 0.68 -> 0.89, without one 0.72 ->
// 0.83; level with the other plans below (rmsnorm_heuristics_group.cpp).
//
// Moments: RMSNorm publishes (0, sum h^2); LayerNorm the slice's mean and M2 from two
// passes over the stage (the first around a shift, the slice's first h, as the bulk
// kernel does) and the group combines them as combine_slice_moments does (nothing
// cancels). Every CTA of the group combines the same S words in the same order, so
// every slice of a row uses the same mean and rstd bits.
// Waiting: the group's S CTAs must be resident together; the host launches no more
// groups than the device holds (max_resident_ctas) and plans this kernel only where
// one group fits. A CTA that waited sync_timeout_ns for a slot (a process given fewer
// SMs than the device has) computes every slice's moments of that row itself from
// global memory, with the same arithmetic: the same bits.
// COOPERATIVE (the in-place fused add: out over x, residual_out over the residual):
// the host launches the grid cooperatively, so every CTA is resident at once and a CTA
// waits for its group's slots with no deadline and no way out. It has to: a CTA that
// read the other slices from global memory could read them after their CTAs had
// overwritten them. Each CTA then reads and writes its own slice only, the bulk copy
// of a row into the stage done before any store over that row, so in place needs
// nothing else (sync_timeout_ns is not read).
// Grid: persistent, G groups of S CTAs; group g takes rows g, g + G, g + 2G, ...,
// CTA c of a group slice c of each (SplitConfig's chunk c).
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/common/shifted_moments.cuh"
#include "normkit/norm/row_engine.cuh"

namespace nk {

// Steps between publishing a row's slice moments and normalizing it.
constexpr int kGroupLookahead = 2;

template <class Cfg, class X, class R, class RO, class W, class B, class O, bool STORE_RSTD, bool CENTER,
          bool PARAMS_SMEM, int STAGES, bool COOPERATIVE = false>
__global__ void __launch_bounds__(Cfg::TPR, Cfg::MIN_BLOCKS) norm_fwd_group_kernel(const NormFwdParams p) {
  constexpr int VEC = Cfg::VEC;
  constexpr int TPR = Cfg::TPR;
  constexpr int S = Cfg::CHUNKS;
  constexpr int SLICE_V = TPR * Cfg::ITEMS;
  constexpr int SLICE_ELEMS = SLICE_V * VEC;
  constexpr int D = kGroupLookahead;
  constexpr int SLOTS_PER_LANE = (S + 31) / 32;
  using RR = typename or_type<R, X>::type;  // the residual's storage type (x's where there is none)
  static_assert(Cfg::FULL, "every slice SLICE_V vectors (the host plans N a multiple of the slice)");
  static_assert(VEC * sizeof(X) == 16, "16-byte vectors: the stage holds the slice as the row lays it out");
  static_assert(VEC * size_or_zero<R> % 16 == 0, "the residual's slices whole 16-byte chunks, as the bulk copy needs");
  static_assert(S <= 128, "a warp reads a row's slots, four a lane at most");
  static_assert(STAGES >= D + 2, "the ring holds the rows between publish and normalize, and one loading");
  constexpr BulkRowsLayout L = bulk_rows_layout(SLICE_V, VEC, sizeof(X), size_or_zero<R>,
                                                PARAMS_SMEM ? size_or_zero<W> : 0, PARAMS_SMEM ? size_or_zero<B> : 0,
                                                STAGES);
  extern __shared__ __align__(128) unsigned char bulk_memory[];
  __shared__ unsigned long long bulk_barriers[STAGES + 1];  // the stages', then the parameters'
  unsigned long long* const stage_full = bulk_barriers;
  unsigned long long& params_full = bulk_barriers[STAGES];
  // LayerNorm's slice moments from one CTA reduction of two shifted sums
  // (shifted_slice_moments), as the bulk ring's.
  constexpr int CTA_SUMS = CENTER ? 2 : 1;
  __shared__ RowReduceStorage<1, TPR, 1, CTA_SUMS> cta_storage;
  __shared__ float row_stats[2];  // the row being normalized: mean, rstd
  __shared__ int timed_out_shared;
  __shared__ unsigned long long fallback_slots[S];  // a timed-out CTA's own moments of the row's slices

  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int rank = static_cast<int>(blockIdx.x % S);
  const long long first = static_cast<long long>(blockIdx.x / S);
  const long long stride = static_cast<long long>(gridDim.x / S);
  const long long my_rows = first < p.shape.rows ? (p.shape.rows - 1 - first) / stride + 1 : 0;
  const long long slice_begin = static_cast<long long>(rank) * SLICE_ELEMS;
  auto stage = [&](int s) { return bulk_memory + s * L.slice_bytes; };
  auto row_of = [&](long long j) { return first + j * stride; };
  // One thread's copy of this CTA's slice of its j-th row into stage s.
  auto issue_row = [&](long long j, int s) {
    if (j < my_rows) copy_row_slices<X, R>(stage(s), p, row_of(j), slice_begin, L, &stage_full[s]);
  };
  const auto params = RingParams<VEC, W, B>::make(p, L, bulk_memory + STAGES * L.slice_bytes);
  const bool params_cached = params.cached;
  if (threadIdx.x == 0) {
    init_bulk_barriers(bulk_barriers);
    params.issue(p, L, slice_begin, &params_full);
#pragma unroll 1
    for (int s = 0; s < STAGES; ++s) issue_row(s, s);
  }
  __syncthreads();  // the stages' barriers initialized before any thread waits on them
  if (params_cached) mbarrier_wait(&params_full, 0);

  // h = x (+ residual) in fp32 of vector k of a slice that starts at xs (and rs),
  // in shared memory (a stage) or in global memory (a timed-out CTA's reads): the
  // same arithmetic, so the same bits, as every other forward kernel's h.
  auto load_h = [&](const X* xs, const RR* rs, int k, float (&h)[VEC]) {
    const int v = k * TPR + static_cast<int>(threadIdx.x);
    RawVec<X, VEC> raw;
    raw.load(xs + v * VEC);
#pragma unroll
    for (int i = 0; i < VEC; ++i) h[i] = raw.get(i);
    if constexpr (!is_none<R>) {
      RawVec<RR, VEC> raw_res;
      raw_res.load(rs + v * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) h[i] += raw_res.get(i);
    }
  };
  // One CTA barrier a sum: the warps' partials go to alternating slot sets, so a set
  // is written again only after every thread has passed the next sum's barrier.
  unsigned sums_taken = 0;
  auto cta_sums = [&](float (&v)[CTA_SUMS]) {
    if (sums_taken++ & 1u) {
      row_sums<1, TPR, 1, true, 1>(v, 0, static_cast<int>(threadIdx.x), cta_storage);
    } else {
      row_sums<1, TPR, 1, true, 0>(v, 0, static_cast<int>(threadIdx.x), cta_storage);
    }
  };
  auto cta_sum = [&](float v) {
    float all[CTA_SUMS] = {v};
    cta_sums(all);
    return all[0];
  };
  // The slice's moments as a slot word (every thread gets it), residual_out stored
  // with the first pass where res_out is given. One CTA reduction (a second where
  // LayerNorm's shift fails its guard).
  auto slice_slot = [&](const X* xs, const RR* rs, typename or_type<RO, X>::type* res_out) {
    float shift = 0.f;
    if constexpr (CENTER) {
      shift = to_float(xs[0]);
      if constexpr (!is_none<R>) shift += to_float(rs[0]);
    }
    float first_sum = 0.f;  // RMSNorm: sum of h^2; LayerNorm: sum of h - shift
    float first_sq = 0.f;   // LayerNorm: sum of (h - shift)^2
#pragma unroll
    for (int k = 0; k < Cfg::ITEMS; ++k) {
      float h[VEC];
      load_h(xs, rs, k, h);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if constexpr (CENTER) {
          const float d = h[i] - shift;
          first_sum += d;
          first_sq += d * d;
        } else {
          first_sum += h[i] * h[i];
        }
      }
      if constexpr (!is_none<RO>) {
        if (res_out != nullptr) store_vec_at<VEC>(res_out, k * TPR + static_cast<int>(threadIdx.x), h);
      }
    }
    if constexpr (!CENTER) {
      return group_slot_pack(0u, __float_as_uint(cta_sum(first_sum)));
    } else {
      auto sums_around = [&](float around, float (&acc)[CTA_SUMS]) {
#pragma unroll
        for (int k = 0; k < Cfg::ITEMS; ++k) {
          float h[VEC];
          load_h(xs, rs, k, h);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = h[i] - around;
            acc[0] += d;
            acc[1] += d * d;
          }
        }
      };
      const SliceMoments m = shifted_slice_moments(shift, first_sum, first_sq, static_cast<float>(SLICE_ELEMS),
                                                   cta_sums, sums_around, [] {});
      // A NaN mean keeps the slot non-zero through its M2 (NaN too); nothing to fix.
      return group_slot_pack(__float_as_uint(m.mean), __float_as_uint(m.m2));
    }
  };

  // Where the ask goes: NK_GROUP_ASK_EARLY (row_engine.cuh).
  // Warp 0's slots of the row it normalizes next (lane l: slices l, l + 32, ...),
  // asked a step ahead; 0 where not yet published (a later poll asks again). Two sets,
  // the steps alternating between them (the loop below runs two steps an iteration):
  // measured faster than one set (backward RMSNorm fp32 N=262144 0.876 -> 0.919, forward
  // LayerNorm fp32 with a residual 0.914 -> 0.926; docs/perf/h200-2026-12-03d.md; which
  // SASS difference does it was not isolated).
  using Slots = unsigned long long[SLOTS_PER_LANE];
  Slots slots_even, slots_odd;
#pragma unroll
  for (int q = 0; q < SLOTS_PER_LANE; ++q) slots_even[q] = slots_odd[q] = 0;
  auto slot_address = [&](long long r, int c) { return p.group_slots + r * S + c; };
  auto ask_slots = [&](long long j, Slots& slot) {
    if (threadIdx.x >= 32 || j < 0 || j >= my_rows) return;
#pragma unroll
    for (int q = 0; q < SLOTS_PER_LANE; ++q) {
      const int c = lane + 32 * q;
      if (c < S)
        asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(slot[q]) : "l"(slot_address(row_of(j), c)) : "memory");
    }
  };
  // The row's mean and M2 from its S slot words, by warp 0 in a fixed order (lane l
  // adds slices l, l + 32, ... then a butterfly): the same bits in every CTA.
  auto combine = [&](const unsigned long long (&words)[SLOTS_PER_LANE]) {
    float mean_sum = 0.f;
#pragma unroll
    for (int q = 0; q < SLOTS_PER_LANE; ++q)
      if (lane + 32 * q < S) mean_sum += __uint_as_float(group_slot_mean_bits(words[q]));
    const float mean = CENTER ? group_sum<32>(mean_sum) / static_cast<float>(S) : 0.f;
    float within = 0.f, between = 0.f;
#pragma unroll
    for (int q = 0; q < SLOTS_PER_LANE; ++q) {
      if (lane + 32 * q >= S) continue;
      within += __uint_as_float(group_slot_m2_bits(words[q]));
      const float d = __uint_as_float(group_slot_mean_bits(words[q])) - mean;
      between += d * d;
    }
    within = group_sum<32>(within);
    const float m2 = CENTER ? within + static_cast<float>(SLICE_ELEMS) * group_sum<32>(between) : within;
    if (lane == 0) {
      row_stats[0] = mean;
      row_stats[1] = 1.f / sqrtf(m2 / static_cast<float>(Cfg::N) + p.eps);  // as the bulk kernel's rstd
    }
  };

  using ROut = typename or_type<RO, X>::type;
  // Step j: publish row j's slice moments, normalize row j - D (its slots in `slot`),
  // ask for row j + 1 - D's slots into `next`.
  auto step = [&](long long j, Slots& slot, Slots& next) {
    if (j < my_rows) {  // publish row j's slice moments
      const long long r = row_of(j);
      const int s = static_cast<int>(j % STAGES);
      mbarrier_wait(&stage_full[s], static_cast<unsigned>((j / STAGES) & 1));
      const X* xs = reinterpret_cast<const X*>(stage(s));
      const RR* rs = reinterpret_cast<const RR*>(stage(s) + L.x_bytes);
      ROut* res_out = is_none<RO> ? nullptr : row_ptr_mut<ROut>(p.residual_out, p.shape, r) + slice_begin;
      const unsigned long long mine = slice_slot(xs, rs, res_out);
      if (threadIdx.x == 0)
        asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(slot_address(r, rank)), "l"(mine) : "memory");
    }
    if (NK_GROUP_ASK_EARLY) ask_slots(j + 1 - D, next);
    if (j >= D) {  // normalize row j - D
      const long long jd = j - D;
      const long long r = row_of(jd);
      const int s = static_cast<int>(jd % STAGES);
      const X* xs = reinterpret_cast<const X*>(stage(s));
      const RR* rs = reinterpret_cast<const RR*>(stage(s) + L.x_bytes);
      if (threadIdx.x < 32) {
        int late = !COOPERATIVE && p.sync_timeout_ns == 0;  // NORMKIT_SYNC_TIMEOUT_US=0: never wait
        int missing = 0;
#pragma unroll
        for (int q = 0; q < SLOTS_PER_LANE; ++q) missing |= lane + 32 * q < S && slot[q] == 0;
        if constexpr (COOPERATIVE) {
#pragma unroll
          for (int q = 0; q < SLOTS_PER_LANE; ++q) {
            const int c = lane + 32 * q;
            while (c < S && slot[q] == 0)
              asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(slot[q]) : "l"(slot_address(r, c)) : "memory");
          }
          missing = 0;
        }
        // The clock only where a slot is still missing (asked a step ahead, most are in).
        if (missing && !late) {
          unsigned deadline;
          asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(deadline));
          deadline += p.sync_timeout_ns;
#pragma unroll
          for (int q = 0; q < SLOTS_PER_LANE; ++q) {
            const int c = lane + 32 * q;
            while (c < S && slot[q] == 0 && !late) {
              asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(slot[q]) : "l"(slot_address(r, c)) : "memory");
              unsigned now;
              asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(now));
              late = static_cast<int>(now - deadline) >= 0 && slot[q] == 0;
            }
          }
        }
        late = __any_sync(0xffffffffu, late);
        if (!late) combine(slot);
        if (lane == 0) timed_out_shared = late;
      }
      __syncthreads();
      if (!COOPERATIVE && timed_out_shared) {
        // Every slice's moments of the row from global memory, by this CTA alone
        // (two block reductions each), then combined as the slots would have been.
        const X* x_row = row_ptr<X>(p.x, p.shape, r);
        const RR* r_row = is_none<R> ? nullptr : row_ptr<RR>(p.residual, p.shape, r);
#pragma unroll 1
        for (int c = 0; c < S; ++c) {
          const unsigned long long w = slice_slot(x_row + c * SLICE_ELEMS, is_none<R> ? nullptr : r_row + c * SLICE_ELEMS,
                                                  nullptr);
          if (threadIdx.x == 0) fallback_slots[c] = w;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
          unsigned long long words[SLOTS_PER_LANE];
#pragma unroll
          for (int q = 0; q < SLOTS_PER_LANE; ++q) words[q] = lane + 32 * q < S ? fallback_slots[lane + 32 * q] : 0;
          combine(words);
        }
        __syncthreads();
      }
      const float mean = row_stats[0];
      const float rstd = row_stats[1];
      const auto affine = OutputAffine<CENTER, O>::make(mean, rstd);
      if constexpr (STORE_RSTD) {
        if (rank == 0 && threadIdx.x == 0) {
          if (p.rstd != nullptr) p.rstd[r] = rstd;
          if constexpr (CENTER) {
            if (p.mean != nullptr) p.mean[r] = mean;
          }
        }
      }
      O* const out = row_ptr_mut<O>(p.out, p.shape, r) + slice_begin;
      // Per-head parameters only where they are not in shared memory; a 64-bit
      // remainder per row and thread is not free (a division routine).
      const long long head_offset =
          (params_cached || p.shape.heads == 1 ? 0 : (r % p.shape.heads) * Cfg::N) + slice_begin;
      auto at = [&](int k) { return (k * TPR + static_cast<int>(threadIdx.x)) * VEC; };
      params.template for_each_item<Cfg::ITEMS, ring_params_ahead_bytes<Cfg::TPR, Cfg::MIN_BLOCKS>()>(
          p, weight_offset_of<CENTER>(p), head_offset, [](int) { return true; }, at, at,
          [&](int k, const float (&w)[VEC], const float (&b)[VEC]) {
            float h[VEC];
            load_h(xs, rs, k, h);
            float v[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[i] = affine(h[i], w[i], b[i]);
            store_vec_at<VEC>(out, at(k) / VEC, v);
          });
      __syncthreads();  // every thread's reads of stage s (and of row_stats) done
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
}

}  // namespace nk
