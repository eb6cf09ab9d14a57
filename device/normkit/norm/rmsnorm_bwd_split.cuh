// Backward of both norms for rows longer than a cluster's shared memory holds well
// (the long-row plans of rmsnorm_heuristics_bwd.cpp): two kernels, no clusters.
//
// Why it is shaped this way: a row of 131072+ elements spread over a cluster of
// 8-16 CTAs keeps every SM waiting on cluster-wide barriers (the stash kernel
// moved ~2 TB/s there on H200, the two-pass kernel less), and dw/db then need a
// third read of h and dout in the column pass. Here the row is cut into column
// chunks that are independent until one number, the row's dot product:
//  1. norm_bwd_dot_kernel: one CTA per (row, chunk) reads h and dout once and
//     writes the chunk's sum of g * xhat to row_dot_partial[row][chunk] (and,
//     LayerNorm, its sum of g to the second [rows][chunks] block). Many
//     small CTAs, no barrier beyond the CTA: a copy-like load pattern.
//  2. norm_bwd_split_kernel: a CTA owns one column chunk for a strided set of
//     rows (persistent over `parts`), adds the row's chunk sums in a fixed order,
//     writes dx, and keeps its columns' dw/db running sums in registers across
//     all its rows; param_grad_reduce.cuh adds the [parts][heads][N] partials.
// HBM traffic: h and dout read twice, dx written once (the stash: once each, but
// at lower bandwidth), and no column pass. Every sum is in a fixed order, so dx,
// dw and db are bitwise reproducible.
//
// Without dw/db (nothing to sum across rows) both steps run in one kernel,
// norm_bwd_synced_kernel, and h and dout are read once: a CTA keeps its chunk
// in registers while it waits for the rest of its row's chunk sums (see there).
// With dw/db, norm_bwd_split_kernel's WAIT does the same without kernel 1: the
// CTAs of one part (one per chunk, the same rows in the same order) publish their
// chunk sums of each row and wait for each other's, so h and dout are read once
// and each CTA still sums dw/db for its columns over a fixed set of rows (the
// partials, and so the result bits, do not depend on timing). The plan takes it for
// fp32 rows up to N=131072, where it measured faster; 16-bit rows wait with two
// vectors a thread (registers), half the bytes in flight, and lost with it.
#pragma once

#include "normkit/common/pdl.cuh"
#include "normkit/common/reduce.cuh"
#include "normkit/norm/rmsnorm_bwd_row.cuh"

namespace nk {

// A thread's vectors of one row's chunk, kept as loaded (storage dtype).
template <class Cfg, class X, class DY>
struct ChunkRegs {
  Packed<X, Cfg::VEC> h[Cfg::ITEMS];
  Packed<DY, Cfg::VEC> dy[Cfg::ITEMS];

  // Every load first, then the arithmetic: loaded and used item by item, the
  // compiler serialized the loads on reused registers; and dx aliases neither
  // input, but the compiler cannot know that and would wait for each store.
  __device__ __forceinline__ void load(const X* h_row, const DY* dy_row, int chunk) {
#pragma unroll
    for (int k = 0; k < Cfg::ITEMS; ++k) {
      const int v = Cfg::vector(chunk, k);
      if (Cfg::in_row(v)) {
        h[k] = load_packed<Cfg::VEC>(h_row + v * Cfg::VEC);
        dy[k] = load_packed<Cfg::VEC>(dy_row + v * Cfg::VEC);
      }
    }
  }

  // For each vector of the chunk in the row: f(k, col, xhat, g, dout).
  template <class Row, class F>
  __device__ __forceinline__ void each(const Row& row, int chunk, F&& f) const {
#pragma unroll
    for (int k = 0; k < Cfg::ITEMS; ++k) {
      const int v = Cfg::vector(chunk, k);
      if (!Cfg::in_row(v)) continue;
      float xh[Cfg::VEC], g[Cfg::VEC], d[Cfg::VEC];
      row.expand(v * Cfg::VEC, h[k], dy[k], xh, g, d);
      f(k, v * Cfg::VEC, xh, g, d);
    }
  }

