// Host-side conversions between fp16 / bf16 bit patterns and float (and, for the
// CPU-only fp64 dtype, double), and typed row load/store for the CPU fallback and
// tests.
//
// Invariants (the CPU fallback must round exactly as the GPU's __float2half_rn /
// __float2bfloat16_rn do, or CPU and GPU results would differ by an ulp):
//  - float -> fp16 and float -> bf16 round to nearest, ties to even; values past
//    the largest finite value round to +-inf exactly where RNE says so (fp16:
//    |x| >= 65520); fp16 subnormals (|x| < 2^-14) are produced, never flushed.
//  - NaN stays NaN (quiet, sign kept, top payload bits kept); +-inf stay +-inf;
//    -0 stays -0.
//  - fp16 / bf16 -> float is exact (every value is representable in float).
//  - double -> fp32 / fp16 / bf16 rounds once, to nearest even, straight from the
//    double (never double -> float -> 16 bits, which can round twice); float ->
//    double is exact.
// Nothing here depends on the host's floating-point environment (rounding mode,
// FTZ/DAZ): all rounding is done on the integer bit patterns.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "normkit/norm/types.hpp"

namespace normkit::norm::detail {

inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact, and a float normal (so FTZ/DAZ
    // cannot touch it).
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(mag));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<std::uint16_t>((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x47800000u) return sign | 0x7c00u;  // >= 2^16 (or inf): beyond any rounding to 65504
  const std::uint32_t e = a >> 23;              // biased float exponent
  if (e >= 113) {
    // fp16 normal range (before rounding). A carry out of the mantissa bumps the
    // exponent, which is the correct result, including 65520.. -> inf (0x7c00).
    std::uint32_t h = ((e - 112u) << 10) | ((a & 0x7fffffu) >> 13);
    const std::uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return sign | static_cast<std::uint16_t>(h);
  }
  // fp16 subnormal (or zero): value / 2^-24 = m * 2^(e - 126) with m the 24-bit
  // significand. A carry to 0x400 yields the smallest normal, as it should.
  if (e < 102) return sign;  // < 2^-25: rounds to zero (2^-25 itself ties to even = 0)
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return sign | static_cast<std::uint16_t>(q);
}

inline float bf16_bits_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  // Truncating a NaN could clear every payload bit and make it an inf.
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // Adding 0x7fff (+1 when the kept lsb is odd) carries into the kept half exactly
  // when RNE rounds up; overflow lands on the inf pattern.
  const std::uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + bias) >> 16);
}

// double -> float on the bit patterns, like the 16-bit encoders above.
//  - kNearestEven: the float nearest to d, ties to even; past FLT_MAX's rounding
//    range -> +-inf; float subnormals are produced, never flushed.
//  - kOdd: truncate toward zero, then set the last bit when anything nonzero was
//    dropped ("round to odd"). Not a rounding anyone wants as a result: it is the
//    intermediate of double -> fp16 / bf16. A float keeps at least 13 more bits
//    than either, and an odd last bit marks "strictly between two floats", so
//    rounding that float to nearest even gives exactly the double's own
//    nearest-even 16-bit value; a plain float intermediate could round twice.
//    Beyond the float range it saturates to +-FLT_MAX (odd), which every 16-bit
//    encoder takes to +-inf, as the double itself would round.
// NaN stays NaN (quiet, sign and top payload bits kept); +-inf and -0 are kept.
enum class Narrow { kNearestEven, kOdd };

inline float double_to_float(double d, Narrow mode = Narrow::kNearestEven) {
  const std::uint64_t x = std::bit_cast<std::uint64_t>(d);
  const std::uint32_t sign = static_cast<std::uint32_t>(x >> 32) & 0x80000000u;
  const std::uint64_t a = x & 0x7fffffffffffffffull;
  if (a >= 0x7ff0000000000000ull) {
    if (a == 0x7ff0000000000000ull) return std::bit_cast<float>(sign | 0x7f800000u);
    return std::bit_cast<float>(sign | 0x7fc00000u | static_cast<std::uint32_t>((a >> 29) & 0x7fffffu));
  }
  const bool odd = mode == Narrow::kOdd;
  const int e = static_cast<int>(a >> 52);  // biased double exponent; 0: zero or subnormal
  const std::uint64_t m = (a & 0xfffffffffffffull) | (e != 0 ? 0x10000000000000ull : 0);  // 53-bit significand
  const int fe = e - 1023 + 127;  // biased float exponent before rounding
  if (fe >= 255) return std::bit_cast<float>(sign | (odd ? 0x7f7fffffu : 0x7f800000u));
  // Float normal: keep 24 of the 53 bits. Float subnormal: value = q * 2^-149, so
  // more bits go; a double subnormal (e == 0) lies far below that grid.
  const int shift = fe >= 1 ? 29 : 30 - fe;
  if (shift >= 54) return std::bit_cast<float>(sign | (odd && m != 0 ? 1u : 0u));  // below half the smallest step
  std::uint32_t f = static_cast<std::uint32_t>(m >> shift);
  if (fe >= 1) f = (static_cast<std::uint32_t>(fe) << 23) | (f & 0x7fffffu);
  const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
  if (odd) {
    if (rem != 0) f |= 1u;
  } else {
    // A carry out of the mantissa bumps the exponent, which is the correct result,
    // up to FLT_MAX -> inf and largest subnormal -> smallest normal.
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (f & 1u))) ++f;
  }
  return std::bit_cast<float>(sign | f);
}

