// Vector loads and stores of VEC elements, widened to / narrowed from fp32.
//
// Invariant (the caller's, checked on the host before launch): every pointer
// passed here is aligned to VEC * sizeof(T). The compiler then emits the widest
// accesses that alignment allows (16-byte ld/st.global.v4 for 8 x bf16 or
// 4 x fp32; two of them for 8 x fp32). VEC == 1 is the fallback for odd N or
// unaligned views and is always legal.
#pragma once

#include "normkit/common/types.cuh"

namespace nk {

template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Packed {
  T v[VEC];
};

template <int VEC, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[VEC]) {
  const Packed<T, VEC> pk = *reinterpret_cast<const Packed<T, VEC>*>(p);
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = to_float(pk.v[i]);
}

// The raw vector, for kernels that keep data in registers in its storage dtype.
template <int VEC, class T>
__device__ __forceinline__ Packed<T, VEC> load_packed(const T* p) {
  return *reinterpret_cast<const Packed<T, VEC>*>(p);
}

template <int VEC, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Packed<T, VEC> pk;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Packed<T, VEC>*>(p) = pk;
}

}  // namespace nk
