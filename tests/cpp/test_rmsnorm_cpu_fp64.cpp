// fp64, the CPU fallback's verification dtype: double -> fp32/fp16/bf16 rounding,
// forward and backward in double against a long double reference written here
// (plain loops, own row addressing), mixed fp64/fp32 calls, determinism, and the
// GPU path's refusal of fp64 (reachable without a GPU: the CUDA entry points
// reject fp64 before they touch the driver).
//
// Tolerance of the double path: |got - ref| <= 1e-12 * (|ref| + mag), mag being
// the sum of the magnitudes of the terms behind the value (as in
// rmsnorm_test_reference.hpp). Double rounding contributes ~n * 2^-53 at worst,
// below 1e-12 for every n used here, while an fp32 intermediate anywhere would
// show up as ~1e-7. rstd is fp32 in the API: it must be the correctly rounded
// float of the reference (within half an fp32 ulp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "host_convert.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_internal.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using normkit::norm::detail::double_to_bf16_bits;
using normkit::norm::detail::double_to_float;
using normkit::norm::detail::double_to_half_bits;
using normkit::norm::detail::Narrow;

namespace {

constexpr DType kF64 = DType::kFloat64, kF32 = DType::kFloat32, kF16 = DType::kFloat16;
constexpr double kRel = 1e-12;

// ---------------------------------------------------------------------------
// Conversions

TEST(RmsNormCpuFp64Convert, DoubleToFloatMatchesHardwareRoundToNearest) {
  // The host runs in the default environment (round to nearest even, no FTZ),
  // where the hardware conversion is the reference.
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::uint64_t> bits;
  std::uniform_int_distribution<int> exp(-160, 135);
  for (int k = 0; k < 200000; ++k) {
    // Random significands over the float range, subnormals and overflow included.
    const double d = std::ldexp(std::bit_cast<double>((bits(rng) & 0x800fffffffffffffull) | 0x3ff0000000000000ull),
                                exp(rng));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(double_to_float(d)), std::bit_cast<std::uint32_t>(static_cast<float>(d)))
        << d;
  }
  // Exact ties between two floats go to the even one.
  for (float f : {1.f, 3.f, 0x1p-130f, 0x1.fffffep127f, 0x1p-149f, 1.5f}) {
    const double mid = 0.5 * (static_cast<double>(f) + static_cast<double>(std::nextafter(f, INFINITY)));
    EXPECT_EQ(double_to_float(mid), static_cast<float>(mid)) << f;
    EXPECT_EQ(double_to_float(-mid), static_cast<float>(-mid)) << f;
  }
  for (double d : {0.0, -0.0, 1e300, -1e300, 1e-300, std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()})
    EXPECT_EQ(std::bit_cast<std::uint32_t>(double_to_float(d)), std::bit_cast<std::uint32_t>(static_cast<float>(d)))
        << d;
  const float nan = double_to_float(-std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(nan) && std::signbit(nan));
  EXPECT_TRUE(std::isnan(double_to_float(std::bit_cast<double>(0x7ff0000000000001ull))));  // signalling: not inf
}

TEST(RmsNormCpuFp64Convert, RoundToOddMarksInexactResults) {
  EXPECT_EQ(double_to_float(1.0, Narrow::kOdd), 1.f);  // exact: untouched
  EXPECT_EQ(double_to_float(1.0 + 0x1p-40, Narrow::kOdd), 1.f + 0x1p-23f);
  EXPECT_EQ(double_to_float(1.0 + 0x1p-23 + 0x1p-40, Narrow::kOdd), 1.f + 0x1p-23f);  // already odd
  EXPECT_EQ(double_to_float(-(2.0 - 0x1p-40), Narrow::kOdd), -(2.f - 0x1p-23f));      // truncated toward zero
  EXPECT_EQ(double_to_float(1e300, Narrow::kOdd), std::numeric_limits<float>::max());
  EXPECT_EQ(double_to_float(1e-300, Narrow::kOdd), std::numeric_limits<float>::denorm_min());
}

