// Launch-shape heuristics of the row kernels (row_engine.cuh): how many threads
// per row, rows per CTA, CTAs per cluster, whether the row fits in registers.
// Pure functions of (N, vector width, direction, features, arch): testable on the
// host and independent of the data.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "normkit/runtime/runtime.hpp"

namespace normkit::norm::detail {

struct RowPlan {
  int vec = 1;         // elements per vector access
  int tpr = 1;         // threads per row in one CTA (power of two)
  int rows = 1;        // rows per CTA
  int cluster = 1;     // CTAs per row (thread-block cluster; > 1 only on sm_90+)
  bool regs = true;    // row kept in registers between reduction and epilogue
  bool row_sums = true;  // backward: dw/db summed by the row kernel (else by the column pass)
  // Backward, rows too long for registers: the CTA's slice of h and dout kept in
  // shared memory between the two halves of the row, instead of reading it twice.
  bool stash = false;
  // Backward, rows too long for the stash: split into column chunks of tpr *
  // split_items vectors (rmsnorm_bwd_split.cuh; two kernels, no cluster).
  bool split = false;
  int split_items = 0;
  // Split rows without dw/db: one kernel that waits for its row's chunk sums
  // (norm_bwd_synced_kernel), h and dout read once.
  bool synced = false;
  // Split rows with dw/db: the dx kernel's CTAs of one part exchange each row's
  // chunk sums and wait for each other (norm_bwd_split_kernel's WAIT) instead of
  // a kernel that computes them first: h and dout read once. Needs the part's
  // CTAs resident together (fit_to_device) and one head (RowPlanInputs::many_heads).
  bool wait_dots = false;
  // Backward, register-resident rows: a persistent CTA loads its next row while it
  // finishes the current one (two register sets; norm_bwd_kernel's PREFETCH).
  bool prefetch = false;
  // Forward, calls of few rows: weight and bias loaded with the row (norm_fwd_kernel's EARLY).
  bool early_params = false;
  // Backward, 16-bit rows in registers whose dw/db sums do not fit beside them:
  // the sums kept in shared memory, one fp32 per column and sum (norm_bwd_kernel's
  // SMEM_SUMS), instead of a column pass that reads h and dout again. row_sums is
  // true with it (the row kernel produces the partials).
  bool smem_sums = false;
  // Backward, register-resident 16-bit rows of one CTA with dw/db sums: the rows
  // a CTA walks copied by cp.async into a three-stage shared-memory ring, two rows
  // ahead (norm_bwd_kernel's ASYNC), instead of `prefetch`'s second register set.
  bool async_rows = false;
  // Forward, register-resident rows of 1024-thread CTAs: the CTA's slice of weight
  // and bias copied by cp.async into shared memory with the row (once per kernel for
  // the pipeline's persistent CTAs), read there by the epilogue (norm_fwd_kernel's
  // PARAMS_SMEM), instead of one global load per item after the reduction.
  bool params_smem = false;
  // Forward, register-resident rows (with_staged_rows' measured rows, or
  // NORMKIT_FORWARD_PLAN's row=smem): the CTA's slice of x (and the residual) copied by
  // cp.async into dynamic shared memory and read there by both passes
  // (norm_fwd_kernel's SMEM_ROW), instead of held in registers: fewer registers a
  // thread, more CTAs a SM.
  bool smem_row = false;
  // Backward, register rows with a weight (where with_weight_smem measured it faster,
  // or NORMKIT_BACKWARD_PLAN's w=smem): the CTA's slice of the weight (one head per
  // CTA) copied once into shared memory and read there by both passes of every row
  // (norm_bwd_kernel's W_SMEM), instead of two global loads per item and row.
  bool weight_smem = false;
  // Backward, rows loaded one at a time (no `prefetch`, no `async_rows`; register
  // rows or the stash) of 16-byte vectors on sm_90+: before a CTA loads a row, it asks
  // L2 for its slice of the next row it takes by a bulk prefetch (norm_bwd_kernel's
  // L2_NEXT), so that those loads wait on L2 rather than HBM (with_l2_next).
  bool l2_next = false;
  // Backward bulk ring (bulk_stages) with the weight's slice beside the stages
  // (weight_smem): the row loop reads h, dout and the weight from shared memory with no
  // pointer test (norm_bwd_bulk_kernel's SHARED_READS), where it measured faster
  // (shared_reads_planned) or NORMKIT_BACKWARD_PLAN's reads=shared asks.
  bool shared_reads = false;
  // Backward bulk ring with dout and dresidual_out (if any) of h's width, where
  // NORMKIT_BACKWARD_PLAN's refill=early asks: pass 1 keeps the row's vectors in
  // registers and the stage is refilled at the barrier of the row's sums, before pass
  // 2 (norm_bwd_bulk_kernel's EARLY_REFILL). Planned by itself on the H100's memory
  // class where it measured faster (bulk_backward_early_refill_measured).
  bool early_refill = false;
  // Backward grouped ring (group_stages) with dresidual_out: its slice read from global
  // memory into registers a step before the row's dx (norm_bwd_group_kernel's
  // DRO_DIRECT), not copied into the stages, which then hold h and dout only (more of
  // them fit); NORMKIT_BACKWARD_PLAN's dro=direct.
  bool dro_direct = false;
  // Backward: the row kernel stores dx (and dresidual) evict-first, st.global.cs (its
  // source compiled with -DNK_PLAN_STORE_CACHE=1, device/normkit/common/vector_io.cuh),
  // where that measured faster (evict_first_measured).
  bool evict_first = false;
  // Rows where NORMKIT_FORWARD_PLAN's (NORMKIT_BACKWARD_PLAN's) row=bulk asks for it,
  // or where it measured faster on sm_90 (bulk_rows_measured,
  // bulk_backward_rows_measured; with_bulk_rows, with_bulk_backward_rows): the row's slices (x's and the residual's; h's, dout's, dresidual_out's)
  // copied by cp.async.bulk into a ring of this many shared-memory stages
  // (norm_fwd_bulk_kernel, norm_bwd_bulk_kernel), a persistent grid, one row per CTA
  // (cluster); the backward's weight slice in shared memory where weight_smem. 0: off.
  int bulk_stages = 0;
  // Rows where NORMKIT_FORWARD_PLAN's (NORMKIT_BACKWARD_PLAN's) row=group asks for it,
  // or where it measured faster on sm_90 (group_rows_measured; with_group_rows): the
  // row cut into slices of tpr * split_items vectors, each taken by a CTA of a group
  // (no cluster) through a ring of this many shared-memory stages, the group's sums
  // exchanged in global memory (norm_fwd_group_kernel, norm_bwd_group_kernel);
  // params_smem (forward): weight and bias slices in shared memory, weight_smem
  // (backward): the weight's. 0: off.
  int group_stages = 0;
  // Forward (NORMKIT_FORWARD_PLAN's occ=): at most this many CTAs per SM, by dynamic
  // shared memory the kernel does not use (smem_bytes raised to sm_ctas_smem_bytes), so
  // the occupancy API, the persistent grids and the hardware all see the cap. 0: off.
  int sm_ctas = 0;
  // With sm_ctas under NORMKIT_FORWARD_PLAN's l1=max: the launch's preferred shared-memory
  // carveout (LaunchConfig::carveout_percent), the smallest that holds sm_ctas CTAs, and
  // smem_bytes padded against it rather than the whole SM, so L1 keeps the rest. -1: none.
  int carveout_percent = -1;
  int smem_bytes = 0;  // dynamic shared memory per CTA (the stash, the smem_sums, params_smem's parameters, smem_row's row, weight_smem's slice or the bulk ring)
  int min_blocks = 1;  // __launch_bounds__ minimum CTAs per SM (caps registers)
  int threads() const { return tpr * rows; }
  std::string str() const;
};

struct RowPlanInputs {
  std::int64_t n = 0;
  int max_vec = 1;          // widest vector every tensor's alignment allows (elements)
  int x_bytes = 2;          // element size of the row input that sets the 16-byte limit
  bool backward = false;
  bool dbias = false;       // backward also sums dout per column
  int dout_bytes = 2;       // backward: element size of dout (the stash holds h and dout)
  int h_bytes = 0;          // backward: element size of h alone (x_bytes is the wider of h and dout)
  bool param_grads = false; // backward: dw or db is computed (the column pass follows long rows)
  int arch = 90;            // compute capability * 10 of the target (clusters need >= 90)
  // The device's peak DRAM bandwidth, GB/s (rt::DeviceInfo::memory_gbps; 0: unknown, as
  // for a compile-only target). The H100 (~3350) and the H200 (~4900) are both sm_90 with
  // 132 SMs, and some rows' fastest plans differ between them: see slower_memory().
  int memory_gbps = 0;
  // Backward: a call with few rows (rows * n <= kFewRowsElements), whose time is
  // the host's: a plan with fewer launches beats one with more bandwidth there.
  bool few_rows = false;
  // Forward: a call of few rows that is also at most kDecodeRows rows (decode), which
  // with_decode_rows plans apart (rmsnorm_heuristics_decode.cpp).
  bool decode_rows = false;
  // LayerNorm (the kernels' CENTER): its synced backward carries a second chunk
  // sum, and the forward pipeline is not planned for it.
  bool center = false;
  // Forward: what the epilogue carries (the pipeline, `prefetch`, is planned only
  // for rows without a residual, LayerNorm's centring or a bias: it keeps two raw
  // rows under 1024 threads' 64 registers, and those spilled with it). Backward:
  // dresidual_out is read (a third row input).
  bool residual = false;
  bool residual_out = false;  // forward: residual_out is stored (prenorm, or training with a residual)
  int residual_bytes = 0;     // forward: the residual's element size (0: none); RowPlan::smem_row stages it
  bool bias = false;
  // Backward: element size of the widest of dresidual_out and dresidual (0: none).
  int dresidual_bytes = 0;
  int dresidual_out_bytes = 0;  // backward: dresidual_out's element size (0: none)
  bool dresidual_output = false;  // backward: a dresidual tensor apart from dx
  // Backward: RowPlan::smem_sums may be planned (NORMKIT_SMEM_SUMS=0 turns it off).
  bool smem_sums_allowed = true;
  // Backward: RowPlan::async_rows may be planned (NORMKIT_ASYNC_ROWS=0 turns it off).
  bool async_rows_allowed = true;
  // x is fp16 (not bf16; backward: x or dout), and (forward) the element sizes of
  // weight and bias (0: absent): ptxas spilled the forward pipeline for one pairing
  // of x and weight and the backward's bulk ring at one fp16 shape, and
  // RowPlan::params_smem holds the parameters, where it may be planned
  // (NORMKIT_PARAMS_SMEM=0 turns it off).
  bool x_fp16 = false;
  bool weight_as_x = true;  // forward: the weight is absent or of x's dtype
  int weight_bytes = 0;
  int bias_bytes = 0;
  bool params_smem_allowed = true;
  // Forward: rstd (and LayerNorm's mean) are stored, as in training.
  bool store_stats = false;
  // NORMKIT_FORWARD_PLAN's (backward: NORMKIT_BACKWARD_PLAN's) forced fields (0 /
  // false: the plan's own choice): elements (columns) per thread, most threads per
  // CTA, min_blocks, no pipeline.
  int forced_elems_per_thread = 0;
  int forced_cta_threads = 0;
  int forced_min_blocks = 0;
  bool forced_no_prefetch = false;
  int forced_cluster = 0;  // backward: register rows over a cluster of this many CTAs (NORMKIT_BACKWARD_PLAN); forward: row=bulk's cluster
  int forced_weight_smem = 0;  // backward: RowPlan::weight_smem asked for (1, w=smem) or refused (-1, w=global)
  int forced_l2_next = 0;  // backward: RowPlan::l2_next asked for (1, l2=next) or refused (-1, l2=off)
  int forced_shared_reads = 0;  // backward: RowPlan::shared_reads asked for (1, reads=shared) or refused (-1, reads=pointer)
  int forced_dro_direct = 0;  // backward: RowPlan::dro_direct asked for (1, dro=direct) or refused (-1, dro=stage)
  bool forced_early_refill = false;  // backward, with forced_bulk_rows: RowPlan::early_refill asked for (refill=early)
  bool forced_early_params = false;  // forward: RowPlan::early_params asked for in a call of many rows (early=1)
  int forced_sm_ctas = 0;  // forward: RowPlan::sm_ctas asked for (occ=)
  bool forced_l1_max = false;  // forward, with forced_sm_ctas: RowPlan::carveout_percent asked for (l1=max)
  bool forced_bulk_rows = false;  // RowPlan::bulk_stages asked for (row=bulk)
  bool forced_group_rows = false;  // RowPlan::group_stages asked for (row=group, or group_rows_measured)
  // RowPlan::group_stages may be planned (NORMKIT_GROUP_ROWS; the host refuses it where
  // the device cannot hold one group of its CTAs at once, or (forward) lacks memory
  // pools for its slots).
  bool group_rows_allowed = true;
  int forced_bulk_stages = 0;     // with forced_bulk_rows: that many stages (stages=)
  int forced_smem_row = 0;  // forward: RowPlan::smem_row asked for (1, row=smem, or with_staged_rows) or refused (-1, row=regs)
  bool forced_smem_sums = false;  // backward register rows (of a cluster, or of one CTA) with their dw/db sums in shared memory (sums=smem)
  // An sm_90 part with the H100's memory (under 4 TB/s: H100 SXM/PCIe/NVL) rather than
  // the H200's, where the plans were measured first. The rules that differ say so
  // with the H100 measurements beside them; an unknown bandwidth plans as the H200.
  bool slower_memory() const { return rt::slower_memory(memory_gbps); }
  // One bandwidth of each class slower_memory() tells apart (the H200's class first, as
  // an unknown bandwidth plans): a compile-only target builds the kernels of both.
  static constexpr int kMemoryClasses[2] = {0, 3352};
  // Whether NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN forced any field (read on
  // the inputs as given, before the measured input rules force some of their own).
  bool any_forced() const {
    return forced_elems_per_thread || forced_cta_threads || forced_min_blocks || forced_no_prefetch ||
           forced_cluster || forced_weight_smem || forced_l2_next || forced_bulk_rows || forced_bulk_stages ||
           forced_smem_row || forced_smem_sums || forced_group_rows || forced_shared_reads || forced_dro_direct ||
           forced_early_params || forced_sm_ctas || forced_l1_max || forced_early_refill;
  }
  // Backward: the call has per-head weights (heads > 1), whose parts multiply the
  // CTAs a split row's wait needs resident: no RowPlan::wait_dots.
  bool many_heads = false;
};

// Backward calls up to this many elements count as few rows (RowPlanInputs).
inline constexpr std::int64_t kFewRowsElements = std::int64_t{1} << 23;
// Forward calls up to this many elements (decode: M <= 128 at N = 8192) are
// planned for latency rather than bandwidth (RowPlan::early_params).
inline constexpr std::int64_t kFewRowsForwardElements = std::int64_t{1} << 20;
// Forward calls of few rows up to this many rows are decode calls (RowPlanInputs::decode_rows).
inline constexpr std::int64_t kDecodeRows = 16;
// Shared memory the plans count on: per SM for CTAs (sm_90; sm_80 has 163 KB, and the
// budgets that use it fit both twice), and what each CTA costs besides its dynamic
// part (static shared memory and the 1 KB the driver reserves).
inline constexpr std::int64_t kSmemPerSm = 227 * 1024;
inline constexpr std::int64_t kSmemPerCta = 2 * 1024;

// Dynamic shared memory a CTA asks for so that at most `ctas` of them fit an SM: just
// over what `ctas` + 1 could each have of the SM's (kSmemPerSm and the 1 KB the driver
// reserves a CTA), 128-byte rounded. `ctas` CTAs still fit since each reserve and
// static part is below that margin for ctas <= 8 (RowPlan::sm_ctas).
inline int sm_ctas_smem_bytes(int ctas) {
  const std::int64_t sm_bytes = kSmemPerSm + 1024;
  return static_cast<int>(std::min<std::int64_t>(kSmemPerSm, (sm_bytes / (ctas + 1) + 128) / 128 * 128));
}

// The shared-memory carveouts an sm_90 SM supports, KB (the rest of its 256 KB is L1).
inline constexpr int kSm90CarveoutsKb[] = {8, 16, 32, 64, 100, 132, 164, 196, 228};
inline constexpr int kSm90SharedPerSmKb = 228;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR

// RowPlan::sm_ctas within the smallest sm_90 carveout (RowPlan::carveout_percent): that
// carveout, in percent of kSm90SharedPerSmKb rounded down (the driver rounds a
// preference up to the next carveout it supports), and the dynamic shared memory a CTA
// asks for, at least `own_bytes`, such that `ctas` CTAs fit the carveout with their 1 KB
// reserve and up to 1 KB of static shared memory each and `ctas` + 1 do not.
struct CarveoutShare {
  int carveout_percent = -1;
  int smem_bytes = 0;
};
inline CarveoutShare sm_ctas_in_carveout(int ctas, int own_bytes) {
  for (const int kb : kSm90CarveoutsKb) {
    const std::int64_t carveout = std::int64_t{kb} * 1024;
    const std::int64_t pad = std::max<std::int64_t>(own_bytes, (carveout / (ctas + 1) - 1024 + 128) / 128 * 128);
    if (ctas * (pad + 2048) <= carveout && (ctas + 1) * (pad + 1024) > carveout)
      return {kb * 100 / kSm90SharedPerSmKb, static_cast<int>(pad)};
  }
  return {-1, std::max(own_bytes, sm_ctas_smem_bytes(ctas))};
}

// Vectors of a row of n elements that one CTA of the plan's cluster owns (its slice).
inline std::int64_t slice_vectors(const RowPlan& p, std::int64_t n) {
  return ((n + p.vec - 1) / p.vec + p.cluster - 1) / p.cluster;
}

RowPlan plan_rows(const RowPlanInputs& in);

// The shape both bulk rings (with_bulk_rows, with_bulk_backward_rows) give a row of nv
// 16-byte vectors whose stage takes stage_per_vector bytes a vector: the smallest
// cluster (up to 16, dividing nv) whose stage is at most target_bytes, or the forced
// one; 512 threads, or the forced count, halved while the slice has as few vectors;
// one CTA per SM or the forced count; the registers a thread may use under that.
// Nothing where the forced cluster does not divide nv or the CTA is under two warps.
struct BulkRingShape {
  int cluster = 1;
  int threads = 512;
  int blocks = 1;
  std::int64_t slice_v = 0;       // the CTA's 16-byte vectors of the row
  std::int64_t items = 0;         // a thread's vectors
  std::int64_t register_cap = 0;  // registers a thread, threads * blocks to an SM
};
std::optional<BulkRingShape> bulk_ring_shape(const RowPlanInputs& in, std::int64_t nv,
                                             std::int64_t stage_per_vector, std::int64_t target_bytes);

// The CTAs of a bulk ring planned where it measured faster (bulk_rows_measured_ctas,
// bulk_backward_measured_ctas) where they are not bulk_ring_shape's own: the cluster,
// the threads a CTA, the CTAs an SM and the stages (the forward's one stage, which
// leaves room for the parameters' slices), each 0 where the ring's own.
struct BulkRingCtas {
  int cluster = 0;
  int threads = 0;
  int blocks = 0;
  int stages = 0;
};

// The stages a bulk ring takes: as many as the SM's shared memory (shared by the
// shape's blocks) holds, up to max_stages, beside the parameters' slices
// (params_bytes; in shared memory where `params_allowed` and the stages asked for
// still fit), or the forced count where it fits; 0 below two (or the forced count).
struct BulkRingStages {
  int stages = 0;
  bool params_smem = false;
};
BulkRingStages bulk_ring_stages(const RowPlanInputs& in, const BulkRingShape& shape, std::int64_t stage_bytes,
                                std::int64_t params_bytes, bool params_allowed, int max_stages);
// A bulk ring's plan of that shape and stage count (one row a CTA, 16-byte vectors);
// the caller adds its shared memory and what else its kernel takes.
RowPlan bulk_ring_plan(const BulkRingShape& shape, int vec, int stages);

// The plan for a device with `sm_count` SMs: a synced split plan needs all of a
// row's chunks resident at once (min_blocks CTAs per SM are guaranteed); with
// fewer SMs than that takes, the two split kernels instead. A process limited to
// fewer SMs than the device has (MPS active-thread limits, green contexts) is not
// seen here; branch wip/synced-timeout makes the kernel itself safe there.
RowPlan fit_to_device(RowPlan plan, std::int64_t n, int sm_count);

// Shared memory the stash of a backward plan needs per CTA: SLICE_V vectors of h
// and of dout (RowStash in rmsnorm_bwd.cuh).
int stash_bytes(std::int64_t n, int vec, int cluster, int x_bytes, int dout_bytes);

// Column chunks of a split plan's rows.
std::int64_t split_chunks(std::int64_t n, const RowPlan& plan);

// Split plans: CTAs per (head, chunk) of the dx kernel, each a strided set of rows.
std::int64_t plan_bwd_split_parts(const RowPlan& plan, std::int64_t n, std::int64_t rows_per_head,
                                  std::int64_t heads, int sm_count);

// param_grad_reduce's CTA (param_grad_reduce.cuh) for `parts` partial rows of dw/db:
// `width` adjacent columns by `lanes` lanes (rmsnorm_heuristics_bwd.cpp says why).
struct ParamReduceShape {
  int width;  // columns a CTA (a multiple of 32)
  int lanes;
};
ParamReduceShape param_reduce_shape(std::int64_t parts);

// Backward grid: CTAs (clusters) per head for `rows_per_head` rows on `sm_count` SMs.
std::int64_t plan_bwd_parts(const RowPlan& plan, std::int64_t rows_per_head, std::int64_t heads, int sm_count);

// Column-wise dw/db pass (two-pass backward): row chunks per head.
std::int64_t plan_bwd_column_parts(std::int64_t n, int vec, std::int64_t rows_per_head, std::int64_t heads,
                                   int sm_count, int threads);

// Widest vector (1, 2, 4 or 8 elements) a tensor allows: pointer aligned to
// vec * elem_bytes and every stride that is used a multiple of vec.
int max_vec_for(const void* data, int elem_bytes, std::int64_t stride_outer, bool outer_used,
                std::int64_t stride_inner, bool inner_used);

}  // namespace normkit::norm::detail
