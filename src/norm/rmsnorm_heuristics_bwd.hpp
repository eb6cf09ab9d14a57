// Backward plans of rows beyond one CTA's registers (the stash, split rows, the
// clusters of calls of few rows) and the measured CTA counts of fp32 register rows:
// the parts of plan_rows (rmsnorm_heuristics.cpp) that rmsnorm_heuristics_bwd.cpp and
// rmsnorm_heuristics_bwd_bulk.cpp (the bulk-copy rings) hold, with the measurements behind them.
#pragma once

#include <cstdint>

#include "rmsnorm_heuristics.hpp"

namespace normkit::norm::detail {

inline std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Threads of a stash or split CTA (rmsnorm_heuristics_bwd.cpp's comment on the stash).
inline constexpr int kStashThreads = 256;

// Split rows (rmsnorm_bwd_split.cuh), for rows beyond the stash: 256 threads x 4
// vectors a chunk (16 KB of a 16-bit h per CTA of the dot kernel, eight 16-byte
// loads in flight per thread in the dx kernel), two CTAs per SM for the dx
// kernel, whose dw running sums (32 floats) stay in registers. With db as well,
// 2 vectors: 4 spilled under the 128-register cap of two CTAs per SM (ptxas,
// every feature on, sm_80 and sm_90a).
inline constexpr int kSplitBlocks = 2;

// Without dw/db the two split kernels become one (norm_bwd_synced_kernel):
// CTAs keep their chunk in registers while they wait for the row's other chunk
// sums, so h and dout are read once, as eager's row kernel reads them (fp32
// N=131072/262144 without weight: the two kernels' five passes measured 0.99-1.01x
// eager, 7579fb6). Three CTAs per SM (85 registers; bf16 spilled under the 64 of
// four) keep loads in flight while others wait; the wait needs CHUNKS CTAs
// resident at once, which the dispatcher checks against the device (fit_to_device).
// With the wait's timeout (branch wip/synced-timeout-2) the bf16 kernel spilled 8
// bytes under the 80 registers of three CTAs per SM, so it takes two (128
// registers): to be measured against three on a GPU before this lands.
inline constexpr int kSyncedBlocks = 2;
// LayerNorm's synced kernel (two chunk sums) spilled 4 bytes at three CTAs per SM
// even without the timeout (bf16 N=131072, sm_90a).
inline constexpr int kSyncedBlocksCentered = 2;

// Rows too long for registers: the stash if a cluster of the allowed size holds
// the row's slices (RowPlan::stash, smem_bytes set); false if none does.
bool plan_stash(const RowPlanInputs& in, RowPlan& p);
// Rows beyond the stash: column chunks (RowPlan::split, and synced or wait_dots).
void plan_split(const RowPlanInputs& in, RowPlan& p);
// Calls of few rows with dw/db: register rows in a cluster of up to 8 CTAs for
// tpr_sums threads of tpr_max each; false where that does not apply.
bool plan_few_rows(const RowPlanInputs& in, std::int64_t tpr_sums, int tpr_max, RowPlan& p);
// Backward rows in registers over a cluster of CTAs that walk rows and reduce
// through row_sums_walk (reduce.cuh): planned where measured faster, or forced by
// NORMKIT_BACKWARD_PLAN's cluster=. cluster 0: not such a row.
struct ClusterRows {
  int cluster = 0;
  int threads = 0;     // per CTA
  int min_blocks = 0;  // CTAs per SM (0: the register estimate's, or a forced minb=)
  bool prefetch = false;
  bool smem_sums = false;  // dw/db sums in shared memory (RowPlan::smem_sums), the CTA's columns
};
// vec: the plan's vector width; tpr8: threads a row takes at 8 columns a thread in one CTA.
ClusterRows plan_cluster_rows(const RowPlanInputs& in, int vec, std::int64_t tpr8);
// 16-bit backward rows of one CTA that measured faster as plain register rows (no
// cp.async ring, no prefetch) at a given shape than at plan_rows' own: the shape as
// NORMKIT_BACKWARD_PLAN's ept=, cta=, minb=, prefetch=0 gave it, since that is how
// it was measured. Inputs that force any part of the plan are returned unchanged.
RowPlanInputs with_plain16_rows(const RowPlanInputs& in);
// fp32 backward register rows: the CTAs per SM measured for the plan (0: the
// register estimate's count stands).
int fp32_backward_blocks(const RowPlanInputs& in, const RowPlan& p, std::int64_t owned);
// The backward plan with RowPlan::weight_smem where it measured faster, or where
// NORMKIT_BACKWARD_PLAN asks for it (in.forced_weight_smem > 0; w=global refuses it),
// and the plan allows it (register rows with a weight): the weight slice's bytes added
// to the dynamic shared memory, the CTAs per SM capped by it.
RowPlan with_weight_smem(const RowPlan& planned, const RowPlanInputs& in);
// The backward plan with RowPlan::l2_next where it measured faster, or where
// NORMKIT_BACKWARD_PLAN asks for it (in.forced_l2_next > 0; l2=off refuses it), and
// the plan allows it: sm_90+, rows loaded one at a time (register rows without the
// prefetch or the ring, or the stash), x, dout and dresidual_out of one element size
// in 16-byte vectors.
RowPlan with_l2_next(const RowPlan& planned, const RowPlanInputs& in);
// RowPlan::evict_first for plan `p` of a call planned from `given` (the inputs as given:
// a forced plan field leaves it off).
bool evict_first_measured(const RowPlan& p, const RowPlanInputs& given);
// The backward plan of norm_bwd_bulk_kernel (RowPlan::bulk_stages) where
// in.forced_bulk_rows asks for it (NORMKIT_BACKWARD_PLAN's row=bulk) and it applies:
// sm_90+, 16-byte vectors of h, dout of h's element size, dresidual_out of whole
// 16-byte items. The cluster is the smallest (up to 16, dividing the row's vectors)
// whose stage (the slices of h, dout and dresidual_out) is at most
// kBulkBackwardStageBytes (cluster= forced: that one, if it divides them); 512 threads
// (cta= forced: that many; fewer where the slice has fewer vectors, at least 64), as
// long as the dw/db sums a thread keeps in registers leave it ~56 others (72 for fp16)
// under the register cap of its CTAs per SM; one CTA per SM (minb= forced: that many
// share its shared memory and registers); as many stages, up to eight, as the shared
// memory holds beside the weight's slice
// (RowPlan::weight_smem where it is whole 16-byte chunks and the stages asked for fit
// beside it), at least two (stages= forced: that many, if they fit), else the plan is
// unchanged. Any other call unchanged. plan_rows' last step.
RowPlan with_bulk_backward_rows(const RowPlan& planned, const RowPlanInputs& in);

// Backward calls on sm_90 where the bulk ring measured faster than the plan's own
// rows (the numbers beside its definition): most bf16 and fp32 rows of N=16384-262144 (fp32 up to
// 131072) without dresidual_out, fewer with it; weight and dresidual_out of x's
// dtype, not calls of few rows, nothing of NORMKIT_BACKWARD_PLAN forced (row=regs
// refuses it).
bool bulk_backward_rows_measured(const RowPlanInputs& in);
// The CTAs the measured backward ring takes where they are not the ring's own.
BulkRingCtas bulk_backward_measured_ctas(const RowPlanInputs& in);

// The same for short bf16 rows (N=256-8192, powers of two), which the ring takes as
// several whole rows a stage: the columns a thread (ept=) it measured fastest at, or
// 0 where the plan's own rows stay.
int bulk_backward_short_rows_ept(const RowPlanInputs& in);
// Whether such a planned ring also takes refill=early (RowPlan::early_refill; where its
// held vectors fit, with_bulk_backward_rows): the rows it measured faster on.
bool bulk_backward_early_refill_measured(const RowPlanInputs& in);

}  // namespace normkit::norm::detail