  // The thread's share of the chunk's sums of g * xhat (and of g for LayerNorm).
  template <class Row>
  __device__ __forceinline__ DotAccumulator<Row::kCenter> dot(const Row& row, int chunk) const {
    DotAccumulator<Row::kCenter> sum;
    each(row, chunk, [&](int, int, const float (&xh)[Cfg::VEC], const float (&g)[Cfg::VEC], const float (&)[Cfg::VEC]) {
      sum.add(xh, g);
    });
    return sum;
  }
};

// Where the chunk sums of row r live: g * xhat at [r][chunk], g (LayerNorm) in a
// second [rows][chunks] block after the first.
template <class Cfg>
__device__ __forceinline__ float* chunk_sums(const NormBwdParams& p, long long r, int which) {
  return p.row_dot_partial + (which * p.shape.rows + r) * Cfg::CHUNKS;
}

// The CTA's chunk sums reduced over its threads (every thread gets them).
template <class Cfg, bool CENTER>
__device__ __forceinline__ DotAccumulator<CENTER> chunk_total(
    const DotAccumulator<CENTER>& mine, RowReduceStorage<1, Cfg::TPR, 1, CENTER ? 2 : 1>& storage) {
  float sums[CENTER ? 2 : 1];
  sums[0] = mine.gx;
  if constexpr (CENTER) sums[CENTER ? 1 : 0] = mine.g;
  row_sums<1, Cfg::TPR, 1>(sums, 0, static_cast<int>(threadIdx.x), storage);
  DotAccumulator<CENTER> total;
  total.gx = sums[0];
  if constexpr (CENTER) total.g = sums[CENTER ? 1 : 0];
  return total;
}

// A row's mean(g * xhat) from its chunk sums, by one warp: lane l adds chunks l,
// l + 32, ... in order, then a butterfly; every lane (and every CTA reading the
// same sums) ends with the same bits. `load` reads one sum.
template <class Cfg, class Load>
__device__ __forceinline__ float mean_of_chunk_sums(int lane, Load&& load) {
  float total = 0.f;
  for (int c = lane; c < Cfg::CHUNKS; c += 32) total += load(c);
  return group_sum<32>(total) / static_cast<float>(Cfg::N);
}

// One thread spins until *count reaches `target` or timeout_ns pass; returns 1 on
// timeout. The low 32 bits of the ns timer (wrapping every 4.3 s; the signed
// difference to the deadline stays right for any timeout below 2^31 ns), one
// register for the deadline: 64-bit timers, or start and now both live, cost the
// registers that made the synced kernel spill at its 80-register cap.
__device__ __forceinline__ int wait_for_count(const unsigned* count, unsigned target, unsigned timeout_ns) {
  unsigned deadline;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(deadline));
  deadline += timeout_ns;
  for (;;) {
    unsigned seen;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    if (seen >= target) return 0;
    unsigned now;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(now));
    if (static_cast<int>(now - deadline) >= 0) return 1;
    __nanosleep(100);
  }
}

// Thread 0 of a CTA that waits (the synced kernel, and the dx kernel's WAIT):
// writes its chunk's sums of row r, announces them in the row's counter and waits
// until all CHUNKS have; 1 if it timed out. The sums are visible GPU-wide before
// the count that announces them, and those of the others after the wait.
template <class Cfg, bool CENTER>
__device__ __forceinline__ int publish_and_wait(const NormBwdParams& p, long long r, int chunk,
                                                const DotAccumulator<CENTER>& total) {
  chunk_sums<Cfg>(p, r, 0)[chunk] = total.gx;
  if constexpr (CENTER) chunk_sums<Cfg>(p, r, 1)[chunk] = total.g;
  __threadfence();
  unsigned* published = p.sync_counters + 1 + r;
  atomicAdd(published, 1u);
  const int timed_out = wait_for_count(published, static_cast<unsigned>(Cfg::CHUNKS), p.sync_timeout_ns);
  __threadfence();
  return timed_out;
}

// Chunk c's sums of row r read from memory one vector at a time, in the order and
// with the arithmetic of ChunkRegs::dot and chunk_total (the same bits), for a CTA
// that timed out waiting: one vector of registers instead of a second chunk.
template <class Cfg, class X, class DY, class Row>
__device__ DotAccumulator<Row::kCenter> chunk_total_from_memory(
    const Row& row, const X* h, const DY* dy, int c, RowReduceStorage<1, Cfg::TPR, 1, Row::kCenter ? 2 : 1>& storage) {
  DotAccumulator<Row::kCenter> sum;
  for (int k = 0; k < Cfg::ITEMS; ++k) {
    const int v = Cfg::vector(c, k);
    if (!Cfg::in_row(v)) continue;
    const Packed<X, Cfg::VEC> hp = load_packed<Cfg::VEC>(h + v * Cfg::VEC);
    const Packed<DY, Cfg::VEC> dp = load_packed<Cfg::VEC>(dy + v * Cfg::VEC);
    float xh[Cfg::VEC], g[Cfg::VEC], d[Cfg::VEC];
    row.expand(v * Cfg::VEC, hp, dp, xh, g, d);
    sum.add(xh, g);
  }
  return chunk_total<Cfg>(sum, storage);
}

