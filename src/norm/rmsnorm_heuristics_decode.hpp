// Forward plans of decode calls (few rows at the hidden sizes of serving), apart from
// plan_rows' bandwidth rules (rmsnorm_heuristics.cpp) because a call of one to a few
// rows is latency: how many threads (and CTAs) share a row decides its time.
#pragma once

#include "rmsnorm_heuristics.hpp"

namespace normkit::norm::detail {

// The forward inputs of a call of few rows (RowPlanInputs::few_rows; the clusters
// only for decode_rows) at N=4096 and 8192 on sm_90 with the elements per thread (and
// CTA threads) that measured faster than plan_rows' own, as forced fields; any other
// call unchanged.
RowPlanInputs with_decode_rows(const RowPlanInputs& in);

}  // namespace normkit::norm::detail
