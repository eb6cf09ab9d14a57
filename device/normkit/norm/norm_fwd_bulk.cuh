// Forward of RMSNorm and LayerNorm (the formulas of rmsnorm_fwd.cuh, residual and
// residual_out included), its rows fed by bulk copies into a ring of shared-memory
// stages.
//
// Why it is shaped this way: the register kernel's long rows (N >= 65536) stay at
// 0.61-0.92x copy. A CTA there holds one row (two with PREFETCH) in registers, so an
// SM has at most 32-64 KB of loads in flight, and less while a row waits for its
// cluster's sums; at ~32 GB/s an SM and ~1-2 us of loaded DRAM latency that is
// about what Little's law asks for, with no margin. Here one thread of each CTA
// copies the CTA's whole slice of a row (and of the residual) with one cp.async.bulk
// each into a stage, and the stage's mbarrier counts their bytes: a copy in flight
// costs no registers and no threads, so the ring keeps STAGES - 1 rows (up to ~190 KB
// an SM) loading while the CTA reduces and stores the current one. The CTA reads its
// slice from the stage into registers at once and frees the stage at the reduction's
// first CTA barrier (after every thread's reads), before the cluster's sums arrive,
// so the refill does not wait for the cluster. The weight and bias slices are the
// same for every row of a persistent CTA and are copied once (PARAMS_SMEM, when there
// is one head and they are 16-byte aligned; otherwise read from global per row).
// The earlier cp.async ring (docs/perf/h200-2026-11-30.md) lost; its report blamed
// one 512-thread CTA per SM whose warps all waited on the same row's barriers, and the
// weight re-read from L2 every row, and named a TMA bulk producer as a way out. Here
// the producer is one bulk copy a slice and the weight is read once; one CTA per SM
// remains by default (minb=2 gives two CTAs an SM half the shared memory each, to
// measure against it).
// LayerNorm: each CTA takes its slice's mean and M2 from one CTA reduction of
// two sums around the slice's first column (shifted_moments.cuh; a second pass
// around the mean only where the guard fails), and the cluster combines the CTAs'
// pairs (combine_slice_moments): one CTA barrier and one cluster exchange a row.
// The CTA is the SM's only one, so each barrier of a row is time its SM issues no
// stores: the two-pass slice moments (two CTA barriers) kept LayerNorm bf16 rows
// at 0.60-0.70x copy where RMSNorm's one barrier reached 0.83-0.92
// (docs/perf/h200-2026-12-01c.md); with one, LayerNorm's 16-bit and long fp32 ring
// rows gained 2-6 %, but fp32 rows of N=32768-65536 lost 2-2.5 % and keep the two
// passes (SHIFTED_SLICE; docs/perf/h200-2026-12-02e.md).
// Measured on the H200 (docs/perf/h200-2026-12-01c.md): faster than the register
// rows for long fp32 rows (up to +32 %) and 16-bit rows with a residual at N=262144
// (+7-41 %), slower for 16-bit LayerNorm rows below that (-3 to -22 %); the plans take
// it where it won (bulk_rows_measured).
// Grid: persistent, as many clusters as are resident (the host's resident_groups);
// cluster g takes rows g, g + G, g + 2G, ... in every CTA of the cluster, so each
// CTA's j-th row uses stage j % STAGES everywhere.
#pragma once

#include "normkit/common/async_copy.cuh"
#include "normkit/common/pdl.cuh"
#include "normkit/common/shifted_moments.cuh"
#include "normkit/norm/row_engine.cuh"

