// Host-side conversions between fp16 / bf16 bit patterns and float, and typed
// row load/store for the CPU fallback and tests.
//
// Invariants (the CPU fallback must round exactly as the GPU's __float2half_rn /
// __float2bfloat16_rn do, or CPU and GPU results would differ by an ulp):
//  - float -> fp16 and float -> bf16 round to nearest, ties to even; values past
//    the largest finite value round to +-inf exactly where RNE says so (fp16:
//    |x| >= 65520); fp16 subnormals (|x| < 2^-14) are produced, never flushed.
//  - NaN stays NaN (quiet, sign kept, top payload bits kept); +-inf stay +-inf;
//    -0 stays -0.
//  - fp16 / bf16 -> float is exact (every value is representable in float).
// Nothing here depends on the host's floating-point environment (rounding mode,
// FTZ/DAZ): all rounding is done on the integer bit patterns.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

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

// Element `i` of `base` read as `t`. Pointer arithmetic is in elements of `t`.
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
    case DType::kFloat32:
      break;
  }
  float v;
  std::memcpy(&v, static_cast<const float*>(base) + i, 4);
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
    case DType::kFloat32:
      break;
  }
  std::memcpy(static_cast<float*>(base) + i, &v, 4);
}

// n contiguous elements starting at element `offset`; the dtype switch sits
// outside the loop so that the per-element work stays a tight loop. memcpy keeps
// unaligned and type-punned access defined.
inline void load_row(const void* base, DType t, std::int64_t offset, std::int64_t n, float* dst) {
  switch (t) {
    case DType::kFloat16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, p + i, 2);
        dst[i] = half_bits_to_float(v);
      }
      return;
    }
    case DType::kBFloat16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + offset;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, p + i, 2);
        dst[i] = bf16_bits_to_float(v);
      }
      return;
    }
    case DType::kFloat32:
      break;
  }
  std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<std::size_t>(n) * 4);
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
    case DType::kFloat32:
      break;
  }
  std::memcpy(static_cast<float*>(base) + offset, src, static_cast<std::size_t>(n) * 4);
}

}  // namespace normkit::norm::detail
