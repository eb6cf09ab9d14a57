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

}  // namespace normkit::norm::detail
