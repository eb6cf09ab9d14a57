// Test support for RMSNorm and LayerNorm (centred = true: the mean is subtracted): guarded, poisoned host buffers, strided row tensors,
// a float64 reference written independently of the library (plain loops, its own
// fp16/bf16 decoders and its own row addressing), and thin wrappers that call the
// library. Inputs are stored with the library's encoder, but only values that are
// exactly representable (checked on every store), so no rounding is involved.
//
// Tolerances: |got - ref| <= rtol(dtype) * (|ref| + mag) + atol(dtype), where
// mag is the sum of the magnitudes of the terms that produced the value (so a
// result that cancels to ~0 is judged against the size of what cancelled), and
//   rtol: fp32 1e-5, fp16 2^-10, bf16 2^-7;  atol: fp16 2^-24 (subnormal step), else 0.
// dweight/dbias sum over M_h rows (rows per head); their mag is
// sqrt(M_h) * rms(terms), i.e. the tolerance grows with sqrt(M_h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_convert.hpp"
#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_cpu.hpp"

namespace rmsref {

using normkit::norm::DType;
using normkit::norm::Rows;
using normkit::norm::RowShape;

// IEEE-style 16-bit formats: sign, 15 - mant exponent bits, mant stored
// significand bits (fp16: 10, bf16: 7).
inline double decode_16bit(std::uint16_t b, int mant) {
  const int emax = (1 << (15 - mant)) - 1, bias = emax >> 1;
  const int e = (b >> mant) & emax, m = b & ((1 << mant) - 1);
  double v;
  if (e == emax)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = std::ldexp(m, 1 - bias - mant);
  else
    v = std::ldexp((1 << mant) + m, e - bias - mant);
  return (b & 0x8000) ? -v : v;
}
inline double decode_fp16(std::uint16_t b) { return decode_16bit(b, 10); }
inline double decode_bf16(std::uint16_t b) { return decode_16bit(b, 7); }

inline std::size_t esize(DType t) { return t == DType::kFloat32 ? 4 : 2; }

inline double rtol(DType t) {
  switch (t) {
    case DType::kFloat16:
      return std::ldexp(1.0, -10);
    case DType::kBFloat16:
      return std::ldexp(1.0, -7);
    default:
      return 1e-5;
  }
}
inline double atol(DType t) { return t == DType::kFloat16 ? std::ldexp(1.0, -24) : 0.0; }

// v rounded to the dtype's significand width, magnitude kept in [2^-8, 2^8] so
// that fp16 neither goes subnormal nor overflows in sums. Any rounding will do:
// inputs only need to be exactly representable.
inline double representable(double v, DType t) {
  const int bits = t == DType::kFloat16 ? 11 : t == DType::kBFloat16 ? 8 : 24;
  const double mag = std::clamp(std::fabs(v), std::ldexp(1.0, -8), std::ldexp(1.0, 8));
  int e;
  const double m = std::frexp(mag, &e);
  return std::copysign(std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits), v);
}

