// Backward plans of long rows (the stash, split rows, the clusters of calls of few
// rows), the measured CTA counts of fp32 register rows, and the backward's grid
// sizes. plan_rows (rmsnorm_heuristics.cpp) calls the helpers declared in
// rmsnorm_heuristics_bwd.hpp.
#include "rmsnorm_heuristics_bwd.hpp"

#include <algorithm>
#include <cstdint>

#include "normkit/norm/params.cuh"

namespace normkit::norm::detail {

// The stash (backward rows too long for registers). 256-thread CTAs with at most
// ~72 KB of shared memory each keep three CTAs per SM, so that one CTA's loads
// overlap another's reduction and stores; the cluster grows (up to 16 CTAs on
// sm_90, a non-portable size the runtime enables per kernel) until the slice
// fits. Measured on H200 (docs/perf/rmsnorm-vs-eager-h200.md, 9cbdd46), no
// weight: bf16 N=32768 (2 CTAs) 497 us against 696 us for register-resident
// rows in a 2-CTA cluster, N=131072 (8 CTAs) 771 against 823 us and N=262144
// (16 CTAs) 837 against 848 us for the two-pass kernel. dw/db come from the
// column pass: sums kept in the stash too were slower (see rmsnorm_bwd.cuh).
// With dw/db (the column pass after the row kernel), clusters beyond 2 CTAs lost
// to the two-pass kernel in the same run (d887cec, total backward): bf16
// N=131072 1161 against 1112 us, N=262144 1230 against 1134, fp32 N=32768 (4
// CTAs) 2130 against 1960, N=131072 2323 against 2062; 2 CTAs won (bf16
// N=32768: 805 against 1046). So with dw/db the stash is used up to 2 CTAs,
// without up to 4 (fp32 N=32768: 1173 us, 1.09x eager). Longer rows take the
// split kernels (plan_split): by its traffic (h and dout read twice, dx written
// once, no column pass) ~2.5 GB against the stash's 1.5 GB plus the column
// pass's 1 GB for bf16 2048x131072, at copy-like occupancy instead of ~2 TB/s.
// Measured (c96aa46 against 9fdb0b9): bf16 N=131072 with weight 689 us against
// the two-pass kernel's 1113, fp32 N=262144 with weight 1351 against 2110.
constexpr std::int64_t kStashBudget = 72 * 1024;

bool plan_stash(const RowPlanInputs& in, RowPlan& p) {
  const int max_cluster = in.arch < 90 ? 1 : in.param_grads ? 2 : 4;
  for (int c = 1; c <= max_cluster; c *= 2) {
    const int bytes = stash_bytes(in.n, p.vec, c, in.x_bytes, in.dout_bytes);
    if (bytes > kStashBudget) continue;
    p.stash = true;
    p.regs = false;
    p.row_sums = false;
    p.cluster = c;
    p.smem_bytes = bytes;
    return true;
  }
  return false;
}

// Split rows: the constants and the measurements behind them are in
// rmsnorm_heuristics_bwd.hpp (kSplitBlocks, kSyncedBlocks).
void plan_split(const RowPlanInputs& in, RowPlan& p) {
  p.split = true;
  p.regs = false;
  p.row_sums = true;  // the dx kernel sums dw/db: no column pass
  p.cluster = 1;
  p.synced = !in.param_grads;
  // fp32 rows with dw/db: the dx kernel's CTAs exchange the chunk sums themselves
  // (norm_bwd_split_kernel's WAIT), as the synced kernel does without them, so h and
  // dout are read once instead of twice. H200, M*N = 2^27, ratio to copy, the two
  // kernels -> WAIT (A/B a487a62 -> 4c84db3 in one run, docs/perf/h200-2026-11-30c.md):
  // RMSNorm fp32 N=32768 0.575 -> 0.650, 65536 0.568 -> 0.616, 131072 0.562 ->
  // 0.594; LayerNorm 0.475 -> 0.576, 0.537 -> 0.563, 0.424 -> 0.544; with
  // dresidual_out RMSNorm 0.654 -> 0.674, 0.646 -> 0.648, 0.647 -> 0.635, LayerNorm
  // 0.588 -> 0.628, 0.592 -> 0.608, 0.502 -> 0.603. Not at N=262144 (RMSNorm 0.553 ->
  // 0.513, LayerNorm 0.474 -> 0.444) and not 16-bit rows, which wait with two vectors
  // a thread (at four, with the sums in shared memory, bf16 rows with fp32 weights
  // spilled 32-64 bytes under 128 registers): half the bytes in flight, and RMSNorm
  // bf16 N=65536-262144 lost 0.568-0.550 -> 0.389-0.322 (LayerNorm 0.422-0.376 ->
  // 0.332-0.279).
  // 16-bit LayerNorm rows beyond N=131072 with 16-bit weight and bias (or none) do
  // wait, with four vectors a thread as fp32 rows do (the spills above were with fp32
  // weights). H200, M*N = 2^27, ratio to copy, the two kernels -> WAIT at four
  // vectors (A/B c9c5755 -> 67a4f0c in one run, docs/perf/h200-2026-11-30d.md):
  // LayerNorm bf16 N=262144 0.389 -> 0.477, with dresidual_out 0.483 -> 0.530; but
  // N=131072 0.520 -> 0.488 and 0.572 -> 0.528, and RMSNorm bf16 N=131072-262144
  // lost too (0.554 -> 0.552, 0.545 -> 0.534; with dresidual_out 0.633 -> 0.590,
  // 0.629 -> 0.577). ptxas sm_80/sm_90a/sm_100a, both norms, bf16/fp16, N=65536-262144
  // (odd N included), with and without db and dresidual_out: clean, 96-128
  // registers, except sm_100a RMSNorm bf16 N=262144 with dresidual_out (32 bytes), so
  // sm_100 rows with dresidual_out keep the two kernels.
  const bool wait16 = in.center && in.n > 131072 && in.x_bytes == 2 && in.weight_bytes <= 2 &&
                      !(in.arch >= 100 && in.residual);
  p.wait_dots = in.param_grads && !in.many_heads && ((in.x_bytes == 4 && in.n <= 131072) || wait16);
  // Two vectors a thread with db (two sums in registers) where the sums stay in
  // registers; WAIT keeps them in shared memory.
  p.split_items = in.dbias && !p.wait_dots ? 2 : 4;
}

// Register rows over a cluster, the CTAs' row sums pushed to each other with
// st.async and awaited on an mbarrier (row_sums_walk), not two cluster barriers a
// row, where they measured faster than the plans below them (the fp32 pair, the
// stash, the split kernels): fp32 rows with dw (LayerNorm: and db) beyond
// N=16384, 8 columns a thread in 512-thread CTAs up to a 16-CTA cluster (1024
// threads beyond), two CTAs per SM, no prefetch; LayerNorm's with dresidual_out
// (which spilled so) one CTA per SM with the next row prefetched, up to N=65536;
// 16-bit rows with dresidual_out at N=16385-32768, one vector a thread in a
// cluster of eight 512-thread CTAs, two per SM; RMSNorm's 16-bit rows with dw alone
// from N=32768 at two vectors a thread (512-thread CTAs, two per SM, up to 16 CTAs;
// 1024 threads at N=262144). H200, M*N = 2^27, ratio to copy,
// own plan -> NORMKIT_BACKWARD_PLAN=cluster=... (two runs each in one call,
// scripts/plan_cases/backward-clusters.txt, docs/perf/h200-2026-11-30h.md):
//   RMSNorm fp32 N=32768 (cluster=8,cta=512,minb=2,prefetch=0) 0.651 -> 0.830, with
//   dresidual_out 0.667 -> 0.885; N=65536 (cluster=16) 0.621 -> 0.780, 0.643 ->
//   0.820; N=131072 (cluster=16,cta=1024) 0.594 -> 0.678, 0.631 -> 0.777.
//   LayerNorm fp32 with dresidual_out (cluster=8/16,cta=512, prefetch, one CTA per
//   SM): N=32768 0.615 -> 0.768, 65536 0.604 -> 0.694.
//   bf16 with dresidual_out N=32768 (cluster=8,cta=512,minb=2,prefetch=0): RMSNorm
//   0.606 -> 0.694, LayerNorm 0.575 -> 0.616.
//   RMSNorm bf16 with dw alone, two vectors a thread, minb=2,prefetch=0
//   (backward-clusters-2.txt): N=32768 (cluster=4; the pair of 32 columns) 0.697 ->
//   0.720, 65536 (cluster=8) 0.560 -> 0.687, 131072 (cluster=16) 0.555 -> 0.663,
//   262144 (cluster=16,cta=1024, one CTA per SM) 0.544 -> 0.595.
// They lost elsewhere: bf16 without dresidual_out at one vector a thread (RMSNorm 0.707 ->
// 0.549 at N=32768 against the pair, 0.574 -> 0.495 at 65536; LayerNorm within 3 %;
// LayerNorm and rows with dresidual_out spilled 152-452 bytes at two vectors),
// bf16 with it from N=65536 (RMSNorm 0.639 -> 0.617), and every bf16 row with the
// next row prefetched (0.34-0.53). LayerNorm fp32 without dresidual_out (its forward
// spilled in that call) takes the RMSNorm rule, measured by the A/B eb7894f ->
// 44a522f (two runs each): N=32768 0.580 -> 0.753, 65536 0.563 -> 0.741, 131072
// 0.545 -> 0.595. Not measured, so not planned: sm_80/sm_100, RMSNorm
// with db, mixed dtypes of x and dout, calls of few rows, N=262144 (fp32 rows
// spilled at 16 columns a thread in 16 CTAs of 1024 threads). With a separate
// dresidual output ptxas spilled 20 bytes (fp32 N=32768, sm_90a): not planned.
ClusterRows plan_cluster_rows(const RowPlanInputs& in, int vec, std::int64_t tpr8) {
  ClusterRows c;
  if (in.forced_cluster > 1 && in.arch >= 90) {
    c.cluster = in.forced_cluster;
    c.threads = in.forced_cta_threads ? in.forced_cta_threads : 512;
    c.smem_sums = in.forced_cluster_smem_sums && in.param_grads;
    c.prefetch = !in.forced_no_prefetch && !c.smem_sums;  // the kernel's shared-memory sums do not prefetch
    return c;
  }
  if (in.arch != 90 || !in.param_grads || in.few_rows || in.forced_elems_per_thread || in.forced_cta_threads ||
      in.dout_bytes != in.x_bytes || vec * in.x_bytes != 16 || (in.dbias && !in.center) || in.dresidual_output)
    return c;
  if (in.x_bytes == 4 && tpr8 > 2048) {
    const bool ln_dro = in.center && in.residual;
    if (tpr8 / 512 <= 16) {
      c.cluster = static_cast<int>(tpr8 / 512);
      c.threads = 512;
      c.min_blocks = ln_dro ? 1 : 2;
      c.prefetch = ln_dro;
    } else if (tpr8 / 1024 <= 16 && !ln_dro) {
      c.cluster = static_cast<int>(tpr8 / 1024);
      c.threads = 1024;
      c.min_blocks = 1;
    }
  } else if (in.x_bytes == 2 && in.residual && tpr8 > 2048 && tpr8 <= 4096) {
    c.cluster = 8;
    c.threads = 512;
    c.min_blocks = 2;
  } else if (in.x_bytes == 2 && !in.center && !in.residual && !in.dbias && tpr8 >= 4096) {
    // Two vectors a thread, as the fp32 rows above hold.
    const std::int64_t tpr16 = tpr8 / 2;
    if (tpr16 / 512 <= 16) {
      c.cluster = static_cast<int>(tpr16 / 512);
      c.threads = 512;
      c.min_blocks = 2;
    } else if (tpr16 / 1024 <= 16) {
      c.cluster = static_cast<int>(tpr16 / 1024);
      c.threads = 1024;
      c.min_blocks = 1;
    }
  }
  // Every thread's vectors in the row (N a multiple of the cluster's columns): a
  // thread's partly empty last vectors spilled 20-36 bytes (N=20000, ptxas sm_90a).
  const std::int64_t nv = in.n / vec;
  if (c.cluster > 1 && nv % (static_cast<std::int64_t>(c.cluster) * c.threads) != 0) c = ClusterRows{};
  return c;
}

// Few rows with dw/db (calls the host's time decides: M=1 and M=199 at N=32768 on
// the H200, where eager's do_bench time is under 100 us): register-resident rows
// in a cluster with dw/db summed in registers are two launches (row kernel,
// reduction) where the stash is three (and its dynamic shared memory), and a
// back-to-back loop of such calls measured 2-6% slower than eager with the stash
// (cee9b14: bf16/fp16 N=32768, paired ratios 0.94-0.97). Their bandwidth is the
// 0.58x of clusters (rmsnorm_heuristics.cpp's header), which these row counts do
// not reach.
bool plan_few_rows(const RowPlanInputs& in, std::int64_t tpr_sums, int tpr_max, RowPlan& p) {
  if (!in.few_rows || !in.param_grads || in.arch < 90) return false;
  const std::int64_t cluster = next_pow2((tpr_sums + tpr_max - 1) / tpr_max);
  if (cluster > 8) return false;  // beyond the portable cluster size (N > 65536 for 16-bit rows)
  p.cluster = static_cast<int>(cluster);
  p.regs = true;
  p.row_sums = true;
  return true;
}

RowPlan fit_to_device(RowPlan p, std::int64_t n, int sm_count) {
  // A part's CHUNKS CTAs wait for each other: all of them resident at once.
  if (p.wait_dots && split_chunks(n, p) > static_cast<std::int64_t>(sm_count) * p.min_blocks) p.wait_dots = false;
  if (p.synced && split_chunks(n, p) > static_cast<std::int64_t>(sm_count) * p.min_blocks) {
    p.synced = false;
    p.min_blocks = kSplitBlocks;
  }
  return p;
}

// fp32 backward rows in registers on sm_90 (h, dout and the sums in one CTA): ptxas
// fits them in 64-121 registers where plan_rows' estimate counts 88-136, so more
// CTAs per SM than the estimate allows, as measured: H200, M*N = 2^27, all fp32,
// NORMKIT_XPLAN sweep at 04b667f (one run, ratio to copy, default -> this count;
// docs/perf/h200-2026-11-30c.md):
//   LayerNorm with dw and db: N=1024 (128 threads) 5 -> 6 CTAs 0.864 -> 0.925 (8:
//   0.884); N=2048 (256) 2 -> 3 0.773 -> 0.928 (4: 0.908); N=4096 (512) 1 -> 2
//   0.711 -> 0.955 (ptxas holds it in 64 registers, no spills). With dresidual_out:
//   N=2048 2 -> 3 0.909 -> 0.987; N=4096 at 16 columns (256 threads) 2, 0.989.
//   RMSNorm with dw and dresidual_out: N=1024 (two 64-thread rows) and 2048 (128
//   threads) 3 -> 4, 0.940 -> 0.992 and 0.955 -> 0.998; N=4096 (256) 1 -> 2 0.795 ->
//   0.971 (96 registers).
// Returns 0 where nothing was measured (the estimate's count stands): sm_80, mixed
// dtypes, LayerNorm without db, RMSNorm with db, N < 1024, and LayerNorm fp32
// N=16384's column pass (5 -> 4 CTAs lost there, 0.516 -> 0.436).
int fp32_backward_blocks(const RowPlanInputs& in, const RowPlan& p, std::int64_t owned) {
  if (!in.backward || in.x_bytes != 4 || in.dout_bytes != 4 || in.arch < 90 || in.n < 1024 || !p.regs ||
      !p.row_sums || p.smem_sums || p.cluster != 1 || p.async_rows || p.prefetch)
    return 0;
  const int threads = p.threads();
  if (in.center && in.dbias) {
    if (owned == 8 && !in.residual) return threads == 128 ? 6 : threads == 256 ? 3 : threads == 512 ? 2 : 0;
    if (owned == 8 && threads == 256) return 3;
    if (owned == 16 && threads == 256 && in.residual) return 2;
    return 0;
  }
  if (!in.center && !in.dbias && in.residual && owned == 16) return threads == 128 ? 4 : threads == 256 ? 2 : 0;
  return 0;
}

int stash_bytes(std::int64_t n, int vec, int cluster, int x_bytes, int dout_bytes) {
  const std::int64_t nv = n / vec;
  const std::int64_t slice_v = (nv + cluster - 1) / cluster;
  return static_cast<int>(std::min<std::int64_t>(slice_v * vec * (x_bytes + dout_bytes), 1LL << 30));
}

std::int64_t split_chunks(std::int64_t n, const RowPlan& plan) {
  return nk::split_chunks(n / plan.vec, plan.tpr, plan.split_items);
}

std::int64_t plan_bwd_split_parts(const RowPlan& plan, std::int64_t n, std::int64_t rows_per_head,
                                  std::int64_t heads, int sm_count) {
  const std::int64_t resident = static_cast<std::int64_t>(std::max(sm_count, 1)) * plan.min_blocks;
  const std::int64_t per_chunk = resident / (split_chunks(n, plan) * heads);
  return std::clamp<std::int64_t>(per_chunk, 1, std::max<std::int64_t>(rows_per_head, 1));
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
