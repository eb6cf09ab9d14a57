// Kernel parameter blocks of the norm kernels. This header is compiled twice: by
// NVRTC into the kernels and by the host compiler into normkit_norm, which fills
// the same structs and passes them by value, so the two sides agree on the layout
// by construction. Plain C++ only: no CUDA types, no host-only headers.
#pragma once

#if defined(__CUDACC__)
#define NK_HOST_DEVICE __host__ __device__
#else
#define NK_HOST_DEVICE
#endif

namespace nk {

// Rows of one tensor: row r starts at element
//   (r / rows_inner) * stride_outer + (r % rows_inner) * stride_inner.
struct RowsParam {
  void* data;
  long long stride_outer;
  long long stride_inner;
};

struct RowsShape {
  long long rows;
  long long rows_inner;
  long long heads;  // params have `heads` rows of N; batch row r uses param row r % heads
};

// A 64-bit division costs ~100 instructions on the GPU; most batches have a
// single row stride (rows_inner == rows) or fit 32-bit indices.
NK_HOST_DEVICE inline long long row_offset(const RowsParam& t, const RowsShape& s, long long r) {
  if (s.rows_inner >= s.rows) return r * t.stride_inner;
  if (s.rows <= 0x7fffffffLL) {
    const unsigned q = static_cast<unsigned>(r) / static_cast<unsigned>(s.rows_inner);
    const unsigned m = static_cast<unsigned>(r) - q * static_cast<unsigned>(s.rows_inner);
    return static_cast<long long>(q) * t.stride_outer + static_cast<long long>(m) * t.stride_inner;
  }
  return (r / s.rows_inner) * t.stride_outer + (r % s.rows_inner) * t.stride_inner;
}

// Whether register-resident backward rows with dresidual_out load it before the
// row's reduction (norm_bwd_kernel's DRO_EARLY); the host's plan then counts its
// registers (rmsnorm_heuristics.cpp). Measured there: fp32 rows, and 16-bit rows
// from N=8192.
NK_HOST_DEVICE constexpr bool backward_dro_early(long long n, int x_bytes) { return x_bytes >= 4 || n >= 8192; }

// Geometry of split rows (rmsnorm_bwd_split.cuh), shared by the kernels and the
// host plan: a row of NV vectors is cut into column chunks of TPR * ITEMS
// vectors; thread t of chunk c owns vectors c * TPR * ITEMS + k * TPR + t for
// k < ITEMS (those below NV), so a warp's accesses are coalesced and every
// vector of the row has exactly one owner (tests/cpp/test_rmsnorm_split_geometry.cpp).
NK_HOST_DEVICE constexpr long long split_chunks(long long nv, int tpr, int items) {
  return (nv + static_cast<long long>(tpr) * items - 1) / (static_cast<long long>(tpr) * items);
}
NK_HOST_DEVICE constexpr long long split_vector(long long chunk, int k, int thread, int tpr, int items) {
  return chunk * tpr * items + static_cast<long long>(k) * tpr + thread;
}

// Dynamic shared memory of norm_fwd_bulk_kernel (RowPlan::bulk_stages), computed
// alike by the kernel and the host's plan: STAGES stages, each the CTA's slice of x
// (SLICE_V vectors of VEC elements) and then of the residual (r_bytes an element; 0:
// none), then the CTA's slices of weight and bias when both are whole 16-byte chunks
// (the bulk copy's unit; otherwise the epilogue reads them from global memory and
// they take no shared memory; w_bytes and b_bytes 0 ask for none).
struct BulkRowsLayout {
  unsigned x_bytes;       // x's slice, at the start of a stage (the residual's follows)
  unsigned slice_bytes;   // one stage
  unsigned weight_bytes;  // the weight's slice (0: not in shared memory)
  unsigned params_bytes;  // weight and bias slices (0: not in shared memory)
  unsigned total_bytes;
};
NK_HOST_DEVICE constexpr BulkRowsLayout bulk_rows_layout(int slice_v, int vec, int x_bytes, int r_bytes, int w_bytes,
                                                         int b_bytes, int stages) {
  const unsigned elems = static_cast<unsigned>(slice_v) * static_cast<unsigned>(vec);
  const unsigned x_slice = elems * static_cast<unsigned>(x_bytes);
  const unsigned slice = x_slice + elems * static_cast<unsigned>(r_bytes);
  const unsigned wb = elems * static_cast<unsigned>(w_bytes);
  const unsigned bb = elems * static_cast<unsigned>(b_bytes);
  const bool cached = wb % 16 == 0 && bb % 16 == 0 && wb + bb > 0;
  return BulkRowsLayout{x_slice, slice, cached ? wb : 0u, cached ? wb + bb : 0u,
                        static_cast<unsigned>(stages) * slice + (cached ? wb + bb : 0u)};
}

// Parameters of the forward of both norms (RMSNorm, and LayerNorm when the
// kernel's CENTER is set: `mean` is then written like rstd, and weight_offset is 0).
struct NormFwdParams {
  RowsShape shape;
  RowsParam x, residual, out, residual_out;
  const void* weight;
  const void* bias;
  float* mean;
  float* rstd;
  float eps;
  float weight_offset;
  // Grouped rows (norm_fwd_group.cuh): one 64-bit slot per (row, slice), [rows][slices],
  // zeroed before each launch; a CTA publishes its slice's moments there (group_slot_pack).
  unsigned long long* group_slots;
  // Grouped rows: how long a CTA waits for its row's other slices before it computes
  // them itself (globaltimer ns, below 2^32), as NormBwdParams::sync_timeout_ns.
  unsigned sync_timeout_ns;
};

// A slice's (mean, M2) as one 64-bit word that is never 0, so that a zeroed slot
// reads as "not yet published" and the value is its own flag (no fence, no count):
// M2 >= 0 (or NaN) has its sign bit free, and it is set. NK_HOST_DEVICE: the host
// tests check the round trip.
NK_HOST_DEVICE inline unsigned long long group_slot_pack(unsigned mean_bits, unsigned m2_bits) {
  return (static_cast<unsigned long long>(m2_bits | 0x80000000u) << 32) | mean_bits;
}
NK_HOST_DEVICE inline unsigned group_slot_mean_bits(unsigned long long slot) { return static_cast<unsigned>(slot); }
NK_HOST_DEVICE inline unsigned group_slot_m2_bits(unsigned long long slot) {
  return static_cast<unsigned>(slot >> 32) & 0x7fffffffu;
}

struct NormBwdParams {
  RowsShape shape;
  RowsParam x, dout, dresidual_out, dx, dresidual;
  const void* weight;
  const float* mean;  // CENTER (LayerNorm) kernels only
  const float* rstd;
  // fp32 per-CTA partial sums, [parts][heads][N]; parts = gridDim.x / cluster.
  float* dweight_partial;
  float* dbias_partial;
  // Non-null when the row kernel's grid is one CTA (cluster) per head and there
  // is no dbias: its dw sums are the final ones, stored here in the weight's
  // dtype ([heads][N]) instead of as a partial, and no reduction kernel follows.
  void* dweight_final;
  // Split plans (rmsnorm_bwd_split.cuh): each row's dot product in column chunks,
  // [rows][chunks], then (CENTER) each row's sum of g in column chunks, [rows][chunks].
  float* row_dot_partial;
  // Synced split plans: [0] the next ticket, [1 + r] chunks of row r that have
  // published their sums; zeroed before each launch.
  unsigned* sync_counters;
  // Synced split plans: how long a CTA waits for its row's other chunk sums before
  // it computes them itself (globaltimer ns, below 2^32); see norm_bwd_synced_kernel.
  unsigned sync_timeout_ns;
  float weight_offset;
  // Grouped rows (norm_bwd_group.cuh): one 64-bit slot per (row, sum, slice),
  // [rows][sums][slices], zeroed before each launch; a CTA publishes its slice's sums
  // there (group_sum_slot).
  unsigned long long* group_slots;
};

// A slice's sum as a 64-bit word that is never 0 (bit 32 set), so that a zeroed slot
// reads as "not yet published" (the grouped backward's sums have no free sign bit).
NK_HOST_DEVICE inline unsigned long long group_sum_slot(unsigned sum_bits) { return (1ull << 32) | sum_bits; }

// Deterministic final reduction of the per-CTA partials into dweight / dbias.
struct ParamGradReduceParams {
  const float* dweight_partial;
  const float* dbias_partial;
  void* dweight;
  void* dbias;
  long long parts;
  long long cols;  // heads * N
};

}  // namespace nk
