// Backward plans of the bulk-copy ring (norm_bwd_bulk_kernel): where it is planned
// (bulk_backward_rows_measured, bulk_backward_short_rows_ept), its shape, and which
// reads its row loop takes (shared_reads_planned), each with the measurements behind it.
// plan_rows (rmsnorm_heuristics.cpp) calls with_bulk_backward_rows, declared in
// rmsnorm_heuristics_bwd.hpp.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "normkit/norm/params.cuh"
#include "rmsnorm_heuristics_bwd.hpp"

namespace normkit::norm::detail {

namespace {
// A stage of 64 KB where the cluster allows: bf16 h and dout at N=262144 over 16 CTAs.
constexpr std::int64_t kBulkBackwardStageBytes = 64 * 1024;
constexpr int kBulkBackwardMaxStages = 8;
}  // namespace

// H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_BACKWARD_PLAN=row=bulk, one run
// each in one call (scripts/plan_cases/backward-bulk-rows.txt at deefadb,
// docs/perf/h200-2026-12-01c.md), weight and dresidual_out of x's dtype:
//   LayerNorm bf16 without dresidual_out N=16384-262144 0.804/0.644/0.652/0.593/0.480
//   -> 0.888/0.803/0.754/0.738/0.668; with it N=32768-262144 0.712/0.690/0.573/0.530
//   -> 0.774/0.766/0.678/0.825;
//   LayerNorm fp32 without it N=16384-131072 0.850/0.872/0.792/0.734 ->
//   0.898/0.933/0.959/0.935; with it N=131072 0.760 -> 0.939;
//   RMSNorm bf16 without it N=32768-262144 0.867/0.793/0.720/0.653 ->
//   0.935/0.874/0.852/0.788; with it N=262144 0.779 -> 0.915;
//   RMSNorm fp32 without it N=65536/131072 0.868/0.728 -> 0.949/0.968; with it
//   N=131072 0.923 -> 0.955.
// bf16 rows with dresidual_out at N=16384 on the shared reads (row=bulk,reads=shared;
// plan_cases/forward-params-ahead.txt at b254296, two rounds, docs/perf/h200-2026-12-02d.md):
// LayerNorm 0.887 -> 0.965, RMSNorm 0.965 -> 0.991.
// RMSNorm bf16 with dresidual_out at N=131072 over 16 CTAs (row=bulk,cluster=16; the
// reads on shared memory, four stages): 0.853 -> 0.944 (over 8: 0.940) on the H200 in
// one call (scripts/plan_cases/rms-bf16-dro-131072.txt at 794f92d, docs/perf/
// h200-2026-12-06b.md), where its register rows over 16 CTAs had been 0.847-0.853 in
// the sweeps; on an H100 the two were level (0.961 / 0.966, h200-2026-12-06.md).
// Slower or level elsewhere: N=16384 but LayerNorm's without dresidual_out (-1 to -5 %),
// RMSNorm bf16 with dresidual_out N=32768-65536 (-2 to -7 %; N=131072 at deefadb too,
// before the ring's shared reads and more stages), LayerNorm bf16 with it
// N=16384 on the pointer reads (-4 %), the fp32 rows with it N=16384-65536 (-1 to -4 %, RMSNorm N=65536
// +1.5 %, left alone), RMSNorm fp32 N=32768 (+1 %). fp32 rows at N=262144 take no
// ring (two of their stages do not fit), so they keep their own plan.
bool bulk_backward_rows_measured(const RowPlanInputs& in) {
  const bool dro = in.residual;
  // As measured: dw (LayerNorm: and db) of a weight of x's dtype, dresidual_out of it
  // and dx as dresidual (no tensor of its own).
  if (in.any_forced() || in.arch != 90 || in.few_rows || in.n < 16384 || in.n > 262144 || !in.param_grads ||
      in.weight_bytes != in.x_bytes || in.dbias != in.center || in.dresidual_output ||
      (dro && in.dresidual_out_bytes != in.x_bytes))
    return false;
  if (in.x_bytes == 2) {
    if (in.x_fp16) return false;  // bf16 measured
    // With dresidual_out at N=16384: on the shared reads only (shared_reads_planned).
    if (in.center) return true;
    return dro ? in.n >= 131072 || in.n == 16384 : in.n >= 32768;
  }
  if (in.x_bytes != 4) return false;
  if (in.n > 131072) return false;
  if (in.center) return !dro || in.n >= 131072;
  return in.n >= (dro ? 131072 : 65536);
}

// Several CTAs an SM instead of one of 512 threads, for bf16 rows. A CTA's row loop
// is a chain (the stage's wait, pass 1, the warps' and the cluster's sums, pass 2,
// the barrier that frees the stage) that one CTA an SM leaves unoverlapped: over
// clusters of 2-8 such CTAs a row of LayerNorm bf16 N=32768 took t = a + b / cluster
// with a ~0.75 us (plan_cases/backward-16bit-more-ctas.txt). Two or three smaller
// CTAs an SM overlap one's reductions with another's passes. H200, M*N = 2^27, ratio
// to copy, own plan (one 512-thread CTA an SM) -> row=bulk,cta=,minb=,cluster=, two
// runs each in one call (scripts/plan_cases/backward-bulk-more-ctas-2.txt at 648f3eb,
// docs/perf/h200-2026-12-03.md):
//   LayerNorm without dresidual_out, slices of 4096 columns in three 128-thread CTAs
//   an SM (cta=128,minb=3): N=16384 (over 4) 0.864 -> 0.933, 32768 (over 8) 0.849 ->
//   0.901 (four such CTAs: 0.870 / 0.889, their two stages against three's four;
//   two of 256 over 4 at N=32768: 0.882);
//   LayerNorm with dresidual_out N=32768, two 256-thread CTAs an SM over 8: 0.893 -> 0.931;
//   N=65536, three 128-thread CTAs an SM over 16: 0.880 -> 0.941 (one run, plan_cases/
//   bulk-more-ctas-3.txt at bdac07b; without dresidual_out that shape lost, 0.905 -> 0.819);
//   RMSNorm without it, slices of 8192 columns in two 256-thread CTAs an SM: N=32768
//   (over 4) 0.888 -> 0.937, 65536 (over 8) 0.924 -> 0.930, 131072 (over 16) 0.907 ->
//   0.931.
// LayerNorm bf16 with dresidual_out N=131072, one 512-thread CTA an SM over 16 in two
// stages of 64 KB (row=bulk,cluster=16,stages=2), against its grouped rows (256
// threads x 2 vectors, two CTAs an SM; group_backward_rows_measured planned them from
// 64b3430, when the ring had neither its shared reads nor more stages): NVIDIA H100
// (132 SMs), two calls at df3cb1a / 11b0f4c (scripts/plan_cases/ln-bwd-long-rows.txt,
// session42-h200.txt; docs/perf/h200-2026-12-07.md): 0.918 / 0.918 -> 0.957 / 0.956;
// three stages 0.954, four (the ring's own count) 0.933 / 0.935, over 8 CTAs 0.923.
// The H200 sweep at 794f92d had the grouped rows at 0.783; RMSNorm's row on the ring
// over 16 went 0.853 -> 0.944 on the H200 (bulk_backward_rows_measured).
// Not taken: RMSNorm N=16384 (0.885 -> 0.865 three 128-thread CTAs over 4, 0.876 two
// 256-thread over 2, one run), RMSNorm N=32768 in 128-thread CTAs (0.840-0.863),
// LayerNorm N=65536 (0.915 -> 0.920 two 256-thread over 8, 0.904 four 128-thread
// over 16), RMSNorm with dresidual_out N=32768-65536 (0.962 / 0.932 -> 0.929 / 0.860:
// a stage of three tensors leaves half an SM two stages), LayerNorm with it at N=16384
// (the ring refused: its stages do not fit, the register rows spilled).
BulkRingCtas bulk_backward_measured_ctas(const RowPlanInputs& in) {
  // As measured: bf16 rows the ring takes (16-byte vectors of h and dout), the
  // measured N only.
  if (!bulk_backward_rows_measured(in) || in.x_bytes != 2 || in.max_vec * in.x_bytes < 16 ||
      in.dout_bytes != in.x_bytes)
    return {};
  const std::int64_t n = in.n;
  // Elsewhere the ring might refuse these CTAs (slices that are not whole vectors), and
  // the register rows would take them instead.
  if ((n & (n - 1)) != 0) return {};
  if (in.center) {
    if (in.slower_memory()) {
      // H100 80GB HBM3, ratio to copy. Without dresidual_out at N=32768, one run each in
      // one call (plan_cases/bwd-no-dro-h100.txt at e19bb11, docs/perf/h200-2026-12-07c.md):
      // over eight 128-thread CTAs (the H200's shape below) 0.859, four of 512 0.952, eight
      // of 256 two an SM 0.882. At N=65536 one 512-thread CTA an SM over 8 0.882 -> 0.949
      // (four were level, 0.857 / 0.856, h100-followup.txt at 5862167), at N=131072 two
      // 256-thread CTAs an SM over 16 0.904 -> 0.929 (over 8 of 512: 0.910), two runs each
      // in one call (h100-cliffs-s45.txt at 4da76dc, docs/perf/h200-2026-12-07d.md; eight
      // of 512 gave 0.945 at N=65536 in ln-bwd-16k-64k-h100.txt too).
      if (!in.residual && n == 32768) return {4, 0, 0};
      if (!in.residual && n == 65536) return {8, 0, 0};
      if (!in.residual && n == 131072) return {16, 256, 2};
      // With dresidual_out at N=32768, four 512-thread CTAs: 0.917 (runs 0.924 / 0.910) ->
      // 0.932 / 0.932; over 8 of 512 0.855, 16 of 128 three an SM 0.926 (one call,
      // h100-cliffs-s45c.txt at 8688978).
      if (in.residual && n == 32768) return {4, 0, 0};
    }
    if (!in.residual && (n == 16384 || n == 32768)) return {static_cast<int>(n / 4096), 128, 3};
    if (in.residual && n == 32768) return {8, 256, 2};
    if (in.residual && n == 65536) return {16, 128, 3};
    if (in.residual && n == 131072) return {16, 0, 0, 2};
    return {};
  }
  // H100 80GB HBM3, one 512-thread CTA an SM over n / 8192 (two runs each in one call,
  // h100-cliffs-s45.txt at 4da76dc): N=32768 0.919 -> 0.954, 65536 0.921 -> 0.955; the
  // other count lost (over 8 at N=32768 0.651, over 4 at 65536 0.898).
  if (!in.residual && in.slower_memory() && (n == 32768 || n == 65536)) return {static_cast<int>(n / 8192), 0, 0};
  if (!in.residual && n >= 32768 && n <= 131072) return {static_cast<int>(n / 8192), 256, 2};
  return {};
}

// Short bf16 rows, several whole rows a stage of one 512-thread CTA an SM. H200, M*N =
// 2^27, ratio to copy, own plan -> NORMKIT_BACKWARD_PLAN=row=bulk,ept=..., one run
// each in one call (scripts/plan_cases/backward-short-bulk-rows.txt at f78a5db,
// docs/perf/h200-2026-12-01d.md), weight (and bias) and dresidual_out of x's dtype:
//   LayerNorm without dresidual_out, ept=32 (four vectors a thread): N=512-8192
//   0.841/0.853/0.834/0.838/0.827 -> 0.885/0.885/0.865/0.882/0.868 (N=256 0.850 ->
//   0.846: not planned);
//   LayerNorm with it, ept=16: N=256-8192 0.839/0.824/0.796/0.856/0.864/0.899 ->
//   0.942/0.949/0.923/0.923/0.929/0.966;
//   RMSNorm without it, ept=16: N=8192 0.900 -> 0.948 (N=256-4096 0.6-4 % slower);
//   RMSNorm with it, ept=16: N=1024-4096 0.938/0.939/0.938 -> 0.971/0.967/0.962
//   (N=256-512 and 8192 1-3 % slower).
// One vector a thread (several rows of 128-512 threads) measured 0.54-0.77x: a stage's
// latency (its wait, two passes, the reduction, the barrier that frees it) bounds one
// CTA, and more columns a thread give each stage more bytes. Two 256-thread CTAs an SM
// (cta=256,minb=2) or four of 128 were no faster than one of 512 at these ept.
// RMSNorm without it at N=16384, one row a stage of one 512-thread CTA at ept=32 (four
// vectors a thread): 0.856 -> 0.899 (one run, scripts/plan_cases/rms-bf16-dro-131072.txt
// at 468a5e8 on an H100 80GB HBM3 given for the H200), and as this plan at 9478978
// against row=regs 0.880 -> 0.903 in another call (docs/perf/h200-2026-12-06.md). On
// the H200 only across machines so far: 0.853 in the sweep at 794f92d, the register rows
// 0.882 in ed6bfb1's, where N=8192 (plan unchanged) ran 0.913 against 0.964
// (docs/perf/h200-2026-12-06b.md); the two plans still want one call.
// Not measured, so not planned: fp16, fp32 (their register rows already reach
// 0.92-1.0x), N between powers of two, N < 256, per-head weights.
// On the H100's memory class (RowPlanInputs::slower_memory) LayerNorm without
// dresidual_out takes two vectors a thread from N=512, N=16384 included (one
// 512-thread CTA's ring, h and dout of 2048 columns a CTA). NVIDIA H100 80GB HBM3, ratio
// to copy, own plan (ept=32 above; N=16384 the ring over four 128-thread CTAs) ->
// row=bulk,ept=16, one run each in two calls (scripts/plan_cases/bwd-no-dro-h100.txt
// at e19bb11, h100-followup.txt at 5862167; docs/perf/h200-2026-12-07c.md): N=1024
// 0.835 -> 0.883, 2048 0.857 -> 0.896, 4096 0.857 -> 0.918, 8192 0.844 -> 0.960, 16384
// 0.854 -> 0.874; the register rows at N=8192 0.778. N=512 0.852 -> 0.882 (two runs,
// h100-cliffs-s45.txt at 4da76dc); N=256 lost (0.876 -> 0.865, ept=32 0.822), and at
// N=16384 ept=32 gave 0.903 against 0.893 (one run 0.891, the other 0.915: not taken).
// RMSNorm on the H100 at ept=16, same call: N=1024-4096 0.905/0.910/0.898 ->
// 0.892/0.901/0.898 (not taken). At N=4096 one row a stage of the 512-thread CTA
// (ept=8, one vector a thread) instead: a call 294.1 us (the register rows, 660
// CTAs) -> 286.4 us (ept=16 299.8, ept=32 295.7; N=8192's ring 270.8), the evict-first
// stores of the own plans in each, one call (scripts/bwd_kernel_times.py at 2ed4abe,
// docs/perf/h200-2026-12-07e.md section 5); in the H100 sweep at a63b300 0.891 -> 0.930, its GPU
// tests passed (docs/perf/h200-2026-12-07f.md).
int bulk_backward_short_rows_ept(const RowPlanInputs& in) {
  const bool dro = in.residual;
  // Per-head weights: a group's rows are not consecutive (one copy a row, far slower).
  if (in.any_forced() || in.arch != 90 || in.few_rows || in.many_heads || in.x_bytes != 2 || in.x_fp16 || in.n < 256 ||
      in.n > 16384 || (in.n & (in.n - 1)) != 0 || in.max_vec < 8 || !in.param_grads || in.weight_bytes != 2 ||
      in.dbias != in.center || in.dresidual_output || (dro && in.dresidual_out_bytes != 2))
    return 0;
  if (in.center && !dro && in.slower_memory() && in.n >= 512) return 16;
  if (!in.center && !dro && in.slower_memory() && in.n == 4096) return 8;
  if (in.n == 16384) return !in.center && !dro ? 32 : 0;
  if (in.center) return dro ? 16 : in.n >= 512 ? 32 : 0;
  if (dro) return in.n >= 1024 && in.n <= 4096 ? 16 : 0;
  return in.n == 8192 ? 16 : 0;
}

// refill=early (RowPlan::early_refill) on the H100's memory class, three rows that sat on
// the sweeps' cliffs (issue 4's "each N within 5 % of its neighbours"). NVIDIA H100 80GB
// HBM3, M*N = 2^27, ratio to copy, own plan -> the same plan with refill=early, two runs
// each in each of two calls (scripts/plan_cases/bwd-early-refill-h100.txt at 03871f9,
// bwd-early-refill-h100-confirm.txt at 9504b5d; docs/perf/h200-2026-12-07i.md):
//   LayerNorm bf16 with dresidual_out N=32768 (four 512-thread CTAs) 0.918 / 0.921 ->
//   0.943 / 0.947 (neighbours 0.990 at 16384, 0.954 at 65536);
//   RMSNorm fp32 N=65536 (the ring over 8 CTAs) 0.946 / 0.937 -> 0.953 / 0.951
//   (neighbours 0.985 at 32768, 0.997 at 131072);
//   RMSNorm bf16 N=16384 (one row a stage at ept=32) 0.915 / 0.913 -> 0.921 / 0.921
//   (still 5.7 % under N=8192's 0.977).
// Slower, so not taken: LayerNorm bf16 N=1024/2048 at ept=16 (0.907 / 0.916 -> 0.899 /
// 0.907), LayerNorm bf16 N=16384 over two CTAs (0.898 -> 0.890), RMSNorm bf16 N=8192 at
// ept=16 (0.977 -> 0.937) and N=16384 over two CTAs (0.884). Not measured on the H200.
bool bulk_backward_early_refill_measured(const RowPlanInputs& in) {
  if (in.any_forced() || in.arch != 90 || !in.slower_memory() || in.x_fp16 || in.few_rows) return false;
  if (in.x_bytes == 2) return in.center ? in.residual && in.n == 32768 : !in.residual && in.n == 16384;
  return in.x_bytes == 4 && !in.center && !in.residual && in.n == 65536;
}

// RowPlan::shared_reads of a bulk ring plan `p`: it needs the weight's slice beside the
// stages (weight_smem; without a weight there is no pointer to test). Where the plans
// take it themselves: the row loop of LayerNorm bf16 N=65536 (ring over 4 CTAs) has
// 15 % fewer SASS instructions (1495 -> 1273), and those rings issue an instruction
// in 55-68 % of cycles (ncu, docs/perf/h200-2026-12-02b.md). H200, M*N = 2^27, bf16
// backward, ratio to copy, same-call A/B against the pointer reads (00f2f32 -> fc7382e
// two rounds, -> a0938af one round; docs/perf/h200-2026-12-02c.md):
//   LayerNorm over clusters: N=32768 0.829 -> 0.851, 65536 0.755 -> 0.893, 131072
//   0.761 -> 0.878, 262144 0.688 -> 0.802; with dresidual_out N=32768 0.781 -> 0.865,
//   65536 0.769 -> 0.867, 262144 0.832 -> 0.874;
//   RMSNorm over 16 CTAs: N=262144 0.825 -> 0.895.
// Not taken (slower): RMSNorm over 2-8 CTAs, N=32768-131072 (0.872 -> 0.855, 0.912 ->
// 0.876-0.880, 0.902 -> 0.895); LayerNorm on one CTA, N=16384 (0.877 -> 0.835) and
// short rows, N=2048 (0.904 -> 0.851). fp32 rows (fc7382e, every ring on the shared
// reads): LayerNorm over clusters N=32768-131072 within -1.5 / +2 % (131072 0.953 ->
// 0.939, with dresidual_out 0.928 -> 0.946), taken as the bf16 rule. Not measured:
// fp16 rows, sm_100 (no ring before sm_90).
// Taken since (two rounds against the own plan, plan_cases/forward-params-ahead.txt at
// b254296, docs/perf/h200-2026-12-02d.md): bf16 rows with dresidual_out at N=16384
// (the ring planned for them by bulk_backward_rows_measured on these reads only):
// LayerNorm 0.887 -> 0.965, RMSNorm 0.965 -> 0.991; LayerNorm bf16's short rows with
// dresidual_out (ept=16, several rows a stage) at N=2048, 0.930 -> 0.978 (without
// dresidual_out they lost, above), and at N=4096 0.898 -> 0.979 and 8192 0.959 -> 0.984
// (one round against reads=pointer, plan_cases/backward-short-shared-reads.txt at
// 4ce57a7); N=256-1024 level (within 1 %): left on the pointer reads.
namespace {
bool shared_reads_planned(const RowPlan& p, const RowPlanInputs& in) {
  if (!p.weight_smem || in.weight_bytes == 0 || in.forced_shared_reads < 0) return false;
  if (in.forced_shared_reads > 0) return true;
  // 16-bit rows with dresidual_out (the plans give bf16 the ring): N=16384's ring (with
  // bulk_backward_rows_measured), and LayerNorm's short rows at N=2048-8192 at two
  // vectors a thread, as measured (ept=16; at ept=32, N=8192 spilled 24 bytes, NVRTC 13.0).
  if (in.x_bytes == 2 && in.residual) {
    const bool short_rows = in.center && in.n >= 2048 && in.n <= 8192 && in.n <= 2LL * p.tpr * p.vec;
    if (in.n == 16384 || short_rows) return true;
  }
  return p.rows == 1 && p.cluster > 1 && (in.center || p.cluster >= 16);
}
}  // namespace

RowPlan with_bulk_backward_rows(const RowPlan& planned, const RowPlanInputs& in) {
  const int dro_bytes = in.dresidual_out_bytes;
  if (!in.forced_bulk_rows || !in.backward || in.arch < 90 || in.max_vec * in.x_bytes < 16 ||
      in.dout_bytes != in.x_bytes || in.n % (16 / in.x_bytes) != 0 || (16 / in.x_bytes) * dro_bytes % 16 != 0)
    return planned;
  const int vec = 16 / in.x_bytes;
  const int rest_bytes = in.dout_bytes + dro_bytes;  // the stage's part after h's slice
  const std::int64_t nv = in.n / vec;
  std::optional<BulkRingShape> shape =
      bulk_ring_shape(in, nv, std::int64_t{vec} * (in.x_bytes + rest_bytes), kBulkBackwardStageBytes);
  if (!shape) return planned;
  // Rows of one CTA: ept= columns a thread (one vector unless given), the row's
  // threads a power of two up to the CTA's (512 unless cta=), and a stage of as many
  // whole rows as the CTA then holds (short rows take several without ept=).
  const std::int64_t cta = in.forced_cta_threads ? in.forced_cta_threads : 512;
  int rows = 1;
  const std::int64_t items = in.forced_elems_per_thread ? std::max(1, in.forced_elems_per_thread / vec) : 1;
  const std::int64_t tpr = next_pow2((nv + items - 1) / items);
  if (shape->cluster == 1 && !in.forced_cluster && tpr <= cta && (in.forced_elems_per_thread || cta >= 2 * nv)) {
    rows = static_cast<int>(cta / tpr);
    shape->threads = static_cast<int>(tpr);
    shape->items = (nv + tpr - 1) / tpr;
    shape->register_cap = std::min<std::int64_t>(255, 65536 / (cta * shape->blocks));
  }
  // The dw/db sums a thread keeps (ITEMS * VEC floats each) beside ~56 registers of
  // the rest, under the cap threads * blocks leave: ptxas sm_90a spilled 8-336 bytes
  // at 64 registers with 16 floats of sums or more (1024 threads, or minb=2 at 512).
  // fp16's conversions take more: LayerNorm fp16 N=16384 (one 512-thread CTA, 64
  // floats of sums under 128 registers) spilled 24 bytes under NVRTC 13.2; bf16 clean.
  const std::int64_t sums = (in.weight_bytes > 0 ? 1 : 0) + (in.dbias ? 1 : 0);
  // A weight read from global memory per row (its slice not beside the stages) takes
  // ~16 more: LayerNorm bf16 N=8192 with dresidual_out in two 256-thread CTAs an SM (64
  // floats of sums under 128 registers) spilled 24-72 bytes (NVRTC 13.2 and 13.0) where
  // the same sums with the weight in shared memory compiled clean (N=262144, 512 threads).
  const int slice_v = static_cast<int>(shape->slice_v);
  const nk::BulkRowsLayout one = nk::bulk_rows_layout(slice_v, vec, in.x_bytes, rest_bytes, in.weight_bytes, 0, 1);
  const BulkRingStages stages =
      bulk_ring_stages(in, *shape, std::int64_t{rows} * one.slice_bytes, one.params_bytes, true, kBulkBackwardMaxStages);
  if (stages.stages == 0) return planned;
  const std::int64_t others = (in.x_fp16 ? 72 : 56) + (in.weight_bytes > 0 && !stages.params_smem ? 16 : 0);
  if (shape->items > 16 || shape->items * vec * sums > shape->register_cap - others) return planned;
  RowPlan p = bulk_ring_plan(*shape, vec, stages.stages);
  // refill=early: the thread's 16-byte vectors of h, dout and dresidual_out (four
  // registers each an item) held from pass 1 to pass 2 beside the sums.
  const std::int64_t held = dro_bytes == 0 ? 8 : 12;
  p.early_refill = in.forced_early_refill && (dro_bytes == 0 || dro_bytes == in.x_bytes) &&
                   in.dout_bytes == in.x_bytes && shape->items * (vec * sums + held) <= shape->register_cap - others;
  p.rows = rows;
  p.row_sums = true;  // the kernel sums dw/db itself
  p.weight_smem = stages.params_smem;
  p.shared_reads = shared_reads_planned(p, in);
  // The kernel's layout counts stages * rows row slices (norm_bwd_bulk_kernel).
  p.smem_bytes = static_cast<int>(nk::bulk_rows_layout(slice_v, vec, in.x_bytes, rest_bytes,
                                                       p.weight_smem ? in.weight_bytes : 0, 0, p.bulk_stages * rows)
                                      .total_bytes);
  return p;
}

}  // namespace normkit::norm::detail
