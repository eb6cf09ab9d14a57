// Elements per thread of forward rows planned for bandwidth, apart from plan_rows'
// general rule (rmsnorm_heuristics.cpp: 32 a thread) where another count measured
// faster on a given architecture.
#pragma once

#include "rmsnorm_heuristics.hpp"

namespace normkit::norm::detail {

// The forward inputs of a bandwidth call (not few rows) on sm_90, with a weight of
// x's dtype and 16-byte vectors, with forced_elems_per_thread set where a count
// other than plan_rows' own measured faster; any other call unchanged.
RowPlanInputs with_forward_elems(const RowPlanInputs& in);

// LayerNorm's fp32 rows with a residual at N=16385-131072 on sm_90 (calls of many
// rows, fp32 weight and bias, 16-byte vectors, no forced fields) with
// forced_smem_row set, and 256-thread CTAs up to N=32768, where staging the row in
// shared memory measured faster; any other call unchanged.
RowPlanInputs with_staged_rows(const RowPlanInputs& in);

// The forward plan with RowPlan::smem_row where NORMKIT_FORWARD_PLAN asks for it
// (in.forced_smem_row) and the plan allows it (register-resident rows of 16-byte
// vectors, not a call of few rows' early parameters, a slice that fits an SM; it
// replaces the pipeline and the shared-memory parameters): its dynamic shared memory and, unless minb= is forced,
// as many CTAs a SM as that memory and 2048 threads allow. residual_bytes: the
// residual's element size (0: none), staged beside x.
RowPlan with_smem_row(const RowPlan& planned, const RowPlanInputs& in, int residual_bytes);

}  // namespace normkit::norm::detail