// The nearest 16-bit value to d (ties to even), by search over all patterns of
// the sign of d with the independent decoders of rmsnorm_test_reference.hpp.
std::uint16_t nearest16(double d, double (*decode)(std::uint16_t), std::uint16_t inf_bits) {
  const std::uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  std::uint16_t best = inf_bits;
  double best_err = INFINITY;
  for (std::uint32_t m = 0; m <= inf_bits; ++m) {
    const double v = decode(static_cast<std::uint16_t>(m));
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (m & 1) == 0)) best = static_cast<std::uint16_t>(m), best_err = err;
  }
  // Beyond the largest finite value: inf once past the midpoint to the next power.
  const double max = decode(static_cast<std::uint16_t>(inf_bits - 1));
  const double limit = max + 0.5 * (max - decode(static_cast<std::uint16_t>(inf_bits - 2)));
  if (a >= limit) best = inf_bits;
  return sign | best;
}

TEST(RmsNormCpuFp64Convert, DoubleTo16BitRoundsOnceNotTwice) {
  // A double just above the midpoint of two fp16 (bf16) values, within half a
  // float ulp of it: double -> float -> 16 bits would see an exact tie and round
  // to even (down); the correct result is up.
  EXPECT_EQ(double_to_half_bits(1.0 + 0x1p-11 + 0x1p-40), 0x3c01);
  EXPECT_EQ(double_to_half_bits(1.0 + 0x1p-11), 0x3c00);  // the exact tie: even
  EXPECT_EQ(double_to_half_bits(-(1.0 + 0x1p-11 + 0x1p-40)), 0xbc01);
  EXPECT_EQ(double_to_bf16_bits(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
  EXPECT_EQ(double_to_bf16_bits(1.0 + 0x1p-8), 0x3f80);
  EXPECT_EQ(double_to_half_bits(65520.0 - 0x1p-30), 0x7bff);  // just below the overflow midpoint
  EXPECT_EQ(double_to_half_bits(65520.0), 0x7c00);
  EXPECT_EQ(double_to_bf16_bits(1e300), 0x7f80);
  EXPECT_EQ(double_to_half_bits(0x1p-25 + 0x1p-60), 0x0001);  // above the tie with zero
  EXPECT_TRUE(std::isnan(rmsref::decode_fp16(double_to_half_bits(std::nan("")))));

  std::mt19937_64 rng(12);
  std::normal_distribution<double> mant(0.0, 1.0);
  std::uniform_int_distribution<int> exp(-30, 17);
  for (int k = 0; k < 3000; ++k) {
    const double d = std::ldexp(mant(rng), exp(rng));
    ASSERT_EQ(double_to_half_bits(d), nearest16(d, rmsref::decode_fp16, 0x7c00)) << d;
    ASSERT_EQ(double_to_bf16_bits(d), nearest16(d, rmsref::decode_bf16, 0x7f80)) << d;
  }
}

TEST(RmsNormCpuFp64Convert, RowsAreExactInAndRoundOnceOut) {
  const double src[4] = {1.0 / 3.0, -1e-310, 1e300, 1.0 + 0x1p-11 + 0x1p-40};
  unsigned char buf[8 * 6] = {};
  detail::store_row(buf, kF64, 1, 4, src);
  double back[4];
  detail::load_row(buf, kF64, 1, 4, back);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(back[i], src[i]);
    EXPECT_EQ(detail::load_elem_f64(buf, kF64, 1 + i), src[i]);
    EXPECT_EQ(detail::load_elem(buf, kF64, 1 + i), double_to_float(src[i]));
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(buf[i], 0) << "wrote before the offset";
  std::uint16_t h[4];
  detail::store_row(h, kF16, 0, 4, src);
  EXPECT_EQ(h[3], 0x3c01);
  double widened[4];
  detail::load_row(h, kF16, 0, 4, widened);
  EXPECT_EQ(widened[3], rmsref::decode_fp16(0x3c01));
}

// ---------------------------------------------------------------------------
// Operator values

// Host rows of any dtype (0xFF-poisoned), read back exactly.
struct Tensor {
  DType t = kF64;
  std::vector<unsigned char> bytes;
  std::int64_t row_stride = 0;
  Tensor() = default;
  Tensor(DType dtype, std::int64_t rows, std::int64_t n, std::int64_t pad = 0)
      : t(dtype), bytes(static_cast<std::size_t>((rows * (n + pad)) * dtype_size(dtype)), 0xFF), row_stride(n + pad) {}
  void* data() { return bytes.data(); }
  double get(std::int64_t i) const {
    const unsigned char* p = bytes.data() + i * dtype_size(t);
    switch (t) {
      case DType::kFloat64: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
      }
      case DType::kFloat32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      default: {
        std::uint16_t b;
        std::memcpy(&b, p, 2);
        return t == kF16 ? rmsref::decode_fp16(b) : rmsref::decode_bf16(b);
      }
    }
  }
  double at(std::int64_t r, std::int64_t i) const { return get(r * row_stride + i); }
  Rows rows() { return Rows::strided(data(), t, row_stride); }
  Param param() { return Param{data(), t}; }
};

// Random values stored in the dtype; the reference reads back what was stored,
// so the inputs are exact whatever rounding the store did.
Tensor random(DType t, std::int64_t rows, std::int64_t n, std::mt19937_64& rng, double mean = 0.0,
              std::int64_t pad = 0) {
  Tensor x(t, rows, n, pad);
  std::normal_distribution<double> dist(mean, 1.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) detail::store_elem_f64(x.data(), t, r * x.row_stride + i, dist(rng));
  return x;
}

using LD = long double;

// |got - ref| <= rel * (|ref| + mag) for every element; count of failures.
struct Checker {
  Checker(std::string name, double rel_tol) : what(std::move(name)), rel(rel_tol) {}
  std::string what;
  double rel;
  int bad = 0;
  std::string first;
  void operator()(double got, LD ref, LD mag, std::int64_t k) {
    const LD tol = static_cast<LD>(rel) * (std::fabs(ref) + mag);
    if (!(std::fabs(static_cast<LD>(got) - ref) <= tol) && bad++ < 3)
      first += "\n  [" + std::to_string(k) + "] got " + std::to_string(got) + " ref " +
               std::to_string(static_cast<double>(ref));
  }
  ::testing::AssertionResult result() const {
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << bad << " elements out of tolerance" << first;
  }
};

// Relative tolerance of an output: double compute, then one rounding to its dtype.
double out_rel(DType t) {
  switch (t) {
    case DType::kFloat64: return kRel;
    case DType::kFloat32: return 0x1p-24 + kRel;
    case DType::kFloat16: return 0x1p-11 + kRel;
    default: return 0x1p-8 + kRel;
  }
}

struct Fp64Case {
  std::int64_t rows = 37, n = 17, heads = 1, pad = 0;
  DType x = kF64, residual = kF64, out = kF64, residual_out = kF64, weight = kF64, bias = kF64;
  bool has_residual = true, has_weight = true, has_bias = true;
  float weight_offset = 0.f, eps = 1e-6f;
  std::string describe() const {
    return "rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " heads=" + std::to_string(heads) +
           " pad=" + std::to_string(pad) + " x=" + dtype_name(x) + " out=" + dtype_name(out) +
           " weight=" + (has_weight ? dtype_name(weight) : "none") + " bias=" + (has_bias ? dtype_name(bias) : "none") +
           " residual=" + (has_residual ? dtype_name(residual) : "none") + " offset=" + std::to_string(weight_offset);
  }
};

// Runs forward then backward through the public API on the CPU and checks both
// against the long double reference.
void check_case(const Fp64Case& c) {
  SCOPED_TRACE(c.describe());
  std::mt19937_64 rng(static_cast<std::uint64_t>(c.rows * 1000 + c.n));
  const std::int64_t M = c.rows, n = c.n, H = c.heads;
  Tensor x = random(c.x, M, n, rng, 0.25, c.pad);
  Tensor res = c.has_residual ? random(c.residual, M, n, rng) : Tensor();
  Tensor w = c.has_weight ? random(c.weight, H, n, rng, 1.0) : Tensor();
  Tensor b = c.has_bias ? random(c.bias, H, n, rng) : Tensor();
  Tensor out(c.out, M, n), res_out(c.residual_out, M, n);
  std::vector<float> rstd(static_cast<std::size_t>(M), NAN);

  RmsNormFwdArgs f;
  f.shape = {M, n, 0};
  f.x = x.rows();
  if (c.has_residual) f.residual = res.rows(), f.residual_out = res_out.rows();
  f.out = out.rows();
  if (c.has_weight) f.weight = w.param();
  if (c.has_bias) f.bias = b.param();
  f.heads = H;
  f.rstd = rstd.data();
  f.eps = c.eps;
  f.weight_offset = c.weight_offset;
  rmsref::run_fwd(f);

  // Forward reference.
  std::vector<LD> h(static_cast<std::size_t>(M * n)), rs(static_cast<std::size_t>(M));
  Checker c_out{"out", out_rel(c.out)}, c_res{"residual_out", out_rel(c.residual_out)}, c_rstd{"rstd", 0x1p-24 + kRel};
  for (std::int64_t r = 0; r < M; ++r) {
    LD ss = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const LD v = static_cast<LD>(x.at(r, i)) + (c.has_residual ? static_cast<LD>(res.at(r, i)) : 0.0L);
      h[r * n + i] = v;
      ss += v * v;
    }
    rs[r] = 1.0L / std::sqrt(ss / n + static_cast<LD>(c.eps));
    c_rstd(rstd[r], rs[r], 0, r);
    const std::int64_t p = r % H;
    for (std::int64_t i = 0; i < n; ++i) {
      const LD wv = c.has_weight ? static_cast<LD>(w.get(p * n + i)) + c.weight_offset : 1.0L;
      const LD bv = c.has_bias ? static_cast<LD>(b.get(p * n + i)) : 0.0L;
      const LD y = h[r * n + i] * rs[r] * wv;
      c_out(out.at(r, i), y + bv, std::fabs(y) + std::fabs(bv), r * n + i);
      if (c.has_residual)
        c_res(res_out.at(r, i), h[r * n + i], std::fabs(x.at(r, i)) + std::fabs(res.at(r, i)), r * n + i);
    }
  }
  EXPECT_TRUE(c_out.result());
  EXPECT_TRUE(c_res.result());
  EXPECT_TRUE(c_rstd.result());

  // Backward from h as the forward stored it, with the fp32 rstd it stored.
  Tensor& hin = c.has_residual ? res_out : x;
  Tensor dout = random(c.out, M, n, rng), dres_out = random(c.residual_out, M, n, rng);
  Tensor dx(c.x, M, n), dres(c.residual, M, n);
  Tensor dw = c.has_weight ? Tensor(c.weight, H, n) : Tensor(), db = c.has_bias ? Tensor(c.bias, H, n) : Tensor();
  RmsNormBwdArgs g;
  g.shape = {M, n, 0};
  g.x = hin.rows();
  g.dout = dout.rows();
  if (c.has_residual) g.dresidual_out = dres_out.rows(), g.dresidual = dres.rows();
  g.dx = dx.rows();
  if (c.has_weight) g.weight = w.param(), g.dweight = dw.data();
  if (c.has_bias) g.dbias = db.param();
  g.heads = H;
  g.rstd = rstd.data();
  g.weight_offset = c.weight_offset;
  rmsref::run_bwd(g);

  const auto hn = static_cast<std::size_t>(H * n);
  std::vector<LD> dw_ref(hn, 0), dw_mag(hn, 0), db_ref(hn, 0), db_mag(hn, 0), xhat(n), gv(n);
  Checker c_dx{"dx", out_rel(c.x)}, c_dres{"dresidual", out_rel(c.residual)};
  for (std::int64_t r = 0; r < M; ++r) {
    const LD rr = rstd[r];
    const std::int64_t p = r % H;
    LD dot = 0, dot_mag = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      xhat[i] = static_cast<LD>(hin.at(r, i)) * rr;
      const LD wv = c.has_weight ? static_cast<LD>(w.get(p * n + i)) + c.weight_offset : 1.0L;
      gv[i] = static_cast<LD>(dout.at(r, i)) * wv;
      dot += gv[i] * xhat[i];
      dot_mag += std::fabs(gv[i] * xhat[i]);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const LD dr = c.has_residual ? static_cast<LD>(dres_out.at(r, i)) : 0.0L;
      const LD v = rr * (gv[i] - xhat[i] * dot / n) + dr;
      const LD mag = rr * (std::fabs(gv[i]) + std::fabs(xhat[i]) * dot_mag / n) + std::fabs(dr);
      c_dx(dx.at(r, i), v, mag, r * n + i);
      if (c.has_residual) c_dres(dres.at(r, i), v, mag, r * n + i);
      const LD dy = dout.at(r, i);
      dw_ref[p * n + i] += dy * xhat[i];
      dw_mag[p * n + i] += std::fabs(dy * xhat[i]);
      db_ref[p * n + i] += dy;
      db_mag[p * n + i] += std::fabs(dy);
    }
  }
  EXPECT_TRUE(c_dx.result());
  EXPECT_TRUE(c_dres.result());
  if (c.has_weight) {
    Checker c_dw{"dweight", out_rel(c.weight)};
    for (std::size_t k = 0; k < hn; ++k) c_dw(dw.get(k), dw_ref[k], dw_mag[k], k);
    EXPECT_TRUE(c_dw.result());
  }
  if (c.has_bias) {
    Checker c_db{"dbias", out_rel(c.bias)};
    for (std::size_t k = 0; k < hn; ++k) c_db(db.get(k), db_ref[k], db_mag[k], k);
    EXPECT_TRUE(c_db.result());
  }
}