// Every chunk sum of row r into sums[0][c] (and LayerNorm's sums of g into
// sums[1][c]), computed by this CTA alone: the fallback of a CTA that timed out
// waiting for the other chunks' CTAs (the synced kernel, and the dx kernel's
// WAIT). All threads of the CTA call it (block reductions); sums are complete
// after the barrier at its end.
template <class Cfg, class X, class DY, class Row>
__device__ void row_chunk_totals_from_memory(const Row& row, const X* h, const DY* dy,
                                             RowReduceStorage<1, Cfg::TPR, 1, Row::kCenter ? 2 : 1>& storage,
                                             float (&sums)[Row::kCenter ? 2 : 1][Cfg::CHUNKS]) {
  for (int c = 0; c < Cfg::CHUNKS; ++c) {
    const DotAccumulator<Row::kCenter> total = chunk_total_from_memory<Cfg, X, DY>(row, h, dy, c, storage);
    if (threadIdx.x == 0) {
      sums[0][c] = total.gx;
      if constexpr (Row::kCenter) sums[Row::kCenter ? 1 : 0][c] = total.g;
    }
  }
  __syncthreads();
}

template <class Cfg, class X, class W, class DY, bool CENTER>
__global__ void __launch_bounds__(Cfg::TPR) norm_bwd_dot_kernel(const NormBwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  constexpr int VEC = Cfg::VEC;
  __shared__ RowReduceStorage<1, Cfg::TPR, 1, CENTER ? 2 : 1> reduce_storage;
  const long long b = blockIdx.x;
  const int chunk = static_cast<int>(b % Cfg::CHUNKS);
  const long long r = b / Cfg::CHUNKS;
  const auto row = NormBwdRow<VEC, X, W, DY, none, none, none, CENTER>::make(p, r, (r % p.shape.heads) * Cfg::N);
  ChunkRegs<Cfg, X, DY> regs;
  regs.load(row_ptr<X>(p.x, p.shape, r), row_ptr<DY>(p.dout, p.shape, r), chunk);
  const DotAccumulator<CENTER> total = chunk_total<Cfg>(regs.dot(row, chunk), reduce_storage);
  if (threadIdx.x == 0) {
    chunk_sums<Cfg>(p, r, 0)[chunk] = total.gx;
    if constexpr (CENTER) chunk_sums<Cfg>(p, r, 1)[chunk] = total.g;
  }
}

