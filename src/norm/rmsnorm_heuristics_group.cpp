// with_group_rows and with_measured_group_rows (rmsnorm_heuristics_fwd.hpp): when the
// forward takes norm_fwd_group_kernel and the backward norm_bwd_group_kernel, and in
// what shape.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "normkit/norm/params.cuh"
#include "rmsnorm_heuristics_fwd.hpp"

namespace normkit::norm::detail {
namespace {

constexpr int kGroupMinStages = 4;  // norm_fwd_group_kernel: kGroupLookahead + 2
constexpr int kGroupMaxStages = 8;
constexpr int kGroupMaxSlices = 128;  // a warp reads a row's slots, four a lane
// Shared memory of a grouped CTA besides its dynamic part: the CTA reduction's
// partials, the barriers and the fallback's slots (8 bytes a slice), and the 1 KB the
// driver reserves.
constexpr std::int64_t kGroupStaticBytes = 2 * 1024;
// The backward's: its fallback sums are 4 bytes a slice and sum (LayerNorm's two).
constexpr std::int64_t kGroupBackwardStaticBytes = 3 * 1024;

struct GroupShape {
  int threads = 256;
  int items = 2;
  int blocks = 2;
  bool dro_direct = false;  // backward: RowPlan::dro_direct
};

// H200 (132 SMs), M*N = 2^27, ratio to a device copy of the same bytes, the plans without
// grouped rows (NORMKIT_GROUP_ROWS=0) -> grouped, same call, two runs each (b16d814,
// scripts/plan_cases/forward-group-rows-ab.txt, docs/perf/h200-2026-12-01e.md section 4);
// weight, bias and residual of x's dtype, N=262144:
//   RMSNorm fp32 with a residual, 256 threads x 2 vectors, 2 CTAs an SM: 0.698 -> 0.930;
//   LayerNorm fp32 with one, 256 x 2, 3 CTAs an SM (parameters from global memory): 0.676 -> 0.886;
//   LayerNorm fp32 without one, 256 x 4, 3 CTAs an SM: 0.717 -> 0.826.
// LayerNorm's slice moments from one CTA reduction of shifted sums (session 34, two runs each
// in one call, scripts/plan_cases/forward-group-shift.txt, docs/perf/h200-2026-12-02e.md):
// with a residual, 3 CTAs an SM 0.904 (two passes 0.895), 2 CTAs an SM (five stages,
// weight and bias in shared memory) 0.917 (two passes 0.877): now 2; without one 0.858
// (two passes 0.846).
// Level or slower below N=262144 in the same call (so not planned there): LayerNorm with
// a residual at N=32768-131072 (0.895-0.898 against 0.896-0.926), without one at
// N=65536-131072 (0.822-0.843 against 0.840-0.917), RMSNorm with one at N=32768 and
// 131072 (0.912 / 0.927 against 0.917 / 0.942), RMSNorm without one (the plans own
// 0.91-0.93 there). RMSNorm fp32 with a residual at N=65536 under 512 threads one CTA an
// SM measured 0.926 against 0.911: a candidate not yet planned (its own plan not run on
// the GPU).
// Backward: H200, M*N = 2^27, ratio to copy, the plans' own -> NORMKIT_BACKWARD_PLAN=row=group
// (256 threads x 2 vectors, 2 CTAs an SM), same call (at 64b3430,
// scripts/plan_cases/backward-group-rows-ab.txt, docs/perf/h200-2026-12-02.md); dw (and
// LayerNorm's db) of a weight of x's dtype, dresidual_out of it where present:
//   fp32 N=262144 (the own plans' split rows): RMSNorm 0.570 -> 0.846, with dresidual_out
//   0.637 -> 0.855; LayerNorm 0.508 -> 0.781, with it 0.582 -> 0.808; a second call of
//   the shapes (backward-group-rows-shapes.txt, 85aa406) 0.844, 0.848, 0.788, 0.807; there 512
//   threads one CTA an SM measured 0.805-0.840 for RMSNorm, and 128 threads four CTAs
//   0.58-0.67;
//   LayerNorm bf16 with dresidual_out N=131072 (the own bulk ring over a cluster):
//   0.683 -> 0.742 (0.737 in the second call); planned here until the ring's shared reads
//   and stages overtook it (0.918 -> 0.956 on an H100, bulk_backward_measured_ctas).
// Slower in the same call, so not planned: fp32 at N=65536-131072 (0.81-0.92 against the
// own 0.91-0.98), bf16 elsewhere (0.60-0.85 against 0.68-0.93; LayerNorm bf16 with
// dresidual_out at N=262144 0.728 against 0.830).
// dresidual_out read directly (RowPlan::dro_direct; six stages beside the weight instead of
// four, lookahead 4), same call, two runs each (885c9e1, scripts/plan_cases/group-dro-direct.txt,
// docs/perf/h200-2026-12-03e.md section 3): fp32 N=262144 RMSNorm 0.845 -> 0.887, LayerNorm
// 0.822 -> 0.870 (lookahead 2: 0.876 / 0.859); bf16 lost everywhere (LayerNorm N=131072 0.790
// -> 0.683, RMSNorm under row=group 0.845 -> 0.734), so fp32 only.
std::optional<GroupShape> group_backward_rows_measured(const RowPlanInputs& in) {
  const bool dro = in.residual;
  if (in.arch != 90 || in.few_rows || in.many_heads || !in.param_grads || in.dresidual_output ||
      in.h_bytes != in.x_bytes || in.dout_bytes != in.x_bytes || in.weight_bytes != in.x_bytes ||
      in.dbias != in.center || (dro && in.dresidual_out_bytes != in.x_bytes) || in.x_fp16)
    return std::nullopt;
  const bool fp32_long = in.x_bytes == 4 && in.n > 131072 && in.n <= 262144;
  if (!fp32_long) return std::nullopt;
  return GroupShape{256, 2, 2, dro};
}

std::optional<GroupShape> group_rows_measured(const RowPlanInputs& in) {
  if (in.any_forced() || !in.group_rows_allowed || in.max_vec * in.x_bytes < 16) return std::nullopt;
  if (in.backward) {
    std::optional<GroupShape> shape = group_backward_rows_measured(in);
    // Only rows that the measured slices tile (as with_group_rows asks).
    if (shape && in.n % (std::int64_t{shape->threads} * shape->items * (16 / in.x_bytes)) != 0) shape.reset();
    return shape;
  }
  if (in.arch != 90 || in.few_rows || !in.group_rows_allowed ||
      in.x_bytes != 4 || in.max_vec * in.x_bytes < 16 || in.weight_bytes != in.x_bytes || in.bias != in.center ||
      (in.bias && in.bias_bytes != in.x_bytes) ||
      (in.residual && (in.residual_bytes != in.x_bytes || !in.residual_out)))
    return std::nullopt;
  if (in.n <= 131072 || in.n > 262144) return std::nullopt;  // measured at N=262144
  std::optional<GroupShape> shape;
  if (in.residual) {
    shape = GroupShape{256, 2, 2};
  } else if (in.center && in.n != 262144) {
    // LayerNorm fp32 N=262144 without a residual takes the bulk ring over 16 CTAs in one
    // stage instead, its weight and bias slices in shared memory (0.836 -> 0.903, one run,
    // bulk_rows_measured_ctas in rmsnorm_heuristics_fwd.cpp).
    shape = GroupShape{256, 4, 3};
  }
  // Only rows that the measured slices tile (as with_group_rows asks).
  const std::int64_t vec = 16 / in.x_bytes;
  if (shape && in.n % (std::int64_t{shape->threads} * shape->items * vec) != 0) shape.reset();
  return shape;
}

}  // namespace

RowPlanInputs with_measured_group_rows(const RowPlanInputs& in) {
  const std::optional<GroupShape> shape = group_rows_measured(in);
  if (!shape) return in;
  RowPlanInputs out = in;
  out.forced_group_rows = true;
  out.forced_cta_threads = shape->threads;
  out.forced_elems_per_thread = shape->items * (16 / in.x_bytes);
  out.forced_min_blocks = shape->blocks;
  if (shape->dro_direct) out.forced_dro_direct = 1;
  return out;
}

namespace {

// The CTA shape row=group asks for (cta=, ept=, minb= over GroupShape's defaults),
// where its slices tile the row's vectors, at most kGroupMaxSlices of them.
std::optional<GroupShape> forced_group_shape(const RowPlanInputs& in, int vec) {
  GroupShape shape;
  if (in.forced_cta_threads) shape.threads = in.forced_cta_threads;
  if (in.forced_elems_per_thread) shape.items = std::max(1, in.forced_elems_per_thread / vec);
  if (in.forced_min_blocks) shape.blocks = in.forced_min_blocks;
  const std::int64_t slice_v = std::int64_t{shape.threads} * shape.items;
  const std::int64_t nv = in.n / vec;
  if (shape.threads < 64 || nv % slice_v != 0 || nv / slice_v > kGroupMaxSlices) return std::nullopt;
  return shape;
}

// The grouped plan of `shape` with its ring: as many stages of stage_bytes as the SM's
// shared memory shared by shape.blocks CTAs holds (at most kGroupMaxStages; stages=
// forced: that many), the parameters' side_bytes beside them where side_allowed and
// kGroupMinStages + 1 stages still fit (RowPlan::params_smem / weight_smem, set by the
// caller from `side`); nullopt where too few stages fit.
struct GroupRing {
  RowPlan plan;
  bool side = false;
};
std::optional<GroupRing> group_ring(const RowPlanInputs& in, const GroupShape& shape, int vec, unsigned stage_bytes,
                                    unsigned side_bytes, bool side_allowed, std::int64_t static_bytes) {
  const std::int64_t budget = kSmemPerSm / shape.blocks - static_bytes;
  auto fitting = [&](bool side) {
    return std::min<std::int64_t>(kGroupMaxStages, (budget - (side ? side_bytes : 0)) / std::int64_t{stage_bytes});
  };
  const std::int64_t wanted = in.forced_bulk_stages ? in.forced_bulk_stages : kGroupMinStages;
  GroupRing ring;
  ring.side = side_allowed && side_bytes > 0 && fitting(true) >= std::max<std::int64_t>(wanted, kGroupMinStages + 1);
  if (fitting(ring.side) < wanted) return std::nullopt;
  RowPlan& p = ring.plan;
  p.vec = vec;
  p.tpr = shape.threads;
  p.rows = 1;
  p.cluster = 1;
  p.regs = true;  // each row read once (the forward's in-place residual add is safe)
  p.split_items = shape.items;
  p.group_stages = static_cast<int>(in.forced_bulk_stages ? in.forced_bulk_stages : fitting(ring.side));
  p.min_blocks = shape.blocks;
  return ring;
}

// The backward's grouped rows (norm_bwd_group_kernel): a stage holds the slices of h,
// dout and dresidual_out; the weight's slice beside the stages (weight_smem).
RowPlan with_group_backward_rows(const RowPlan& planned, const RowPlanInputs& in) {
  const int h_bytes = in.h_bytes ? in.h_bytes : in.x_bytes;
  const int vec = 16 / h_bytes;
  // dresidual_out goes into the stages unless read directly (RowPlan::dro_direct).
  const bool dro_direct = in.forced_dro_direct > 0 && in.dresidual_out_bytes > 0;
  const int extra_bytes = in.dout_bytes + (dro_direct ? 0 : in.dresidual_out_bytes);
  if (in.many_heads || in.dout_bytes * vec % 16 != 0 || in.dresidual_out_bytes * vec % 16 != 0) return planned;
  const std::optional<GroupShape> shape = forced_group_shape(in, vec);
  if (!shape) return planned;
  // Registers: the dw/db running sums (a thread's columns, one each a sum) beside ~64
  // for the rest; 16-bit LayerNorm at 2 x 8 columns under three 256-thread CTAs an SM
  // (85 registers) spilled 96-176 bytes (ptxas sm_90a), so such shapes are refused.
  const int sums = (in.weight_bytes > 0 ? 1 : 0) + (in.dbias ? 1 : 0);
  if (64 + sums * shape->items * vec > 65536 / (shape->threads * shape->blocks)) return planned;
  const int slice_vectors = shape->threads * shape->items;
  const nk::BulkRowsLayout one = nk::bulk_rows_layout(slice_vectors, vec, h_bytes, extra_bytes, in.weight_bytes, 0, 1);
  std::optional<GroupRing> ring = group_ring(in, *shape, vec, one.slice_bytes, one.weight_bytes,
                                             in.forced_weight_smem >= 0, kGroupBackwardStaticBytes);
  if (!ring) return planned;
  RowPlan& p = ring->plan;
  p.row_sums = true;  // the kernel sums dw/db (its groups' partials)
  p.dro_direct = dro_direct;
  p.weight_smem = ring->side;
  p.smem_bytes = static_cast<int>(nk::bulk_rows_layout(slice_vectors, vec, h_bytes, extra_bytes,
                                                       p.weight_smem ? in.weight_bytes : 0, 0, p.group_stages)
                                      .total_bytes);
  return p;
}

}  // namespace

RowPlan with_group_rows(const RowPlan& planned, const RowPlanInputs& in) {
  if (!in.forced_group_rows || !in.group_rows_allowed || in.arch < 90 || in.max_vec * in.x_bytes < 16 ||
      in.n % (16 / in.x_bytes) != 0)
    return planned;
  if (in.backward) return with_group_backward_rows(planned, in);
  const int r_bytes = in.residual ? in.residual_bytes : 0;
  const int vec = 16 / in.x_bytes;
  if (vec * r_bytes % 16 != 0) return planned;
  const std::optional<GroupShape> shape = forced_group_shape(in, vec);
  if (!shape) return planned;
  const int slice_vectors = shape->threads * shape->items;
  const int b_bytes = in.bias ? in.bias_bytes : 0;
  const nk::BulkRowsLayout one = nk::bulk_rows_layout(slice_vectors, vec, in.x_bytes, r_bytes, in.weight_bytes, b_bytes, 1);
  std::optional<GroupRing> ring =
      group_ring(in, *shape, vec, one.slice_bytes, one.params_bytes, in.params_smem_allowed, kGroupStaticBytes);
  if (!ring) return planned;
  RowPlan& p = ring->plan;
  p.params_smem = ring->side;
  p.smem_bytes = static_cast<int>(nk::bulk_rows_layout(slice_vectors, vec, in.x_bytes, r_bytes,
                                                       p.params_smem ? in.weight_bytes : 0, p.params_smem ? b_bytes : 0,
                                                       p.group_stages)
                                      .total_bytes);
  return p;
}

}  // namespace normkit::norm::detail