namespace nk {

template <class Cfg, class X, class R, class RO, class W, class B, class O, bool STORE_RSTD, bool CENTER,
          bool PARAMS_SMEM, int STAGES>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) norm_fwd_bulk_kernel(const NormFwdParams p) {
  constexpr int VEC = Cfg::VEC;
  constexpr int CLUSTER = Cfg::CLUSTER;
  static_assert(Cfg::ROWS == 1 && Cfg::REGS && Cfg::TPR > 32, "one row a CTA (cluster), at least two warps");
  static_assert(VEC * sizeof(X) == 16, "16-byte vectors: the stage holds the slice as the row lays it out");
  static_assert(Cfg::SLICE_V * CLUSTER == Cfg::NV, "every CTA's slice is SLICE_V vectors");
  // One stage (stages=1, for measuring): the next row's copy overlaps only this row's
  // reduction and stores, as the register rows' prefetch does; room for the parameters.
  static_assert(STAGES >= 1, "a ring of at least one stage");
  constexpr int SLICE_ELEMS = Cfg::SLICE_V * VEC;
  static_assert(VEC * size_or_zero<R> % 16 == 0, "the residual's rows 16-byte aligned, as the bulk copy needs");
  constexpr BulkRowsLayout L = bulk_rows_layout(Cfg::SLICE_V, VEC, sizeof(X), size_or_zero<R>,
                                                PARAMS_SMEM ? size_or_zero<W> : 0, PARAMS_SMEM ? size_or_zero<B> : 0,
                                                STAGES);
  // Shared memory: STAGES stages (x's slice, then the residual's), then (L.params_bytes > 0)
  // the weight's slice and the bias's.
  extern __shared__ __align__(128) unsigned char bulk_memory[];
  __shared__ unsigned long long bulk_barriers[STAGES + 1];  // the stages', then the parameters'
  unsigned long long* const stage_full = bulk_barriers;
  unsigned long long& params_full = bulk_barriers[STAGES];
  // LayerNorm's slice moments from shifted sums (two sums in one CTA reduction) for
  // 16-bit rows and fp32 rows of N >= 131072. fp32 rows below take two passes: the
  // mean around the first column (one sum), then the sums of h - mean and of its
  // square around that mean (one reduction of two), which correct the mean to first
  // order: the first column an outlier (test_outlier_first_column) left the first
  // pass's mean 3e-5 off, as it did at ce080a3, whose second pass summed squares
  // only. Same call, two rounds each against ce080a3 (docs/perf/h200-2026-12-02e.md,
  // section 4): the shifted sums gave fp32 N=131072 0.882 -> 0.903, bf16 +residual
  // N=262144 0.908 -> 0.926, but fp32 N=32768 0.928 -> 0.905, 65536 0.950 -> 0.931,
  // 65536 +residual 0.929 -> 0.911; these two passes 0.939 -> 0.938 at N=32768 and
  // 0.949 -> 0.928, 0.932 -> 0.915 at N=65536 (ce080a3's uncorrected ones: level).
  constexpr bool SHIFTED_SLICE = CENTER && (sizeof(X) <= 2 || Cfg::N >= 131072);
  constexpr int CTA_SUMS = CENTER ? 2 : 1;
  __shared__ RowReduceStorage<1, Cfg::TPR, 1, CTA_SUMS> cta_storage;
  // The two passes' first sum (LayerNorm without SHIFTED_SLICE; RMSNorm's one sum
  // takes cta_storage).
  __shared__ RowReduceStorage<1, Cfg::TPR, 1, 1> first_sum_storage;
  __shared__ ClusterPushes<1, CLUSTER, CENTER ? 2 : 1> cluster_pushes;  // CLUSTER > 1 only

  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  const RowThread<Cfg> t = RowThread<Cfg>::make();
  const long long first = static_cast<long long>(blockIdx.x / CLUSTER);
  const long long stride = static_cast<long long>(gridDim.x / CLUSTER);
  const long long slice_begin = static_cast<long long>(t.rank) * SLICE_ELEMS;
  auto stage = [&](int s) { return bulk_memory + s * L.slice_bytes; };
  // One thread's copy of the CTA's slice of row r into stage s.
  auto issue_row = [&](long long r, int s) {
    if (r < p.shape.rows) copy_row_slices<X, R>(stage(s), p, r, slice_begin, L, &stage_full[s]);
  };
  const auto params = RingParams<VEC, W, B>::make(p, L, bulk_memory + STAGES * L.slice_bytes);
  const bool params_cached = params.cached;
  if (threadIdx.x == 0) {
    init_bulk_barriers(bulk_barriers);
    params.issue(p, L, slice_begin, &params_full);
#pragma unroll 1
    for (int s = 0; s < STAGES; ++s) issue_row(first + s * stride, s);
  }
  __syncthreads();  // the stages' barriers initialized before any thread waits on them
  unsigned step = 0;  // cluster exchanges so far (the same count in every CTA of the cluster)
  row_sums_walk_arrive(cluster_pushes);
  if (params_cached) mbarrier_wait(&params_full, 0);

  // Sums of v[0..CTA_SUMS) over the CTA, through warp_partial slot set `slot`
  // (alternating: the CTA barrier of the next sum comes after every thread's reads
  // of this one).
  unsigned cta_sums_taken = 0;
  auto cta_sums = [&](float (&v)[CTA_SUMS]) {
#pragma unroll
    for (int j = 0; j < CTA_SUMS; ++j) v[j] = group_sum<32>(v[j]);
    warp_partials_sum(v, 0, t.lane, cta_storage, static_cast<int>(cta_sums_taken++ & 1u));
  };
  auto cta_sum = [&](float v) {
    float one[1] = {group_sum<32>(v)};
    if constexpr (CTA_SUMS == 1) {
      warp_partials_sum(one, 0, t.lane, cta_storage, static_cast<int>(cta_sums_taken++ & 1u));
    } else {
      warp_partials_sum(one, 0, t.lane, first_sum_storage, static_cast<int>(cta_sums_taken++ & 1u));
    }
    return one[0];
  };
  // The CTA's pushes of step `step` to the cluster, and back the CTAs' values.
  auto exchange = [&](const float (&v)[CENTER ? 2 : 1]) {
    if (step == 0) row_sums_walk_ready<CLUSTER>();
    cluster_push_partials(v, 0, t.lane, cluster_pushes, step);
    cluster_await_partials(cluster_pushes, step);
    return &cluster_pushes.pushed[step++ & 1u][0];
  };

  int s = 0;              // the stage of this CTA's j-th row: j % STAGES
  unsigned phase = 0;     // (j / STAGES) % 2, the parity of that stage's use
  for (long long r = first; r < p.shape.rows; r += stride) {
    mbarrier_wait(&stage_full[s], phase);
    RawVec<X, VEC> raw[Cfg::ITEMS];
    RawVec<typename or_type<R, X>::type, VEC> raw_res[is_none<R> ? 1 : Cfg::ITEMS];
    for_each_item<Cfg>([&](int k) {
      if (!t.owns_folded(k)) return;
      raw[k].pk = *reinterpret_cast<const decltype(raw[k].pk)*>(stage(s) + t.slice_vector(k) * 16);
      if constexpr (!is_none<R>)
        raw_res[k].pk = *reinterpret_cast<const decltype(raw_res[k].pk)*>(stage(s) + L.x_bytes +
                                                                           t.slice_vector(k) * (VEC * size_or_zero<R>));
    });
    // h = x (+ residual) of item k in fp32, element i (the same fp32 sum as the
    // register kernel's, so residual_out has the same bits). `first`: its first use.
    auto h = [&](int k, int i, bool first) {
      float v = first ? raw[k].get(i) : raw[k].get_again(i);
      if constexpr (!is_none<R>) v += first ? raw_res[k].get(i) : raw_res[k].get_again(i);
      return v;
    };
    // The stage is free once every thread is past the first CTA barrier below; it
    // takes the row STAGES rows on.
    auto refill = [&] {
      if (threadIdx.x == 0) issue_row(r + STAGES * stride, s);
    };
    // residual_out is stored with the row's first pass, before the reduction, so that
    // its stores overlap the reduction's latency.
    using ROut = typename or_type<RO, X>::type;
    [[maybe_unused]] ROut* const res_out = is_none<RO> ? nullptr : row_ptr_mut<ROut>(p.residual_out, p.shape, r);
    // LayerNorm's first pass sums h - shift, shift = h of the slice's first column (a
    // broadcast read of the stage): the slice's mean then keeps fp32's precision when
    // |mean| >> std (rows of 1000 +- 1 summed plainly lost ~3 ulps of the mean).
    float shift = 0.f;
    if constexpr (CENTER) {
      shift = to_float(*reinterpret_cast<const X*>(stage(s)));
      if constexpr (!is_none<R>) shift += to_float(*reinterpret_cast<const typename or_type<R, X>::type*>(stage(s) + L.x_bytes));
    }
    float first_sum = 0.f;  // RMSNorm: sum of h^2; LayerNorm: sum of h - shift
    float first_sq = 0.f;   // LayerNorm: sum of (h - shift)^2
    for_each_item<Cfg>([&](int k) {
      if (!t.owns_folded(k)) return;
      float v[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        v[i] = h(k, i, true);
        if constexpr (CENTER) {
          const float d = v[i] - shift;
          first_sum += d;
          if constexpr (SHIFTED_SLICE) first_sq += d * d;
        } else {
          first_sum += v[i] * v[i];
        }
      }
      if constexpr (!is_none<RO>) store_vec<VEC>(res_out + t.column(k), v);
    });
    float mean = 0.f;
    float m2 = 0.f;  // RMSNorm: sum of h^2; LayerNorm: sum of (h - mean)^2
    if constexpr (CENTER) {
      // The sums of (h - around) and of its square over the thread's items.
      auto sums_around = [&](float around, float (&acc)[CTA_SUMS]) {
        for_each_item<Cfg>([&](int k) {
          if (!t.owns_folded(k)) return;
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = h(k, i, false) - around;
            acc[0] += d;
            acc[1] += d * d;
          }
        });
      };
      SliceMoments slice;
      if constexpr (SHIFTED_SLICE) {
        slice = shifted_slice_moments(shift, first_sum, first_sq, static_cast<float>(SLICE_ELEMS), cta_sums,
                                      sums_around, refill);
      } else {
        const float first_mean = shift + cta_sum(first_sum) / static_cast<float>(SLICE_ELEMS);
        refill();
        slice = slice_moments_around(first_mean, static_cast<float>(SLICE_ELEMS), cta_sums, sums_around);
      }
      if constexpr (CLUSTER > 1) {
        const float pair[2] = {slice.mean, slice.m2};
        const SliceMoments m = combine_slice_moments<CLUSTER>(*exchange(pair), static_cast<float>(SLICE_ELEMS));
        mean = m.mean;
        m2 = m.m2;
      } else {
        mean = slice.mean;
        m2 = slice.m2;
      }
    } else {
      m2 = cta_sum(first_sum);
      refill();
      if constexpr (CLUSTER > 1) {
        const float one[1] = {m2};
        const float (&pushed)[CLUSTER][1] = *exchange(one);
        m2 = 0.f;
#pragma unroll
        for (int c = 0; c < CLUSTER; ++c) m2 += pushed[c][0];
      }
    }
    // rsqrtf is approximate (2 ulp); 1/sqrtf is correctly rounded and still cheap per row.
    const float rstd = 1.f / sqrtf(m2 / static_cast<float>(Cfg::N) + p.eps);
    if constexpr (STORE_RSTD) {
      if (t.rank == 0 && threadIdx.x == 0) {
        if (p.rstd != nullptr) p.rstd[r] = rstd;
        if constexpr (CENTER) {
          if (p.mean != nullptr) p.mean[r] = mean;
        }
      }
    }
    O* const out = row_ptr_mut<O>(p.out, p.shape, r);
    const auto affine = OutputAffine<CENTER, O>::make(mean, rstd);
    const long long head_offset = params_cached ? 0 : (r % p.shape.heads) * Cfg::N;
    params.template for_each_item<Cfg::ITEMS, ring_params_ahead_bytes<Cfg::THREADS, Cfg::MIN_BLOCKS>()>(
        p, weight_offset_of<CENTER>(p), head_offset, [&](int k) { return t.owns_folded(k); },
        [&](int k) { return t.slice_vector(k) * VEC; }, [&](int k) { return t.column(k); },
        [&](int k, const float (&w)[VEC], const float (&b)[VEC]) {
          float v[VEC];
#pragma unroll
          for (int i = 0; i < VEC; ++i) v[i] = affine(h(k, i, false), w[i], b[i]);
          store_vec<VEC>(out + t.column(k), v);
        });
    if (++s == STAGES) {
      s = 0;
      phase ^= 1u;
    }
  }
  // A cluster that had no row (the grid never has more than the rows, but in case)
  // still waits once on the barrier it arrived at.
  if constexpr (CLUSTER > 1) {
    if (step == 0) row_sums_walk_ready<CLUSTER>();
  }
}

}  // namespace nk