TEST(RmsNormCpuFp64, ForwardAndBackwardMatchLongDoubleReference) {
  for (std::int64_t n : {1, 2, 3, 17, 64, 1000, 4097}) {
    Fp64Case c;
    c.n = n;
    check_case(c);
  }
}

TEST(RmsNormCpuFp64, FeatureCombinations) {
  Fp64Case c;
  c.has_residual = c.has_bias = false;  // plain
  check_case(c);
  c.has_weight = false;
  check_case(c);
  c = Fp64Case{};
  c.weight_offset = 1.f, c.eps = 1e-5f, c.pad = 5;  // Gemma offset, strided rows
  check_case(c);
  c = Fp64Case{};
  c.rows = 36, c.heads = 4, c.n = 24;  // per-head weight and bias
  check_case(c);
  c = Fp64Case{};
  c.rows = 512, c.n = 700;  // many dw/db blocks
  check_case(c);
}

TEST(RmsNormCpuFp64, MixedWithFp32ComputesInDouble) {
  // fp64 activations with fp32 parameters and residual.
  Fp64Case c;
  c.weight = c.bias = c.residual = kF32;
  check_case(c);
  // One fp64 tensor among fp32 ones still selects double: every fp32 output is
  // the correctly rounded double result (half an ulp), which fp32 arithmetic
  // over n = 4097 elements does not achieve.
  c = Fp64Case{};
  c.n = 4097;
  c.x = c.residual = c.out = c.residual_out = c.bias = kF32;
  c.weight = kF64;
  check_case(c);
  // fp16 output straight from double.
  c = Fp64Case{};
  c.out = kF16, c.has_residual = false;
  check_case(c);
}

