// Backward plans of long rows (the stash, split rows, the clusters of calls of few
// rows), the measured CTA counts of fp32 register rows, and the backward's grid
// sizes. plan_rows (rmsnorm_heuristics.cpp) calls the helpers declared in
// rmsnorm_heuristics_bwd.hpp. The bulk ring's plans: rmsnorm_heuristics_bwd_bulk.cpp.
#include "rmsnorm_heuristics_bwd.hpp"

#include <algorithm>
#include <cstdint>

#include "normkit/norm/params.cuh"

namespace normkit::norm::detail {

// The stash (backward rows too long for registers). 256-thread CTAs with at most
// ~72 KB of shared memory each keep three CTAs per SM, so that one CTA's loads
// overlap another's reduction and stores; the cluster grows (up to 16 CTAs on
// sm_90, a non-portable size the runtime enables per kernel) until the slice
// fits. Measured on H200 (docs/perf/rmsnorm-vs-eager-h200.md, 9cbdd46), no
// weight: bf16 N=32768 (2 CTAs) 497 us against 696 us for register-resident
// rows in a 2-CTA cluster, N=131072 (8 CTAs) 771 against 823 us and N=262144
// (16 CTAs) 837 against 848 us for the two-pass kernel. dw/db come from the
// column pass: sums kept in the stash too were slower (see rmsnorm_bwd.cuh).
// With dw/db (the column pass after the row kernel), clusters beyond 2 CTAs lost
// to the two-pass kernel in the same run (d887cec, total backward): bf16
// N=131072 1161 against 1112 us, N=262144 1230 against 1134, fp32 N=32768 (4
// CTAs) 2130 against 1960, N=131072 2323 against 2062; 2 CTAs won (bf16
// N=32768: 805 against 1046). So with dw/db the stash is used up to 2 CTAs,
// without up to 4 (fp32 N=32768: 1173 us, 1.09x eager). Longer rows take the
// split kernels (plan_split): by its traffic (h and dout read twice, dx written
// once, no column pass) ~2.5 GB against the stash's 1.5 GB plus the column
// pass's 1 GB for bf16 2048x131072, at copy-like occupancy instead of ~2 TB/s.
// Measured (c96aa46 against 9fdb0b9): bf16 N=131072 with weight 689 us against
// the two-pass kernel's 1113, fp32 N=262144 with weight 1351 against 2110.
constexpr std::int64_t kStashBudget = 72 * 1024;

bool plan_stash(const RowPlanInputs& in, RowPlan& p) {
  const int max_cluster = in.arch < 90 ? 1 : in.param_grads ? 2 : 4;
  for (int c = 1; c <= max_cluster; c *= 2) {
    const int bytes = stash_bytes(in.n, p.vec, c, in.x_bytes, in.dout_bytes);
    if (bytes > kStashBudget) continue;
    p.stash = true;
    p.regs = false;
    p.row_sums = false;
    p.cluster = c;
    p.smem_bytes = bytes;
    return true;
  }
  return false;
}

// Split rows: the constants and the measurements behind them are in
// rmsnorm_heuristics_bwd.hpp (kSplitBlocks, kSyncedBlocks).
void plan_split(const RowPlanInputs& in, RowPlan& p) {
  p.split = true;
  p.regs = false;
  p.row_sums = true;  // the dx kernel sums dw/db: no column pass
  p.cluster = 1;
  p.synced = !in.param_grads;
  // fp32 rows with dw/db: the dx kernel's CTAs exchange the chunk sums themselves
  // (norm_bwd_split_kernel's WAIT), as the synced kernel does without them, so h and
  // dout are read once instead of twice. H200, M*N = 2^27, ratio to copy, the two
  // kernels -> WAIT (A/B a487a62 -> 4c84db3 in one run, docs/perf/h200-2026-11-30c.md):
  // RMSNorm fp32 N=32768 0.575 -> 0.650, 65536 0.568 -> 0.616, 131072 0.562 ->
  // 0.594; LayerNorm 0.475 -> 0.576, 0.537 -> 0.563, 0.424 -> 0.544; with
  // dresidual_out RMSNorm 0.654 -> 0.674, 0.646 -> 0.648, 0.647 -> 0.635, LayerNorm
  // 0.588 -> 0.628, 0.592 -> 0.608, 0.502 -> 0.603. Not at N=262144 (RMSNorm 0.553 ->
  // 0.513, LayerNorm 0.474 -> 0.444) and not 16-bit rows, which wait with two vectors
  // a thread (at four, with the sums in shared memory, bf16 rows with fp32 weights
  // spilled 32-64 bytes under 128 registers): half the bytes in flight, and RMSNorm
  // bf16 N=65536-262144 lost 0.568-0.550 -> 0.389-0.322 (LayerNorm 0.422-0.376 ->
  // 0.332-0.279).
  // 16-bit LayerNorm rows beyond N=131072 with 16-bit weight and bias (or none) do
  // wait, with four vectors a thread as fp32 rows do (the spills above were with fp32
  // weights). H200, M*N = 2^27, ratio to copy, the two kernels -> WAIT at four
  // vectors (A/B c9c5755 -> 67a4f0c in one run, docs/perf/h200-2026-11-30d.md):
  // LayerNorm bf16 N=262144 0.389 -> 0.477, with dresidual_out 0.483 -> 0.530; but
  // N=131072 0.520 -> 0.488 and 0.572 -> 0.528, and RMSNorm bf16 N=131072-262144
  // lost too (0.554 -> 0.552, 0.545 -> 0.534; with dresidual_out 0.633 -> 0.590,
  // 0.629 -> 0.577). ptxas sm_80/sm_90a/sm_100a, both norms, bf16/fp16, N=65536-262144
  // (odd N included), with and without db and dresidual_out: clean, 96-128
  // registers, except sm_100a RMSNorm bf16 N=262144 with dresidual_out (32 bytes), so
  // sm_100 rows with dresidual_out keep the two kernels.
  const bool wait16 = in.center && in.n > 131072 && in.x_bytes == 2 && in.weight_bytes <= 2 &&
                      !(in.arch >= 100 && in.residual);
  p.wait_dots = in.param_grads && !in.many_heads && ((in.x_bytes == 4 && in.n <= 131072) || wait16);
  // Two vectors a thread with db (two sums in registers) where the sums stay in
  // registers; WAIT keeps them in shared memory.
  p.split_items = in.dbias && !p.wait_dots ? 2 : 4;
}

// Register rows over a cluster, the CTAs' row sums pushed to each other with
// st.async and awaited on an mbarrier (row_sums_walk), not two cluster barriers a
// row, where they measured faster than the plans below them (the fp32 pair, the
// stash, the split kernels). 512-thread CTAs, two per SM, up to a 16-CTA cluster
// (1024-thread CTAs, one per SM, beyond), no prefetch:
// - fp32 rows with dw (LayerNorm: and db) beyond N=16384 at 8 columns a thread, the
//   sums in registers; LayerNorm's with dresidual_out, and at N=131072 all of
//   LayerNorm's, with the sums in shared memory (sums=smem: one fp32 per column of
//   the CTA's slice, per sum), LayerNorm's without dresidual_out there in 512-thread
//   CTAs of four vectors, one per SM;
// - 16-bit rows from N=32768 at two vectors a thread, the sums in shared memory:
//   RMSNorm with and without dresidual_out (at N=32768 in two 1024-thread CTAs),
//   LayerNorm without it up to N=131072;
// - LayerNorm's 16-bit rows with dresidual_out at N=32768-65536: two vectors a thread,
//   the sums in shared memory, one 512-thread CTA per SM (NORMKIT_SMEM_SUMS=0, and
//   RMSNorm's with it: at N=16385-32768 one vector a thread, the sums in registers, a
//   cluster of eight).
// H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_BACKWARD_PLAN=cluster=...,
// two runs each in one call (docs/perf/h200-2026-11-30h.md and -2026-11-30.md):
//   RMSNorm fp32 N=32768 (cluster=8,cta=512,minb=2,prefetch=0) 0.651 -> 0.830, with
//   dresidual_out 0.667 -> 0.885; N=65536 (cluster=16) 0.621 -> 0.780, 0.643 ->
//   0.820; N=131072 (cluster=16,cta=1024) 0.594 -> 0.678, 0.631 -> 0.777.
//   LayerNorm fp32 without dresidual_out (the RMSNorm rule; A/B eb7894f -> 44a522f):
//   N=32768 0.580 -> 0.753, 65536 0.563 -> 0.741, 131072 0.545 -> 0.595.
//   LayerNorm fp32 with sums=smem (backward-cluster-smem-sums-2.txt, at 201f760,
//   against the sums in registers, with dresidual_out one CTA per SM and the next row
//   prefetched): with dresidual_out N=32768 0.757 -> 0.818, 65536 0.686 -> 0.782,
//   131072 (no cluster plan before) 0.598 -> 0.639; without N=131072 0.594 -> 0.607
//   (N=32768 and 65536 within 1 %, RMSNorm fp32 too: not planned).
//   16-bit rows, two vectors a thread, sums=smem (backward-cluster-smem-sums.txt, at
//   201f760): RMSNorm bf16 with dresidual_out N=32768 (cluster=4) 0.680 -> 0.883,
//   65536 (cluster=8) 0.637 -> 0.853, 131072 (cluster=16) 0.632 -> 0.836, 262144
//   (cluster=16,cta=1024) 0.628 -> 0.740; with dw alone against the same rows with
//   the sums in registers 0.723 -> 0.741, 0.704 -> 0.720, 0.682 -> 0.688, 0.590 ->
//   0.600 (those had measured, against the pair, the stash and the split rows, 0.697
//   -> 0.720, 0.560 -> 0.687, 0.555 -> 0.663, 0.544 -> 0.595); LayerNorm bf16 N=32768
//   0.486 -> 0.636, 65536 0.511 -> 0.611, 131072 0.520 -> 0.563, 262144 0.480 -> 0.476
//   (not planned).
//   LayerNorm bf16 with dresidual_out N=32768 (cluster=8, sums in registers): 0.575
//   -> 0.616; then at one 512-thread CTA per SM with sums=smem (backward-ln-dro-
//   clusters.txt at 8dfc416, docs/perf/h200-2026-11-30j.md) N=32768 (cluster=4) 0.602
//   -> 0.626, 65536 (cluster=8, against the split rows) 0.577 -> 0.601; N=131072
//   (cluster=16) lost, 0.573 -> 0.521.
//   Fewer, larger CTAs (backward-clusters-3.txt, at c1d3721): RMSNorm bf16 N=32768 in
//   two 1024-thread CTAs (cluster=2,cta=1024,minb=1, sums=smem) 0.739 -> 0.758, with
//   dresidual_out 0.874 -> 0.910 (at N=65536 and 131072 four and eight such CTAs lost
//   1-2 %; LayerNorm bf16 lost 3-9 %); LayerNorm fp32 N=131072 without dresidual_out
//   in 512-thread CTAs of four vectors, one per SM (cluster=16,cta=512,minb=1,
//   sums=smem) 0.606 -> 0.646 (with dresidual_out 0.641 -> 0.636, RMSNorm fp32 0.663 ->
//   0.657: not planned; two per SM spilled 72-448 bytes).
// They lost elsewhere: 16-bit rows at one vector a thread with sums=smem (RMSNorm
// 0.741 -> 0.542 at N=32768, LayerNorm 0.636 -> 0.488) and with the sums in registers
// (0.707 -> 0.549), and every 16-bit row with the next row prefetched (0.34-0.53).
// LayerNorm's 16-bit rows with dresidual_out spilled 12-32 bytes at two vectors a
// thread with the sums in shared memory (152-452 with them in registers). Not
// measured, so not planned: sm_80/sm_100, RMSNorm with db, mixed dtypes of x and
// dout, calls of few rows, fp32 N=262144 (spilled at 16 columns a thread in 16 CTAs
// of 1024 threads). With a separate dresidual output ptxas spilled 20 bytes (fp32
// N=32768, sm_90a): not planned.
ClusterRows plan_cluster_rows(const RowPlanInputs& in, int vec, std::int64_t tpr8) {
  ClusterRows c;
  if (in.forced_cluster > 1 && in.arch >= 90) {
    c.cluster = in.forced_cluster;
    c.threads = in.forced_cta_threads ? in.forced_cta_threads : 512;
    c.smem_sums = in.forced_smem_sums && in.param_grads;
    c.prefetch = !in.forced_no_prefetch && !c.smem_sums;  // the kernel's shared-memory sums do not prefetch
    return c;
  }
  if (in.arch != 90 || !in.param_grads || in.few_rows || in.forced_elems_per_thread || in.forced_cta_threads ||
      in.dout_bytes != in.x_bytes || vec * in.x_bytes != 16 || (in.dbias && !in.center) || in.dresidual_output)
    return c;
  // NORMKIT_SMEM_SUMS=0: the sums stay in registers, in the plans that measured so
  // before sums=smem (LayerNorm's fp32 rows with dresidual_out one CTA per SM, the
  // next row prefetched), or no cluster where they spilled there.
  const bool smem = in.smem_sums_allowed;
  if (in.x_bytes == 4 && tpr8 > 2048) {
    const bool ln_dro = in.center && in.residual;
    if (tpr8 / 512 <= 16) {
      c.cluster = static_cast<int>(tpr8 / 512);
      c.threads = 512;
      c.min_blocks = ln_dro && !smem ? 1 : 2;
      c.prefetch = ln_dro && !smem;
      c.smem_sums = ln_dro && smem;
    } else if (tpr8 / 1024 <= 16 && (smem || !ln_dro)) {
      c.cluster = static_cast<int>(tpr8 / 1024);
      c.threads = 1024;
      c.min_blocks = 1;
      c.smem_sums = in.center && smem;
      // LayerNorm without dresidual_out: 512-thread CTAs of four vectors (one per SM).
      if (in.center && !in.residual && smem) c.threads = 512;
    }
  } else if (in.x_bytes == 2 && in.residual && !smem && tpr8 > 2048 && tpr8 <= 4096) {
    // One vector a thread, the sums in registers.
    c.cluster = 8;
    c.threads = 512;
    c.min_blocks = 2;
  } else if (in.x_bytes == 2 && tpr8 >= 4096 && (smem || (!in.center && !in.residual))) {
    // Two vectors a thread, as the fp32 rows above hold; LayerNorm not beyond
    // N=131072 (no faster than its split rows at 1024 threads).
    const std::int64_t tpr16 = tpr8 / 2;
    c.smem_sums = smem;
    if (tpr16 == 2048 && !in.center && smem) {
      // RMSNorm N=32768: two 1024-thread CTAs (one per SM) instead of four of 512.
      c.cluster = 2;
      c.threads = 1024;
      c.min_blocks = 1;
    } else if (tpr16 / 512 <= 16 && !(in.center && in.residual)) {
      c.cluster = static_cast<int>(tpr16 / 512);
      c.threads = 512;
      c.min_blocks = 2;
    } else if (in.center && in.residual && tpr16 / 512 <= 8) {
      // LayerNorm with dresidual_out: one CTA per SM (two spilled 12-32 bytes).
      c.cluster = static_cast<int>(tpr16 / 512);
      c.threads = 512;
      c.min_blocks = 1;
    } else if (tpr16 / 1024 <= 16 && !in.center) {
      c.cluster = static_cast<int>(tpr16 / 1024);
      c.threads = 1024;
      c.min_blocks = 1;
    }
  }
  // Every thread's vectors in the row (N a multiple of the cluster's columns): a
  // thread's partly empty last vectors spilled 20-36 bytes (N=20000, ptxas sm_90a).
  const std::int64_t nv = in.n / vec;
  if (c.cluster < 2 || nv % (static_cast<std::int64_t>(c.cluster) * c.threads) != 0) c = ClusterRows{};
  return c;
}

// LayerNorm's 16-bit backward rows spent most of their time outside their loads in
// the cp.async ring's and the prefetch's bookkeeping: at N=2048 its ring kernel is
// 2784 SASS instructions (60 SHFL, 15 BAR, 39 LDS) where the same row as plain
// register rows is 1160 (20, 2, 2) and RMSNorm's 1008. As plain rows with 16-32
// columns a thread and as many CTAs per SM as ptxas fits without spills (sm_90a),
// H200, bf16 with dw and db, M*N = 2^27, ratio to copy, own plan ->
// NORMKIT_BACKWARD_PLAN (two runs each in one call; scripts/plan_cases/
// backward-ln-plain.txt and -2.txt at 201f760, docs/perf/h200-2026-11-30i.md):
//   without dresidual_out: ept=16,cta=128,minb=6 (80 registers) N=256 0.762 -> 0.842,
//   512 0.707 -> 0.842; ept=32,cta=128,minb=4 (128) N=1024 0.730 -> 0.857, 2048
//   0.682 -> 0.823 (ept=16 0.807), 4096 0.748 -> 0.847; ept=32,cta=256,minb=2 N=8192
//   0.751 -> 0.805; ept=32,cta=512,minb=1 N=16384 0.691 -> 0.745.
//   with dresidual_out: ept=16,cta=128,minb=6 N=256 0.815 -> 0.834, 512 0.755 ->
//   0.822, 1024 0.776 -> 0.800, 2048 0.762 -> 0.796.
// And RMSNorm's 16-bit rows with dw alone at N=4097-8192 (the ring's 512-thread
// CTAs, two per SM): ept=16,cta=512,minb=2 (63 registers) 0.808 -> 0.877.
// Then (backward-plain-smem-sums.txt and backward-ln-plain-odd.txt at 8dfc416,
// docs/perf/h200-2026-11-30j.md), LayerNorm with dw and db:
//   with dresidual_out and the sums in shared memory (sums=smem, 64-80 registers):
//   N=2048 ept=16,cta=128,minb=8 0.798 -> 0.858; 4096 ept=16,cta=256,minb=4 (own:
//   plan_rows' smem_sums32) 0.784 -> 0.863; 8192 ept=16,cta=512,minb=2 0.877 ->
//   0.889; not at N=1024 (ept=16,cta=64,minb=12 0.799 -> 0.793) nor without
//   dresidual_out (0.74-0.78 against 0.81-0.85 own);
//   without dresidual_out at N between powers of two, ept=32,cta=128,minb=4 (tpr a
//   power of two, three vectors a thread): N=1536 0.564 -> 0.778, 3072 0.649 -> 0.783;
//   not at 5120 and 6144 (ept=32,cta=256,minb=2 0.758 -> 0.699, 0.785 -> 0.758) nor
//   12288 (ept=32,cta=512,minb=1 0.670 -> 0.681, within noise of a rule).
// They lost or tied elsewhere: LayerNorm with dresidual_out N=4096 (ept=16,cta=256,
// minb=3 0.786 -> 0.791) and 8192 (0.875 own; ept=32,cta=256 one CTA per SM 0.699,
// two spilled), without it ept=32,cta=256,minb=1 at N=8192 (0.563), ept=8 at any N
// (0.65-0.78); RMSNorm with dresidual_out N=2048 (ept=16,cta=128,minb=6 0.836 ->
// 0.847, within the runs' spread: not planned). Not measured, so not planned:
// sm_80/sm_100, N < 256, rows whose vectors are not 16 bytes, mixed x and dout
// dtypes, a separate dresidual, calls of few rows, other N that are not a power of
// two, LayerNorm without db with the sums in shared memory.
RowPlanInputs with_plain16_rows(const RowPlanInputs& in) {
  if (!in.backward || in.arch != 90 || in.x_bytes != 2 || in.dout_bytes != 2 || !in.param_grads || in.few_rows ||
      in.dresidual_output || in.n < 256 || in.n % 8 != 0 || in.max_vec < 8 || in.forced_elems_per_thread ||
      in.forced_cta_threads || in.forced_min_blocks || in.forced_no_prefetch || in.forced_cluster || in.forced_smem_sums ||
      in.forced_bulk_rows)
    return in;
  struct Shape {
    int ept, cta, minb;
    bool smem_sums = false;
  };
  Shape s{0, 0, 0};
  const bool smem = in.smem_sums_allowed;
  // N between powers of two (LayerNorm without dresidual_out): measured at 1536 and
  // 3072 (a power-of-two number of threads, three vectors each); 5120 and 6144 lost.
  const bool odd_ok = in.center && !in.residual && in.n > 1024 && in.n <= 3072;
  if (in.center && !in.residual) {
    s = in.n <= 512 ? Shape{16, 128, 6}
        : in.n <= 4096 ? Shape{32, 128, 4}
        : in.n <= 8192 ? Shape{32, 256, 2}
        : in.n <= 16384 ? Shape{32, 512, 1}
                        : s;
  } else if (in.center && in.n <= 1024) {
    s = Shape{16, 128, 6};
  } else if (in.center && in.n <= 2048) {
    s = smem && in.dbias ? Shape{16, 128, 8, true} : Shape{16, 128, 6};
  } else if (in.center && in.dbias && in.n <= 8192 && smem) {
    s = in.n <= 4096 ? Shape{16, 256, 4, true} : Shape{16, 512, 2, true};
  } else if (!in.center && !in.dbias && !in.residual && in.n > 4096 && in.n <= 8192) {
    s = Shape{16, 512, 2};
  }
  // Every thread's vectors in the row (the row's threads are a power of two): a
  // thread's partly empty last vector spilled 8-80 bytes (N=1000 with dresidual_out at
  // ept=16,minb=6, ptxas sm_90a).
  if (s.ept == 0) return in;
  const std::int64_t items = s.ept / 8, nv = in.n / 8, tpr = next_pow2(nv / items);
  if (nv % items != 0 || nv % tpr != 0 || (!odd_ok && tpr != nv / items)) return in;
  RowPlanInputs out = in;
  out.forced_elems_per_thread = s.ept;
  out.forced_cta_threads = s.cta;
  out.forced_min_blocks = s.minb;
  out.forced_no_prefetch = true;
  out.forced_smem_sums = s.smem_sums;
  return out;
}

// Few rows with dw/db (calls the host's time decides: M=1 and M=199 at N=32768 on
// the H200, where eager's do_bench time is under 100 us): register-resident rows
// in a cluster with dw/db summed in registers are two launches (row kernel,
// reduction) where the stash is three (and its dynamic shared memory), and a
// back-to-back loop of such calls measured 2-6% slower than eager with the stash
// (cee9b14: bf16/fp16 N=32768, paired ratios 0.94-0.97). Their bandwidth is the
// 0.58x of clusters (rmsnorm_heuristics.cpp's header), which these row counts do
// not reach.
bool plan_few_rows(const RowPlanInputs& in, std::int64_t tpr_sums, int tpr_max, RowPlan& p) {
  if (!in.few_rows || !in.param_grads || in.arch < 90) return false;
  const std::int64_t cluster = next_pow2((tpr_sums + tpr_max - 1) / tpr_max);
  if (cluster > 8) return false;  // beyond the portable cluster size (N > 65536 for 16-bit rows)
  p.cluster = static_cast<int>(cluster);
  p.regs = true;
  p.row_sums = true;
  return true;
}

RowPlan fit_to_device(RowPlan p, std::int64_t n, int sm_count) {
  // A part's CHUNKS CTAs wait for each other: all of them resident at once.
  if (p.wait_dots && split_chunks(n, p) > static_cast<std::int64_t>(sm_count) * p.min_blocks) p.wait_dots = false;
  if (p.synced && split_chunks(n, p) > static_cast<std::int64_t>(sm_count) * p.min_blocks) {
    p.synced = false;
    p.min_blocks = kSplitBlocks;
  }
  return p;
}

// fp32 backward rows in registers on sm_90 (h, dout and the sums in one CTA): ptxas
// fits them in 64-121 registers where plan_rows' estimate counts 88-136, so more
// CTAs per SM than the estimate allows, as measured: H200, M*N = 2^27, all fp32,
// NORMKIT_XPLAN sweep at 04b667f (one run, ratio to copy, default -> this count;
// docs/perf/h200-2026-11-30c.md):
//   LayerNorm with dw and db: N=1024 (128 threads) 5 -> 6 CTAs 0.864 -> 0.925 (8:
//   0.884); N=2048 (256) 2 -> 3 0.773 -> 0.928 (4: 0.908); N=4096 (512) 1 -> 2
//   0.711 -> 0.955 (ptxas holds it in 64 registers, no spills). With dresidual_out:
//   N=2048 2 -> 3 0.909 -> 0.987; N=4096 at 16 columns (256 threads) 2, 0.989.
//   RMSNorm with dw and dresidual_out: N=1024 (two 64-thread rows) and 2048 (128
//   threads) 3 -> 4, 0.940 -> 0.992 and 0.955 -> 0.998; N=4096 (256) 1 -> 2 0.795 ->
//   0.971 (96 registers).
// Returns 0 where nothing was measured (the estimate's count stands): sm_80, mixed
// dtypes, LayerNorm without db, RMSNorm with db, N < 1024, and LayerNorm fp32
// N=16384's column pass (5 -> 4 CTAs lost there, 0.516 -> 0.436).
int fp32_backward_blocks(const RowPlanInputs& in, const RowPlan& p, std::int64_t owned) {
  if (!in.backward || in.x_bytes != 4 || in.dout_bytes != 4 || in.arch < 90 || in.n < 1024 || !p.regs ||
      !p.row_sums || p.smem_sums || p.cluster != 1 || p.async_rows || p.prefetch)
    return 0;
  const int threads = p.threads();
  if (in.center && in.dbias) {
    if (owned == 8 && !in.residual) return threads == 128 ? 6 : threads == 256 ? 3 : threads == 512 ? 2 : 0;
    if (owned == 8 && threads == 256) return 3;
    if (owned == 16 && threads == 256 && in.residual) return 2;
    return 0;
  }
  if (!in.center && !in.dbias && in.residual && owned == 16) return threads == 128 ? 4 : threads == 256 ? 2 : 0;
  return 0;
}

int stash_bytes(std::int64_t n, int vec, int cluster, int x_bytes, int dout_bytes) {
  const std::int64_t nv = n / vec;
  const std::int64_t slice_v = (nv + cluster - 1) / cluster;
  return static_cast<int>(std::min<std::int64_t>(slice_v * vec * (x_bytes + dout_bytes), 1LL << 30));
}

std::int64_t split_chunks(std::int64_t n, const RowPlan& plan) {
  return nk::split_chunks(n / plan.vec, plan.tpr, plan.split_items);
}

std::int64_t plan_bwd_split_parts(const RowPlan& plan, std::int64_t n, std::int64_t rows_per_head,
                                  std::int64_t heads, int sm_count) {
  const std::int64_t resident = static_cast<std::int64_t>(std::max(sm_count, 1)) * plan.min_blocks;
  const std::int64_t per_chunk = resident / (split_chunks(n, plan) * heads);
  return std::clamp<std::int64_t>(per_chunk, 1, std::max<std::int64_t>(rows_per_head, 1));
}

std::int64_t plan_bwd_column_parts(std::int64_t n, int vec, std::int64_t rows_per_head, std::int64_t heads,
                                   int sm_count, int threads) {
  const std::int64_t col_ctas = (n / vec + threads - 1) / threads;
  // About four CTAs per SM in total: enough loads in flight, few partials to add.
  const std::int64_t want = (static_cast<std::int64_t>(std::max(sm_count, 1)) * 4 + col_ctas * heads - 1) /
                            (col_ctas * heads);
  return std::clamp<std::int64_t>(want, 1, std::max<std::int64_t>(rows_per_head, 1));
}

// param_grad_reduce's CTA (param_grad_reduce.cuh): `width` adjacent columns by
// `lanes` lanes, each lane adding at most ~32 of a column's parts (more lanes where
// there are more parts, so that more of the partials' L2 reads are in flight), and
// 256 threads a CTA where few lanes leave room for more columns. H100 80GB HBM3, bf16
// backward, the reduction's time in a call (scripts/bwd_kernel_times.py: CUPTI, calls
// back to back; docs/perf/h200-2026-12-07e.md), 8 lanes of 32 columns everywhere ->
// lanes by the parts: RMSNorm N=256-4096 (660-1056 parts: 32 lanes) 9.3-10.7 ->
// 4.6-6.3 us, LayerNorm N=256 15.8 -> 6.4 us; 16 lanes at 132 parts were 0.1-0.5 us
// slower than 8, and at N=262144 (8 parts over clusters of 16) a CTA of 32 columns
// took 9.8 us, one lane of 256 columns 4.5. Same-call A/B of the 88 backward rows
// against 8 lanes of 32 columns (section 4 there): +0.33 % on average, +1-3.5 % for the
// short register rows and the long rows; LayerNorm's 0.7-1.6 % slower rows came from
// the kernel's load scheduling (param_grad_reduce.cuh), since fixed: in the next sweep
// (a63b300, another H100; docs/perf/h200-2026-12-07f.md) LayerNorm's 44 backward rows
// were level or faster than at 2ed4abe (+1.3 % on average, up to +3.1 %), RMSNorm's
// +1.0 % on average (machines differ by about that; no same-call A/B yet).
ParamReduceShape param_reduce_shape(std::int64_t parts) {
  int lanes = 1;
  while (lanes < 32 && parts > 32 * static_cast<std::int64_t>(lanes)) lanes *= 2;
  return {lanes >= 8 ? 32 : 256 / lanes, lanes};
}

std::int64_t plan_bwd_parts(const RowPlan& plan, std::int64_t rows_per_head, std::int64_t heads, int sm_count) {
  const std::int64_t row_groups = (rows_per_head + plan.rows - 1) / plan.rows;
  const std::int64_t resident = static_cast<std::int64_t>(std::max(sm_count, 1)) * plan.min_blocks;
  const std::int64_t per_head = std::max<std::int64_t>(1, resident / (heads * plan.cluster));
  return std::max<std::int64_t>(1, std::min(row_groups, per_head));
}

namespace {

// Where the plans read the weight from shared memory unasked (sm_90, a weight of x's
// width, calls of many rows). H200 plan cases, two runs each: w=smem against the plans
// before it at N=1024-32768 (h200-2026-12-01.md section 1), then this rule against
// w=global over the sweep's N=256-32768 and w=smem forced at N=65536-262144 (section
// 2). Ratio to copy: RMSNorm bf16 with dresidual_out +2-7 % (N=1024 0.876 -> 0.938,
// 2048 0.881 -> 0.946, 65536 0.874 -> 0.913), without it +1-9 % (N=1024 0.904 ->
// 0.936, 262144's cluster rows 0.598 -> 0.652); LayerNorm bf16 with it +1-4 % (N=16384
// 0.848 -> 0.883, 65536 0.605 -> 0.629); LayerNorm fp32 with it N=32768-131072 +9-14 %
// (0.895 -> 0.974, 0.827 -> 0.905, 0.673 -> 0.766), without it N=131072 0.635 ->
// 0.736; the other fp32 rows within -0.5 .. +2 %. Left out:
//  - RMSNorm fp32 without dresidual_out at N=2049-8192: 0.6-1.3 % slower;
//  - LayerNorm 16-bit without dresidual_out: beyond N=16384 0.3-1.7 % slower; at
//    N=4096-16384 (+0.7-2.8 % measured) NVRTC 13.2 (the PyTorch cu13 wheels' own)
//    spilled 36-40 bytes where 13.0 compiled clean;
//  - LayerNorm 16-bit rows of several a CTA, with dresidual_out or not: ptxas sm_90a
//    spilled 8-96 bytes (the weight's loads, free of the dx stores' aliasing, are
//    issued ahead and held);
//  - CTAs capped at 64 registers a thread (1024 threads an SM) without dresidual_out,
//    LayerNorm fp32 (N=4096, 16384, 32768, 65536) and RMSNorm 16-bit rows of one CTA
//    with shared-memory sums or the cp.async ring (N=16384, 5120): 12-48 bytes spilled
//    (RMSNorm's over a cluster, N=32768-262144, compiled clean);
//  - LayerNorm 16-bit with dresidual_out, three vectors a thread or more at 85
//    registers or fewer (N=6144, three 256-thread CTAs an SM): 16 bytes spilled.
bool weight_smem_measured(const RowPlan& p, const RowPlanInputs& in) {
  if (in.arch != 90 || in.few_rows || in.weight_bytes != in.x_bytes) return false;
  const bool fp32 = in.x_bytes == 4;
  if (in.center && !fp32 && !in.residual) return false;
  if (!in.center && fp32 && !in.residual && in.n > 2048 && in.n <= 8192) return false;
  if (in.center && !fp32 && p.rows > 1) return false;
  const bool capped64 = std::int64_t{p.threads()} * p.min_blocks >= 1024;
  if (capped64 && !in.residual && (in.center ? fp32 : p.cluster == 1 && (p.smem_sums || p.async_rows))) return false;
  const std::int64_t items = (slice_vectors(p, in.n) + p.tpr - 1) / p.tpr;
  if (in.center && !fp32 && in.residual && std::int64_t{p.threads()} * p.min_blocks >= 768 && items >= 3) return false;
  return true;
}

}  // namespace

RowPlan with_weight_smem(const RowPlan& planned, const RowPlanInputs& in) {
  if (in.forced_weight_smem < 0 || !in.backward || !planned.regs || planned.split || in.weight_bytes == 0 ||
      (in.forced_weight_smem == 0 && !weight_smem_measured(planned, in)))
    return planned;
  RowPlan p = planned;
  const std::int64_t entry = ((std::int64_t{p.vec} * in.weight_bytes + 15) / 16) * 16;  // W_ENTRY
  p.weight_smem = true;
  p.smem_bytes += static_cast<int>(slice_vectors(p, in.n) * entry);
  // sm_80 has 163 KB an SM, not sm_90's kSmemPerSm.
  const std::int64_t per_sm = in.arch >= 90 ? kSmemPerSm : 163 * 1024;
  const std::int64_t by_smem = per_sm / (p.smem_bytes + kSmemPerCta);
  if (!in.forced_min_blocks) p.min_blocks = static_cast<int>(std::clamp<std::int64_t>(std::min<std::int64_t>(p.min_blocks, by_smem), 1, 16));
  return p;
}

namespace {

// H200, M*N = 2^27, ratio to copy, own plan -> NORMKIT_BACKWARD_PLAN=l2=next, two runs
// each in one call (scripts/plan_cases/backward-l2-next.txt at e0fee24,
// docs/perf/h200-2026-12-01b.md; identical plans of the two cases agreed within 1 %):
//   16-bit rows over a cluster without dresidual_out: RMSNorm N=32768 (two 1024-thread
//   CTAs) 0.812 -> 0.872, 65536 0.774 -> 0.793, 131072 0.712 -> 0.720; LayerNorm
//   N=65536 0.633 -> 0.658, 131072 0.578 -> 0.591, 32768 0.649 -> 0.647;
//   LayerNorm 16-bit with dresidual_out over a cluster: N=32768 0.646 -> 0.714, 65536
//   0.627 -> 0.688;
//   LayerNorm 16-bit rows of one CTA without dresidual_out: N=8192 0.811 -> 0.826,
//   16384 (one 512-thread CTA an SM) 0.751 -> 0.805;
//   LayerNorm fp32 over a cluster without dresidual_out: N=32768 0.849 -> 0.869, 65536
//   0.782 -> 0.784.
// Slower everywhere else it applied: rows of several a CTA and short rows (N=256-2048:
// -4 to -36 %; one thread's bulk prefetches a row of each row), RMSNorm 16-bit with
// dresidual_out (-3 to -11 %), fp32 rows with it (-2 to -30 %), RMSNorm bf16 N=16384's
// shared-memory sums (0.882 -> 0.676), the fp32 clusters with shared-memory sums
// (LayerNorm N=131072 0.735 -> 0.612, RMSNorm 0.725 -> 0.601). LayerNorm fp32 rows of
// one CTA without dresidual_out alternated (N=512 +4.8 %, 1024 -0.5, 2048 +3.4, 4096
// -6.5, 8192 +2.0): not planned.
bool l2_next_measured(const RowPlan& p, const RowPlanInputs& in) {
  if (in.arch != 90 || in.few_rows || in.n > 131072 || p.rows != 1) return false;
  if (in.x_bytes == 2) {
    if (p.cluster > 1) return in.center || !in.residual;
    return in.center && !in.residual && !p.smem_sums && in.n > 4096;
  }
  return in.center && !in.residual && p.cluster > 1 && !p.smem_sums && in.n <= 65536;
}

}  // namespace

RowPlan with_l2_next(const RowPlan& planned, const RowPlanInputs& in) {
  const bool allowed = in.backward && in.arch >= 90 && (planned.regs || planned.stash) && !planned.split &&
                       !planned.prefetch && !planned.async_rows && in.x_bytes == in.dout_bytes &&
                       planned.vec * in.x_bytes == 16 && (!in.residual || in.dresidual_out_bytes == in.x_bytes);
  // Where CTAs at 64 registers a thread spilled with it (ptxas sm_90a): one
  // 512-thread CTA of 16-bit rows a row (two an SM), 12 bytes for LayerNorm with
  // dresidual_out (N=8192, NVRTC 13.0) and 56 for RMSNorm with its sums in registers
  // (N=8192, NVRTC 13.2); LayerNorm fp32 rows with their sums in registers, 8 bytes,
  // in 1024-thread CTAs (N=16384 over a cluster of two, NVRTC 13.2) and with a 16-bit
  // weight (N=32768 over a cluster of eight 512-thread CTAs, NVRTC 13.0).
  const bool capped64 = planned.threads() * planned.min_blocks >= 1024;
  const bool spilled =
      capped64 && ((planned.cluster == 1 && in.x_bytes == 2 && (in.center ? in.residual : !planned.smem_sums)) ||
                   (in.center && in.x_bytes == 4 && !planned.smem_sums &&
                    (planned.threads() == 1024 || in.weight_bytes != in.x_bytes)));
  if (!allowed || spilled || in.forced_l2_next < 0 || (in.forced_l2_next == 0 && !l2_next_measured(planned, in)))
    return planned;
  RowPlan p = planned;
  p.l2_next = true;
  return p;
}

// Backward rows without dresidual_out store dx evict-first (RowPlan::evict_first) on the
// H100's memory class. NVIDIA H100 80GB HBM3, M*N = 2^27, ratio to copy, plain stores
// -> -DNK_STORE_CACHE=1 (env:NORMKIT_NVRTC_FLAGS), the same plans, one run each in two
// calls (scripts/plan_cases/store-evict-first.txt at e19bb11, h100-followup.txt at
// 5862167; docs/perf/h200-2026-12-07c.md): RMSNorm bf16 N=2048 0.884 -> 0.893, 4096
// 0.876 -> 0.883, 8192 0.919 -> 0.977, 32768 0.887 -> 0.904, 131072 0.933 -> 0.953;
// RMSNorm fp32 N=4096 0.937 -> 0.944, 131072 0.972 -> 0.983; LayerNorm bf16 (the plans
// before its short rows' ept=16) N=4096 0.855 -> 0.869, 8192 0.848 -> 0.870, 32768
// 0.852 -> 0.876, 131072 0.869 -> 0.896; LayerNorm fp32 N=4096 0.931 -> 0.941, 131072
// 0.970 -> 0.968. With dresidual_out level (-0.2 to +1.0 %: RMSNorm bf16 N=4096 0.981
// both, LayerNorm bf16 131072 0.956 -> 0.958), so left plain; the forward lost 0-0.6 %
// at N=1024/16384 (both norms, bf16 and fp32, with and without a residual); LayerNorm
// bf16's short rows at ept=16 were level (N=2048 0.896 both, 8192 0.960 -> 0.961).
// Not measured on the H200: its plans keep the plain stores. Nor where a thread has 64
// registers (1024 threads an SM): LayerNorm fp32 N=16384's register rows (1024-thread
// CTAs over a cluster of two) spilled 12 bytes with them under NVRTC 13.2, none plain.
bool evict_first_measured(const RowPlan& p, const RowPlanInputs& given) {
  return given.backward && !given.any_forced() && given.arch == 90 && given.slower_memory() && !given.residual &&
         !given.few_rows && std::int64_t{p.threads()} * p.min_blocks < 1024;
}

}  // namespace normkit::norm::detail
