// The per-vector algebra of the backward of both norms, shared by every backward
// row kernel (rmsnorm_bwd.cuh, rmsnorm_bwd_split.cuh, norm_bwd_bulk.cuh,
// norm_bwd_group.cuh) so that they
// differ only in where the row lives between its reduction and its epilogue, and the
// writer of their dw/db partials:
//   xhat = (h - mean) * rstd   (mean = 0 for RMSNorm; CENTER: LayerNorm's saved mean)
//   g    = dout * (w + weight_offset)
//   dx   = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ dresidual_out);  dresidual = dx
// RMSNorm has no mean(g) term (the mean is not subtracted, so nothing depends on it).
#pragma once

#include "normkit/norm/row_engine.cuh"

namespace nk {

// A row's two means that dx needs; g_mean is 0 (and never computed) for RMSNorm.
struct RowDots {
  float gx_mean;
  float g_mean;
};

// A thread's share of the row's sums of g * xhat and (CENTER) of g.
template <bool CENTER>
struct DotAccumulator {
  float gx = 0.f;
  float g = 0.f;
  template <int VEC>
  __device__ __forceinline__ void add(const float (&xh)[VEC], const float (&gv)[VEC]) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      gx += gv[i] * xh[i];
      if constexpr (CENTER) g += gv[i];
    }
  }
};

template <int VEC, class X, class W, class DY, class DRO, class DX, class DR, bool CENTER, bool FOLD_ALLOWED = true>
struct NormBwdRow {
  static constexpr bool kCenter = CENTER;
  // FOLD_MEAN (the rings' reads, expand_at / expand_shared and store_dx_at, of
  // LayerNorm's 16-bit rows): h - mean folded into the multiply-adds that take it,
  // xhat = fma(h, rstd, -mean * rstd) and dx's term fma(c, h, shift - c * mean): one
  // add an element fewer in each pass (the LayerNorm bf16 ring's SASS: 16 of ~164
  // instructions a vector of 8, in rows that ncu found as bound by issue as by
  // memory). Each product may cancel against its constant where |mean| >> std, an
  // error of ~|mean| / std * 2^-24 in xhat, far below a 16-bit h's own rounding
  // (~|h| / std * 2^-9); fp32 rows keep the subtraction (rows of 1000 +- 1 are tested
  // to fp32's precision there). FOLD_ALLOWED: the kernel's measured choice (norm_bwd_bulk
  // takes it for rows of 64 threads and more). NK_BWD_NO_MEAN_FOLD compiles it out, to
  // measure.
#ifdef NK_BWD_NO_MEAN_FOLD
  static constexpr bool FOLD_MEAN = false;
#else
  static constexpr bool FOLD_MEAN = CENTER && sizeof(X) <= 2 && FOLD_ALLOWED;
#endif
  const NormBwdParams& p;
  long long head_offset;  // first element of the row's weight row ((r % heads) * N)
  float rstd;
  float mean;             // CENTER only
  // Batch row r's dresidual_out, dx and dresidual, found once: found at each
  // vector, their row offsets (a division) were found again after every store,
  // the stores possibly aliasing the parameters.
  const DRO* dro_row;
  DX* dx_row;
  DR* dr_row;

  __device__ static NormBwdRow make(const NormBwdParams& p, long long r, long long head_offset, float rstd,
                                    float mean) {
    return NormBwdRow{p,
                      head_offset,
                      rstd,
                      mean,
                      is_none<DRO> ? nullptr : row_ptr<DRO>(p.dresidual_out, p.shape, r),
                      is_none<DX> ? nullptr : row_ptr_mut<DX>(p.dx, p.shape, r),
                      is_none<DR> ? nullptr : row_ptr_mut<DR>(p.dresidual, p.shape, r)};
  }
  __device__ static NormBwdRow make(const NormBwdParams& p, long long r, long long head_offset) {
    return make(p, r, head_offset, p.rstd[r], CENTER ? p.mean[r] : 0.f);
  }