TEST(RmsNormCpuFp64, BitwiseIdenticalForAnyThreadCount) {
  std::mt19937_64 rng(5);
  const std::int64_t M = 256, n = 1000;
  Tensor x = random(kF64, M, n, rng), w = random(kF64, 1, n, rng, 1.0), dout = random(kF64, M, n, rng);
  std::vector<float> rstd(M);
  Tensor out(kF64, M, n);
  RmsNormFwdArgs f;
  f.shape = {M, n, 0};
  f.x = x.rows();
  f.out = out.rows();
  f.weight = w.param();
  f.rstd = rstd.data();
  rmsref::run_fwd(f);
  std::vector<unsigned char> first_dx, first_dw;
  for (int threads : {1, 2, 3, 8}) {
    rmsref::ForceThreads force(threads);
    Tensor dx(kF64, M, n), dw(kF64, 1, n), db(kF64, 1, n);
    RmsNormBwdArgs g;
    g.shape = {M, n, 0};
    g.x = x.rows();
    g.dout = dout.rows();
    g.dx = dx.rows();
    g.weight = w.param();
    g.dweight = dw.data();
    g.dbias = db.param();
    g.rstd = rstd.data();
    rmsref::run_bwd(g);
    std::vector<unsigned char> cat = dx.bytes;
    cat.insert(cat.end(), db.bytes.begin(), db.bytes.end());
    if (threads == 1)
      first_dx = cat, first_dw = dw.bytes;
    else
      EXPECT_TRUE(cat == first_dx && dw.bytes == first_dw) << threads << " threads";
  }
}

