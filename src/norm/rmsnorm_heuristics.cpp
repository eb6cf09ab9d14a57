#include "rmsnorm_heuristics.hpp"

#include <algorithm>
#include <cstdint>

#include "normkit/runtime/error.hpp"

namespace normkit::norm::detail {
namespace {

std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

std::string RowPlan::str() const {
  return "vec=" + std::to_string(vec) + " tpr=" + std::to_string(tpr) + " rows=" + std::to_string(rows) +
         " cluster=" + std::to_string(cluster) + " regs=" + std::to_string(regs ? 1 : 0) +
         " minb=" + std::to_string(min_blocks);
}

int max_vec_for(const void* data, int elem_bytes, std::int64_t stride_outer, bool outer_used, std::int64_t stride_inner,
                bool inner_used) {
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  for (int v = 8; v > 1; v /= 2) {
    if (addr % static_cast<std::uintptr_t>(v * elem_bytes) != 0) continue;
    if (outer_used && stride_outer % v != 0) continue;
    if (inner_used && stride_inner % v != 0) continue;
    return v;
  }
  return 1;
}

RowPlan plan_rows(const RowPlanInputs& in) {
  NK_CHECK(in.n >= 1, "plan_rows: n must be >= 1");
  RowPlan p;
  // Widest vector that (a) every tensor's alignment allows, (b) divides N, and
  // (c) keeps the row input's access at <= 16 bytes (the widest LDG).
  p.vec = 1;
  for (int v = 8; v >= 1; v /= 2) {
    if (v <= in.max_vec && in.n % v == 0 && v * in.x_bytes <= 16) {
      p.vec = v;
      break;
    }
  }
  // Elements a thread keeps in registers. Forward: h only, so 32 (eight 16-byte
  // bf16 loads in flight per thread). Backward keeps xhat, g and the column sums,
  // 3-4 values per element, so fewer elements per thread.
  const int elems_per_thread = in.backward ? (in.dbias ? 8 : 16) : 32;
  const int tpr_max = in.backward ? 512 : 1024;
  // The two-pass kernel keeps no row in registers: small CTAs, four per SM, so
  // that several rows' loads and reductions overlap on each SM.
  const int tpr_two_pass = 256;
  const int two_pass_blocks = 4;
  const std::int64_t nv = in.n / p.vec;
  const std::int64_t items = std::max<std::int64_t>(1, elems_per_thread / p.vec);
  std::int64_t tpr = next_pow2((nv + items - 1) / items);
  p.cluster = 1;
  p.regs = true;
  if (tpr > tpr_max) {
    const std::int64_t cluster = next_pow2((tpr + tpr_max - 1) / tpr_max);
    // Backward rows that need a cluster to stay in registers leave one 512-thread
    // CTA per SM, which then waits on every row's cluster-wide reduction: measured
    // on H200 (bf16, M=8192, N=32768) at 1.47 ms against eager PyTorch's 1.05 ms.
    // Those use the two-pass kernel instead, like rows too long for any cluster.
    if (in.arch >= 90 && cluster <= 8 && !in.backward) {
      p.cluster = static_cast<int>(cluster);
    } else {
      // Two passes over the row. A cluster (where there is one) splits the row
      // into slices of ~4096 elements, small enough for the second pass to be
      // served from L2.
      p.regs = false;
      p.cluster = in.arch >= 90 ? static_cast<int>(std::clamp<std::int64_t>(next_pow2(in.n / 4096), 1, 8)) : 1;
    }
    tpr = p.regs ? tpr_max : tpr_two_pass;
  }
  p.tpr = static_cast<int>(tpr);
  // Short rows: several rows per CTA so that a CTA has >= 128-256 threads.
  const int cta_target = in.backward ? 128 : 256;
  p.rows = p.regs ? std::max(1, cta_target / p.tpr) : 1;

  // Register budget per thread -> minimum CTAs per SM for __launch_bounds__.
  const std::int64_t slice_v = (nv + p.cluster - 1) / p.cluster;
  const std::int64_t owned = ((slice_v + p.tpr - 1) / p.tpr) * p.vec;
  const int per_elem = in.backward ? (3 + (in.dbias ? 1 : 0)) : 1;
  // Overhead and per-element cost from ptxas reports: scalar (vec 1) access needs
  // more address registers per element, hence the 5/4.
  const std::int64_t regs_needed = ((48 + per_elem * owned * 5 / 4) + 7) / 8 * 8;
  const std::int64_t by_regs = 65536 / (static_cast<std::int64_t>(p.threads()) * regs_needed);
  const std::int64_t by_threads = 2048 / p.threads();
  p.min_blocks = static_cast<int>(std::clamp<std::int64_t>(std::min(by_regs, by_threads), 1, 16));
  if (!p.regs) p.min_blocks = two_pass_blocks;
  return p;
}

std::int64_t plan_bwd_column_parts(std::int64_t n, int vec, std::int64_t rows_per_head, std::int64_t heads,
                                   int sm_count, int threads) {
  const std::int64_t col_ctas = (n / vec + threads - 1) / threads;
  // About four CTAs per SM in total: enough loads in flight, few partials to add.
  const std::int64_t want = (static_cast<std::int64_t>(std::max(sm_count, 1)) * 4 + col_ctas * heads - 1) /
                            (col_ctas * heads);
  return std::clamp<std::int64_t>(want, 1, std::max<std::int64_t>(rows_per_head, 1));
}

std::int64_t plan_bwd_parts(const RowPlan& plan, std::int64_t rows_per_head, std::int64_t heads, int sm_count) {
  const std::int64_t row_groups = (rows_per_head + plan.rows - 1) / plan.rows;
  const std::int64_t resident = static_cast<std::int64_t>(std::max(sm_count, 1)) * plan.min_blocks;
  const std::int64_t per_head = std::max<std::int64_t>(1, resident / (heads * plan.cluster));
  return std::max<std::int64_t>(1, std::min(row_groups, per_head));
}

}  // namespace normkit::norm::detail
