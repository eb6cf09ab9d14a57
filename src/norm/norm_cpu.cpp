// CPU fallback of RMSNorm and LayerNorm: the GPU's semantics on host memory
// (formulas in rmsnorm.hpp and layernorm.hpp), rows spread over std::threads.
//
// One row driver per direction serves both norms: they share the loads, the
// residual add, the affine epilogue, the stores and the dW/dB reduction, and
// differ only in whether the row is centred (LayerNorm subtracts the mean
// before the variance, computed in a second pass over the row held in scratch,
// and its backward subtracts mean(g) too). The argument structs name their
// common fields alike, so the drivers are templates over them.
//
// Compute type: fp32 everywhere, as on the GPU, unless some tensor of the call is
// fp64 (a CPU-only dtype, there for float64 verification such as gradcheck): then
// every step, loads, sums and the dw/db reduction included, is done in double, so
// that the result is as accurate as the fp64 data asks for and not limited by an
// fp32 intermediate. Only rstd stays fp32, because the API stores it as fp32. The
// row math is one template over the compute type (T below); the fp32
// instantiation is the original code, operation for operation.
//
// Each row is read completely into scratch of the compute type before any of its
// outputs is stored, so exact aliasing (out == x, residual_out == residual,
// dx == dout) is safe, as it is on the GPU.
//
// Determinism: dweight/dbias are summed per fixed block of rows into partials of
// the compute type, and the partials are summed in block order. The blocks depend
// only on the shape (and the compute type), never on the thread count or on which
// thread ran which block, so the result is bitwise identical for any number of
// threads.
#include "rmsnorm_cpu.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "host_convert.hpp"
#include "layernorm_internal.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_internal.hpp"

