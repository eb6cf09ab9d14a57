// The forward's measured rules apart from plan_rows' general ones (rmsnorm_heuristics.cpp):
// elements a thread (and for long rows CTA size and CTAs per SM), and rows staged in
// shared memory, where they measured faster on a given architecture.
#pragma once

#include "rmsnorm_heuristics.hpp"

namespace normkit::norm::detail {

// The forward inputs of a bandwidth call (not few rows) on sm_90, with a weight of
// x's dtype and 16-byte vectors, with forced_elems_per_thread set where a count
// other than plan_rows' own measured faster; any other call unchanged.
RowPlanInputs with_forward_elems(const RowPlanInputs& in);

// LayerNorm's fp32 rows with an fp32 residual at N=16385-131072 on sm_90 (calls of many
// rows, fp32 weight and bias, 16-byte vectors, no forced fields) with
// forced_smem_row set, and 256-thread CTAs up to N=32768, where staging the row in
// shared memory measured faster; any other call unchanged (NORMKIT_FORWARD_PLAN's
// row=regs among them: register rows, the other measured rules kept).
RowPlanInputs with_staged_rows(const RowPlanInputs& in);

// The forward plan with RowPlan::smem_row where in.forced_smem_row asks for it
// (with_staged_rows, or NORMKIT_FORWARD_PLAN's row=smem) and the plan allows it
// (register-resident rows of 16-byte vectors, a residual of whole 16-byte items, not a
// call of few rows' early parameters, a slice that fits an SM; it replaces the pipeline
// and the shared-memory parameters): its dynamic shared memory (x's slice and, of
// in.residual_bytes, the residual's) and, unless minb= is forced, as many CTAs a SM as
// that memory, 2048 threads and 40 registers a thread allow. plan_rows' last step.
RowPlan with_smem_row(const RowPlan& planned, const RowPlanInputs& in);

// The forward plan of norm_fwd_bulk_kernel (RowPlan::bulk_stages) where
// in.forced_bulk_rows asks for it (NORMKIT_FORWARD_PLAN's row=bulk) and it applies:
// sm_90+, 16-byte vectors of x and a residual (if any) of whole 16-byte items. The
// cluster is the smallest (up to 16, dividing the row's vectors) whose stage (the
// slices of x and the residual) is at most kBulkSliceBytes (cluster= forced: that
// one, if it divides them);
// 512 threads (cta= forced: that many; fewer where the slice has fewer vectors, at
// least 64) as long as the row's registers leave ~40 others under the cap of its CTAs
// per SM, one CTA per SM (minb= forced: that many share its shared memory), and
// as many stages, up to kBulkMaxStages, as the shared memory holds beside the
// weight's and bias's slices (RowPlan::params_smem: where they are whole 16-byte
// chunks, two stages (stages= forced: that many) fit beside them and
// NORMKIT_PARAMS_SMEM allows; else read from global memory), at least two (stages=
// forced: that many, if they fit), else the plan is unchanged. Any other call
// unchanged. plan_rows' last step.
RowPlan with_bulk_rows(const RowPlan& planned, const RowPlanInputs& in);

// Forward calls on sm_90 where the bulk ring measured faster than the plan's own
// rows (the numbers beside its definition): long fp32 rows, bf16 rows with a
// residual at N > 131072 and RMSNorm's without one from N=131072; weight, bias and
// residual of x's dtype, not calls of few rows, nothing of NORMKIT_FORWARD_PLAN
// forced (row=regs refuses it).
bool bulk_rows_measured(const RowPlanInputs& in);
// The CTAs the measured bulk ring takes where they are not the ring's own.
BulkRingCtas bulk_rows_measured_ctas(const RowPlanInputs& in);

// The plan of norm_fwd_group_kernel (norm_bwd_group_kernel: RowPlan::group_stages)
// where in.forced_group_rows asks for it (NORMKIT_FORWARD_PLAN's or
// NORMKIT_BACKWARD_PLAN's row=group, or with_measured_group_rows) and it applies: sm_90+,
// the host allows it (group_rows_allowed), 16-byte vectors of x (backward: of h) and a
// residual (backward: dout and dresidual_out; one head, the dw/db sums' registers
// within min_blocks' budget) of whole 16-byte items, N a multiple of the slice. The slice is the CTA's threads (256, cta= forced:
// that many) times its vectors a thread (2, ept= forced: ept / vec), at most 128 of
// them a row; CTAs per SM 2 (minb= forced); as many stages, from 4 (kGroupLookahead + 2)
// up to 8 (stages= forced: that many), as the SM's shared memory shared by those CTAs
// holds, with the weight's and bias's slices beside them (params_smem) where 5 stages
// still fit and NORMKIT_PARAMS_SMEM allows, else read from global memory. Otherwise
// the plan is unchanged. plan_rows' last step.
RowPlan with_group_rows(const RowPlan& planned, const RowPlanInputs& in);

// Calls on sm_90 where the grouped ring measured faster than the plan's own rows (the
// numbers beside its definition; forward and backward), with forced_group_rows and the
// measured CTA shape (cta=, ept=, minb=) set; any other call unchanged.
RowPlanInputs with_measured_group_rows(const RowPlanInputs& in);

}  // namespace normkit::norm::detail
