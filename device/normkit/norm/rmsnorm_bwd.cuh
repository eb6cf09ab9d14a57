// RMSNorm backward. For each row (h = the forward's x + residual, rstd saved):
//   xhat = h * rstd,   g = dout * (w + weight_offset)
//   dx   = rstd * (g - xhat * mean(g * xhat)) (+ dresidual_out);  dresidual = dx
// and across rows, per column (per head in per-head mode):
//   dw = sum dout * xhat,   db = sum dout.
//
// Why it is shaped this way: the grid is persistent — `parts` CTAs (clusters) per
// head walk the rows of their head with a fixed stride — so each thread keeps its
// columns' dw/db running sums in registers across many rows and writes them once,
// as fp32 partials [parts][heads][N]. param_grad_reduce.cuh then sums the partials
// in a fixed order: no float atomics anywhere, so dw/db are bitwise reproducible.
// Rows in one CTA (ROWS > 1) are combined through shared memory in row order
// before the partial is written, which keeps `parts` (and the final reduction)
// small for short rows. Without REGS the running sums live in the CTA's own
// partial row in global memory (read-modify-write by the one thread owning each
// column, so still deterministic) and the epilogue re-reads h and dout.
#pragma once

#include "normkit/norm/row_engine.cuh"

namespace nk {

template <class Cfg>
struct BwdCombineStorage {
  // ROWS > 1 with REGS: the CTA's column sums are combined here in row order.
  float cols[(Cfg::ROWS > 1 && Cfg::REGS) ? Cfg::SLICE_V * Cfg::VEC : 1];
};

// Adds the ROWS rows' per-thread sums `acc` in row order and writes the CTA's
// partial. Threads of all rows must call it (it has barriers).
template <class Cfg, int ACC_ITEMS>
__device__ __forceinline__ void write_partial(const RowThread<Cfg>& t, const float (&acc)[ACC_ITEMS][Cfg::VEC],
                                              float* partial_row, BwdCombineStorage<Cfg>& combine) {
  constexpr int VEC = Cfg::VEC;
  if constexpr (Cfg::ROWS == 1) {
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      float* dst = partial_row + t.column(k);
#pragma unroll
      for (int i = 0; i < VEC; ++i) dst[i] = acc[k][i];
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
        const float* c = combine.cols + t.slice_vector(k) * VEC;
        float* dst = partial_row + t.column(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst[i] = c[i];
      });
    }
    __syncthreads();  // combine.cols is reused by the next call
  }
}

template <class Cfg, class X, class W, class DY, class DRO, class DX, class DR, bool DBIAS>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) rmsnorm_bwd_kernel(const RmsNormBwdParams p) {
  constexpr int VEC = Cfg::VEC;
  constexpr bool DW = !is_none<W>;
  constexpr int ACC = Cfg::REGS ? Cfg::ITEMS : 1;
  __shared__ typename Cfg::Reduce reduce_storage;
  __shared__ BwdCombineStorage<Cfg> combine;

  const RowThread<Cfg> t = RowThread<Cfg>::make();
  const long long heads = p.shape.heads;
  const long long head = blockIdx.y;
  const long long part = blockIdx.x / Cfg::CLUSTER;
  const long long parts = gridDim.x / Cfg::CLUSTER;
  const long long rows_per_head = p.shape.rows / heads;
  const long long head_offset = head * Cfg::N;
  float* dw_partial = DW ? p.dweight_partial + (part * heads + head) * Cfg::N : nullptr;
  float* db_partial = DBIAS ? p.dbias_partial + (part * heads + head) * Cfg::N : nullptr;

  float dw_acc[ACC][VEC], db_acc[ACC][VEC];
  float xhat_r[ACC][VEC], g_r[ACC][VEC];
#pragma unroll
  for (int k = 0; k < ACC; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw_acc[k][i] = db_acc[k][i] = 0.f;
  if constexpr (!Cfg::REGS) {
    // Running sums in global memory: only this thread ever touches these columns.
    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k) || t.sub != 0) return;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if constexpr (DW) dw_partial[t.column(k) + i] = 0.f;
        if constexpr (DBIAS) db_partial[t.column(k) + i] = 0.f;
      }
    });
  }

  for (long long base = part * Cfg::ROWS; base < rows_per_head; base += parts * Cfg::ROWS) {
    const long long j = base + t.sub;
    const bool active = j < rows_per_head;
    const long long r = head + heads * (active ? j : 0);
    const float rstd = active ? p.rstd[r] : 0.f;
    const X* h = row_ptr<X>(p.x, p.shape, r);
    const DY* dy = row_ptr<DY>(p.dout, p.shape, r);

    // xhat and g of vector k; dout comes back in `d` for the column sums.
    auto load = [&](int k, float (&xh)[VEC], float (&g)[VEC], float (&d)[VEC]) {
      const int col = t.column(k);
      load_vec<VEC>(h + col, xh);
      load_vec<VEC>(dy + col, d);
      float w[VEC];
      load_param<VEC, W>(p.weight, head_offset, col, p.weight_offset, 1.f, w);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        xh[i] *= rstd;
        g[i] = d[i] * w[i];
      }
    };

    float dot = 0.f;
    for_each_item<Cfg>([&](int k) {
      if (!active || !t.owns(k)) return;
      float xh[VEC], g[VEC], d[VEC];
      load(k, xh, g, d);
#pragma unroll
      for (int i = 0; i < VEC; ++i) dot += g[i] * xh[i];
      if constexpr (Cfg::REGS) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          xhat_r[k][i] = xh[i];
          g_r[k][i] = g[i];
          dw_acc[k][i] += d[i] * xh[i];
          db_acc[k][i] += d[i];
        }
      } else {
        const int col = t.column(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          if constexpr (DW) dw_partial[col + i] += d[i] * xh[i];
          if constexpr (DBIAS) db_partial[col + i] += d[i];
        }
      }
    });

    dot = row_sum<Cfg::ROWS, Cfg::TPR, Cfg::CLUSTER>(dot, t.sub, t.lane, reduce_storage);
    const float mean_dot = dot / static_cast<float>(Cfg::N);
    if (!active) continue;

    for_each_item<Cfg>([&](int k) {
      if (!t.owns(k)) return;
      const int col = t.column(k);
      float xh[VEC], g[VEC];
      if constexpr (Cfg::REGS) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          xh[i] = xhat_r[k][i];
          g[i] = g_r[k][i];
        }
      } else {
        float d[VEC];
        load(k, xh, g, d);
      }
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
    });
  }

  if constexpr (Cfg::REGS) {
    if constexpr (DW) write_partial<Cfg>(t, dw_acc, dw_partial, combine);
    if constexpr (DBIAS) write_partial<Cfg>(t, db_acc, db_partial, combine);
  }
}

}  // namespace nk
