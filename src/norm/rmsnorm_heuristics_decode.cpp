// with_decode_rows (rmsnorm_heuristics_decode.hpp).
//
// A decode call's row is read by one CTA whose threads each load a few vectors, add
// them, and wait on one block reduction: with 128 threads of 32 elements (plan_rows'
// own at N=4096 bf16) every thread's four loads are in flight at once but the
// reduction and the epilogue run on four warps. Spreading the row over more threads
// (16-bit N=4096: 256 threads of two vectors), or over a cluster of small CTAs whose
// SMs each hold a slice (fp32 rows and N=8192: two vectors a thread), cut the
// time of one call. H200, graph replay, us per call, M=1 unless said, own plan ->
// NORMKIT_FORWARD_PLAN, two runs each in one call (scripts/plan_cases/
// forward-decode.txt at 3c8394e, docs/perf/h200-2026-11-30j.md):
//   RMSNorm bf16 N=4096 (ept=16) 2.25 -> 2.15, with a residual 2.52 -> 2.44, M=16
//   1.93 -> 1.89 and 2.23 -> 2.11; N=8192 (ept=8,cta=128: a cluster of eight) 2.53 ->
//   2.37, 2.91 -> 2.53.
//   RMSNorm fp32 N=4096 (ept=8,cta=128: four CTAs) 2.28 -> 2.23, 2.60 -> 2.34, M=16
//   1.97 -> 1.97, 2.33 -> 2.11; N=8192 (eight) 2.70 -> 2.27, 2.86 -> 2.02.
//   LayerNorm bf16 N=4096 (ept=16) 2.59 -> 2.47, 2.91 -> 2.78, M=16 2.28 -> 2.16,
//   2.60 -> 2.44; N=8192 (ept=8,cta=256: four CTAs) 3.00 -> 2.68, 3.50 -> 3.06.
//   LayerNorm fp32 N=4096 (ept=8,cta=256: two CTAs) 2.59 -> 2.48, 3.03 -> 2.66, M=16
//   2.29 -> 2.17, 2.75 -> 2.36; N=8192 (four) 2.84 -> 2.16, 3.51 -> 2.35.
// LayerNorm over 128-thread CTAs does not compile (its cluster rows need 256). Lost:
// ept=8 in one CTA (RMSNorm bf16 N=4096 2.37, fp32 2.82), fp32 ept=4 (2.73-4.22).
// Then as plans (A/B 3c8394e -> 635c80b, two runs each, M=1/16/128): every M=1 and
// M=16 row faster (e.g. LayerNorm fp32 N=8192 M=16 2.91 -> 2.25, RMSNorm fp32 N=4096
// M=16 1.99 -> 1.98 the least) and the 16-bit N=4096 rows at M=128 too (RMSNorm bf16
// 2.20 -> 2.09, LayerNorm 2.54 -> 2.42), but the clusters at M=128 lost (LayerNorm
// bf16 N=8192 3.28 -> 4.62, RMSNorm fp32 N=4096 2.58 -> 2.78): 128 clusters queue for
// the SMs. So the clusters only for calls of up to kDecodeRows rows (decode_rows).
// Not measured, so not planned: other N, sm_80/sm_100, weights of another dtype than x;
// M=17-127 (no cluster) and M=129-256 at N=4096 (16-bit: ept=16) are not measured.
#include "rmsnorm_heuristics_decode.hpp"

namespace normkit::norm::detail {

RowPlanInputs with_decode_rows(const RowPlanInputs& in) {
  if (in.backward || !in.few_rows || in.arch != 90 || (in.n != 4096 && in.n != 8192) || !in.weight_as_x ||
      (in.x_bytes != 2 && in.x_bytes != 4) || in.max_vec * in.x_bytes < 16 || in.forced_elems_per_thread ||
      in.forced_cta_threads || in.forced_min_blocks || in.forced_no_prefetch || in.forced_bulk_rows ||
      in.forced_group_rows)
    return in;
  RowPlanInputs out = in;
  if (in.x_bytes == 2 && in.n == 4096) {
    out.forced_elems_per_thread = 16;
  } else if (in.decode_rows) {
    out.forced_elems_per_thread = 8;
    out.forced_cta_threads = in.center ? 256 : 128;
  } else {
    return in;
  }
  return out;
}

}  // namespace normkit::norm::detail
