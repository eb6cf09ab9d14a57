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
// cancels), one more reduction and no more memory traffic. residual_out is
// stored while the row is loaded, before the reduction, so its store overlaps the
// reduction's latency. Every optional tensor is a template type (`none` when
// absent): absent features cost no instructions and no registers.
#pragma once

#include "normkit/norm/row_engine.cuh"

namespace nk {

template <class Cfg, class X, class R, class RO, class W, class B, class O, bool STORE_RSTD, bool CENTER>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) norm_fwd_kernel(const NormFwdParams p) {
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

  // REGS without a residual: the row stays in registers as loaded (its storage
  // dtype: half the registers of fp32 for 16-bit data), and all of a thread's
  // loads are issued before any is used. Loaded and converted item by item, the
  // compiler reused one load's registers for the next: one 16-byte load in flight
  // per thread instead of ITEMS (the SASS of 16-bit rows, e.g. bf16 N=131072,
  // showed it). With a residual, h = x + residual is kept in fp32 as before:
  // both raw rows spilled under the 64 registers of 1024-thread CTAs.
  constexpr bool RAW = Cfg::REGS && is_none<R>;
  constexpr bool H32 = Cfg::REGS && !is_none<R>;
  RawVec<X, VEC> x_raw[RAW ? Cfg::ITEMS : 1];
  float h[H32 ? Cfg::ITEMS : 1][VEC];
  if constexpr (RAW) {
    for_each_item<Cfg>([&](int k) {
      if (!active || !t.owns(k)) return;
      x_raw[k].load(x + t.column(k));
    });
  }
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
      for (int i = 0; i < VEC; ++i) v[i] = first ? x_raw[k].get(i) : x_raw[k].get_again(i);
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

  // Pass 1 sums h (LayerNorm) or h^2 (RMSNorm).
  float sum = 0.f;
  for_each_item<Cfg>([&](int k) {
    if (!active || !t.owns(k)) return;
    float v[VEC];
    get_h(k, v, true);
    if constexpr (!is_none<RO>) store_vec<VEC>(row_ptr_mut<RO>(p.residual_out, p.shape, r) + t.column(k), v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) sum += CENTER ? v[i] : v[i] * v[i];
  });
  // One row per CTA, each reduction once: ONCE (one cluster barrier, not two).
  sum = row_sum<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER, true, 0>(sum, t.sub, t.lane, reduce_storage);
  float mean = 0.f;
  if constexpr (CENTER) {
    mean = sum / static_cast<float>(Cfg::N);
    float sq = 0.f;
    for_each_item<Cfg>([&](int k) {
      if (!active || !t.owns(k)) return;
      float v[VEC];
      get_h(k, v, false);
#pragma unroll
      for (int i = 0; i < VEC; ++i) sq += (v[i] - mean) * (v[i] - mean);
    });
    sum = row_sum<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER, true, 1>(sq, t.sub, t.lane, reduce_storage);
  }
  // rsqrtf is approximate (2 ulp); 1/sqrtf is correctly rounded and still cheap per row.
  const float rstd = 1.f / sqrtf(sum / static_cast<float>(Cfg::N) + p.eps);
  if constexpr (STORE_RSTD) {
    // STORE_RSTD: the row statistics asked for (LayerNorm: mean and rstd, each optional).
    if (active && t.lane == 0 && t.rank == 0) {
      if (p.rstd != nullptr) p.rstd[r] = rstd;
      if constexpr (CENTER) {
        if (p.mean != nullptr) p.mean[r] = mean;
      }
    }
  }
  if (!active) return;

  const long long head_offset = (r % p.shape.heads) * Cfg::N;
  O* out = row_ptr_mut<O>(p.out, p.shape, r);
  for_each_item<Cfg>([&](int k) {
    if (!t.owns(k)) return;
    const int col = t.column(k);
    float v[VEC];
    get_h(k, v, false);
    float w[VEC], b[VEC];
    load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
    load_param<VEC, B>(p.bias, head_offset, col, 0.f, 0.f, b);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = (CENTER ? v[i] - mean : v[i]) * rstd * w[i] + b[i];
    store_vec<VEC>(out + col, v);
  });
}

}  // namespace nk