// WAIT: no kernel 1; the part's CTAs exchange each row's chunk sums (see the top).
// They must be resident together: the host plans WAIT only where parts x CHUNKS CTAs
// fit the device's min_blocks per SM (fit_to_device), one head. A CTA that waited
// sync_timeout_ns for the others (a process given fewer SMs than the device has)
// computes the row's other chunk sums itself from memory: the same bits.
template <class Cfg, class X, class W, class DY, class DRO, class DX, class DR, bool DBIAS, bool CENTER, bool WAIT>
__global__ void __launch_bounds__(Cfg::TPR, Cfg::MIN_BLOCKS) norm_bwd_split_kernel(const NormBwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  constexpr int VEC = Cfg::VEC;
  // WAIT only (a few hundred bytes otherwise unused).
  __shared__ RowReduceStorage<1, Cfg::TPR, 1, CENTER ? 2 : 1> reduce_storage;
  __shared__ float fallback_sums[CENTER ? 2 : 1][WAIT ? Cfg::CHUNKS : 1];
  __shared__ int timed_out_shared;
  constexpr int ITEMS = Cfg::ITEMS;
  constexpr bool DW = !is_none<W>;
  const int chunk = static_cast<int>(blockIdx.x % Cfg::CHUNKS);
  const long long part = blockIdx.x / Cfg::CHUNKS;
  const long long parts = gridDim.x / Cfg::CHUNKS;
  const long long heads = p.shape.heads;
  const long long head = blockIdx.y;
  const long long rows_per_head = p.shape.rows / heads;
  const int lane = static_cast<int>(threadIdx.x) % 32;

  // dw/db running sums of the thread's columns: in registers, or (WAIT, whose chunk
  // stays in registers across the wait; with the sums there as well, 16-bit rows
  // spilled 40-112 bytes under 128 registers) in the CTA's dynamic shared memory,
  // one slot per (sum, item, element, thread), each thread touching only its own
  // (no barrier; consecutive threads, consecutive words).
  constexpr bool SUMS_SMEM = WAIT;
  extern __shared__ float sums_smem[];
  auto slot = [&](int sum, int k, int i) -> float& {
    return sums_smem[((sum * ITEMS + k) * VEC + i) * Cfg::TPR + threadIdx.x];
  };
  constexpr int DB_SLOT = DW ? 1 : 0;
  float dw[DW && !SUMS_SMEM ? ITEMS : 1][VEC], db[DBIAS && !SUMS_SMEM ? ITEMS : 1][VEC];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if constexpr (SUMS_SMEM) {
        if constexpr (DW) slot(0, k, i) = 0.f;
        if constexpr (DBIAS) slot(DB_SLOT, k, i) = 0.f;
      } else {
        if constexpr (DW) dw[k][i] = 0.f;
        if constexpr (DBIAS) db[k][i] = 0.f;
      }
    }

  for (long long j = part; j < rows_per_head; j += parts) {
    const long long r = head + heads * j;
    ChunkRegs<Cfg, X, DY> regs;
    const X* h_row = row_ptr<X>(p.x, p.shape, r);
    const DY* dy_row = row_ptr<DY>(p.dout, p.shape, r);
    regs.load(h_row, dy_row, chunk);
    const auto row = NormBwdRow<VEC, X, W, DY, DRO, DX, DR, CENTER>::make(p, r, head * Cfg::N);
    float* gx_sums = chunk_sums<Cfg>(p, r, 0);
    float* g_sums = chunk_sums<Cfg>(p, r, 1);
    bool from_fallback = false;
    if constexpr (WAIT) {
      const DotAccumulator<CENTER> total = chunk_total<Cfg>(regs.dot(row, chunk), reduce_storage);
      if (threadIdx.x == 0) timed_out_shared = publish_and_wait<Cfg>(p, r, chunk, total);
      __syncthreads();
      if (timed_out_shared) {
        row_chunk_totals_from_memory<Cfg, X, DY>(row, h_row, dy_row, reduce_storage, fallback_sums);
        from_fallback = true;
      }
    }
    // The row's sums in chunk order: from kernel 1 or the part's other CTAs (L2,
    // __ldcg: other SMs wrote them), or from this CTA's own fallback.
    RowDots means;
    means.gx_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) {
      if constexpr (WAIT) return from_fallback ? fallback_sums[0][c] : __ldcg(gx_sums + c);
      return gx_sums[c];
    });
    means.g_mean = 0.f;
    if constexpr (CENTER) {
      means.g_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) {
        if constexpr (WAIT) return from_fallback ? fallback_sums[CENTER ? 1 : 0][c] : __ldcg(g_sums + c);
        return g_sums[c];
      });
    }
    regs.each(row, chunk, [&](int k, int col, const float (&xh)[VEC], const float (&g)[VEC], const float (&d)[VEC]) {
      row.store_dx(col, xh, g, means);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        if constexpr (SUMS_SMEM) {
          if constexpr (DW) slot(0, k, i) += d[i] * xh[i];
          if constexpr (DBIAS) slot(DB_SLOT, k, i) += d[i];
        } else {
          if constexpr (DW) dw[k][i] += d[i] * xh[i];
          if constexpr (DBIAS) db[k][i] += d[i];
        }
      }
    });
  }

  const long long base = (part * heads + head) * Cfg::N;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int v = Cfg::vector(chunk, k);
    if (!Cfg::in_row(v)) continue;
    // VEC-wide stores into the aligned workspace (write_partial in rmsnorm_bwd.cuh).
    float w_out[VEC], b_out[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if constexpr (DW) w_out[i] = SUMS_SMEM ? slot(0, k, i) : dw[k][i];
      if constexpr (DBIAS) b_out[i] = SUMS_SMEM ? slot(DB_SLOT, k, i) : db[k][i];
    }
    if constexpr (DW) store_vec<VEC>(p.dweight_partial + base + v * VEC, w_out);
    if constexpr (DBIAS) store_vec<VEC>(p.dbias_partial + base + v * VEC, b_out);
  }
}