// A host buffer of `elems` elements of one dtype, with 0xFF-filled guard bytes
// before and after. The data pointer is offset by 16 bytes + one element, so it
// is never 16-byte aligned.
class Buf {
 public:
  static constexpr std::size_t kLead = 16, kTail = 64;
  Buf() = default;
  Buf(DType t, std::int64_t elems)
      : t_(t), elems_(elems), bytes_(kLead + esize(t) * (1 + static_cast<std::size_t>(elems)) + kTail, 0xFF) {}
  DType dtype() const { return t_; }
  std::int64_t elems() const { return elems_; }
  void* data() { return bytes_.data() + kLead + esize(t_); }
  const void* data() const { return bytes_.data() + kLead + esize(t_); }
  double get(std::int64_t i) const {
    const unsigned char* p = static_cast<const unsigned char*>(data()) + i * esize(t_);
    if (t_ == DType::kFloat32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    return t_ == DType::kFloat16 ? decode_fp16(b) : decode_bf16(b);
  }
  void set(std::int64_t i, double v) {
    normkit::norm::detail::store_elem(data(), t_, i, static_cast<float>(v));
    if (get(i) != v) throw std::logic_error("rmsref::Buf::set: value not representable in dtype");
  }
  void poison() { std::fill(bytes_.begin(), bytes_.end(), 0xFF); }
  const std::vector<unsigned char>& bytes() const { return bytes_; }
  // Every byte outside the elements marked in `written` (guards included) is 0xFF.
  ::testing::AssertionResult untouched_except(const std::vector<bool>& written) const {
    const std::size_t first = kLead + esize(t_), es = esize(t_);
    for (std::size_t k = 0; k < bytes_.size(); ++k) {
      const bool inside = k >= first && k < first + es * static_cast<std::size_t>(elems_);
      if (inside && written[(k - first) / es]) continue;
      if (bytes_[k] != 0xFF)
        return ::testing::AssertionFailure()
               << "byte " << k << " (element "
               << (static_cast<std::int64_t>(k) - static_cast<std::int64_t>(first)) / static_cast<std::int64_t>(es)
               << ") outside the written rows was modified";
    }
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult untouched() const { return untouched_except(std::vector<bool>(elems_, false)); }

 private:
  DType t_ = DType::kFloat32;
  std::int64_t elems_ = 0;
  std::vector<unsigned char> bytes_;
};

// A batch of rows in a Buf. Shapes passed here always have rows_inner resolved.
struct Strided {
  Buf buf;
  std::int64_t stride_outer = 0, stride_inner = 0;
  std::int64_t offset(const RowShape& s, std::int64_t r) const {
    return (r / s.rows_inner) * stride_outer + (r % s.rows_inner) * stride_inner;
  }
  Rows rows() { return Rows{buf.data(), buf.dtype(), stride_outer, stride_inner}; }
  double at(const RowShape& s, std::int64_t r, std::int64_t i) const { return buf.get(offset(s, r) + i); }
  std::vector<bool> row_mask(const RowShape& s) const {
    std::vector<bool> m(static_cast<std::size_t>(buf.elems()), false);
    for (std::int64_t r = 0; r < s.rows; ++r)
      for (std::int64_t i = 0; i < s.n; ++i) m[offset(s, r) + i] = true;
    return m;
  }
};

// Rows padded by pad_inner elements, row groups by pad_outer more; broadcast: all
// rows are the same n elements (strides 0).
inline Strided make_strided(DType t, const RowShape& s, std::int64_t pad_inner = 0, std::int64_t pad_outer = 0,
                            bool broadcast = false) {
  Strided x;
  if (!broadcast) {
    x.stride_inner = s.n + pad_inner;
    x.stride_outer = s.rows_inner * x.stride_inner + pad_outer;
  }
  const std::int64_t elems = s.rows == 0 ? 0 : x.offset(s, s.rows - 1) + s.n;
  x.buf = Buf(t, elems);
  return x;
}

inline void fill_rows(Strided& x, const RowShape& s, std::mt19937_64& rng, double mean = 0, double sd = 1) {
  std::normal_distribution<double> dist(mean, sd);
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t i = 0; i < s.n; ++i) x.buf.set(x.offset(s, r) + i, representable(dist(rng), x.buf.dtype()));
}

inline Buf make_param(DType t, std::int64_t count, std::mt19937_64& rng, double mean, double sd) {
  Buf b(t, count);
  std::normal_distribution<double> dist(mean, sd);
  for (std::int64_t i = 0; i < count; ++i) b.set(i, representable(dist(rng), t));
  return b;
}

// Row-major (rows, n) reference values with the magnitudes that bound their error.
struct Values {
  std::vector<double> v, mag;
  void resize(std::size_t k) { v.assign(k, 0.0), mag.assign(k, 0.0); }
};

struct FwdRef {
  Values out, h;
  std::vector<double> rstd, mean;  // mean: LayerNorm (centred) only
};

// `residual`, `weight`, `bias` may be null. centred: LayerNorm, whose output also
// carries the error of the computed mean, so its mag counts the row's mean |h|.
inline FwdRef reference_fwd(const RowShape& s, const Strided& x, const Strided* residual, const Buf* weight,
                            const Buf* bias, std::int64_t heads, double eps, double offset, bool centred = false) {
  FwdRef ref;
  const std::int64_t n = s.n;
  ref.out.resize(static_cast<std::size_t>(s.rows * n));
  ref.h.resize(static_cast<std::size_t>(s.rows * n));
  ref.rstd.resize(static_cast<std::size_t>(s.rows));
  ref.mean.resize(static_cast<std::size_t>(s.rows));
  for (std::int64_t r = 0; r < s.rows; ++r) {
    double sum = 0, sum_abs = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double a = x.at(s, r, i), b = residual ? residual->at(s, r, i) : 0.0;
      ref.h.v[r * n + i] = a + b;
      ref.h.mag[r * n + i] = std::fabs(a) + std::fabs(b);
      sum += a + b;
      sum_abs += std::fabs(a + b);
    }
    const double mean = centred ? sum / n : 0.0, mean_abs = centred ? sum_abs / n : 0.0;
    double ss = 0;
    for (std::int64_t i = 0; i < n; ++i) ss += (ref.h.v[r * n + i] - mean) * (ref.h.v[r * n + i] - mean);
    const double rstd = 1.0 / std::sqrt(ss / n + eps);
    ref.rstd[r] = rstd;
    ref.mean[r] = mean;
    const std::int64_t p = r % heads;
    for (std::int64_t i = 0; i < n; ++i) {
      const double w = weight ? weight->get(p * n + i) + offset : 1.0;
      const double b = bias ? bias->get(p * n + i) : 0.0;
      const double y = (ref.h.v[r * n + i] - mean) * rstd * w;
      ref.out.v[r * n + i] = y + b;
      ref.out.mag[r * n + i] = std::fabs(y) + mean_abs * rstd * std::fabs(w) + std::fabs(b);
    }
  }
  return ref;
}

