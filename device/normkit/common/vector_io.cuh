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

// A raw vector (already in registers) widened to fp32.
template <int VEC, class T>
__device__ __forceinline__ void widen(const Packed<T, VEC>& pk, float (&out)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = to_float(pk.v[i]);
}

// One load of the whole vector (a copy: widen reading through a reference to memory
// would be free to load element by element).
template <int VEC, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[VEC]) {
  const Packed<T, VEC> pk = *reinterpret_cast<const Packed<T, VEC>*>(p);
  widen(pk, out);
}
// bf16 pairs are loaded as the 32-bit words they are and widened with one shift (the
// even element) or one mask (the odd) each. Loaded as 16-bit elements, every odd
// element was first moved into a register of its own (PRMT and MOV before the shift:
// three instructions for one; norm_bwd_bulk_kernel's SASS, LayerNorm bf16 N=65536,
// where widening took a fifth of the row loop), and rebuilding the words from the
// elements after the load does not undo it (nvcc 13.0: the same PRMTs, and the
// global weight's one 16-byte load split into eight 2-byte ones).
template <int WORDS>
__device__ __forceinline__ void widen_bf16_words(const unsigned (&words)[WORDS], float (&out)[2 * WORDS]) {
#pragma unroll
  for (int j = 0; j < WORDS; ++j) {
    out[2 * j] = __uint_as_float(words[j] << 16);
    out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}
template <int VEC>
__device__ __forceinline__ void load_vec(const bf16* p, float (&out)[VEC]) {
  if constexpr (VEC % 2 != 0) {
    const Packed<bf16, VEC> pk = *reinterpret_cast<const Packed<bf16, VEC>*>(p);
    widen(pk, out);
  } else {
    const Packed<unsigned, VEC / 2> words = *reinterpret_cast<const Packed<unsigned, VEC / 2>*>(p);
    widen_bf16_words(words.v, out);
  }
}

// Words of shared memory (load_shared_vec below: a vector of them widened to fp32,
// bf16 pairs as words), read where and in the order the code reads them: the loads
// are asm volatile, so the compiler neither hoists a loop-invariant read out of its
// loop nor moves them ahead of each other. As plain reads, norm_bwd_bulk_kernel's
// weight slice (the same every row) left the row loop for registers the kernel did
// not have and the items' loads went ahead: NVRTC 13.0 spilled 16-116 bytes at 128
// registers (LayerNorm bf16 N=8192-16384 on one CTA).
// WORDS * 4 is 8, 16 or 32 bytes, and p (shared memory) aligned to it.
template <int WORDS>
__device__ __forceinline__ void load_shared_words(const void* p, unsigned (&w)[WORDS]) {
  static_assert(WORDS == 2 || WORDS % 4 == 0, "8, 16 or 32 bytes");
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (WORDS == 2) {
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(at));
  } else {
#pragma unroll
    for (int j = 0; j < WORDS; j += 4)
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[j]), "=r"(w[j + 1]), "=r"(w[j + 2]), "=r"(w[j + 3])
                   : "r"(at + 4 * j));
  }
}
// VEC elements of T held as raw 32-bit words (load_shared_words' or a kernel's
// registers) widened to fp32, bf16 pairs with one shift or one mask each.
template <class T, int VEC, int WORDS>
__device__ __forceinline__ void widen_words(const unsigned (&w)[WORDS], float (&out)[VEC]) {
  static_assert(WORDS * 4 == VEC * static_cast<int>(sizeof(T)), "the words hold the vector");
  if constexpr (is_bf16<T>) {
    widen_bf16_words(w, out);
  } else {
    union {
      unsigned w[WORDS];
      Packed<T, VEC> pk;
    } u;
#pragma unroll
    for (int j = 0; j < WORDS; ++j) u.w[j] = w[j];
    widen(u.pk, out);
  }
}
template <int VEC, class T>
__device__ __forceinline__ void load_shared_vec(const T* p, float (&out)[VEC]) {
  // Loaded into the union itself: through a word array copied into it, the fp16 and
  // fp32 rings' SASS changed (norm_bwd_bulk_kernel's SHARED_READS); bf16's did not.
  union {
    unsigned w[VEC * static_cast<int>(sizeof(T)) / 4];
    Packed<T, VEC> pk;
  } u;
  load_shared_words(p, u.w);
  if constexpr (is_bf16<T>) {
    widen_bf16_words(u.w, out);
  } else {
    widen(u.pk, out);
  }
}

// The raw vector, for kernels that keep data in registers in its storage dtype.
template <int VEC, class T>
__device__ __forceinline__ Packed<T, VEC> load_packed(const T* p) {
  return *reinterpret_cast<const Packed<T, VEC>*>(p);
}

