// Element types: names, parsing, and the host fp16/bf16 conversions the CPU
// fallback rounds with. Conversions are checked exhaustively over all 2^16 bit
// patterns against decoders written independently (rmsnorm_test_reference.hpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "host_convert.hpp"
#include "normkit/norm/types.hpp"
#include "normkit/runtime/error.hpp"
#include "rmsnorm_test_reference.hpp"

using namespace normkit::norm;
using namespace normkit::norm::detail;

namespace {

TEST(RmsNormCpuTypes, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "fp16");
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kFloat32), "fp32");
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_STREQ(dtype_name(DType::kFloat64), "fp64");
  EXPECT_THROW(dtype_size(static_cast<DType>(7)), normkit::Error);
}

TEST(RmsNormCpuTypes, ParseAcceptsAliasesAndRejectsOthers) {
  for (const char* s : {"fp16", "float16", "half", "f16", "FP16", "Half"})
    EXPECT_EQ(parse_dtype(s), DType::kFloat16) << s;
  for (const char* s : {"bf16", "bfloat16", "BF16", "BFloat16"}) EXPECT_EQ(parse_dtype(s), DType::kBFloat16) << s;
  for (const char* s : {"fp32", "float32", "float", "f32", "Float"}) EXPECT_EQ(parse_dtype(s), DType::kFloat32) << s;
  for (const char* s : {"fp64", "float64", "double", "f64", "Double"}) EXPECT_EQ(parse_dtype(s), DType::kFloat64) << s;
  for (const char* s : {"", "fp8", "int8", "float128", "bf", "fp16 ", "long double"}) EXPECT_FALSE(parse_dtype(s)) << s;
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
}

float f32(double v) { return static_cast<float>(v); }

// For every finite pattern: decode is exact, encode(decode) round-trips, and the
// exact midpoint to the next pattern up rounds to the even one of the two while
// anything just off the midpoint rounds to the nearer one. Midpoints of 16-bit
// types need at most 13 significant bits, so they are exact floats.
void check_all_patterns(double (*decode)(std::uint16_t), float (*host_decode)(std::uint16_t),
                        std::uint16_t (*encode)(float), std::uint16_t max_finite, std::uint16_t inf_bits) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double want = decode(bits);
    const std::uint16_t mag = bits & 0x7fff;
    if (std::isnan(want)) continue;  // NaN patterns: the special-value tests
    ASSERT_EQ(static_cast<double>(host_decode(bits)), want) << std::hex << b;
    ASSERT_EQ(encode(f32(want)), bits) << "round trip " << std::hex << b;
    if (mag >= max_finite) continue;  // no next finite pattern up
    const auto next = static_cast<std::uint16_t>(bits + 1);
    const double mid = 0.5 * (want + decode(next));
    ASSERT_EQ(static_cast<double>(f32(mid)), mid);
    const std::uint16_t even = (bits & 1) ? next : bits;
    ASSERT_EQ(encode(f32(mid)), even) << "tie above " << std::hex << b;
    ASSERT_EQ(encode(std::nextafter(f32(mid), 0.f)), bits) << "below midpoint above " << std::hex << b;
    ASSERT_EQ(encode(std::nextafter(f32(mid), 2.f * f32(mid))), next) << "above midpoint above " << std::hex << b;
  }
  ASSERT_EQ(encode(std::numeric_limits<float>::infinity()), inf_bits);
  ASSERT_EQ(encode(-std::numeric_limits<float>::infinity()), inf_bits | 0x8000);
}

TEST(RmsNormCpuConvert, Fp16AllPatternsDecodeRoundTripAndTies) {
  check_all_patterns(rmsref::decode_fp16, half_bits_to_float, float_to_half_bits, 0x7bff, 0x7c00);
}

TEST(RmsNormCpuConvert, Bf16AllPatternsDecodeRoundTripAndTies) {
  check_all_patterns(rmsref::decode_bf16, bf16_bits_to_float, float_to_bf16_bits, 0x7f7f, 0x7f80);
}

TEST(RmsNormCpuConvert, Fp16SpecialValues) {
  EXPECT_EQ(float_to_half_bits(65504.f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.f), 0x7c00);  // the midpoint to 2^16 ties up to inf
  EXPECT_EQ(float_to_half_bits(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-0.f), 0x8000);
  EXPECT_EQ(float_to_half_bits(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half_bits(0x1p-25f), 0x0000);  // tie between 0 and it: even
  EXPECT_EQ(float_to_half_bits(std::nextafter(0x1p-25f, 1.f)), 0x0001);
  EXPECT_EQ(float_to_half_bits(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_half_bits(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normals
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff802000u)}) {
    const std::uint16_t h = float_to_half_bits(nan);
    EXPECT_TRUE(std::isnan(half_bits_to_float(h))) << std::hex << h;
    EXPECT_EQ(h & 0x8000, std::signbit(nan) ? 0x8000 : 0) << std::hex << h;
  }
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7c01)));
  EXPECT_EQ(half_bits_to_float(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(RmsNormCpuConvert, Bf16SpecialValues) {
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // above the last midpoint
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(-0.f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00008000u)), 0x0000);  // tie to even
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);  // tie to even, up
  for (std::uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const std::uint16_t b = float_to_bf16_bits(std::bit_cast<float>(bits));
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(b))) << std::hex << bits;  // never truncated to inf
    EXPECT_EQ(b & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
  }
}

TEST(RmsNormCpuConvert, RowLoadStoreAllDtypes) {
  const float src[5] = {1.f, -2.5f, 0.15625f, 65504.f, -0.f};
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    unsigned char buf[8 * 8] = {};
    store_row(buf, t, 2, 5, src);  // offset in elements
    float back[5];
    load_row(buf, t, 2, 5, back);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(back[i], load_elem(buf, t, 2 + i));
      const float expect = t == DType::kBFloat16 ? bf16_bits_to_float(float_to_bf16_bits(src[i])) : src[i];
      EXPECT_EQ(back[i], expect) << dtype_name(t) << " " << i;
    }
    for (int i = 0; i < 2 * static_cast<int>(dtype_size(t)); ++i) EXPECT_EQ(buf[i], 0) << "wrote before the offset";
  }
}

}  // namespace
