// with_forward_elems, with_staged_rows, with_smem_row and with_bulk_rows (rmsnorm_heuristics_fwd.hpp).
//
// plan_rows gives a forward row 32 elements a thread (two to eight 16-byte loads in
// flight each), which leaves short rows few threads: a 16-bit row of 1024 with a
// residual is 32 threads that each wait on eight loads before one warp reduction.
// Where more threads a row (fewer elements each) or fewer (LayerNorm bf16 N=16384:
// 64 elements, 256-thread CTAs, instead of 512) ran faster, the count is forced here.
// H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_FORWARD_PLAN=ept=<e>, one run
// each in one call at c13406d (scripts/plan_cases/forward-near-copy.txt,
// docs/perf/h200-2026-11-30k.md):
//   16-bit with a residual, N=256-2048 (ept=8): RMSNorm bf16 0.975/0.981/0.978/0.979
//   -> 1.000/1.003/1.007/1.002 (Liger-Kernel had been faster at 512-2048); LayerNorm
//   0.969/0.983/0.977/0.965 -> 1.001/0.986/0.982/0.972. From N=4096 it lost (RMSNorm
//   0.966 -> 0.925, 8192 0.973 -> 0.714).
//   RMSNorm 16-bit N=4097-8192 (ept=16): 0.959 -> 0.974, with a residual 0.973 ->
//   0.987. LayerNorm lost there (0.959 -> 0.807).
//   LayerNorm 16-bit without a residual, N=8193-16384 (ept=64): 0.896 -> 0.937 (the
//   sweep at 3c8394e had it at 0.894, under issue 4's 0.92). RMSNorm unchanged
//   (0.970 -> 0.951 at 64, so not planned).
//   fp32 without a residual (ept=16): N=256/512 RMSNorm 0.971/0.986 -> 0.992/0.990,
//   LayerNorm 0.968/0.981 -> 0.992/0.988; N=4097-8192 RMSNorm 0.965 -> 0.981,
//   LayerNorm 0.968 -> 0.985. N=16384 lost (RMSNorm 0.974 -> 0.908).
//   fp32 with a residual (ept=16): N=256 RMSNorm 0.957 -> 0.970, LayerNorm 0.960 ->
//   0.976; N=2049-4096 0.975 -> 0.986 and 0.962 -> 0.981; RMSNorm N=8193-16384 0.949
//   -> 0.975 (LayerNorm lost there: 0.930 -> 0.834).
// Then as plans, A/B f3b11f8 -> f4d8266 (two runs each side): every such row as fast or
// faster (e.g. LayerNorm bf16 N=16384 0.897 -> 0.934, RMSNorm bf16 with a residual
// N=1024 0.973 -> 1.003, fp32 N=8192 0.959 -> 0.979), none slower by more than 1 %.
// Not measured, so not planned: N below 256, sm_80/sm_100, weights of another dtype,
// unaligned rows (vectors under 16 bytes).
//
// Long rows (measured_long_rows): elements a thread, CTA size and CTAs per SM forced
// where they measured faster than plan_rows' (64 elements in two 512-thread CTAs an
// SM for 16-bit rows, 16 in 1024-thread CTAs for fp32 with a residual). H200, M*N =
// 2^27, weight of x's dtype (LayerNorm: and bias), ratio to copy, own plan ->
// NORMKIT_FORWARD_PLAN, two rounds in one call at bf8b819 (scripts/plan_cases/
// forward-long-rows-confirm.txt, docs/perf/h200-2026-11-30l.md; one round before in
// forward-long-small-ctas.txt agreed):
//   RMSNorm bf16 with a residual N=131072 (ept=32,cta=512,minb=2): 0.903 -> 0.934;
//   RMSNorm bf16 N=65536 (ept=32,cta=512,minb=3): 0.900 -> 0.916; N=131072
//   (ept=64,cta=256,minb=4): 0.875 -> 0.890; LayerNorm bf16 N=131072 (the same):
//   0.804 -> 0.824; LayerNorm fp32 with a residual N=262144 (ept=32,cta=512,minb=2,
//   a cluster of 16): 0.584 -> 0.682.
// Not taken: RMSNorm bf16 with a residual N=65536 at 32 (0.943 -> 0.937), LayerNorm
// bf16 N=65536 at 64/256 (0.854 -> 0.850), RMSNorm fp32 with a residual N=262144 at
// 32/512 (0.715 -> 0.720). RMSNorm rows are measured without bias, LayerNorm's with
// one; fp16 rows not at all (taken as 16-bit rows, as the rules above).
//
// Short fp32 rows (measured_short_fp32_rows), where Liger-Kernel's forward had been up
// to 2.8 % faster (sweep at 1b2b6e8): elements a thread with a CTA size or a count of
// CTAs per SM. H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_FORWARD_PLAN, two
// rounds in one call at 25f7b02 (scripts/plan_cases/forward-fp32-short-ctas.txt), then
// as plans, A/B 25f7b02 -> 497eda9, two runs each (docs/perf/h200-2026-12-01.md
// sections 4-5):
//   with a residual, N=257-1024 (ept=16,cta=512): RMSNorm N=512/1024 0.964/0.967 ->
//   0.972/0.970, LayerNorm 0.965/0.953 -> 0.969/0.962;
//   with a residual, N=1025-2048 (ept=8,minb=6): RMSNorm N=1500/2048 0.954/0.972 ->
//   0.978/0.982, LayerNorm 0.958/0.968 -> 0.973/0.982;
//   LayerNorm without one, N=3585-4096 (ept=8,minb=6: 512-thread CTAs, so four an SM
//   at 32 registers): N=4096 0.965 -> 0.981 (Liger-Kernel's 1.4 % lead there gone).
//   Not below: at N=3000 a 512-thread CTA's 375 threads lost (0.972 -> 0.882). RMSNorm
//   without one at N=4096 (ept=16,cta=128, rows over a cluster of two) 0.977 -> 0.982
//   but N=3000 0.979 -> 0.943, so not planned.
// Within 0.7 % elsewhere (N=256-8192, both norms, with and without a residual), or
// slower: 128-thread CTAs at N=8192 0.854-0.884, ept=8 with 512-thread CTAs there 0.640.
// Liger-Kernel stays ahead by 1-2 % at RMSNorm with a residual N=256-1024 and without
// one N=1024, LayerNorm without one N=1024, 2048 and 8192 (not the shape: the plan
// cases found no CTA shape of ours there within 1 % of it).
// Those cases had two vectors a thread or more. One vector a thread, Liger's own
// shape (a row of 128 threads, two a CTA, as many CTAs an SM as fit), took RMSNorm
// fp32 with a residual N=512 from 0.971 to 0.999 (Liger 0.990 in that call's sweep;
// H200, one run, scripts/plan_cases/forward-liger-rows-h200.txt at 794f92d,
// docs/perf/h200-2026-12-06b.md), so RMSNorm with a residual at N=257-512 takes it.
// Not measured off N=512 (N=257-511 keep 128-thread rows, part of them idle).
// RMSNorm without a residual at one vector a thread, rows of 64-128 threads in
// 128-thread CTAs 16 an SM (N=256-512), of 256 threads 8 an SM (N=513-1024), against
// 16 elements a thread: NVIDIA H100, two calls at df3cb1a / 11b0f4c (scripts/
// plan_cases/pending-h200-session41.txt, session42-h200.txt; docs/perf/
// h200-2026-12-07.md): N=256 1.004 / 1.005 -> 1.014 / 1.014, N=512 1.003 / 1.004 ->
// 1.014 / 1.011, N=1024 0.997 / 0.999 -> 1.013 / 1.015 (Liger had led N=512-1024 by up
// to 2 % in the H200 sweep at 794f92d). N=2048 in 512-thread CTAs lost (0.993 -> 0.979);
// LayerNorm's rows were level (within 0.3 %), RMSNorm's with a residual at N=256 and
// 1024 within 0.3 %, so neither is planned.
//
// with_staged_rows: LayerNorm's fp32 rows with a residual at N=16385-131072 keep 16
// elements a thread in registers (32 spilled beside h's fp32 copy), over clusters of
// 512- or 1024-thread CTAs, one or two of them an SM. Staged in shared memory instead
// (RowPlan::smem_row: 33-52 registers) an SM holds three to six CTAs. H200, M*N = 2^27,
// fp32 with weight and bias, ratio to copy, own plan -> NORMKIT_FORWARD_PLAN, one run
// in one call at 2fa121a (scripts/plan_cases/forward-smem-row.txt, docs/perf/h200-2026-11-30l.md):
//   N=32768 (row=smem,cta=256) 0.825 -> 0.891; N=65536 (row=smem) 0.787 -> 0.849;
//   N=131072 (row=smem) 0.697 -> 0.766 (cta=512 0.768).
// Every other row of N=32768-262144 (both norms, bf16 and fp32, with and without a
// residual) was slower staged or within 3 %: e.g. RMSNorm bf16 N=65536 0.903 ->
// 0.886, LayerNorm bf16 0.856 -> 0.674 (register rows of 64 elements, two 512-thread
// CTAs an SM, need no more CTAs). Not measured: sm_80, sm_100, other dtypes.
#include "rmsnorm_heuristics_fwd.hpp"