  // xhat, g and dout of the vector at column `col` from its stored values.
  __device__ __forceinline__ void expand(int col, const Packed<X, VEC>& hp, const Packed<DY, VEC>& dp,
                                         float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) const {
    float w[VEC];
    load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
    expand_with(w, hp, dp, xh, g, d);
  }
  // The same with the vector's weight given raw, as its dtype holds it (a copy in
  // shared memory: norm_bwd_kernel's W_SMEM).
  template <class WP>
  __device__ __forceinline__ void expand_packed(const WP& wp, const Packed<X, VEC>& hp, const Packed<DY, VEC>& dp,
                                                float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) const {
    float w[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) w[i] = to_float(wp.v[i]) + p.weight_offset;
    expand_with(w, hp, dp, xh, g, d);
  }
  // The same with the vector's weight (weight_offset added) given. Element by element
  // from the raw vectors, as the register kernels hold them (written as widen and then
  // combine, ptxas sm_90a spilled 28 bytes in LayerNorm fp16 rows with an fp32 weight
  // over a cluster under minb=2).
  __device__ __forceinline__ void expand_with(const float (&w)[VEC], const Packed<X, VEC>& hp,
                                              const Packed<DY, VEC>& dp, float (&xh)[VEC], float (&g)[VEC],
                                              float (&d)[VEC]) const {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      d[i] = to_float(dp.v[i]);
      xh[i] = (CENTER ? to_float(hp.v[i]) - mean : to_float(hp.v[i])) * rstd;
      g[i] = d[i] * w[i];
    }
  }
  // The same with h and dout read from memory at hs and ds (a ring's stage: load_vec
  // widens bf16 pairs as words), the weight from its row at column `col`, or, where
  // ws is given, from there (a copy of its slice in shared memory, raw).
  // XH_SCALED false: xh is h - mean (h itself under FOLD_MEAN), not yet times rstd
  // (store_dx_at<false> folds rstd and the mean into its coefficients: one multiply,
  // and under FOLD_MEAN one add, an element fewer).
  template <bool XH_SCALED = true, class WS>
  __device__ __forceinline__ void expand_at(int col, const WS* ws, const X* hs, const DY* ds, float (&xh)[VEC],
                                            float (&g)[VEC], float (&d)[VEC]) const {
    float w[VEC], h[VEC];
    weight_at(col, ws, w);
    load_vec<VEC>(hs, h);
    load_vec<VEC>(ds, d);
    combine<XH_SCALED>(w, h, d, xh, g);
  }
  template <class WS>
  __device__ __forceinline__ void weight_at(int col, const WS* ws, float (&w)[VEC]) const {
    if (ws != nullptr) {
      load_param<VEC, W>(ws, 0, 0, p.weight_offset, 1.f, w);
    } else {
      load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
    }
  }
  // The same with h, dout and the weight's vector all in shared memory (a ring's stage
  // and a copy of the weight's slice the kernel always has): no test of the pointer and
  // no global fallback in the row loop, where those took ~20 instructions a vector in
  // norm_bwd_bulk_kernel's SASS; LayerNorm's weight without weight_offset's add (0
  // there: one add an element fewer). Read by load_shared_vec: as plain loads, NVRTC 13.0
  // hoisted the weight's out of the row loop and scheduled the items' loads ahead,
  // spilling 16-116 bytes at 128 registers (LayerNorm bf16 N=8192-16384 on one CTA).
  template <bool XH_SCALED = true, class WS>
  __device__ __forceinline__ void expand_shared(const WS* ws, const X* hs, const DY* ds, float (&xh)[VEC],
                                                float (&g)[VEC], float (&d)[VEC]) const {
    float w[VEC], h[VEC];
    weight_shared(ws, w);
    load_shared_vec<VEC>(hs, h);
    load_shared_vec<VEC>(ds, d);
    combine<XH_SCALED>(w, h, d, xh, g);
  }
  template <class WS>
  __device__ __forceinline__ void weight_shared(const WS* ws, float (&w)[VEC]) const {
#pragma unroll
    for (int i = 0; i < VEC; ++i) w[i] = 1.f;
    if constexpr (!is_none<W>) {
      load_shared_vec<VEC>(ws, w);
      if constexpr (!CENTER) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) w[i] += p.weight_offset;
      }
    }
  }
  // expand_at / expand_shared (SHARED) with h's and dout's vectors already in registers
  // as raw words, read from a ring's stage before it was given back
  // (norm_bwd_bulk_kernel's EARLY_REFILL).
  template <bool XH_SCALED, bool SHARED, class WS, int HW, int DW>
  __device__ __forceinline__ void expand_words(int col, const WS* ws, const unsigned (&hw)[HW],
                                               const unsigned (&dw)[DW], float (&xh)[VEC], float (&g)[VEC],
                                               float (&d)[VEC]) const {
    float w[VEC], h[VEC];
    if constexpr (SHARED) {
      weight_shared(ws, w);
    } else {
      weight_at(col, ws, w);
    }
    widen_words<X, VEC>(hw, h);
    widen_words<DY, VEC>(dw, d);
    combine<XH_SCALED>(w, h, d, xh, g);
  }
  // xhat (XH_SCALED false: h - mean, or h under FOLD_MEAN) and g from h, dout and the
  // weight (weight_offset added).
  template <bool XH_SCALED = true>
  __device__ __forceinline__ void combine(const float (&w)[VEC], const float (&h)[VEC], const float (&d)[VEC],
                                         float (&xh)[VEC], float (&g)[VEC]) const {
    const float neg_mean_rstd = -mean * rstd;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if constexpr (FOLD_MEAN) {
        xh[i] = XH_SCALED ? fmaf(h[i], rstd, neg_mean_rstd) : h[i];
      } else {
        const float centered = CENTER ? h[i] - mean : h[i];
        xh[i] = XH_SCALED ? centered * rstd : centered;
      }
      g[i] = d[i] * w[i];
    }
  }

  // dresidual_out's vector at `col`, raw (nothing without one).
  using DroPacked = Packed<typename or_type<DRO, float>::type, VEC>;
  __device__ __forceinline__ DroPacked load_dro(int col) const {
    DroPacked v{};
    if constexpr (!is_none<DRO>) v = load_packed<VEC>(dro_row + col);
    return v;
  }

  // dx (and dresidual) of the vector at `col`, given the row's means and
  // dresidual_out's vector there, raw (as the register kernels hold it).
  __device__ __forceinline__ void store_dx(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                           const RowDots& dots, const DroPacked& dro) const {
    float dx[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      dx[i] = rstd * ((CENTER ? g[i] - dots.g_mean : g[i]) - xh[i] * dots.gx_mean);
      if constexpr (!is_none<DRO>) dx[i] += to_float(dro.v[i]);
    }
    store_vec<VEC>(dx_row + col, dx);
    if constexpr (!is_none<DR>) store_vec<VEC>(dr_row + col, dx);
  }
  __device__ __forceinline__ void store_dx(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                           const RowDots& dots) const {
    store_dx(col, xh, g, dots, load_dro(col));
  }
  // The ring kernels' (norm_bwd_bulk_kernel, norm_bwd_group_kernel): dresidual_out's
  // vector at dro_at in a stage (ignored without one; bf16 widened as words by
  // load_vec), and dx = rstd * g + (-rstd * mean(g * xhat)) * xhat + (-rstd * mean(g)):
  // two fused multiply-adds an element where the formula as written takes three for
  // LayerNorm. XH_SCALED false: xh holds h - mean (expand_at<false>), and the
  // coefficient takes rstd once more. The register kernels keep store_dx above: with
  // the fused form and dresidual_out widened ahead, ptxas sm_90a spilled 16-40 bytes in
  // their rows of N=1000-1024 under minb=6.
  template <bool XH_SCALED = true, class DS>
  __device__ __forceinline__ void store_dx_at(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                              const RowDots& dots, const DS* dro_at) const {
    float dro[VEC] = {};
    if constexpr (!is_none<DRO>) load_vec<VEC>(dro_at, dro);
    store_dx_fused<XH_SCALED>(col, xh, g, dots, dro);
  }
  // The same with dresidual_out's vector raw in registers (norm_bwd_group_kernel's DRO_DIRECT).
  template <bool XH_SCALED = true>
  __device__ __forceinline__ void store_dx_at(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                              const RowDots& dots, const DroPacked& packed) const {
    float dro[VEC] = {};
    if constexpr (!is_none<DRO>) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) dro[i] = to_float(packed.v[i]);
    }
    store_dx_fused<XH_SCALED>(col, xh, g, dots, dro);
  }
  template <bool XH_SCALED>
  __device__ __forceinline__ void store_dx_fused(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                                 const RowDots& dots, const float (&dro)[VEC]) const {
    const float xh_scale = -rstd * dots.gx_mean * (XH_SCALED ? 1.f : rstd);
    // Under FOLD_MEAN pass 2's xh is h itself: the mean's term moves into the shift.
    const float shift = !CENTER                      ? 0.f
                        : (FOLD_MEAN && !XH_SCALED) ? fmaf(-xh_scale, mean, -rstd * dots.g_mean)
                                                    : -rstd * dots.g_mean;
    float dx[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      dx[i] = fmaf(rstd, g[i], CENTER ? fmaf(xh_scale, xh[i], shift) : xh_scale * xh[i]);
      if constexpr (!is_none<DRO>) dx[i] += dro[i];
    }
    store_vec<VEC>(dx_row + col, dx);
    if constexpr (!is_none<DR>) store_vec<VEC>(dr_row + col, dx);
  }
};