namespace normkit::norm::detail {
namespace {

std::atomic<int> g_forced_threads{0};

// Past this many threads a memory-bound loop gains nothing and thread start-up
// dominates small calls.
constexpr int kMaxThreads = 32;
// Below this much work per thread, starting a thread costs more than it saves.
constexpr std::int64_t kMinElemsPerThread = std::int64_t{1} << 15;
// Rows are handed out in blocks of about this many elements.
constexpr std::int64_t kElemsPerBlock = std::int64_t{1} << 14;
// Bound on the dW/dB partials, which take blocks * heads * n values of the
// compute type each.
constexpr std::int64_t kPartialBudgetBytes = std::int64_t{64} << 20;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

int choose_threads(std::int64_t blocks, std::int64_t elems) {
  std::int64_t want = g_forced_threads.load(std::memory_order_relaxed);
  if (want <= 0) {
    // Read once: glibc answers hardware_concurrency() by reading sysfs, which
    // cost a small call (one row) more than its arithmetic.
    static const unsigned hw = std::thread::hardware_concurrency();
    want = std::min<std::int64_t>(hw == 0 ? 1 : hw, kMaxThreads);
    want = std::min(want, std::max<std::int64_t>(1, elems / kMinElemsPerThread));
  }
  return static_cast<int>(std::max<std::int64_t>(1, std::min(want, blocks)));
}

// Calls work(claim) on `threads` threads, the caller's included. claim() returns
// each block index in [0, blocks) exactly once over all threads, then -1. If a
// thread cannot be started, the others simply claim its share.
template <class Work>
void run_parallel(std::int64_t blocks, int threads, const Work& work) {
  std::atomic<std::int64_t> next{0};
  auto claim = [&]() -> std::int64_t {
    const std::int64_t b = next.fetch_add(1, std::memory_order_relaxed);
    return b < blocks ? b : -1;
  };
  if (threads <= 1) {
    work(claim);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&] {
    try {
      work(claim);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(blocks, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(guarded);
    } catch (const std::system_error&) {
      break;
    }
  }
  guarded();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// Whether a call computes in double (see the file comment): any fp64 tensor. A
// single fp64 tensor among fp32 ones is still computed in double rather than
// rounded to fp32 on the way in, which would silently lose what it carries.
bool is_f64(const Rows& t) { return t.present() && t.dtype == DType::kFloat64; }
bool is_f64(const Param& p) { return p.present() && p.dtype == DType::kFloat64; }

// Forward and backward structs of every norm (they name their tensors alike).
template <class Args>
  requires requires(const Args& a) { a.out; }
bool computes_in_double(const Args& a) {
  return is_f64(a.x) || is_f64(a.residual) || is_f64(a.out) || is_f64(a.residual_out) || is_f64(a.weight) ||
         is_f64(a.bias);
}

template <class Args>
  requires requires(const Args& a) { a.dout; }
bool computes_in_double(const Args& a) {
  return is_f64(a.x) || is_f64(a.dout) || is_f64(a.dresidual_out) || is_f64(a.dx) || is_f64(a.dresidual) ||
         is_f64(a.weight) || is_f64(a.dbias);
}

// LayerNorm centres each row (mean subtracted); RMSNorm does not.
template <class Args>
constexpr bool kCentred = std::is_same_v<Args, LayerNormFwdArgs> || std::is_same_v<Args, LayerNormBwdArgs>;

// LayerNorm has no weight offset.
template <class Args>
float weight_offset(const Args& a) {
  if constexpr (kCentred<Args>)
    return 0.f;
  else
    return a.weight_offset;
}

// mean and rstd are fp32 in the API whatever the compute type.
float stat_out(float v) { return v; }
float stat_out(double v) { return double_to_float(v); }

// Eight independent lanes, combined pairwise, over blocks of kSumBlock elements
// whose sums are then added in order: a shorter dependency chain and a smaller
// rounding error than one running sum, still plain fp32 like the GPU on the fp32
// path. One block of eight lanes over a whole row grew its error with N/8 terms a
// lane: rstd of a bf16 row of N=262144 was off float64 by 6.3e-6 (relative), and
// outputs near zero with a bias by 1.9e-5; the blocks bound a lane at 256 terms.
// Rows of up to kSumBlock elements give the same bits as before.
constexpr std::int64_t kSumBlock = 2048;

template <class T, class Term>
T lane_sum(std::int64_t n, const Term& term) {
  T total = T(0);
  for (std::int64_t start = 0; start < n; start += kSumBlock) {
    const std::int64_t end = std::min(n, start + kSumBlock);
    T lanes[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};
    std::int64_t i = start;
    for (; i + 8 <= end; i += 8)
      for (int k = 0; k < 8; ++k) lanes[k] += term(i + k);
    for (int k = 0; i < end; ++i, ++k) lanes[k] += term(i);
    total += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
  return total;
}

// A (heads, n) parameter in the compute type, with the offset folded in once
// rather than converted again for every row.
template <class T>
std::vector<T> load_param(const void* data, DType dtype, std::int64_t count, float offset) {
  std::vector<T> v(static_cast<std::size_t>(count));
  load_row(data, dtype, 0, count, v.data());
  if (offset != 0.f)
    for (T& w : v) w += static_cast<T>(offset);
  return v;
}

std::int64_t fwd_block_rows(std::int64_t n) { return std::max<std::int64_t>(1, kElemsPerBlock / n); }

// Rows per dW/dB block: a function of the shape and of the compute type's size
// (value_bytes, which the partial budget counts), never of the threads. A
// multiple of heads, so that every block touches every head equally and the
// partials cost no more than the rows they summarize.
std::int64_t bwd_block_rows(const RowShape& s, std::int64_t heads, int accumulators, std::int64_t value_bytes) {
  std::int64_t blocks = std::max<std::int64_t>(1, ceil_div(s.rows * s.n, kElemsPerBlock));
  if (accumulators > 0) {
    const std::int64_t per_block = heads * s.n * accumulators * value_bytes;
    blocks = std::min(blocks, std::max<std::int64_t>(1, kPartialBudgetBytes / per_block));
  }
  const std::int64_t rows = ceil_div(s.rows, blocks);
  return ceil_div(rows, heads) * heads;
}

template <class T>
struct Partials {
  std::unique_ptr<T[]> data;  // blocks x heads x n, each block zeroed by the thread that owns it
  std::int64_t stride = 0;    // heads * n
  T* block(std::int64_t b) { return data.get() + b * stride; }
};

template <class T>
Partials<T> make_partials(bool wanted, std::int64_t blocks, std::int64_t heads, std::int64_t n) {
  Partials<T> p;
  if (!wanted) return p;
  p.stride = heads * n;
  p.data.reset(new T[static_cast<std::size_t>(blocks * p.stride)]);
  return p;
}

// Sums the partials of every block, in block order, and stores (heads, n) values.
template <class T>
void reduce_partials(Partials<T>& p, std::int64_t blocks, void* dst, DType dtype) {
  constexpr std::int64_t kChunk = 1024;
  const std::int64_t chunks = ceil_div(p.stride, kChunk);
  run_parallel(chunks, choose_threads(chunks, blocks * p.stride), [&](const auto& claim) {
    T acc[kChunk];
    for (std::int64_t c = claim(); c >= 0; c = claim()) {
      const std::int64_t c0 = c * kChunk, len = std::min(kChunk, p.stride - c0);
      std::fill(acc, acc + len, T(0));
      for (std::int64_t b = 0; b < blocks; ++b) {
        const T* src = p.block(b) + c0;
        for (std::int64_t i = 0; i < len; ++i) acc[i] += src[i];
      }
      store_row(dst, dtype, c0, len, acc);
    }
  });
}

// Rows > 0 (the caller handles the empty batch); T is the compute type.
template <class T, class Args>
void fwd_rows(const Args& a) {
  constexpr bool centred = kCentred<Args>;
  const RowShape& s = a.shape;
  const std::int64_t n = s.n, heads = a.heads;
  const std::vector<T> w =
      a.weight.present() ? load_param<T>(a.weight.data, a.weight.dtype, heads * n, weight_offset(a)) : std::vector<T>{};
  const std::vector<T> bias =
      a.bias.present() ? load_param<T>(a.bias.data, a.bias.dtype, heads * n, 0.f) : std::vector<T>{};
  // Rows carries a const pointer for inputs and outputs alike; outputs are
  // writable by the API's contract.
  void* out = const_cast<void*>(a.out.data);
  void* residual_out = const_cast<void*>(a.residual_out.data);

  const std::int64_t block_rows = fwd_block_rows(n);
  const std::int64_t blocks = ceil_div(s.rows, block_rows);
  run_parallel(blocks, choose_threads(blocks, s.rows * n), [&](const auto& claim) {
    std::vector<T> h(static_cast<std::size_t>(n)), tmp(static_cast<std::size_t>(n));
    for (std::int64_t b = claim(); b >= 0; b = claim()) {
      const std::int64_t r_end = std::min(s.rows, (b + 1) * block_rows);
      for (std::int64_t r = b * block_rows; r < r_end; ++r) {
        load_row(a.x.data, a.x.dtype, row_offset(a.x, s, r), n, h.data());
        if (a.residual.present()) {
          load_row(a.residual.data, a.residual.dtype, row_offset(a.residual, s, r), n, tmp.data());
          for (std::int64_t i = 0; i < n; ++i) h[i] += tmp[i];
        }
        // LayerNorm: the mean first, then the variance of the centred row (a
        // second pass over h, never E[h^2] - mean^2, which cancels).
        T mean = T(0);
        if constexpr (centred) mean = lane_sum<T>(n, [&](std::int64_t i) { return h[i]; }) / static_cast<T>(n);
        const auto centre = [&](std::int64_t i) {
          if constexpr (centred)
            return h[i] - mean;
          else
            return h[i];
        };
        const T sumsq = lane_sum<T>(n, [&](std::int64_t i) { return centre(i) * centre(i); });
        const T rstd = T(1) / std::sqrt(sumsq / static_cast<T>(n) + static_cast<T>(a.eps));
        const std::int64_t p = (r % heads) * n;
        for (std::int64_t i = 0; i < n; ++i) tmp[i] = centre(i) * rstd;
        if (!w.empty())
          for (std::int64_t i = 0; i < n; ++i) tmp[i] *= w[p + i];
        if (!bias.empty())
          for (std::int64_t i = 0; i < n; ++i) tmp[i] += bias[p + i];
        if constexpr (centred)
          if (a.mean != nullptr) a.mean[r] = stat_out(mean);
        if (a.rstd != nullptr) a.rstd[r] = stat_out(rstd);
        // Without a residual h is x itself: prenorm without a residual stores x.
        if (residual_out != nullptr)
          store_row(residual_out, a.residual_out.dtype, row_offset(a.residual_out, s, r), n, h.data());
        store_row(out, a.out.dtype, row_offset(a.out, s, r), n, tmp.data());
      }
    }
  });
}

// Rows > 0 (the caller handles the empty batch).
template <class T, class Args>
void bwd_rows(const Args& a) {
  constexpr bool centred = kCentred<Args>;
  const RowShape& s = a.shape;
  const std::int64_t n = s.n, heads = a.heads;
  const bool want_dw = a.weight.present(), want_db = a.dbias.present();
  void* dbias = const_cast<void*>(a.dbias.data);
  const std::vector<T> w =
      want_dw ? load_param<T>(a.weight.data, a.weight.dtype, heads * n, weight_offset(a)) : std::vector<T>{};
  void* dx = const_cast<void*>(a.dx.data);
  void* dresidual = const_cast<void*>(a.dresidual.data);

  const std::int64_t block_rows =
      bwd_block_rows(s, heads, int{want_dw} + int{want_db}, static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t blocks = ceil_div(s.rows, block_rows);
  Partials<T> pdw = make_partials<T>(want_dw, blocks, heads, n);
  Partials<T> pdb = make_partials<T>(want_db, blocks, heads, n);

  run_parallel(blocks, choose_threads(blocks, s.rows * n), [&](const auto& claim) {
    const auto nn = static_cast<std::size_t>(n);
    std::vector<T> xhat(nn), dy(nn), g(nn), tmp(nn);
    for (std::int64_t b = claim(); b >= 0; b = claim()) {
      T* bdw = want_dw ? pdw.block(b) : nullptr;
      T* bdb = want_db ? pdb.block(b) : nullptr;
      if (bdw) std::fill(bdw, bdw + heads * n, T(0));
      if (bdb) std::fill(bdb, bdb + heads * n, T(0));
      const std::int64_t r_end = std::min(s.rows, (b + 1) * block_rows);
      for (std::int64_t r = b * block_rows; r < r_end; ++r) {
        const T rstd = a.rstd[r];
        const std::int64_t p = (r % heads) * n;
        load_row(a.x.data, a.x.dtype, row_offset(a.x, s, r), n, xhat.data());
        load_row(a.dout.data, a.dout.dtype, row_offset(a.dout, s, r), n, dy.data());
        if constexpr (centred) {
          const T mean = a.mean[r];
          for (std::int64_t i = 0; i < n; ++i) xhat[i] = (xhat[i] - mean) * rstd;
        } else {
          for (std::int64_t i = 0; i < n; ++i) xhat[i] *= rstd;
        }
        if (want_dw)
          for (std::int64_t i = 0; i < n; ++i) g[i] = dy[i] * w[p + i];
        else
          std::copy(dy.begin(), dy.end(), g.begin());
        const T mean_gx = lane_sum<T>(n, [&](std::int64_t i) { return g[i] * xhat[i]; }) / static_cast<T>(n);
        if constexpr (centred) {
          const T mean_g = lane_sum<T>(n, [&](std::int64_t i) { return g[i]; }) / static_cast<T>(n);
          for (std::int64_t i = 0; i < n; ++i) g[i] = rstd * (g[i] - mean_g - xhat[i] * mean_gx);
        } else {
          for (std::int64_t i = 0; i < n; ++i) g[i] = rstd * (g[i] - xhat[i] * mean_gx);
        }
        if (a.dresidual_out.present()) {
          load_row(a.dresidual_out.data, a.dresidual_out.dtype, row_offset(a.dresidual_out, s, r), n, tmp.data());
          for (std::int64_t i = 0; i < n; ++i) g[i] += tmp[i];
        }
        if (bdw)
          for (std::int64_t i = 0; i < n; ++i) bdw[p + i] += dy[i] * xhat[i];
        if (bdb)
          for (std::int64_t i = 0; i < n; ++i) bdb[p + i] += dy[i];
        store_row(dx, a.dx.dtype, row_offset(a.dx, s, r), n, g.data());
        if (dresidual != nullptr) store_row(dresidual, a.dresidual.dtype, row_offset(a.dresidual, s, r), n, g.data());
      }
    }
  });
  if (want_dw) reduce_partials(pdw, blocks, a.dweight, a.weight.dtype);
  if (want_db) reduce_partials(pdb, blocks, dbias, a.dbias.dtype);
}

template <class Args>
void fwd_cpu(const Args& a) {
  if (a.shape.rows == 0) return;
  if (computes_in_double(a))
    fwd_rows<double>(a);
  else
    fwd_rows<float>(a);
}

template <class Args>
void bwd_cpu(const Args& a) {
  if (a.shape.rows == 0) {
    // A sum over no rows is zero; dweight/dbias are not empty tensors.
    const std::int64_t count = a.heads * a.shape.n;
    const std::vector<float> zeros(static_cast<std::size_t>(count), 0.f);
    if (a.weight.present()) store_row(a.dweight, a.weight.dtype, 0, count, zeros.data());
    if (a.dbias.present()) store_row(const_cast<void*>(a.dbias.data), a.dbias.dtype, 0, count, zeros.data());
    return;
  }
  if (computes_in_double(a))
    bwd_rows<double>(a);
  else
    bwd_rows<float>(a);
}

}  // namespace

void set_cpu_threads_for_testing(int threads) {
  g_forced_threads.store(std::max(0, threads), std::memory_order_relaxed);
}

void rmsnorm_fwd_cpu(const RmsNormFwdArgs& a) { fwd_cpu(a); }
void rmsnorm_bwd_cpu(const RmsNormBwdArgs& a) { bwd_cpu(a); }
void layernorm_fwd_cpu(const LayerNormFwdArgs& a) { fwd_cpu(a); }
void layernorm_bwd_cpu(const LayerNormBwdArgs& a) { bwd_cpu(a); }

}  // namespace normkit::norm::detail
