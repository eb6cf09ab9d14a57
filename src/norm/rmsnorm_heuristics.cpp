// Launch plans of the RMSNorm row kernels. What the thresholds rest on (H200,
// docs/perf/rmsnorm-vs-eager-h200.md, CUDA-event medians against eager PyTorch):
//  - Forward: the row in registers, 32 elements a thread, up to 1024 threads, and
//    clusters of up to 8 CTAs for longer rows: faster than eager at all 38
//    GPU-bound shapes (50f6905: 1.07-1.56x; bf16 N=131072 needed its raw rows held
//    as words, see RawVec in vector_io.cuh).
//  - Backward, short rows (one CTA of <= 512 threads at 8-16 elements a thread):
//    dw/db summed in registers; kernel time below eager's where profiled
//    (scripts/profile_rmsnorm.py), the end-to-end time host-bound.
//  - Backward, rows too long for one CTA's registers: register-resident rows in
//    clusters lost to eager beyond 2 CTAs (0.58-0.59x at 4-8) while each row's
//    reduction took two cluster barriers. Such rows kept their slices in shared
//    memory instead (the stash), and rows beyond what a 2-CTA stash holds (4
//    without dw/db) are split into column chunks (both in
//    rmsnorm_heuristics_bwd.cpp): 1.31-1.81x eager with dw/db, 1.33-1.61x without
//    (50f6905, M*N = 2^28, N = 131072 and 262144). Since the clusters reduce through
//    row_sums_walk's pushes (reduce.cuh), fp32 rows from N=32768 and some 16-bit
//    ones take register rows over clusters of 4-16 CTAs again (plan_cluster_rows).
//  - Forward RMSNorm rows of 16-bit x and weight over a cluster of 1024-thread CTAs:
//    the weight copied into shared memory with the row (RowPlan::params_smem), so
//    that the epilogue is not ITEMS L2 round trips (954acb4, 2026-11-30).
//  - ptxas: every plan here compiles without spills for sm_80/sm_90a/sm_100a
//    (tests/cpp/test_rmsnorm_kernels.cpp); the register estimates below were
//    tuned until that held.
#include "rmsnorm_heuristics.hpp"

#include <algorithm>
#include <cstdint>

#include "normkit/norm/params.cuh"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_heuristics_bwd.hpp"
#include "rmsnorm_heuristics_decode.hpp"
#include "rmsnorm_heuristics_fwd.hpp"