TEST(RmsNormCpuFp64, InPlaceAndEmptyBatch) {
  std::mt19937_64 rng(6);
  const std::int64_t M = 4, n = 33;
  Tensor x = random(kF64, M, n, rng), copy = x;
  std::vector<float> rstd(M);
  RmsNormFwdArgs f;
  f.shape = {M, n, 0};
  f.x = copy.rows();
  f.out = copy.rows();  // out == x
  f.rstd = rstd.data();
  rmsref::run_fwd(f);
  for (std::int64_t r = 0; r < M; ++r) {
    LD ss = 0;
    for (std::int64_t i = 0; i < n; ++i) ss += static_cast<LD>(x.at(r, i)) * x.at(r, i);
    const LD rr = 1.0L / std::sqrt(ss / n + static_cast<LD>(1e-6f));
    for (std::int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(copy.at(r, i), static_cast<double>(x.at(r, i) * rr), kRel * std::fabs(x.at(r, i) * rr));
  }
  // No rows: dweight / dbias are sums over nothing, written as zeros.
  Tensor w = random(kF64, 1, n, rng), dw(kF64, 1, n), db(kF64, 1, n);
  RmsNormBwdArgs g;
  g.shape = {0, n, 0};
  g.x = x.rows(), g.dout = x.rows(), g.dx = copy.rows();
  g.weight = w.param(), g.dweight = dw.data(), g.dbias = db.param();
  g.rstd = rstd.data();
  rmsref::run_bwd(g);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_TRUE(dw.get(i) == 0.0 && db.get(i) == 0.0) << i;
}

// ---------------------------------------------------------------------------
// The GPU path refuses fp64, naming the argument. The CUDA entry points check
// before any driver call, so a Device::cuda(0) call fails the same way with or
// without a GPU.

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const normkit::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RmsNormCpuFp64Gpu, DevicePathRejectsFp64NamingTheArgument) {
  std::vector<double> d(64, 1.0);
  std::vector<float> f(64, 1.f), rstd(4, 1.f);
  RmsNormFwdArgs a;
  a.shape = {4, 16, 0};
  a.x = Rows::strided(f.data(), kF32, 16);
  a.out = Rows::strided(f.data(), kF32, 16);
  a.weight = Param{d.data(), kF64};
  a.device = Device::cuda(0);
  EXPECT_EQ(error_of([&] { rmsnorm_fwd(a); }).rfind(
                "rmsnorm_fwd: argument 'weight' is fp64; float64 runs only on the CPU fallback "
                "(the GPU kernels take fp16, bf16 and fp32)",
                0),
            0u);
  a.x = Rows::strided(d.data(), kF64, 16);
  EXPECT_NE(error_of([&] { rmsnorm_fwd(a); }).find("rmsnorm_fwd: argument 'x' is fp64"), std::string::npos);

  RmsNormBwdArgs b;
  b.shape = {4, 16, 0};
  b.x = Rows::strided(f.data(), kF32, 16);
  b.dout = Rows::strided(f.data(), kF32, 16);
  b.dx = Rows::strided(d.data(), kF64, 16);
  b.rstd = rstd.data();
  b.device = Device::cuda(0);
  EXPECT_NE(error_of([&] { rmsnorm_bwd(b); }).find("rmsnorm_bwd: argument 'dx' is fp64; float64 runs only on the CPU"),
            std::string::npos);
  b.dx = Rows::strided(f.data(), kF32, 16);
  b.dbias = Param{d.data(), kF64};
  EXPECT_NE(error_of([&] { rmsnorm_bwd_workspace_bytes(b); })
                .find("rmsnorm_bwd_workspace_bytes: argument 'dbias' is fp64"),
            std::string::npos);

  // The seam itself: nothing to say without fp64, and the first fp64 argument named.
  b.dbias = Param{};
  EXPECT_NO_THROW(detail::reject_fp64_on_gpu(b));
  b.dresidual_out = Rows::strided(d.data(), kF64, 16);
  EXPECT_NE(error_of([&] { detail::reject_fp64_on_gpu(b); }).find("argument 'dresidual_out' is fp64"),
            std::string::npos);
}

TEST(RmsNormCpuFp64Gpu, PrecompileRejectsFp64) {
  RmsNormVariant v;
  v.n = 256;
  v.x = kF64;
  EXPECT_EQ(error_of([&] { rmsnorm_precompile(v, "sm_90a"); }).rfind(
                "rmsnorm_precompile: argument 'x' is fp64; float64 runs only on the CPU fallback", 0),
            0u);
}

}  // namespace
