// The per-vector algebra of the RMSNorm backward, shared by every backward row
// kernel (rmsnorm_bwd.cuh, rmsnorm_bwd_split.cuh) so that they differ only in
// where the row lives between its reduction and its epilogue:
//   xhat = h * rstd,   g = dout * (w + weight_offset)
//   dx   = rstd * (g - xhat * mean(g * xhat)) (+ dresidual_out);  dresidual = dx.
#pragma once

#include "normkit/norm/row_engine.cuh"

namespace nk {

template <int VEC, class X, class W, class DY, class DRO, class DX, class DR>
struct RmsBwdRow {
  const RmsNormBwdParams& p;
  long long r;            // batch row
  long long head_offset;  // first element of the row's weight row ((r % heads) * N)
  float rstd;

  // xhat, g and dout of the vector at column `col` from its stored values.
  __device__ __forceinline__ void expand(int col, const Packed<X, VEC>& hp, const Packed<DY, VEC>& dp,
                                         float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) const {
    float w[VEC];
    load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      d[i] = to_float(dp.v[i]);
      xh[i] = to_float(hp.v[i]) * rstd;
      g[i] = d[i] * w[i];
    }
  }

  // dx (and dresidual) of the vector at `col`, given the row's mean(g * xhat).
  __device__ __forceinline__ void store_dx(int col, const float (&xh)[VEC], const float (&g)[VEC],
                                           float mean_dot) const {
    float dx[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) dx[i] = rstd * (g[i] - xh[i] * mean_dot);
    if constexpr (!is_none<DRO>) {
      float dro[VEC];
      load_vec<VEC>(row_ptr<DRO>(p.dresidual_out, p.shape, r) + col, dro);
#pragma unroll
      for (int i = 0; i < VEC; ++i) dx[i] += dro[i];
    }
    store_vec<VEC>(row_ptr_mut<DX>(p.dx, p.shape, r) + col, dx);
    if constexpr (!is_none<DR>) store_vec<VEC>(row_ptr_mut<DR>(p.dresidual, p.shape, r) + col, dx);
  }
};

}  // namespace nk