template <class Cfg>
struct BwdCombineStorage {
  // ROWS > 1 with REGS: the CTA's column sums are combined here in row order.
  float cols[(Cfg::ROWS > 1 && Cfg::REGS) ? Cfg::SLICE_V * Cfg::VEC : 1];
};

// Adds the ROWS rows' per-thread sums `acc` in row order and writes the CTA's
// partial (fp32), or the final sums when the CTA is its head's only one (T the
// parameter's dtype, rounded once). Threads of all rows must call it (it has
// barriers).
// The fp32 partials (VECTOR: the workspace, 16-byte aligned and N % VEC == 0, so
// every column(k) is VEC-aligned) go out as VEC-wide stores: one scalar store per
// column put 32 partly written sectors in every warp store, and in decode
// backward calls, where each CTA sees one row, those stores were most of the row
// kernel (ncu, LayerNorm bf16 M=128 N=4096: 16.9 us, L2 50% busy, DRAM 3%).
// dweight itself (the caller's tensor, whose alignment the plan does not check)
// keeps scalar stores.
template <class Cfg, bool VECTOR, int ACC_ITEMS, class T>
__device__ __forceinline__ void write_partial(const RowThread<Cfg>& t, const float (&acc)[ACC_ITEMS][Cfg::VEC],
                                              T* partial_row, BwdCombineStorage<Cfg>& combine) {
  constexpr int VEC = Cfg::VEC;
  auto store = [&](T* dst, const float (&v)[VEC]) {
    if constexpr (VECTOR) {
      store_vec<VEC>(dst, v);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) dst[i] = from_float<T>(v[i]);
    }
  };
  if constexpr (Cfg::ROWS == 1) {
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      store(partial_row + t.column(k), acc[k]);
    });
  } else {
    for (int s = 0; s < Cfg::ROWS; ++s) {
      if (t.sub == s) {
        for_each_item<Cfg>([&](int k) {
          if (!t.owns(k)) return;
          float* c = combine.cols + t.slice_vector(k) * VEC;
#pragma unroll
          for (int i = 0; i < VEC; ++i) c[i] = (s == 0 ? 0.f : c[i]) + acc[k][i];
        });
      }
      __syncthreads();
    }
    if (t.sub == 0) {
      for_each_item<Cfg>([&](int k) {
        if (!t.owns(k)) return;
        float c[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) c[i] = combine.cols[t.slice_vector(k) * VEC + i];
        store(partial_row + t.column(k), c);
      });
    }
    __syncthreads();  // combine.cols is reused by the next call
  }
}

}  // namespace nk