// A vector a kernel keeps raw in registers (its storage dtype) and widens where it
// uses it: get() the first time, get_again() after (see to_float_again). bf16
// pairs are held as 32-bit words and widened with one shift or one mask each.
// Held as 16-bit elements, the compiler unpacked every element into a register of
// its own at the load (twice the registers of the raw data, plus a branch around
// each item's load; the bf16 N=131072 forward's SASS). f16 pairs widen from either
// half of a word in one instruction already.
template <class T, int VEC, bool WORDS = (sizeof(T) == 2 && VEC >= 2)>
struct RawVec {
  Packed<T, VEC> pk;
  __device__ __forceinline__ void load(const T* p) { pk = *reinterpret_cast<const Packed<T, VEC>*>(p); }
  __device__ __forceinline__ float get(int i) const { return to_float(pk.v[i]); }
  __device__ __forceinline__ float get_again(int i) const { return to_float_again(pk.v[i]); }
};

template <int VEC>
struct RawVec<bf16, VEC, true> {
  Packed<unsigned, VEC / 2> pk;  // element 2j in the low half of word j
  __device__ __forceinline__ void load(const bf16* p) {
    pk = *reinterpret_cast<const Packed<unsigned, VEC / 2>*>(p);
  }
  __device__ __forceinline__ float get(int i) const {
    const unsigned w = pk.v[i / 2];
    return __uint_as_float(i % 2 == 0 ? w << 16 : w & 0xffff0000u);
  }
  __device__ __forceinline__ float get_again(int i) const {
    unsigned u;
    if (i % 2 == 0) {
      asm("shl.b32 %0, %1, 16;" : "=r"(u) : "r"(pk.v[i / 2]));
    } else {
      asm("and.b32 %0, %1, 0xffff0000;" : "=r"(u) : "r"(pk.v[i / 2]));
    }
    return __uint_as_float(u);
  }
};

// How the outputs' vectors are stored: a build switch for measuring (the README's
// NORMKIT_NVRTC_FLAGS, -DNK_STORE_CACHE=M). 0 (default): plain stores, the code every
// measurement in docs/perf/ ran (SASS unchanged by this switch's code: 40 kernels of
// both norms compared). 1: st.global.cs (__stcs; SASS STG.E.EF, evict first), so that
// the output's lines, written once and never read here, are the first L2 gives up.
// Every caller's pointer is global memory (outputs and partials); the hinted stores go
// by words of 16, 8 or 4 bytes, and a 2-byte vector (VEC 1 of a 16-bit type) plainly.
// A plan that stores evict-first (RowPlan::evict_first) compiles with
// -DNK_PLAN_STORE_CACHE=1, which a -DNK_STORE_CACHE given for measuring overrides.
#ifndef NK_STORE_CACHE
#ifdef NK_PLAN_STORE_CACHE
#define NK_STORE_CACHE NK_PLAN_STORE_CACHE
#else
#define NK_STORE_CACHE 0
#endif
#endif
static_assert(NK_STORE_CACHE == 0 || NK_STORE_CACHE == 1, "NK_STORE_CACHE is 0 or 1");

// The widest word a hinted store of BYTES takes.
template <int BYTES>
struct StoreWord {
  using type = unsigned;
};
template <>
struct StoreWord<8> {
  using type = uint2;
};
template <>
struct StoreWord<16> {
  using type = uint4;
};

template <class T, int VEC>
__device__ __forceinline__ void store_packed(Packed<T, VEC>* dst, const Packed<T, VEC>& pk) {
  constexpr int BYTES = static_cast<int>(sizeof(Packed<T, VEC>));
  if constexpr (NK_STORE_CACHE == 0 || (BYTES % 16 != 0 && BYTES != 8 && BYTES != 4)) {
    *dst = pk;
  } else {
    using W = typename StoreWord<BYTES % 16 == 0 ? 16 : BYTES>::type;
    constexpr int WORDS = BYTES / static_cast<int>(sizeof(W));
    // Packed is aligned to its size, so to W's.
    const W* const words = reinterpret_cast<const W*>(&pk);
#pragma unroll
    for (int j = 0; j < WORDS; ++j) __stcs(reinterpret_cast<W*>(dst) + j, words[j]);
  }
}

template <int VEC, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Packed<T, VEC> pk;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pk.v[i] = from_float<T>(in[i]);
  store_packed(reinterpret_cast<Packed<T, VEC>*>(p), pk);
}

// store_vec at vector index v of `base` (elements v * VEC on), through a Packed
// pointer: the one wide store. `store_vec(base + v * VEC, ...)` came out as VEC scalar
// stores in norm_fwd_group_kernel (nvcc 13.0, PTX st.global.f32 x4; the cast's
// alignment was taken from the element pointer), though not in the other kernels.
template <int VEC, class T>
__device__ __forceinline__ void store_vec_at(T* base, long long v, const float (&in)[VEC]) {
  Packed<T, VEC> pk;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pk.v[i] = from_float<T>(in[i]);
  store_packed(reinterpret_cast<Packed<T, VEC>*>(base) + v, pk);
}
}  // namespace nk