inline std::uint16_t double_to_half_bits(double d) { return float_to_half_bits(double_to_float(d, Narrow::kOdd)); }
inline std::uint16_t double_to_bf16_bits(double d) { return float_to_bf16_bits(double_to_float(d, Narrow::kOdd)); }

// Element `i` of `base` read as `t`. Pointer arithmetic is in elements of `t`.
// fp64 data is rounded to the nearest float (the fp32 compute path never sees it:
// a call with any fp64 tensor computes in double).
inline float load_elem(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kFloat16: {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const std::uint16_t*>(base) + i, 2);
      return half_bits_to_float(v);
    }
    case DType::kBFloat16: {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const std::uint16_t*>(base) + i, 2);
      return bf16_bits_to_float(v);
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, static_cast<const double*>(base) + i, 8);
      return double_to_float(v);
    }
    case DType::kFloat32:
      break;
  }
  float v;
  std::memcpy(&v, static_cast<const float*>(base) + i, 4);
  return v;
}

// Element `i` as a double: exact for every dtype.
inline double load_elem_f64(const void* base, DType t, std::int64_t i) {
  if (t != DType::kFloat64) return load_elem(base, t, i);
  double v;
  std::memcpy(&v, static_cast<const double*>(base) + i, 8);
  return v;
}

inline void store_elem(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kFloat16: {
      const std::uint16_t b = float_to_half_bits(v);
      std::memcpy(static_cast<std::uint16_t*>(base) + i, &b, 2);
      return;
    }
    case DType::kBFloat16: {
      const std::uint16_t b = float_to_bf16_bits(v);
      std::memcpy(static_cast<std::uint16_t*>(base) + i, &b, 2);
      return;
    }
    case DType::kFloat64: {
      const double d = v;
      std::memcpy(static_cast<double*>(base) + i, &d, 8);
      return;
    }
    case DType::kFloat32:
      break;
  }
  std::memcpy(static_cast<float*>(base) + i, &v, 4);
}

// Stores a double, rounded once to `t` (see double_to_float).
inline void store_elem_f64(void* base, DType t, std::int64_t i, double v) {
  switch (t) {
    case DType::kFloat16: {
      const std::uint16_t b = double_to_half_bits(v);
      std::memcpy(static_cast<std::uint16_t*>(base) + i, &b, 2);
      return;
    }
    case DType::kBFloat16: {
      const std::uint16_t b = double_to_bf16_bits(v);
      std::memcpy(static_cast<std::uint16_t*>(base) + i, &b, 2);
      return;
    }
    case DType::kFloat32: {
      const float f = double_to_float(v);
      std::memcpy(static_cast<float*>(base) + i, &f, 4);
      return;
    }
    case DType::kFloat64:
      break;
  }
  std::memcpy(static_cast<double*>(base) + i, &v, 8);
}

namespace host_row {
// n elements of storage type S from element `offset`, decoded into dst. memcpy
// keeps unaligned and type-punned access defined (and compiles to plain loads).
template <class S, class Acc, class Decode>
inline void decode(const void* base, std::int64_t offset, std::int64_t n, Acc* dst, Decode decode_one) {
  const auto* p = static_cast<const S*>(base) + offset;
  for (std::int64_t i = 0; i < n; ++i) {
    S v;
    std::memcpy(&v, p + i, sizeof(S));
    dst[i] = decode_one(v);
  }
}
}  // namespace host_row

// n contiguous elements starting at element `offset`, widened to the compute type
// (float, or double for the fp64 path, where every load is exact). The dtype
// switch sits outside the loop so that the per-element work stays a tight loop.
template <class Acc>
inline void load_row(const void* base, DType t, std::int64_t offset, std::int64_t n, Acc* dst) {
  static_assert(std::is_same_v<Acc, float> || std::is_same_v<Acc, double>);
  switch (t) {
    case DType::kFloat16:
      return host_row::decode<std::uint16_t>(base, offset, n, dst, half_bits_to_float);
    case DType::kBFloat16:
      return host_row::decode<std::uint16_t>(base, offset, n, dst, bf16_bits_to_float);
    case DType::kFloat32:
      return host_row::decode<float>(base, offset, n, dst, [](float v) { return v; });
    case DType::kFloat64:
      if constexpr (std::is_same_v<Acc, float>) {
        return host_row::decode<double>(base, offset, n, dst, [](double v) { return double_to_float(v); });
      } else {
        return host_row::decode<double>(base, offset, n, dst, [](double v) { return v; });
      }
  }
}

inline void store_row(void* base, DType t, std::int64_t offset, std::int64_t n, const float* src) {
  switch (t) {
    case DType::kFloat16: {
      auto* p = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t b = float_to_half_bits(src[i]);
        std::memcpy(p + i, &b, 2);
      }
      return;
    }
    case DType::kBFloat16: {
      auto* p = static_cast<std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t b = float_to_bf16_bits(src[i]);
        std::memcpy(p + i, &b, 2);
      }
      return;
    }
    case DType::kFloat64: {
      auto* p = static_cast<double*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        const double d = src[i];
        std::memcpy(p + i, &d, 8);
      }
      return;
    }
    case DType::kFloat32:
      break;
  }
  std::memcpy(static_cast<float*>(base) + offset, src, static_cast<std::size_t>(n) * 4);
}

// Stores from the double compute path round once (store_elem_f64).
inline void store_row(void* base, DType t, std::int64_t offset, std::int64_t n, const double* src) {
  if (t == DType::kFloat64) {
    std::memcpy(static_cast<double*>(base) + offset, src, static_cast<std::size_t>(n) * 8);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) store_elem_f64(base, t, offset + i, src[i]);
}

}  // namespace normkit::norm::detail