struct BwdRef {
  Values dx;
  Values dw, db;  // (heads, n)
};

// rstd (and LayerNorm's mean) hold the fp32 values the library is given;
// `dresidual_out`/`weight`/`mean` may be null (mean null: RMSNorm).
inline BwdRef reference_bwd(const RowShape& s, const Strided& x, const Strided& dout, const Strided* dresidual_out,
                            const Buf* weight, const std::vector<float>& rstd, std::int64_t heads, double offset,
                            const std::vector<float>* mean = nullptr) {
  BwdRef ref;
  const std::int64_t n = s.n;
  ref.dx.resize(static_cast<std::size_t>(s.rows * n));
  ref.dw.resize(static_cast<std::size_t>(heads * n));
  ref.db.resize(static_cast<std::size_t>(heads * n));
  std::vector<double> xhat(n), g(n);
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const std::int64_t p = r % heads;
    const double rs = rstd[r], mu = mean ? (*mean)[r] : 0.0;
    double dot = 0, dot_mag = 0, gsum = 0, gsum_mag = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      xhat[i] = (x.at(s, r, i) - mu) * rs;
      g[i] = dout.at(s, r, i) * (weight ? weight->get(p * n + i) + offset : 1.0);
      dot += g[i] * xhat[i];
      dot_mag += std::fabs(g[i] * xhat[i]);
      gsum += g[i];
      gsum_mag += std::fabs(g[i]);
    }
    // LayerNorm also subtracts mean(g); its xhat carries the error of x - mean.
    const double c = dot / n, c_mag = dot_mag / n, gm = mean ? gsum / n : 0.0, gm_mag = mean ? gsum_mag / n : 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double dr = dresidual_out ? dresidual_out->at(s, r, i) : 0.0;
      const double xhat_mag = std::fabs(xhat[i]) + (mean ? std::fabs(mu) * rs : 0.0);
      ref.dx.v[r * n + i] = rs * (g[i] - gm - xhat[i] * c) + dr;
      ref.dx.mag[r * n + i] = rs * (std::fabs(g[i]) + gm_mag + xhat_mag * c_mag) + std::fabs(dr);
      const double dy = dout.at(s, r, i);
      ref.dw.v[p * n + i] += dy * xhat[i];
      ref.dw.mag[p * n + i] += (dy * xhat[i]) * (dy * xhat[i]);  // sum of squares, finished below
      ref.db.v[p * n + i] += dy;
      ref.db.mag[p * n + i] += dy * dy;
    }
  }
  // sum of squares -> sqrt(M_h) * rms = sqrt(sum of squares).
  for (auto* m : {&ref.dw.mag, &ref.db.mag})
    for (double& v : *m) v = std::sqrt(v);
  return ref;
}