// Kernels 1 and 2 in one, for rows without dw/db. A CTA takes a ticket, its place
// in the order in which CTAs actually started; the ticket names its (row, chunk).
// It loads its chunk of h and dout into registers, publishes the chunk's sums,
// waits until every chunk of its row has published, adds the sums in chunk order
// and writes dx from the registers.
// Why the wait cannot deadlock: a row's chunks hold consecutive tickets, and
// tickets are handed out in start order, so every CTA with an earlier ticket is
// running or done. The CTAs of the oldest unfinished row are then the oldest
// running ones; as long as the GPU holds CHUNKS CTAs at once (the host plans this
// kernel only where CHUNKS <= SMs x MIN_BLOCKS: fit_to_device), all of that row's
// chunks get to run and publish, the row finishes, and the next row becomes the
// oldest. Where a process gets fewer SMs than the device has (MPS limits, green
// contexts), that can fail; so a CTA that has waited sync_timeout_ns computes every
// chunk sum of its row itself, reading the row once more. It does so with the same
// thread layout and block reduction as each chunk's own CTA: the same bits, so dx
// does not depend on which CTAs waited.
template <class Cfg, class X, class DY, class DRO, class DX, class DR, bool CENTER>
__global__ void __launch_bounds__(Cfg::TPR, Cfg::MIN_BLOCKS) norm_bwd_synced_kernel(const NormBwdParams p) {
  wait_for_prerequisite_grids();  // before any global access (pdl.cuh)
  constexpr int VEC = Cfg::VEC;
  __shared__ RowReduceStorage<1, Cfg::TPR, 1, CENTER ? 2 : 1> reduce_storage;
  __shared__ unsigned ticket_shared;
  __shared__ RowDots means_shared;
  __shared__ int timed_out_shared;
  __shared__ float fallback_sums[CENTER ? 2 : 1][Cfg::CHUNKS];
  if (threadIdx.x == 0) ticket_shared = atomicAdd(p.sync_counters, 1u);
  __syncthreads();
  const unsigned ticket = ticket_shared;
  const int chunk = static_cast<int>(ticket % Cfg::CHUNKS);
  const long long r = ticket / Cfg::CHUNKS;
  const auto row = NormBwdRow<VEC, X, none, DY, DRO, DX, DR, CENTER>::make(p, r, 0);
  ChunkRegs<Cfg, X, DY> regs;
  regs.load(row_ptr<X>(p.x, p.shape, r), row_ptr<DY>(p.dout, p.shape, r), chunk);
  const DotAccumulator<CENTER> total = chunk_total<Cfg>(regs.dot(row, chunk), reduce_storage);
  float* gx_sums = chunk_sums<Cfg>(p, r, 0);
  float* g_sums = chunk_sums<Cfg>(p, r, 1);
  if (threadIdx.x == 0) timed_out_shared = publish_and_wait<Cfg>(p, r, chunk, total);
  __syncthreads();
  if (!timed_out_shared) {
    // The row's sums in chunk order, read from L2 (__ldcg: other SMs wrote them).
    if (threadIdx.x < 32) {
      const int lane = static_cast<int>(threadIdx.x);
      const float gx_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) { return __ldcg(gx_sums + c); });
      float g_mean = 0.f;
      if constexpr (CENTER) g_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) { return __ldcg(g_sums + c); });
      if (threadIdx.x == 0) means_shared = RowDots{gx_mean, g_mean};
    }
    __syncthreads();
    const RowDots means = means_shared;
    regs.each(row, chunk, [&](int, int col, const float (&xh)[VEC], const float (&g)[VEC], const float (&)[VEC]) {
      row.store_dx(col, xh, g, means);
    });
    return;
  }
  // Timed out: every chunk sum of the row from here (the chunk's own arithmetic),
  // then this chunk again from memory, so that `regs` need not stay live.
  const X* h = row_ptr<X>(p.x, p.shape, r);
  const DY* dy = row_ptr<DY>(p.dout, p.shape, r);
  row_chunk_totals_from_memory<Cfg, X, DY>(row, h, dy, reduce_storage, fallback_sums);
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    const float gx_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) { return fallback_sums[0][c]; });
    float g_mean = 0.f;
    if constexpr (CENTER) g_mean = mean_of_chunk_sums<Cfg>(lane, [&](int c) { return fallback_sums[CENTER ? 1 : 0][c]; });
    if (threadIdx.x == 0) means_shared = RowDots{gx_mean, g_mean};
  }
  __syncthreads();
  const RowDots means = means_shared;
  ChunkRegs<Cfg, X, DY> again;
  again.load(h, dy, chunk);
  again.each(row, chunk, [&](int, int col, const float (&xh)[VEC], const float (&g)[VEC], const float (&)[VEC]) {
    row.store_dx(col, xh, g, means);
  });
}

}  // namespace nk
