// Final step of every norm backward: dweight[c] = sum over parts of the fp32
// partials (same for dbias), in part order, rounded once to the parameter dtype.
//
// Why it is shaped this way: the sum must be deterministic, so each column's parts
// are added in a fixed order, never with atomics. A CTA is a block of
// blockDim.x adjacent columns (a multiple of 32: each warp's reads are coalesced) by
// blockDim.y lanes: lane l of a column adds parts l, l + lanes, ... and the lanes'
// results are added in lane order through shared memory. The shape is a launch
// parameter (param_reduce_shape), not a template one, because the best one depends
// on the parts: the partials are L2-latency-bound reads, and short rows (few
// columns: N / 32 warps of columns is 64 at N = 2048) come with many parts (~900 of
// the register rows there), which want many lanes, while long rows have many
// columns and few parts (8 over clusters at N = 262144), which want one lane and
// CTAs of several warps of columns rather than thousands of tiny CTAs.
#pragma once

#include "normkit/common/pdl.cuh"
#include "normkit/common/types.cuh"
#include "normkit/norm/params.cuh"

namespace nk {

// At most kReduceThreads threads a CTA (columns x lanes). The bounds say one CTA an SM
// at least: with the bare __launch_bounds__(1024) ptxas sm_90a (CUDA 13.0) held the
// dweight and dbias kernel to 32 registers and issued each batch's loads two at a
// time, each add waiting on its load (LayerNorm's backward ran 0.7-1.6 % slower at
// the same CTA shape as before, H100, docs/perf/h200-2026-12-07e.md); with (1024, 1)
// it takes 47 and issues all 16 before the first add, as the 256-thread kernel did
// (the next H100 sweep: LayerNorm's backward rows level or faster, h200-2026-12-07f.md).
constexpr int kReduceThreads = 1024;

template <class W, class B>
__global__ void __launch_bounds__(kReduceThreads, 1) param_grad_reduce_kernel(const ParamGradReduceParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  __shared__ float sums[2][kReduceThreads];
  const int tx = static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  const int lanes = static_cast<int>(blockDim.y);
  const int width = static_cast<int>(blockDim.x);
  const long long c = static_cast<long long>(blockIdx.x) * width + tx;
  float dw = 0.f, db = 0.f;
  if (c < p.cols) {
    // BATCH parts' loads are issued before any is added, then added in part order
    // (the same order as one at a time, so the same bits): a lane's parts are
    // latency-bound L2 reads (a few microseconds per call at 128 parts, decode's
    // backward), and one load in flight per lane left most of that latency exposed.
    constexpr int BATCH = 8;
    long long part = lane;
    for (; part + (BATCH - 1) * lanes < p.parts; part += BATCH * lanes) {
      float w[BATCH], b[BATCH];
#pragma unroll
      for (int q = 0; q < BATCH; ++q) {
        const long long at = (part + q * lanes) * p.cols + c;
        if constexpr (!is_none<W>) w[q] = p.dweight_partial[at];
        if constexpr (!is_none<B>) b[q] = p.dbias_partial[at];
      }
#pragma unroll
      for (int q = 0; q < BATCH; ++q) {
        if constexpr (!is_none<W>) dw += w[q];
        if constexpr (!is_none<B>) db += b[q];
      }
    }
    for (; part < p.parts; part += lanes) {
      if constexpr (!is_none<W>) dw += p.dweight_partial[part * p.cols + c];
      if constexpr (!is_none<B>) db += p.dbias_partial[part * p.cols + c];
    }
  }
  if (lanes > 1) {
    sums[0][lane * width + tx] = dw;
    sums[1][lane * width + tx] = db;
    __syncthreads();
    if (lane != 0) return;
    dw = 0.f;
    db = 0.f;
    for (int l = 0; l < lanes; ++l) {
      dw += sums[0][l * width + tx];
      db += sums[1][l * width + tx];
    }
  }
  if (c >= p.cols) return;
  if constexpr (!is_none<W>) static_cast<W*>(p.dweight)[c] = from_float<W>(dw);
  if constexpr (!is_none<B>) static_cast<B*>(p.dbias)[c] = from_float<B>(db);
}

}  // namespace nk