inline ::testing::AssertionResult close_at(const char* what, std::int64_t count, DType t,
                                           const std::function<double(std::int64_t)>& got, const Values& ref) {
  std::int64_t bad = 0;
  std::ostringstream first;
  for (std::int64_t k = 0; k < count; ++k) {
    const double g = got(k), tol = rtol(t) * (std::fabs(ref.v[k]) + ref.mag[k]) + atol(t);
    if (!(std::fabs(g - ref.v[k]) <= tol)) {  // NaN (poison left in place) fails too
      if (bad++ < 5) first << "\n  [" << k << "] got " << g << " ref " << ref.v[k] << " tol " << tol;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << normkit::norm::dtype_name(t) << "): " << bad << " of "
                                       << count << " elements out of tolerance" << first.str();
}

// Compares the rows of `got` (flattened to row-major k = r * n + i) with `ref`.
inline ::testing::AssertionResult close_rows(const char* what, const Strided& got, const RowShape& s,
                                             const Values& ref) {
  return close_at(
      what, s.rows * s.n, got.buf.dtype(), [&](std::int64_t k) { return got.at(s, k / s.n, k % s.n); }, ref);
}

inline ::testing::AssertionResult close_buf(const char* what, const Buf& got, const Values& ref) {
  return close_at(
      what, got.elems(), got.dtype(), [&](std::int64_t k) { return got.get(k); }, ref);
}

// ---------------------------------------------------------------------------
// Calling the library: the public API with Device::cpu(), which validates and
// then runs the CPU fallback.

using normkit::norm::RmsNormBwdArgs;
using normkit::norm::RmsNormFwdArgs;

inline constexpr DType kF16 = DType::kFloat16, kBF16 = DType::kBFloat16, kF32 = DType::kFloat32;
// Row lengths of the dtype grids: odd ones exercise every tail path.
inline const std::vector<std::int64_t> kNs = {1, 2, 3, 17, 64, 1023, 1024, 4097};

inline void run_fwd(RmsNormFwdArgs a) {
  a.device = normkit::norm::Device::cpu();
  normkit::norm::rmsnorm_fwd(a);
}
inline void run_bwd(RmsNormBwdArgs a) {
  a.device = normkit::norm::Device::cpu();
  normkit::norm::rmsnorm_bwd(a);
}
// For code that serves both directions (and both norms).
inline void run_cpu(const RmsNormFwdArgs& a) { run_fwd(a); }
inline void run_cpu(const RmsNormBwdArgs& a) { run_bwd(a); }
inline void run_cpu(normkit::norm::LayerNormFwdArgs a) {
  a.device = normkit::norm::Device::cpu();
  normkit::norm::layernorm_fwd(a);
}
inline void run_cpu(normkit::norm::LayerNormBwdArgs a) {
  a.device = normkit::norm::Device::cpu();
  normkit::norm::layernorm_bwd(a);
}

// Restores the automatic thread count even when an assertion returns early.
struct ForceThreads {
  explicit ForceThreads(int n) { normkit::norm::detail::set_cpu_threads_for_testing(n); }
  ~ForceThreads() { normkit::norm::detail::set_cpu_threads_for_testing(0); }
  ForceThreads(const ForceThreads&) = delete;
  ForceThreads& operator=(const ForceThreads&) = delete;
};

inline std::string opt_name(const std::optional<DType>& t) { return t ? normkit::norm::dtype_name(*t) : "none"; }

inline RowShape resolved(std::int64_t rows, std::int64_t n, std::int64_t rows_inner) {
  return {rows, n, rows_inner == 0 ? std::max<std::int64_t>(rows, 1) : rows_inner};
}

// Applies `mutate` to a copy of run->args and expects the call to throw a
// normkit::Error whose message contains `needle` (the caller then checks that
// the outputs are still poisoned).
template <class Run, class Mutate>
void expect_rejected(Run& run, const Mutate& mutate, const std::string& needle) {
  SCOPED_TRACE("expected error containing: " + needle);
  auto a = run->args;
  mutate(a);
  try {
    run_cpu(a);
    ADD_FAILURE() << "the call was accepted";
  } catch (const normkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace rmsref
