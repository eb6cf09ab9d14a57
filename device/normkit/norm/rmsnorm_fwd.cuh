// RMSNorm forward:  h = x (+ residual);  rstd = rsqrt(mean(h^2) + eps);
//                   out = h * rstd * (w + weight_offset) (+ b);  residual_out = h.
//
// Why it is shaped this way: the op is memory-bound, so the only goal is to move
// each byte once at full width. The row is read once into registers (REGS), its
// sum of squares reduced across the row's threads (and the cluster's CTAs for long
// rows), and the epilogue writes from registers. residual_out is stored while the
// row is loaded, before the reduction, so its store overlaps the reduction's
// latency. Every optional tensor is a template type (`none` when absent): absent
// features cost no instructions and no registers.
#pragma once

#include "normkit/norm/row_engine.cuh"

namespace nk {

template <class Cfg, class X, class R, class RO, class W, class B, class O, bool STORE_RSTD>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) rmsnorm_fwd_kernel(const RmsNormFwdParams p) {
  constexpr int VEC = Cfg::VEC;
  __shared__ typename Cfg::Reduce reduce_storage;
  const RowThread<Cfg> t = RowThread<Cfg>::make();
  const long long row = static_cast<long long>(blockIdx.x / Cfg::CLUSTER) * Cfg::ROWS + t.sub;
  // Threads past the last row still take part in the (barrier-carrying) reduction.
  const bool active = row < p.shape.rows;
  const long long r = active ? row : 0;

  const X* x = row_ptr<X>(p.x, p.shape, r);
  const R* res = nullptr;
  if constexpr (!is_none<R>) res = row_ptr<R>(p.residual, p.shape, r);

  float h[Cfg::REGS ? Cfg::ITEMS : 1][VEC];
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

  float sum_sq = 0.f;
  for_each_item<Cfg>([&](int k) {
    if (!active || !t.owns(k)) return;
    float v[VEC];
    load_h(k, v);
    if constexpr (!is_none<RO>) store_vec<VEC>(row_ptr_mut<RO>(p.residual_out, p.shape, r) + t.column(k), v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) sum_sq += v[i] * v[i];
    if constexpr (Cfg::REGS) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) h[k][i] = v[i];
    }
  });

  sum_sq = row_sum<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER>(sum_sq, t.sub, t.lane, reduce_storage);
  // rsqrtf is approximate (2 ulp); 1/sqrtf is correctly rounded and still cheap per row.
  const float rstd = 1.f / sqrtf(sum_sq / static_cast<float>(Cfg::N) + p.eps);
  if constexpr (STORE_RSTD) {
    if (active && t.lane == 0 && t.rank == 0) p.rstd[r] = rstd;
  }
  if (!active) return;

  const long long head_offset = (r % p.shape.heads) * Cfg::N;
  O* out = row_ptr_mut<O>(p.out, p.shape, r);
  for_each_item<Cfg>([&](int k) {
    if (!t.owns(k)) return;
    const int col = t.column(k);
    float v[VEC];
    if constexpr (Cfg::REGS) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[i] = h[k][i];
    } else {
      load_h(k, v);
    }
    float w[VEC], b[VEC];
    load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
    load_param<VEC, B>(p.bias, head_offset, col, 0.f, 0.f, b);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = v[i] * rstd * w[i] + b[i];
    store_vec<VEC>(out + col, v);
  });
}

}  // namespace nk