namespace normkit::norm::detail {
namespace {

// RowPlan::smem_sums: at most this much shared memory per CTA (two CTAs per SM on
// sm_90 up to 113 KB each; 128 KB leaves LayerNorm N=16384 one CTA per SM).
constexpr std::int64_t kSmemSumsBudget = 128 * 1024;
constexpr std::int64_t kAsyncStages = 3;  // RowPlan::async_rows' ring (norm_bwd_kernel's kStages)
// RowPlan::async_rows: registers per thread the CTAs per SM leave at least (ptxas,
// sm_80/sm_90a/sm_100a, bf16 and fp16, with and without dw/db/dresidual); LayerNorm
// rows of which a thread holds several vectors, or a CTA several rows, need more
// (bf16 N=4096 with dw alone spilled 32 bytes at 80). LayerNorm bf16 N=2048 with
// dw and db (one vector a thread) ran at 2749 GB/s with three CTAs per SM (80
// registers), 2434 with two (96).
constexpr std::int64_t kAsyncMinRegs = 80;
constexpr std::int64_t kAsyncMinRegsCentered = 96;
constexpr std::int64_t kAsyncMinRegsTwoSums = 128;  // two sums of 16 columns (LayerNorm N=4096 with db, below)
constexpr std::int64_t kParamsSmemBudget = 128 * 1024;  // RowPlan::params_smem (one CTA per SM)

}  // namespace


std::string RowPlan::str() const {
  return "vec=" + std::to_string(vec) + " tpr=" + std::to_string(tpr) + " rows=" + std::to_string(rows) +
         " cluster=" + std::to_string(cluster) + " regs=" + std::to_string(regs ? 1 : 0) +
         " row_sums=" + std::to_string(row_sums ? 1 : 0) + " stash=" + std::to_string(smem_bytes) +
         " split=" + std::to_string(split ? split_items : 0) + (synced ? " synced" : "") +
         (wait_dots ? " wait" : "") +
         (prefetch ? " prefetch" : "") + (early_params ? " early" : "") + (smem_sums ? " smem_sums" : "") +
         (async_rows ? " async" : "") + (params_smem ? " params_smem" : "") + (smem_row ? " smem_row" : "") +
         (weight_smem ? " weight_smem" : "") + (l2_next ? " l2_next" : "") + (shared_reads ? " shared_reads" : "") +
         (early_refill ? " early_refill" : "") +
         (dro_direct ? " dro_direct" : "") + (evict_first ? " evict_first" : "") +
         (bulk_stages ? " bulk=" + std::to_string(bulk_stages) : "") +
         (group_stages ? " group=" + std::to_string(group_stages) + " items=" + std::to_string(split_items) : "") +
         (sm_ctas ? " occ=" + std::to_string(sm_ctas) : "") +
         (carveout_percent >= 0 ? " carveout=" + std::to_string(carveout_percent) + "%" : "") +
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

namespace {

// The bulk ring asked for where it measured faster, as row=bulk would ask for it (and
// the backward's short rows with their ept=).
RowPlanInputs with_measured_bulk_rows(const RowPlanInputs& in) {
  const int short_ept = in.backward ? bulk_backward_short_rows_ept(in) : 0;
  if (!short_ept && !(in.backward ? bulk_backward_rows_measured(in) : bulk_rows_measured(in))) return in;
  RowPlanInputs out = in;
  out.forced_bulk_rows = true;
  if (short_ept) out.forced_elems_per_thread = short_ept;
  const BulkRingCtas ctas = short_ept ? BulkRingCtas{}
                            : in.backward ? bulk_backward_measured_ctas(in)
                                          : bulk_rows_measured_ctas(in);
  out.forced_cluster = ctas.cluster;
  out.forced_cta_threads = ctas.threads;
  out.forced_min_blocks = ctas.blocks;
  out.forced_bulk_stages = ctas.stages;
  out.forced_early_refill = in.backward && bulk_backward_early_refill_measured(in);
  return out;
}

}  // namespace

RowPlan plan_rows(const RowPlanInputs& given) {
  NK_CHECK(given.n >= 1, "plan_rows: n must be >= 1");
  // The bulk ring's measured rows first: the other measured rules leave such calls alone.
  const RowPlanInputs in = with_forward_elems(
      with_staged_rows(with_decode_rows(with_plain16_rows(with_measured_bulk_rows(with_measured_group_rows(given))))));
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
  const std::int64_t nv = in.n / p.vec;
  auto threads_for = [&](int elems_per_thread) {
    const std::int64_t items = std::max<std::int64_t>(1, elems_per_thread / p.vec);
    return next_pow2((nv + items - 1) / items);
  };
  // The forward's two-pass kernel keeps no row in registers: small CTAs, four
  // per SM, so that several rows' loads and reductions overlap on each SM.
  const int tpr_two_pass = 256;
  const int two_pass_blocks = 4;
  p.cluster = 1;
  p.regs = true;
  p.row_sums = in.backward;
  const bool fp32_with_residual = !in.backward && in.x_bytes == 4 && in.residual && in.arch >= 90;
  // Forward 16-bit rows with a weight and without a residual whose 32 elements a
  // thread take 1024 threads or more (N > 16384) hold 64 elements a thread, raw, in
  // CTAs of 512 threads, two per SM (64 registers each, as one 1024-thread CTA has),
  // over a cluster beyond N=32768. One 1024-thread CTA per SM idled from the end of
  // its loads to its next row's (the forward pipeline below answers that with a
  // second raw row, for which 64 elements leave no registers, so these rows go
  // without it, and without `params_smem`: both were off in the measurements). H200,
  // M*N = 2^27, ratio to copy, A/B bench of two runs each (docs/perf/h200-2026-11-30e.md):
  //   1024-thread CTAs of 64 elements, half the CTAs a row (4996d87 -> 06872c2):
  //   RMSNorm bf16 N=131072 0.785 -> 0.820, 262144 0.725 -> 0.788 (fp16 0.678 -> 0.821,
  //   0.624 -> 0.793); LayerNorm bf16 0.626 -> 0.740, 0.596 -> 0.715.
  //   Then 512-thread CTAs (06872c2 -> aaf26cf -> 5abd9fa): RMSNorm bf16 N=20480
  //   0.789 -> 0.958, 32768 0.873 -> 0.942, 65536 0.849 -> 0.870, 131072 0.820 ->
  //   0.838, 262144 0.782 -> 0.803; LayerNorm bf16 0.596 -> 0.927, 0.723 -> 0.930,
  //   0.772 -> 0.816, 0.742 -> 0.763, 0.716 -> 0.757; fp16 alike.
  // Not measured, so not planned: rows without a weight (they keep the pipeline),
  // calls of few rows (planned for latency), sm_80.
  // LayerNorm rows that store mean and rstd (the training forward) over a cluster
  // keep 1024-thread CTAs (one per SM, as 06872c2 measured without the statistics):
  // in 512-thread CTAs ptxas sm_90a spilled 16 bytes (bf16 x, 16-bit weight and
  // bias, N=65536 and 131072); without the statistics, and RMSNorm, compiled clean.
  const bool raw64 = !in.backward && in.x_bytes == 2 && !in.residual && in.weight_bytes > 0 && in.arch >= 90 &&
                     p.vec * in.x_bytes == 16 && !in.few_rows && threads_for(32) >= 1024;
  std::int64_t tpr;
  int tpr_max;
  bool ring_db16 = false;  // backward: ring_rows_db's rows of 16 columns a thread (below)
  bool two_ctas = false;   // forward: two 512-thread CTAs per SM (below)
  bool smem_sums32 = false;  // backward: 32 columns a thread with shared-memory sums (below)
  if (!in.backward) {
    // Forward keeps h (fp32): 32 elements, eight 16-byte bf16 loads in flight.
    // 512-thread CTAs in clusters instead of 1024 threads (two CTAs per SM
    // instead of one) measured slower on H200 at 32 elements a thread
    // (docs/perf/h200.md, 2026-11-29): bf16 N=32768 0.71x copy against 0.79x,
    // N=262144 0.53x against 0.58x; at 64 (raw64, above) faster.
    // fp32 rows with a residual (h in fp32 beside the residual's loads) spilled
    // 16-72 bytes at 32 elements a thread under the 64 registers of 1024-thread CTAs
    // (ptxas sm_90a and sm_100a, RMSNorm and LayerNorm, N >= 32768): 16 there, the
    // row over a cluster twice as large (below). Shorter rows (512 threads or fewer
    // at 32 elements: fp32 N=16384 with a residual 0.94x copy) and sm_80, without
    // clusters, compiled them clean and keep 32. H200, M*N = 2^27, ratio to copy
    // (main's spilling plans at 619d2e2 -> 954acb4, docs/perf/h200-2026-11-30.md):
    // RMSNorm N=32768 0.802 -> 0.821, 65536 0.779 -> 0.762, 131072 0.749 -> 0.748,
    // 262144 0.730 -> 0.651; LayerNorm 0.760 -> 0.792, 0.728 -> 0.733, 0.697 ->
    // 0.690, 0.675 -> 0.600. N=262144's loss, probably SMs left idle by 16-CTA
    // clusters (each needs 16 free SMs of one GPC), is the price of no spills there.
    const int elems = in.forced_elems_per_thread ? in.forced_elems_per_thread
                      : raw64                  ? 64
                      : fp32_with_residual && threads_for(32) >= 1024 ? 16
                                                                      : 32;
    tpr = threads_for(elems);
    const bool raw64_pairs = raw64 && !(in.center && in.store_stats && threads_for(64) > 512);
    // The other rows of 1024 threads or more (N >= 32768) at their 32 (fp32 with a
    // residual: 16) elements a thread take two 512-thread CTAs per SM as well, where
    // that measured faster: LayerNorm (16-bit with a residual, fp32 with or without
    // one) and RMSNorm fp32 without a residual, with a weight, while the cluster of
    // 512-thread CTAs stays within the limits below (N=262144 keeps 1024 threads).
    // H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_FORWARD_PLAN=cta=512,minb=2,
    // two runs each in one call at 6045181 (docs/perf/h200-2026-11-30f.md):
    //   LayerNorm bf16 with a residual N=32768 0.783 -> 0.854, 65536 0.735 -> 0.853,
    //   131072 0.676 -> 0.804; fp32 0.851 -> 0.879, 0.792 -> 0.825, 0.784 -> 0.814;
    //   fp32 with a residual 0.788 -> 0.810, 0.735 -> 0.774, 0.686 -> 0.700;
    //   RMSNorm fp32 0.898 -> 0.912, 0.866 -> 0.894, 0.831 -> 0.839.
    // RMSNorm lost with a residual: bf16 0.951 -> 0.900, 0.899 -> 0.873, 0.851 ->
    // 0.850; fp32 0.886 -> 0.825, 0.858 -> 0.776, 0.797 -> 0.746.
    // LayerNorm's 16-bit rows with fp32 weight and bias storing mean and rstd keep
    // 1024 threads: at 64 registers ptxas sm_90a spilled 72 bytes (N=32768-131072).
    const bool two_ctas_measured = in.center ? (in.x_bytes == 4 || in.residual) : (in.x_bytes == 4 && !in.residual);
    const bool two_ctas_spill = in.center && in.store_stats && in.weight_bytes > in.x_bytes;
    two_ctas = !raw64 && two_ctas_measured && !two_ctas_spill && in.weight_bytes > 0 && in.arch >= 90 && !in.few_rows &&
               p.vec * in.x_bytes == 16 && threads_for(32) >= 1024 &&
               next_pow2((tpr + 511) / 512) <= (fp32_with_residual ? 16 : 8);
    tpr_max = in.forced_cta_threads ? in.forced_cta_threads : (raw64_pairs || two_ctas) ? 512 : 1024;
  } else {
    // Backward keeps the row (h and dout in their storage dtype) and, for rows
    // that fit one CTA of <= 512 threads at 8-16 elements per thread, the fp32
    // dw (and db) running sums for its columns across all rows it visits.
    // LayerNorm's 16-bit rows of the cp.async ring (async_rows below: 16-byte
    // vectors) with db, where 8 columns a thread took a whole 512-thread CTA
    // (N=4096), take 16 columns a thread on sm_90: two 256-thread CTAs per SM
    // reducing in turn instead of one waiting on each row's barriers. H200, bf16,
    // M*N = 2^27, ratio to copy (6683edb -> 7a81653, docs/perf/h200-2026-11-30.md):
    // LayerNorm N=4096 with dw and db 0.559 -> 0.679, with a residual 0.601 -> 0.688.
    // Not at N=8192 (512 threads of 16 columns instead of shared-memory sums, 619d2e2):
    // 0.698 -> 0.642 and 0.689 -> 0.661. Not measured: sm_80, RMSNorm with db.
    const bool ring_rows_db = in.dbias && in.center && in.async_rows_allowed && in.arch >= 90 && in.x_bytes == 2 &&
                              in.dout_bytes == in.x_bytes && p.vec * in.x_bytes == 16;
    // fp32 rows with db where 8 columns a thread need more than 512 threads (N=8192)
    // take 16 and stay in registers instead of the stash (110 registers). H200,
    // a1a09e4 -> b7e2621 in one run: LayerNorm fp32 N=8192 with dw and db 0.581 ->
    // 0.918x copy (Liger 0.896), with dresidual_out 0.569 -> 0.993.
    const bool fp32_db_regs = in.dbias && in.x_bytes == 4 && threads_for(8) > 512 && threads_for(16) <= 512;
    // fp32 rows with db and dresidual_out where 8 columns a thread take a whole
    // 512-thread CTA (N=4096) take 16 on sm_90: two 256-thread CTAs per SM (121
    // registers) instead of one. H200, LayerNorm fp32 N=4096 with dw, db and
    // dresidual_out, NORMKIT_XPLAN sweep at 04b667f (one run,
    // docs/perf/h200-2026-11-30c.md): 0.860 -> 0.989x copy; two 512-thread CTAs of 8
    // columns spilled 16 bytes (64 registers). Without dresidual_out the 512-thread
    // CTAs fit two per SM (min_blocks below: 0.955, against 0.926 at 16 columns).
    const bool fp32_db16_dro =
        in.center && in.dbias && in.x_bytes == 4 && in.dout_bytes == 4 && in.residual && in.arch >= 90 &&
        threads_for(8) == 512;
    ring_db16 = ring_rows_db && threads_for(8) == 512;
    // LayerNorm's fp32 rows with db whose 16 columns a thread take two 512-thread
    // CTAs (N=8193-16384): the fp32 pair below at 16 columns, the dw and db sums in
    // registers (95-122 of them, no spills, ptxas sm_90a and sm_100a), instead of
    // the stash and the column pass. H200, LayerNorm fp32 N=16384 with dw and db,
    // M*N = 2^27, A/B bench 68f8c48 -> 71c78e8 (two runs each, docs/perf/h200-2026-11-30f.md):
    // 0.521 -> 0.713x copy (Liger 0.54), with dresidual_out 0.579 -> 0.813; N=8192
    // and 32768 unchanged. Not measured: RMSNorm with db (keeps the stash), sm_80.
    const bool fp32_db_pair = in.center && in.dbias && in.x_bytes == 4 && in.dout_bytes == 4 && in.arch >= 90 &&
                              in.param_grads && threads_for(16) == 1024;
    // fp32 rows with dw whose 8 columns a thread take two 1024-thread CTAs
    // (N=8193-16384) on sm_90: the pair below at 8 columns and 1024 threads (62-64
    // registers, no spills, ptxas sm_90a) instead of 16 columns at 512 threads.
    // H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_BACKWARD_PLAN=ept=8,cta=1024,
    // two runs each in one call at 2a04be8 (docs/perf/h200-2026-11-30g.md): RMSNorm
    // fp32 N=16384 0.717 -> 0.781, with dresidual_out 0.817 -> 0.920 (Liger had been
    // 13 % faster there); LayerNorm fp32 with dw and db 0.705 -> 0.755. LayerNorm with
    // db and dresidual_out spilled 44-60 bytes under 64 registers and keeps
    // fp32_db_pair; so did LayerNorm and RMSNorm with dresidual_out on sm_100a
    // (16-72 bytes), which keeps its plans. Not measured: a 16-bit dout. Since the
    // pair reduces through row_sums_walk's mbarriers, rows with a separate dresidual
    // output spilled 20-40 bytes there (ptxas sm_90a): they keep fp32_pair's 16 columns.
    const bool fp32_wide_pair = in.x_bytes == 4 && in.dout_bytes == 4 && in.arch == 90 && in.param_grads &&
                                !(in.dbias && in.residual) && !in.dresidual_output && threads_for(8) == 2048 &&
                                !in.forced_elems_per_thread;
    // 16-bit rows whose sums would stay in registers that take 32 columns a thread
    // with the dw (and db) sums in shared memory instead (the longer rows' plan
    // below), where that measured faster on sm_90. H200, bf16, M*N = 2^27, ratio to
    // copy, own plan -> NORMKIT_BACKWARD_PLAN, two runs each in one call
    // (docs/perf/h200-2026-11-30g.md):
    //   RMSNorm with dresidual_out and dw alone, N=4097-8192 (one 512-thread CTA of 16
    //   columns, rms_dro_plain_rows): 256 threads, 111 registers, two CTAs per SM;
    //   `ept=8` at 2a04be8: N=8192 0.820 -> 0.944. Without dresidual_out it lost to
    //   the cp.async ring (0.848 -> 0.837).
    //   RMSNorm without dresidual_out, N=2049-4096 (the ring's 256-thread CTAs): 128
    //   threads, five CTAs per SM; `ept=8,cta=256` at 1b9236c: N=4096 0.833 -> 0.880.
    //   With dresidual_out it lost (0.893 -> 0.853).
    //   LayerNorm with db and dresidual_out, N=2049-4096 (ring_db16): 128 threads, 90
    //   registers, five CTAs per SM; `ept=8,cta=256` at 1b9236c: N=4096 0.712 ->
    //   0.791. Without dresidual_out 0.752 -> 0.753, so not planned.
    const bool sums16_rows = in.x_bytes == 2 && in.dout_bytes == 2 && in.arch >= 90 && in.param_grads &&
                             p.vec * in.x_bytes == 16 && !in.forced_elems_per_thread && !in.forced_cta_threads;
    const std::int64_t threads16 = threads_for(16);
    smem_sums32 = sums16_rows && in.smem_sums_allowed &&
                  (in.center ? in.dbias && in.residual && threads16 == 256
                             : !in.dbias && threads16 == (in.residual ? 512 : 256));
    // LayerNorm's 16-bit rows with db and without dresidual_out, N=513-1024: 32
    // columns a thread, four 32-thread rows a CTA of the cp.async ring (125
    // registers, four CTAs per SM) instead of 128 threads of 8 (six CTAs of 72).
    // H200, bf16, M*N = 2^27, ratio to copy, own plan -> `ept=32` at 1b9236c (two
    // runs each): N=1024 0.678 -> 0.730. With dresidual_out it lost (0.766 ->
    // 0.725), and so did N=2048 (0.661 -> 0.556).
    const bool ln_rows32 = sums16_rows && in.center && in.dbias && !in.residual && in.async_rows_allowed &&
                           threads_for(32) == 32 && threads_for(8) == 128;
    tpr = threads_for(in.forced_elems_per_thread ? in.forced_elems_per_thread
                      : ln_rows32      ? 32
                      : fp32_wide_pair ? 8
                      : in.dbias && !ring_db16 && !fp32_db_regs && !fp32_db16_dro && !fp32_db_pair ? 8
                                                                                                 : 16);
    tpr_max = in.forced_cta_threads ? in.forced_cta_threads : fp32_wide_pair ? 1024 : 512;
    // fp32 rows with dw whose sums need two 512-thread CTAs (RMSNorm N=16384): a
    // cluster of two holds the row and the sums, instead of the stash (98-104
    // registers). H200, a1a09e4 -> b7e2621 in one run: 0.540 -> 0.718x copy (Liger
    // 0.627), with dresidual_out 0.601 -> 0.816.
    const bool fp32_pair = in.x_bytes == 4 && in.arch >= 90 && in.param_grads && tpr > tpr_max &&
                           next_pow2((tpr + tpr_max - 1) / tpr_max) == 2;
    // 16-bit rows with dw alone at 32 columns a thread over a pair of 512-thread CTAs
    // (RMSNorm N=32768), the state of the fp32 pair (128 bytes of h and dout, dw
    // sums), instead of the stash and the column pass's second read of h and dout.
    // H200, RMSNorm bf16 N=32768, A/B a487a62 -> 4c84db3 in one run: 0.510 -> 0.630x
    // copy (docs/perf/h200-2026-11-30c.md). Not with dresidual_out (its early load
    // would add 64 bytes a thread) or db (a second sum).
    const bool pair16 = in.x_bytes == 2 && in.arch >= 90 && in.param_grads && !in.dbias && !in.residual &&
                        tpr > tpr_max && threads_for(32) == 2 * tpr_max;
    const bool few_rows_cluster = tpr > tpr_max && plan_few_rows(in, tpr, tpr_max, p);
    if (few_rows_cluster || (tpr > tpr_max && (fp32_pair || pair16))) {
      if (!few_rows_cluster) {
        p.cluster = 2;
        p.regs = true;
        p.row_sums = true;
      }
      tpr = tpr_max;  // the cluster holds the row, dw/db sums included
    } else if (tpr > tpr_max || smem_sums32) {
      // Longer rows (and smem_sums32, above): registers go to the row alone (128 bytes of h + dout per
      // thread; 256 bytes made ptxas spill under the 128-register cap of 512
      // threads, and 1024 threads' 64-register cap spilled at 128) and dw/db
      // come from the column pass.
      p.row_sums = false;
      tpr = threads_for(64 / in.x_bytes);
      // 16-bit rows that still fit one CTA keep dw/db in shared memory instead
      // (RowPlan::smem_sums): the column pass's second read of h and dout was 40%
      // of the backward's traffic. H200, M*N = 2^27, bf16, ratio to copy with the
      // column pass -> with the sums (one run each, 8e1deac, docs/perf/h200.md):
      // RMSNorm N=16384 0.53 -> 0.77 (0.55 -> 0.74 with a residual), LayerNorm
      // (dw and db) N=8192 0.53 -> 0.80, N=16384 0.51 -> 0.64. Worst case two sums.
      const std::int64_t sums_bytes = (in.dbias ? 2 : 1) * in.n * 4;
      if (tpr <= tpr_max && in.param_grads && in.x_bytes == 2 && in.arch >= 80 && sums_bytes <= kSmemSumsBudget &&
          in.smem_sums_allowed) {
        p.row_sums = true;
        p.smem_sums = true;
        p.smem_bytes = static_cast<int>(sums_bytes);
      }
    }
  }
  // NORMKIT_BACKWARD_PLAN's sums=smem without cluster=: register rows of one CTA a row
  // with their dw/db sums in shared memory (RowPlan::smem_sums), for measuring them.
  if (in.backward && in.forced_smem_sums && !in.forced_cluster && p.regs && p.row_sums && p.cluster == 1 &&
      tpr <= tpr_max && in.param_grads) {
    p.smem_sums = true;
    p.smem_bytes = static_cast<int>((in.dbias ? 2 : 1) * in.n * 4);
  }
  // Backward rows in registers over a cluster of CTAs that walk rows, dw/db summed
  // in registers (plan_cluster_rows, rmsnorm_heuristics_bwd.cpp, where they measured
  // faster; or NORMKIT_BACKWARD_PLAN's cluster=).
  const ClusterRows cluster_rows = in.backward ? plan_cluster_rows(in, p.vec, threads_for(8)) : ClusterRows{};
  if (cluster_rows.cluster > 1) {
    p.cluster = cluster_rows.cluster;
    p.regs = true;
    p.row_sums = true;
    p.smem_sums = cluster_rows.smem_sums;
    // One fp32 sum per column of the CTA's slice, per sum (dw, and db).
    p.smem_bytes = p.smem_sums ? static_cast<int>((in.dbias ? 2 : 1) * ((nv + p.cluster - 1) / p.cluster) * p.vec * 4) : 0;
    tpr = tpr_max = cluster_rows.threads;
  }
  if (tpr > tpr_max) {
    if (in.backward) {
      // Register-resident rows in clusters (one 512-thread CTA per SM, waiting on
      // two cluster barriers a row) lost to eager beyond 2 CTAs on H200 (fp32
      // N=32768: 0.58x, bf16 N=131072: 0.59x at 4-8 CTAs): rows that
      // plan_cluster_rows (above) does not take take the stash or, longer still,
      // the split kernels.
      if (!plan_stash(in, p)) plan_split(in, p);
    } else {
      const std::int64_t cluster = next_pow2((tpr + tpr_max - 1) / tpr_max);
      // fp32 rows with a residual (16 elements a thread, above) take up to 16 CTAs
      // (non-portable, as the stash's): at N=262144 the two passes would refuse the
      // in-place fused add, which needs the row in registers.
      if (in.arch >= 90 && cluster <= (fp32_with_residual ? 16 : 8)) {
        p.cluster = static_cast<int>(cluster);
      } else {
        // Two passes over the row. A cluster (where there is one) splits the row
        // into slices of ~4096 elements, small enough for the second pass to be
        // served from L2.
        p.regs = false;
        p.row_sums = false;
        p.cluster = in.arch >= 90 ? static_cast<int>(std::clamp<std::int64_t>(next_pow2(in.n / 4096), 1, 8)) : 1;
      }
    }
    tpr = (p.stash || p.split) ? kStashThreads : p.regs ? tpr_max : tpr_two_pass;
  }
  p.tpr = static_cast<int>(tpr);
  // Short rows: several rows per CTA so that a CTA has >= 128-256 threads.
  // Not rows with their dw/db sums in shared memory: the CTA's rows would add to the
  // same columns at once (norm_bwd_kernel asserts one row a CTA there). The planner
  // gives them >= 128 threads; NORMKIT_BACKWARD_PLAN's `cta=` can give fewer.
  const int cta_target = in.backward ? 128 : 256;
  p.rows = p.regs && !p.smem_sums ? std::max(1, cta_target / p.tpr) : 1;
  // Forward calls of few rows: one row per CTA of >= 128 threads. A decode call's
  // rows are latency, not bandwidth: two rows a CTA put M=128 on 64 of 132 SMs.
  // H200 by graph replay, N=4096, 885c98d -> 619d2e2 (docs/perf/h200-2026-11-30.md):
  // RMSNorm bf16 M=16 2.20 -> 1.93 us, M=128 2.35 -> 2.17, with a
  // residual 2.86 -> 2.44 and 3.12 -> 2.86; LayerNorm bf16 M=16 2.70 -> 2.31,
  // M=128 2.81 -> 2.57; fp32 alike. M=1 and N=8192 (one row a CTA already) as before.
  if (!in.backward && in.few_rows && p.regs && p.cluster == 1 && p.tpr >= 128) p.rows = 1;
  // LayerNorm's forward over a cluster (shifted moments) decides on one row's sums per
  // cluster: one row a CTA (the kernel asserts it; NORMKIT_FORWARD_PLAN's cta=128 gave two).
  if (!in.backward && in.center && p.cluster > 1) p.rows = 1;

  // 16-bit register-resident backward rows of >= 256 threads prefetch their CTA's
  // next row (a second register set of h and dout; norm_bwd_kernel's PREFETCH).
  // H200, M*N = 2^27 with weight, ratio to copy without -> with: bf16 N=4096
  // 0.70 -> 0.76, N=8192 0.63 -> 0.70. Shorter rows (several per CTA) lost with it
  // (N=1024 0.80 -> 0.76: 125 registers, fewer CTAs per SM), and so did
  // register-resident clusters of 2-8 CTAs with it (bf16 N=32768 0.27x, fp32
  // N=16384 0.31x: every row waits on a cluster-wide barrier; with row_sums_walk's
  // pushes bf16 rows still ran at 0.34-0.53x with it, one CTA per SM, and only
  // LayerNorm's fp32 rows with dresidual_out take it: plan_cluster_rows). fp32 rows measured
  // 0.90-0.95x without it, and rows without dw/db sums (the column pass follows)
  // 0.49x with it against 0.53x (bf16 N=16384). Scalar rows spilled with it.
  if (in.backward && p.regs && p.row_sums && !p.smem_sums && !in.forced_no_prefetch &&
      (cluster_rows.cluster > 1 ? cluster_rows.prefetch
                                : p.cluster == 1 && p.tpr >= 256 && in.x_bytes <= 2 && p.vec * in.x_bytes >= 8))
    p.prefetch = true;
  // Register-resident 16-bit rows with dw/db sums and 16-byte vectors of h and
  // dout take the cp.async ring instead (RowPlan::async_rows): the pipeline two
  // rows deep without a second register set. The CTAs per SM are capped to leave
  // it kAsyncMinRegs (ptxas spilled at the 73 registers of seven 128-thread CTAs,
  // and LayerNorm at 80 where a thread holds several vectors or rows).
  // Shorter rows (CTAs of 128-256 threads, several rows per CTA, where the
  // register pipeline spilled) take it where it measured faster: LayerNorm, and
  // RMSNorm with dresidual_out (a third row input). H200, bf16, GB/s without ->
  // with (47820e0, kernel GB/s: this machine's copy reference is bimodal, see
  // docs/perf/h200.md): RMSNorm with dresidual_out N=256-2048 3300-3484 ->
  // 3529-3836, LayerNorm 2416-2906 -> 2434-3246; RMSNorm without dresidual_out
  // lost: N=256-2048 3399-3643 -> 3183-3532.
  // H200, M*N = 2^27, bf16, ratio to copy with the register pipeline -> with the
  // ring (8e1deac): RMSNorm N=4096 0.77 -> 0.84, N=8192 0.71 -> 0.80 (with a
  // residual 0.81 -> 0.86 and 0.77 -> 0.75, within this machine's run-to-run
  // noise of ~0.05), LayerNorm N=2048 0.58 -> 0.67, N=4096 0.52 -> 0.60.
  // Except LayerNorm rows with db of 16 columns a thread (N=4096 on sm_90, above)
  // without dresidual_out: the register pipeline, two CTAs of 128 registers, measured
  // 0.659 -> 0.697x copy against the ring (H200, bf16, one run of the NORMKIT_XPLAN
  // sweep at 9dc2034, docs/perf/h200-2026-11-30b.md); A/B bench 0.679 -> 0.722.
  const bool ln_db16_pipeline = ring_db16 && !in.residual && p.prefetch;
  // Except RMSNorm's rows of one 512-thread CTA with dresidual_out and dw alone
  // (16-bit N=4097-8192; with db, N=4096 takes such CTAs too, not measured):
  // plain register rows (no ring, no prefetch; 85 registers, one CTA per SM)
  // measured faster than the ring in two NORMKIT_XPLAN runs (H200, bf16, ratio to
  // copy): 0.742 -> 0.791 at 04b667f, 0.755 -> 0.807 at b4b49d9; A/B bench
  // c9c5755 -> 67a4f0c 0.767 -> 0.819 (docs/perf/h200-2026-11-30d.md). Two CTAs per
  // SM there spilled 8 bytes. Since smem_sums32 (above) these are the rows whose
  // shared-memory sums are off (NORMKIT_SMEM_SUMS=0) or forced plans.
  const bool rms_dro_plain_rows = in.backward && !in.center && !in.dbias && in.residual && in.arch >= 90 &&
                                  in.x_bytes == 2 && p.regs && p.row_sums && !p.smem_sums && p.cluster == 1 &&
                                  p.rows == 1 && p.threads() == 512;
  if (rms_dro_plain_rows) p.prefetch = false;
  const bool one_wide_row = p.rows == 1 && p.tpr >= 256;
  if (in.backward && p.regs && p.row_sums && !p.smem_sums && p.cluster == 1 && p.threads() >= 128 &&
      (one_wide_row || in.center || in.residual) && in.async_rows_allowed && !in.forced_no_prefetch &&
      !ln_db16_pipeline && !rms_dro_plain_rows &&
      in.arch >= 80 && in.x_bytes == 2 && p.vec * in.x_bytes == 16 && in.dout_bytes == in.x_bytes) {
    p.prefetch = false;
    p.async_rows = true;
    p.smem_bytes = static_cast<int>(kAsyncStages * p.rows * (in.n / p.vec) * p.vec * (in.x_bytes + in.dout_bytes));
  }

  // Forward rows of 1024-thread CTAs (one CTA per SM: 16-bit N >= 32768, clusters
  // beyond 32768; on sm_90 now rows without a weight or in calls of few rows, the
  // others take raw64's two 512-thread CTAs per SM) walk rows persistently and prefetch the next (norm_fwd_kernel's
  // PREFETCH): a CTA alone on its SM idled from the end of its loads to the next
  // CTA's start. H200, M*N = 2^27, bf16 without residual, ratio to copy without ->
  // with (two runs with it, docs/perf/h200.md): N=32768 0.83 -> 0.97 / 0.88, 65536
  // 0.73 -> 0.89 / 0.81, 131072 0.69 -> 0.74 / 0.74, 262144 0.65 -> 0.69 / 0.70.
  // 512-thread rows (N=16384, two CTAs per SM, which already overlap one another's
  // loads) lost with it: 0.96 -> 0.72 / 0.73.
  // Not rows of 64 elements a thread (raw64, above), nor fp16 rows whose weight is of
  // another dtype: with an fp32 weight ptxas sm_90a spilled 12 bytes in one CTA
  // (N=32768) and 64 over a cluster in a call of few rows (N=200000), with a bf16
  // weight 12 (N=32768). bf16 rows with fp32 weights compiled clean.
  const bool fp16_mixed_weight = in.x_fp16 && !in.weight_as_x;
  if (!in.backward && p.regs && p.tpr >= 1024 && in.x_bytes == 2 && p.vec * in.x_bytes == 16 && !in.residual &&
      !in.center && !in.bias && in.arch >= 80 && !fp16_mixed_weight && !raw64 && !in.forced_no_prefetch)
    p.prefetch = true;

  // Forward calls of few rows load weight and bias with the row (one memory
  // latency less per call; more registers, which they can spare). H200 by graph
  // replay, bf16 without residual: M=1 N=4096 3.88 -> 2.43 us, M=128 N=4096 4.19
  // -> 2.93 us (copy 1.6 and 2.2 us).
  // NORMKIT_FORWARD_PLAN's early=1 asks it of calls of many rows too (to measure).
  if (!in.backward && (in.few_rows || in.forced_early_params) && p.regs && !p.prefetch && p.threads() <= 256)
    p.early_params = true;

  // Forward rows of 1024-thread CTAs (one per SM) read weight and bias after the
  // reduction, item by item next to the stores: the pointers may alias, so each
  // load waits for the store before it and a row's epilogue is ITEMS L2 round trips
  // in a row (the SASS of bf16 N=65536: LDG w, STG out, LDG w, ...), with no other
  // CTA on the SM to fill them. Held in registers they spilled (64 per thread at
  // 1024 threads). Copied by cp.async into shared memory with the row instead (no
  // registers; once per kernel for the pipeline's persistent CTAs), the epilogue
  // reads them there. Only where rows take a cluster (N >= 65536 for 16-bit rows;
  // in CTAs of a whole row ptxas spilled 12-32 bytes with it) and only where it
  // measured faster: RMSNorm with 16-bit x and weight. H200, M*N = 2^27, ratio to
  // copy without -> with in one run (954acb4, docs/perf/h200-2026-11-30.md):
  // RMSNorm bf16 N=65536 0.806 -> 0.843, 131072 0.735 -> 0.786, 262144 0.705 ->
  // 0.721; with a residual 0.760 -> 0.798, 0.747 -> 0.748, 0.686 -> 0.729. It lost
  // for LayerNorm bf16 (weight and bias; 0.676 -> 0.468 at N=65536, 0.725 -> 0.723
  // with a residual) and RMSNorm fp32 (0.831 -> 0.726 at N=131072), and spilled for
  // LayerNorm's fp32 rows. NORMKIT_PARAMS_SMEM=0 turns it off. Since raw64 (above),
  // rows without a residual take it only in calls of few rows.
  const bool params_smem_measured = !in.center && in.x_bytes == 2 && in.weight_bytes == 2 &&
                                    (in.bias_bytes == 0 || in.bias_bytes == 2);
  if (!in.backward && in.params_smem_allowed && p.regs && p.threads() == 1024 && p.cluster > 1 && !p.early_params &&
      params_smem_measured && !raw64) {
    const std::int64_t item_bytes = std::int64_t{p.vec} * (in.weight_bytes + in.bias_bytes);
    const std::int64_t bytes = (nv + p.cluster - 1) / p.cluster * item_bytes;
    if ((p.vec * in.weight_bytes) % 16 == 0 && (p.vec * in.bias_bytes) % 16 == 0 &&
        bytes <= kParamsSmemBudget) {
      p.params_smem = true;
      p.smem_bytes = static_cast<int>(bytes);
    }
  }

  // Register budget per thread -> minimum CTAs per SM for __launch_bounds__.
  const std::int64_t owned = ((slice_vectors(p, in.n) + p.tpr - 1) / p.tpr) * p.vec;
  // Registers per owned element: forward h; backward h + dout in storage dtype,
  // plus the fp32 column sums when the row kernel keeps them.
  const int row_regs = in.x_bytes >= 4 ? 2 : 1;
  const int per_elem = !in.backward ? 1
                                    : row_regs * (p.async_rows ? 0 : p.prefetch ? 2 : 1) +
                                          (p.row_sums && !p.smem_sums ? (in.dbias ? 2 : 1) : 0);
  // Overhead and per-element cost from ptxas reports: scalar (vec 1) access needs
  // more address registers per element, hence the 5/4.
  std::int64_t regs_needed = ((48 + per_elem * owned * 5 / 4) + 7) / 8 * 8;
  // Scalar rows with their dw/db sums in shared memory: the sums' addresses are
  // registers too (odd N=4097 with db spilled 16-32 bytes under 80, three CTAs per
  // SM; ptxas sm_80/sm_90a/sm_100a).
  if (p.smem_sums && p.vec == 1) regs_needed += 16;
  // Register-resident backward rows that hold dresidual_out's vectors through the
  // reduction (norm_bwd_kernel's DRO_EARLY): their registers too (bf16 N=1024
  // spilled 56 bytes under 80 without them, ptxas sm_90a).
  if (in.backward && in.residual && p.regs && nk::backward_dro_early(in.n, in.x_bytes)) regs_needed += (owned * in.x_bytes / 2 + 7) / 8 * 8;
  if (p.async_rows) {
    const bool centered_many = in.center && (owned > p.vec || p.rows > 1);
    regs_needed = std::max<std::int64_t>(regs_needed, centered_many ? kAsyncMinRegsCentered : kAsyncMinRegs);
    if (in.dbias && owned >= 16) regs_needed = std::max<std::int64_t>(regs_needed, kAsyncMinRegsTwoSums);
    // fp32 dresidual_out and dresidual beside 16-bit rows: their vectors are twice
    // the row's (bf16 N=1000 spilled 12 bytes under six 128-thread CTAs, ptxas sm_90a).
    if (in.dresidual_bytes > in.x_bytes) regs_needed += 16;
  }
  const std::int64_t by_regs = 65536 / (static_cast<std::int64_t>(p.threads()) * regs_needed);
  const std::int64_t by_threads = 2048 / p.threads();
  p.min_blocks = static_cast<int>(std::clamp<std::int64_t>(std::min(by_regs, by_threads), 1, 16));
  if (!p.regs) p.min_blocks = two_pass_blocks;
  // Calls of few rows launch a few CTAs: registers, not occupancy (fp32 rows with a
  // raw residual and their parameters early spilled under the 128 of two CTAs).
  // H200 by graph replay, 6683edb -> 885c98d (norm_fwd_kernel's RAW_RES and
  // EARLY_PARAMS): RMSNorm fp32 M=1-128 N=4096-8192 4.9-5.9 -> 2.4-3.6 us, with a
  // residual 8.2-8.8 -> 3.0-5.3; LayerNorm bf16 4.0-4.5 -> 2.7-3.3.
  if (p.early_params) p.min_blocks = 1;
  // 64 elements a thread (raw64) and the other two-CTA rows (two_ctas): 64
  // registers each of 1024 threads per SM.
  if (raw64 || two_ctas) p.min_blocks = static_cast<int>(std::max(1, 1024 / p.threads()));
  // LayerNorm's 16-bit rows with a residual in one 512-thread CTA (N=16384 at 32
  // elements a thread), 72 registers by the estimate above and one CTA per SM: two at
  // 64 registers. H200, bf16, M*N = 2^27, ratio to copy, two runs each in one call at
  // 6045181 (NORMKIT_FORWARD_PLAN=minb=2): 0.913 -> 0.962; N=8192 (256 threads) 0.955
  // alike. At 64 registers ptxas sm_90a spilled 16-60 bytes for RMSNorm (24), rows
  // storing mean and rstd, and fp32 weight or bias: those keep one CTA per SM. So do
  // rows without a bias or without residual_out (normkit precompile sm_90a, bf16
  // N=16384: 8 and 24 bytes); the measured rows had both.
  if (!in.backward && in.center && in.residual && in.residual_out && in.bias && in.x_bytes == 2 &&
      in.weight_bytes == 2 && in.bias_bytes == 2 && !in.store_stats && in.arch >= 90 && !in.few_rows && p.regs &&
      p.cluster == 1 && p.threads() == 512 && p.vec * in.x_bytes == 16)
    p.min_blocks = 2;
  // RMSNorm's 16-bit backward rows without dresidual_out hold h, dout and dw sums in
  // fewer registers than the estimate above counts (ptxas: 69-72 where it allows 102):
  // more CTAs per SM, as the NORMKIT_XPLAN sweep measured (H200, bf16, one run at
  // 9dc2034, ratio to copy; docs/perf/h200-2026-11-30b.md): 128-thread CTAs of the
  // register rows 5 -> 7 per SM, N=256 0.872 -> 0.928, 1024 0.812 -> 0.861 (6 alike),
  // 2048 0.798 -> 0.881; the ring's one-row 512-thread CTAs (N=8192) at 64 registers
  // 1 -> 2 per SM, 0.777 -> 0.804. Confirmed by the A/B bench (9dc2034 -> 97b8060):
  // N=256 0.889 -> 0.937, 1024 0.825 -> 0.912, 2048 0.811 -> 0.911, 8192 0.793 ->
  // 0.824; its 256-thread CTAs (N=4096) 3 -> 4 measured 0.789 -> 0.813 in the sweep
  // but 0.835 -> 0.831 there, and keep 3. ptxas fits them in 64-73 registers without
  // spills. Not measured: sm_80 (kept), rows with dresidual_out (RMSNorm N=1024: 6 ->
  // 7 CTAs 0.823 -> 0.824). Not rows with db (a second sum: fp16 N=4096 spilled 40
  // bytes under two 512-thread CTAs, sm_90a).
  if (in.backward && !in.center && !in.residual && !in.dbias && in.arch >= 90 && in.x_bytes == 2 && p.regs && p.row_sums &&
      p.cluster == 1 && p.vec * in.x_bytes == 16) {
    if (!p.smem_sums && !p.async_rows && !p.prefetch && p.threads() == 128) p.min_blocks = 7;
    if (p.async_rows && p.rows == 1 && p.threads() == 512) p.min_blocks = 2;
    // Their rows of 512 threads with the dw sums in shared memory (N=8193-16384), the
    // estimate's one CTA per SM: two at 64 registers (no spills with 16-bit and fp32
    // weights, ptxas sm_90a and sm_100a). H200, bf16, M*N = 2^27, ratio to copy, own
    // plan -> NORMKIT_BACKWARD_PLAN=minb=2, two runs each at 2a04be8: N=16384 0.792 ->
    // 0.875. With dresidual_out they spilled 8-196 bytes (N=8192-16384).
    if (p.smem_sums && p.threads() == 512) p.min_blocks = 2;
  }
  if (const int fp32_blocks = fp32_backward_blocks(in, p, owned); fp32_blocks > 0) p.min_blocks = fp32_blocks;
  if (p.split) p.min_blocks = p.synced ? (in.center ? kSyncedBlocksCentered : kSyncedBlocks) : kSplitBlocks;
  const int by_smem =
      static_cast<int>(std::clamp<std::int64_t>(kSmemPerSm / (p.smem_bytes + kSmemPerCta), 1, 8));
  // The stash's CTAs per SM as its shared memory allows, but 80 registers a thread at
  // least: 16-bit rows of 256-thread CTAs at N=20480-24576 (40-48 KB a CTA over a
  // 2-CTA cluster) spilled 324-432 bytes under five (48 registers) and 8-80 under four
  // (64), ptxas sm_90a; three, as the 72 KB stashes measured (85 registers).
  if (p.stash) p.min_blocks = std::min(by_smem, std::max(1, 65536 / (p.threads() * 80)));
  // The stash of fp32 rows with dresidual_out and a 16-bit dout: four CTAs' 64
  // registers spilled 8 bytes (N=16384, fp32 h and weight, ptxas sm_90a); three.
  if (p.stash && in.residual && in.x_bytes >= 4 && in.dout_bytes < in.x_bytes) p.min_blocks = std::min(p.min_blocks, 3);
  if (p.smem_sums || p.async_rows) p.min_blocks = std::min(p.min_blocks, by_smem);
  // smem_sums32's 128-thread rows: the five CTAs per SM measured at N=4096 (ptxas
  // 89-90 registers) also where a thread's last columns are empty (N=3000: the
  // estimate's six spilled 16-32 bytes for LayerNorm fp16 on sm_100a).
  if (smem_sums32 && p.threads() == 128) p.min_blocks = std::min(p.min_blocks, 5);
  if (cluster_rows.min_blocks) p.min_blocks = cluster_rows.min_blocks;
  if (in.forced_min_blocks) p.min_blocks = in.forced_min_blocks;
  RowPlan planned = with_group_rows(
      with_bulk_backward_rows(with_bulk_rows(with_l2_next(with_weight_smem(with_smem_row(p, in), in), in), in), in),
      in);
  planned.evict_first = evict_first_measured(planned, given);
  if (in.forced_sm_ctas && !in.backward) {
    planned.sm_ctas = in.forced_sm_ctas;
    if (in.forced_l1_max && in.arch == 90) {
      const CarveoutShare share = sm_ctas_in_carveout(in.forced_sm_ctas, planned.smem_bytes);
      planned.carveout_percent = share.carveout_percent;
      planned.smem_bytes = share.smem_bytes;
    } else {
      planned.smem_bytes = std::max(planned.smem_bytes, sm_ctas_smem_bytes(in.forced_sm_ctas));
    }
  }
  return planned;
}

}  // namespace normkit::norm::detail
