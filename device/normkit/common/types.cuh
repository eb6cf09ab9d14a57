// Element types and conversions for NVRTC-compiled kernels, without cuda_fp16.h /
// cuda_bf16.h: NVRTC 13 ships neither and user machines need not have the CUDA
// headers, so the 16-bit types are plain bit containers converted with PTX `cvt`.
//
// Invariants: every kernel computes in fp32; to_float() is exact for all three
// types; from_float<T>() rounds to nearest even (PTX .rn), preserving NaN/Inf.
// `none` marks an absent tensor in a kernel's template arguments so that the
// feature compiles away with `if constexpr` instead of a runtime branch.
#pragma once

namespace nk {

struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};
struct none {};

template <class T>
inline constexpr bool is_none = false;
template <>
inline constexpr bool is_none<none> = true;

template <class T>
inline constexpr bool is_bf16 = false;
template <>
inline constexpr bool is_bf16<bf16> = true;

// T, or Fallback where T is `none` (a type to declare storage with that is never used).
template <class T, class Fallback>
struct or_type {
  using type = T;
};
template <class Fallback>
struct or_type<none, Fallback> {
  using type = Fallback;
};
template <class T>
inline constexpr int size_or_zero = is_none<T> ? 0 : static_cast<int>(sizeof(typename or_type<T, char>::type));

__device__ __forceinline__ float to_float(float v) { return v; }
// bf16 is the top half of an fp32: widening is a shift (no cvt needed, works on sm_80).
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }
__device__ __forceinline__ float to_float(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

// to_float for a value a kernel keeps raw in registers and widens a second time
// (the epilogue after the row reduction). The compiler merges two identical C++
// shifts of bf16 and then keeps every widened fp32 value live across the
// reduction: twice the registers of the raw row, which on 1024-thread CTAs (64
// registers) deferred half of the thread's loads (SASS of the bf16 N=131072
// forward). An asm shift is a different expression, so it is recomputed. f16's
// widening is already an asm cvt and is not merged.
template <class T>
__device__ __forceinline__ float to_float_again(T v) {
  return to_float(v);
}
template <>
__device__ __forceinline__ float to_float_again<bf16>(bf16 v) {
  unsigned u;
  asm("shl.b32 %0, %1, 16;" : "=r"(u) : "r"(static_cast<unsigned>(v.bits)));
  return __uint_as_float(u);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

}  // namespace nk