#include <algorithm>

#include "normkit/norm/params.cuh"

namespace normkit::norm::detail {
namespace {

// A measured shape (elements a thread, most threads a CTA, CTAs per SM the registers
// are capped for, CTAs per SM at most (RowPlan::sm_ctas); zero: plan_rows' own), or all
// zeros where none was measured.
struct MeasuredShape {
  int elems = 0;
  int cta = 0;
  int min_blocks = 0;
  int sm_ctas = 0;
  bool measured() const { return elems != 0 || cta != 0 || sm_ctas != 0; }
};
// Long rows' measured shape.
MeasuredShape measured_long_rows(const RowPlanInputs& in) {
  const std::int64_t n = in.n;
  if (in.x_bytes == 2 && !in.center && !in.bias) {
    if (in.residual && n > 65536 && n <= 131072) return {32, 512, 2};
    if (!in.residual && n > 32768 && n <= 65536) return {32, 512, 3};
    if (!in.residual && n > 65536 && n <= 131072) return {64, 256, 4};
  }
  if (in.x_bytes == 2 && in.center && !in.residual && n > 65536 && n <= 131072) return {64, 256, 4};
  // With a bias and residual_out stored (as measured): without a bias ptxas sm_90a
  // spilled 16 bytes at 64 registers, without residual_out 40-60.
  if (in.x_bytes == 4 && in.center && in.residual && in.residual_out && in.bias && n > 131072 && n <= 262144)
    return {32, 512, 2};
  return {};
}

// Short fp32 rows' measured shape (the header comment's last part), or zeros.
MeasuredShape measured_short_fp32_rows(const RowPlanInputs& in) {
  const std::int64_t n = in.n;
  if (in.x_bytes != 4) return {};
  if (in.residual && !in.center && n > 256 && n <= 512) return {4, 128, 16};
  if (!in.residual && !in.center && n >= 256 && n <= 512) return {4, 128, 16};
  if (!in.residual && !in.center && n > 512 && n <= 1024) return {4, 256, 8};
  if (in.residual && n > 256 && n <= 1024) return {16, 512, 0};
  if (in.residual && n > 1024 && n <= 2048) return {8, 0, 6};
  if (!in.residual && in.center && n > 3584 && n <= 4096) return {8, 0, 6};
  return {};
}

// The rows where Liger-Kernel's forward led ours beyond both rows' p20-p80 spread in
// the H100 sweeps at 4da76dc / 8688978 (0.4-1.2 %; docs/perf/h200-2026-12-07d.md), on
// the H100's memory class (RowPlanInputs::slower_memory): more threads a row, or
// smaller CTAs. NVIDIA H100 80GB HBM3, M*N = 2^27, ratio to copy, own plan ->
// NORMKIT_FORWARD_PLAN, two runs each in one call at 52b38d4 (scripts/plan_cases/
// liger-clear-rows-h100.txt, docs/perf/h200-2026-12-07e.md):
//   RMSNorm fp32 with a residual, 512 threads a row: N=2048 (ept=4) 0.984 -> 0.993,
//   4096 (ept=8) 0.980 -> 0.991, 8192 (ept=16) 0.979 -> 0.986; N=256 at two elements a
//   thread 0.995 -> 0.998;
//   RMSNorm bf16 N=256 at one vector a thread (rows of 32 threads): 0.994 -> 1.010
//   (ept=16: 1.005);
//   LayerNorm fp32 N=16384 in 256-thread CTAs: 0.977 -> 0.986.
// Level or slower: RMSNorm fp32 N=8192 in 256-thread CTAs (0.992 -> 0.990) or at 1024
// threads a row (0.850); RMSNorm fp32 with a residual N=256 at 8 elements (0.996).
// Then, where Liger still led in the sweep at 2ed4abe, Liger's own threads a row, two
// runs each in one call (scripts/plan_cases/liger-rows-h100-2.txt at 2ed4abe, section 5
// of the same file): LayerNorm bf16 N=4096 at 256 threads a row (ept=16) 0.985 ->
// 0.992 (in 256-thread CTAs the same; prefetch=0 0.987, ept=8 0.885); RMSNorm bf16
// N=32768 one 1024-thread CTA a row (ept=32,cta=1024) 0.974 -> 0.977 (without the
// pipeline the same). In the H100 sweep at a63b300 (docs/perf/h200-2026-12-07f.md):
// LayerNorm bf16 N=4096 0.996 (Liger 0.997, within the spreads), RMSNorm bf16 N=32768
// 0.982 (Liger 0.981). The measured N only (the sweep's powers of two).
// Then the three rows Liger still led beyond the spreads in the H100 sweep at a76ccc5
// (docs/perf/h200-2026-12-07h.md): Liger's kernels there, compiled offline, hold fewer
// CTAs an SM than ours. Two runs each in one call at c67ae62, ratio to copy, own ->
// measured (Liger in the same call): RMSNorm fp32 N=16384 one 1024-thread CTA a row
// (ept=16,cta=1024; one an SM) 0.990 -> 0.998 (0.999); at 512 threads two CTAs an SM
// by occ= the same as own, one 0.945; RMSNorm fp32 N=8192 at most two 512-thread CTAs
// an SM (occ=2; the registers allow three) 0.992 -> 1.001 (0.997), with a residual
// 0.986 -> 0.994 (0.994), N=4096 with one 0.991 -> 0.994; N=2048 (own: 64-thread rows,
// four 256-thread CTAs an SM) at two CTAs an SM 0.991 -> 0.995 at 6be8db0 (Liger 0.993-0.994
// in two calls before; four CTAs 0.986). Slower: occ=2 for bf16 rows
// at N=4096-8192 (1.005 -> 0.935), occ=2 or one 1024-thread CTA with a residual at
// N=16384 (0.995 -> 0.950 / 0.996); LayerNorm fp32 N=16384 under every variant tried
// (0.986; occ=1-3, ept=8-64, row=smem: 0.739-0.982).
MeasuredShape measured_slower_memory_rows(const RowPlanInputs& in) {
  if (!in.slower_memory()) return {};
  const std::int64_t n = in.n;
  if (in.x_bytes == 4 && !in.center && in.residual) {
    if (n == 4096 || n == 8192) return {static_cast<int>(n / 512), 0, 0, 2};
    if (n == 2048) return {static_cast<int>(n / 512), 0, 0};
    if (n == 256) return {2, 0, 0};
  }
  if (in.x_bytes == 4 && !in.center && !in.residual) {
    if (n == 2048) return {0, 0, 0, 2};
    if (n == 8192) return {16, 0, 0, 2};
    if (n == 16384) return {16, 1024, 0};
  }
  if (in.x_bytes == 2 && !in.center && !in.residual && n == 256) return {8, 0, 0};
  if (in.x_bytes == 2 && !in.center && !in.residual && n == 32768) return {32, 1024, 0};
  if (in.x_bytes == 2 && in.center && !in.residual && n == 4096) return {16, 0, 0};
  if (in.x_bytes == 4 && in.center && !in.residual && n == 16384) return {0, 256, 0};
  return {};
}

// Elements a thread for the call, or 0 for plan_rows' own.
int measured_forward_elems(const RowPlanInputs& in) {
  const std::int64_t n = in.n;
  if (in.x_bytes == 2) {
    if (in.residual && n >= 256 && n <= 2048) return 8;
    if (!in.center && n > 4096 && n <= 8192) return 16;
    if (in.center && !in.residual && n > 8192 && n <= 16384) return 64;
    return 0;
  }
  if (in.x_bytes == 4) {
    if (!in.residual && ((n >= 256 && n <= 512) || (n > 4096 && n <= 8192))) return 16;
    if (in.residual && (n == 256 || (n > 2048 && n <= 4096) || (!in.center && n > 8192 && n <= 16384))) return 16;
    return 0;
  }
  return 0;
}

// Registers a thread of a staged row keeps at least: at 32 ptxas sm_90a spilled 32
// bytes (LayerNorm fp32 with a residual, N=20000, whose last items are partly empty).
constexpr std::int64_t kSmemRowMinRegisters = 40;
// One CTA's staged slice at most: a CTA must still fit an SM.
constexpr std::int64_t kSmemRowBudget = kSmemPerSm - kSmemPerCta;

}  // namespace

RowPlanInputs with_forward_elems(const RowPlanInputs& in) {
  if (in.backward || in.few_rows || in.arch != 90 || !in.weight_as_x || in.weight_bytes == 0 ||
      in.max_vec * in.x_bytes < 16 || in.forced_elems_per_thread || in.forced_cta_threads || in.forced_min_blocks ||
      in.forced_no_prefetch || in.forced_smem_row > 0 || in.forced_bulk_rows || in.forced_group_rows)
    return in;
  RowPlanInputs out = in;
  MeasuredShape shape = measured_slower_memory_rows(in);
  if (!shape.measured()) shape = measured_long_rows(in);
  if (!shape.measured()) shape = measured_short_fp32_rows(in);
  if (shape.measured()) {
    out.forced_elems_per_thread = shape.elems;
    out.forced_cta_threads = shape.cta;
    out.forced_min_blocks = shape.min_blocks;
    if (!in.forced_sm_ctas) out.forced_sm_ctas = shape.sm_ctas;  // NORMKIT_FORWARD_PLAN's occ= over the measured shape's
    return out;
  }
  const int elems = measured_forward_elems(in);
  if (elems == 0) return in;
  out.forced_elems_per_thread = elems;
  return out;
}

RowPlanInputs with_staged_rows(const RowPlanInputs& in) {
  if (in.backward || in.few_rows || in.arch != 90 || !in.center || in.residual_bytes != 4 || in.x_bytes != 4 ||
      in.weight_bytes != 4 || (in.bias && in.bias_bytes != 4) || in.max_vec * in.x_bytes < 16 ||
      in.n <= 16384 || in.n > 131072 || in.forced_elems_per_thread || in.forced_cta_threads ||
      in.forced_min_blocks || in.forced_no_prefetch || in.forced_smem_row || in.forced_bulk_rows ||
      in.forced_group_rows)
    return in;
  RowPlanInputs out = in;
  out.forced_smem_row = 1;
  if (in.n <= 32768) out.forced_cta_threads = 256;
  return out;
}

RowPlan with_smem_row(const RowPlan& planned, const RowPlanInputs& in) {
  const int residual_bytes = in.residual_bytes;
  // The kernel copies whole 16-byte chunks: x's items are, and the residual's must be
  // (an fp32 row's bf16 residual is 8 bytes an item).
  if (in.forced_smem_row <= 0 || in.backward || !planned.regs || planned.early_params || planned.vec * in.x_bytes != 16 ||
      (planned.vec * residual_bytes) % 16 != 0 || in.arch < 80)
    return planned;
  RowPlan p = planned;
  const std::int64_t items = (slice_vectors(p, in.n) + p.tpr - 1) / p.tpr;
  const std::int64_t bytes = items * p.threads() * p.vec * (in.x_bytes + residual_bytes);
  if (bytes > kSmemRowBudget) return planned;
  p.smem_row = true;
  p.prefetch = false;     // the staged row replaces the pipeline's second register set,
  p.params_smem = false;  // and takes the dynamic shared memory of the parameters' copy
  p.smem_bytes = static_cast<int>(bytes);
  if (!in.forced_min_blocks) {
    const std::int64_t by_smem = kSmemPerSm / (bytes + kSmemPerCta);
    const std::int64_t by_regs = 65536 / (std::int64_t{p.threads()} * kSmemRowMinRegisters);
    p.min_blocks = static_cast<int>(
        std::clamp<std::int64_t>(std::min({by_smem, by_regs, std::int64_t{2048 / p.threads()}}), 1, 16));
  }
  return p;
}

namespace {
// A stage of 32 KB where the cluster allows (x's slice and the residual's): bf16
// N=262144 over 16 CTAs without a residual, N=65536 over 4; with a bf16 weight's 32 KB
// slice, six such stages fit an SM (227 KB).
constexpr std::int64_t kBulkSliceBytes = 32 * 1024;
constexpr int kBulkMaxStages = 8;
}  // namespace

std::optional<BulkRingShape> bulk_ring_shape(const RowPlanInputs& in, std::int64_t nv,
                                             std::int64_t stage_per_vector, std::int64_t target_bytes) {
  BulkRingShape shape;
  while (shape.cluster < 16 && nv * stage_per_vector / shape.cluster > target_bytes && nv % (2 * shape.cluster) == 0)
    shape.cluster *= 2;
  if (in.forced_cluster) shape.cluster = in.forced_cluster;
  if (nv % shape.cluster != 0) return std::nullopt;  // slices of equal length only
  shape.slice_v = nv / shape.cluster;
  if (in.forced_cta_threads) shape.threads = in.forced_cta_threads;
  while (shape.threads > 64 && shape.threads / 2 >= shape.slice_v) shape.threads /= 2;
  if (shape.threads < 64) return std::nullopt;  // the cluster exchange relies on the warps' CTA barrier
  shape.items = (shape.slice_v + shape.threads - 1) / shape.threads;
  if (in.forced_min_blocks) shape.blocks = in.forced_min_blocks;
  shape.register_cap = std::min<std::int64_t>(255, 65536 / (std::int64_t{shape.threads} * shape.blocks));
  return shape;
}

BulkRingStages bulk_ring_stages(const RowPlanInputs& in, const BulkRingShape& shape, std::int64_t stage_bytes,
                                std::int64_t params_bytes, bool params_allowed, int max_stages) {
  const std::int64_t budget = kSmemPerSm / shape.blocks - kSmemPerCta;
  auto fitting = [&](bool params_smem) {
    return std::min<std::int64_t>(max_stages, (budget - (params_smem ? params_bytes : 0)) / stage_bytes);
  };
  const std::int64_t wanted = in.forced_bulk_stages ? in.forced_bulk_stages : 2;
  BulkRingStages out;
  out.params_smem = params_allowed && params_bytes > 0 && fitting(true) >= wanted;
  const std::int64_t stages = fitting(out.params_smem);
  if (stages >= wanted) out.stages = static_cast<int>(in.forced_bulk_stages ? in.forced_bulk_stages : stages);
  return out;
}

RowPlan bulk_ring_plan(const BulkRingShape& shape, int vec, int stages) {
  RowPlan p;
  p.vec = vec;
  p.tpr = shape.threads;
  p.rows = 1;
  p.cluster = shape.cluster;
  p.regs = true;
  p.bulk_stages = stages;
  p.min_blocks = shape.blocks;
  return p;
}

// H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_FORWARD_PLAN=row=bulk, one run
// each in one call (scripts/plan_cases/forward-bulk-rows.txt at deefadb,
// docs/perf/h200-2026-12-01c.md), weight (and bias) and residual of x's dtype:
//   LayerNorm fp32 without a residual N=32768 0.910 -> 0.946, 65536 0.853 -> 0.931;
//   with one N=32768 0.895 -> 0.937, 65536 0.853 -> 0.911, 131072 0.766 -> 0.926;
//   RMSNorm fp32 without a residual N=131072 0.880 -> 0.910, 262144 0.811 -> 0.934;
//   with one N=65536 0.890 -> 0.916, 131072 0.845 -> 0.939;
//   bf16 with a residual N=262144: RMSNorm 0.858 -> 0.922, LayerNorm 0.628 -> 0.880.
// Slower or level elsewhere: every N=16384 row (-3 to -12 %), LayerNorm bf16 without a
// residual (N=32768-262144: -19 to -22 %) and with one below N=262144 (-3 to -17 %),
// RMSNorm bf16 below N=262144 (-1 to -10 %; without a residual N=131072 +2 %, left
// alone), fp32 rows at N=262144 but RMSNorm's without a residual (LayerNorm -15 %).
// RMSNorm fp32 over 8 CTAs instead of the ring's own 16 (or the register rows over
// 2-4), same call, three runs (scripts/plan_cases/forward-fp32-bulk8.txt at e4d28a0,
// docs/perf/h200-2026-12-02b.md): without a residual N=65536 0.923 -> 0.934, 131072
// 0.914 -> 0.935; with one N=32768 0.916 -> 0.926, 65536 0.911 -> 0.939. Not at N=16384
// (0.972 -> 0.799 / 0.946), 32768 without a residual (0.935 -> 0.903), 131072 with one
// (0.937 -> 0.838); over 4 CTAs 0.89-0.93.
// LayerNorm's slice moments from one CTA reduction of shifted sums instead of two
// passes (norm_fwd_bulk.cuh), two runs each in one call (scripts/plan_cases/
// forward-bulk-shift.txt, docs/perf/h200-2026-12-02e.md): LayerNorm fp32
// without a residual N=131072 0.881 (own plan) -> 0.902 (0.853 with the two passes),
// now planned; LayerNorm bf16 rows stay off the ring (N=65536-262144 without a residual
// 0.854 / 0.859 / 0.750 against the register rows' 0.911 / 0.857 / 0.845; with one
// N=65536-131072 0.917 / 0.855 against 0.930 / 0.880).
// RMSNorm bf16 without a residual from N=131072, over 16 CTAs of 64 columns a thread,
// several an SM (the ring's own shape, one 512-thread CTA an SM, measured +2 % at
// N=131072 above: not planned). Two runs each in one call (scripts/plan_cases/
// backward-bulk-more-ctas-2.txt at 648f3eb, docs/perf/h200-2026-12-03.md), the
// register rows -> the ring: N=131072 0.908 -> 0.927 (four 128-thread CTAs an SM;
// two of 256: 0.915), 262144 0.885 -> 0.925 (two 256-thread CTAs an SM). LayerNorm
// bf16 lost both ways (N=131072 0.860 -> 0.809 / 0.620, 262144 0.836 -> 0.629).
// Those LayerNorm rings lost to the bias (the bench's LayerNorm has one), not to the
// centring: without it they ran at 0.94 / 0.92 / 0.91 (scripts/proto/fwd_param_probe.py,
// docs/perf/h200-2026-12-03c.md). With it, four 128-thread CTAs an SM, or two of 256 at
// N=262144, leave no room for the weight and bias slices beside two stages, so the
// epilogue read them from global memory (0.66-0.75 with them loaded ahead of the stores),
// and two of 256 at N=131072 read them from shared memory in one loop with the global
// path (0.806; 0.895 apart). Three 128-thread CTAs an SM over 16 hold them with two
// stages: LayerNorm bf16 with a bias, no residual, N=131072 0.886 (own plan, the
// register rows) -> 0.929 (0.906 before the loops were apart), one run each.
// One stage (the next row's copy into the stage the CTA has just read into registers,
// overlapping the row's reduction and stores as the register rows' prefetch does)
// leaves room for them in the other shapes. Same tool, one run each, own plan -> one
// stage: LayerNorm bf16 N=262144 in two 256-thread CTAs an SM over 16 0.842 -> 0.906,
// with a residual N=131072 0.912 -> 0.934; LayerNorm fp32 N=131072 in two of 256 over
// 16 0.911 -> 0.936, N=262144 in one of 512 over 16 0.836 -> 0.903 (0.697 with the
// stages that fit). Level or slower: RMSNorm bf16 N=131072-262144 (0.933 / 0.936 ->
// 0.936 / 0.941), LayerNorm bf16 N=65536 (0.922 -> 0.915 / 0.832), LayerNorm bf16
// N=131072 (0.921 in three CTAs, as with two stages), fp32 rows with a residual
// (LayerNorm N=65536 0.926 -> 0.874, 262144 0.920 -> 0.856; RMSNorm N=262144 0.945
// -> 0.900).
BulkRingCtas bulk_rows_measured_ctas(const RowPlanInputs& in) {
  if (!bulk_rows_measured(in) || in.max_vec * in.x_bytes < 16) return {};
  // LayerNorm fp32 with a residual N=32768 on the H100's memory class, over eight
  // 256-thread CTAs two an SM (the ring's own shape: eight of 512): 0.927 -> 0.945, the
  // register rows 0.906 (one run each, plan_cases/fwd-fp32-long-h100.txt at e19bb11,
  // docs/perf/h200-2026-12-07c.md; N=65536 lost that way, 0.963 -> 0.811).
  if (in.center && in.x_bytes == 4 && in.residual && in.n == 32768 && in.slower_memory()) return {8, 256, 2};
  if (in.x_bytes == 4 && !in.center && in.n <= (in.residual ? 65536 : 131072)) {
    // Without a residual at N=65536 in two 256-thread CTAs an SM: 0.918 -> 0.935, one
    // run (plan_cases/bulk-more-ctas-3.txt at bdac07b, docs/perf/h200-2026-12-03.md;
    // at N=32768 0.959 -> 0.897, four 128-thread CTAs 0.914; at 131072 over 16, 0.938 ->
    // 0.932; LayerNorm fp32 lost 3-26 % in either shape).
    if (!in.residual && in.n == 65536) return {8, 256, 2};
    return {8, 0, 0};
  }
  if (in.center && in.x_bytes == 4 && !in.residual) {
    if (in.n == 131072) return {16, 256, 2, 1};
    if (in.n == 262144) return {16, 512, 1, 1};
  }
  if (in.center && in.x_bytes == 2) {
    if (in.residual && in.n == 131072) return {16, 256, 2, 1};
    if (!in.residual && in.n == 131072) return {16, 128, 3};
    if (!in.residual && in.n == 262144) return {16, 256, 2, 1};
  }
  if (in.x_bytes == 2 && !in.center && !in.residual) {
    // The measured N only: elsewhere the ring might refuse these CTAs (a slice that is
    // not whole vectors), and the register rows would take them instead.
    if (in.n == 131072) return {16, 128, 4};
    if (in.n == 262144) return {16, 256, 2};
  }
  return {};
}

bool bulk_rows_measured(const RowPlanInputs& in) {
  // As measured: a weight of x's dtype, LayerNorm's bias of it too (RMSNorm none), a
  // residual of it with residual_out stored.
  if (in.any_forced() || in.arch != 90 || in.few_rows || in.weight_bytes != in.x_bytes || in.bias != in.center ||
      (in.bias && in.bias_bytes != in.x_bytes) || in.n < 32768 || in.n > 262144 ||
      (in.residual && (in.residual_bytes != in.x_bytes || !in.residual_out)))
    return false;
  if (in.x_bytes == 4) {
    // The H100's memory class keeps these fp32 rows in registers: NVIDIA H100 80GB HBM3,
    // ratio to copy, the ring (own plan; the sweep at 9ef53ac where not in the call) ->
    // row=regs, one run each in two calls (plan_cases/fwd-fp32-long-h100.txt at e19bb11,
    // h100-followup.txt at 5862167; docs/perf/h200-2026-12-07c.md): LayerNorm without a
    // residual N=32768 0.898 -> 0.996 / 0.995, 65536 0.907 -> 0.981 / 0.984, 131072
    // 0.964 -> 0.976; RMSNorm with one N=32768 0.936 -> 0.985 / 0.988, 65536 0.941 ->
    // 0.968; without N=65536 0.940 -> 0.996, 131072 0.940 -> 0.982. The ring stays for
    // the rest: LayerNorm with a residual (N=32768 0.927 -> 0.906, 65536 0.963 -> 0.879,
    // 131072 0.965 -> 0.769), RMSNorm with one N=131072 (0.962 -> 0.880), N=262144 (not
    // measured on the H100). On the H200 the ring measured faster on all of them (above).
    if (in.slower_memory() && in.n <= 131072 && (in.center ? !in.residual : !in.residual || in.n <= 65536))
      return false;
    if (in.center) return in.n <= 131072 || (!in.residual && in.n == 262144);
    return in.residual ? in.n >= 32768 && in.n <= 131072 : in.n >= 65536;
  }
  if (in.x_bytes != 2 || in.x_fp16) return false;  // bf16 measured
  if (in.residual) return in.n > 131072 || (in.center && in.n == 131072);
  return in.n == 131072 || in.n == 262144;
}

RowPlan with_bulk_rows(const RowPlan& planned, const RowPlanInputs& in) {
  const int r_bytes = in.residual ? in.residual_bytes : 0;
  if (!in.forced_bulk_rows || in.backward || in.arch < 90 || in.max_vec * in.x_bytes < 16 ||
      in.n % (16 / in.x_bytes) != 0 || (16 / in.x_bytes) * r_bytes % 16 != 0)
    return planned;
  const int vec = 16 / in.x_bytes;
  const std::optional<BulkRingShape> shape =
      bulk_ring_shape(in, in.n / vec, std::int64_t{vec} * (in.x_bytes + r_bytes), kBulkSliceBytes);
  if (!shape) return planned;
  // The row a thread holds raw (ITEMS vectors of x and the residual) beside ~40
  // registers of the rest, under the cap threads * blocks leave: ptxas sm_90a spilled
  // 128 bytes at 64 registers with 28 (LayerNorm fp32 N=200000 under minb=2).
  if (shape->items * vec * (in.x_bytes + r_bytes) / 4 > shape->register_cap - 40) return planned;
  const int slice_v = static_cast<int>(shape->slice_v);
  const int b_bytes = in.bias ? in.bias_bytes : 0;
  const nk::BulkRowsLayout one = nk::bulk_rows_layout(slice_v, vec, in.x_bytes, r_bytes, in.weight_bytes, b_bytes, 1);
  const BulkRingStages stages =
      bulk_ring_stages(in, *shape, one.slice_bytes, one.params_bytes, in.params_smem_allowed, kBulkMaxStages);
  if (stages.stages == 0) return planned;
  RowPlan p = bulk_ring_plan(*shape, vec, stages.stages);
  p.params_smem = stages.params_smem;
  p.smem_bytes = static_cast<int>(nk::bulk_rows_layout(slice_v, vec, in.x_bytes, r_bytes, p.params_smem ? in.weight_bytes : 0,
                                                       p.params_smem ? b_bytes : 0, p.bulk_stages)
                                      .total_bytes);
  return p;
}

}  // namespace normkit::norm::detail
