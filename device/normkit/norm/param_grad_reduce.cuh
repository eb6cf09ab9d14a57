// Final step of every norm backward: dweight[c] = sum over parts of the fp32
// partials (same for dbias), in part order, rounded once to the parameter dtype.
//
// Why it is shaped this way: the sum must be deterministic, so each column's parts
// are added in a fixed order, never with atomics. For short rows there are few
// columns and many parts, so a CTA splits each column's parts over PART_LANES
// threads (strided, fixed) and adds their results in lane order through shared
// memory; reads stay coalesced because a warp covers 32 adjacent columns.
#pragma once

#include "normkit/common/pdl.cuh"
#include "normkit/common/types.cuh"
#include "normkit/norm/params.cuh"

namespace nk {

template <class W, class B, int PART_LANES>
__global__ void __launch_bounds__(32 * PART_LANES) param_grad_reduce_kernel(const ParamGradReduceParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  __shared__ float sums[2][PART_LANES][33];
  const int tx = static_cast<int>(threadIdx.x) % 32;
  const int lane = static_cast<int>(threadIdx.x) / 32;
  const long long c = static_cast<long long>(blockIdx.x) * 32 + tx;
  float dw = 0.f, db = 0.f;
  if (c < p.cols) {
    // BATCH parts' loads are issued before any is added, then added in part order
    // (the same order as one at a time, so the same bits): a lane's parts are
    // latency-bound L2 reads (a few microseconds per call at 128 parts, decode's
    // backward), and one load in flight per lane left most of that latency exposed.
    constexpr int BATCH = 8;
    long long part = lane;
    for (; part + (BATCH - 1) * PART_LANES < p.parts; part += BATCH * PART_LANES) {
      float w[BATCH], b[BATCH];
#pragma unroll
      for (int q = 0; q < BATCH; ++q) {
        const long long at = (part + q * PART_LANES) * p.cols + c;
        if constexpr (!is_none<W>) w[q] = p.dweight_partial[at];
        if constexpr (!is_none<B>) b[q] = p.dbias_partial[at];
      }
#pragma unroll
      for (int q = 0; q < BATCH; ++q) {
        if constexpr (!is_none<W>) dw += w[q];
        if constexpr (!is_none<B>) db += b[q];
      }
    }
    for (; part < p.parts; part += PART_LANES) {
      if constexpr (!is_none<W>) dw += p.dweight_partial[part * p.cols + c];
      if constexpr (!is_none<B>) db += p.dbias_partial[part * p.cols + c];
    }
  }
  sums[0][lane][tx] = dw;
  sums[1][lane][tx] = db;
  __syncthreads();
  if (lane != 0 || c >= p.cols) return;
  dw = 0.f;
  db = 0.f;
#pragma unroll
  for (int l = 0; l < PART_LANES; ++l) {
    dw += sums[0][l][tx];
    db += sums[1][l][tx];
  }
  if constexpr (!is_none<W>) static_cast<W*>(p.dweight)[c] = from_float<W>(dw);
  if constexpr (!is_none<B>) static_cast<B*>(p.dbias)[c] = from_float<B>(db);
}

}  // namespace nk
