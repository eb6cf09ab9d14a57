// A row's mean and M2 (sum of squared deviations from the mean) from one
// reduction of two sums taken around a shift K common to the row:
//   S = sum(h - K),  Q = sum((h - K)^2),  mean = K + S / n,  M2 = Q - S^2 / n.
// Exact in real arithmetic for any K; in fp32 the subtraction loses about
// log2(1 + 2 S^2 / (n M2)) bits of M2, nothing when K is the mean and everything
// when |mean - K| >> std, as for K = 0 (E[h^2] - mean^2: rows of 1000 +- 1 keep
// about one bit). LayerNorm's forward takes K = h of the row's first column, a
// sample of the row, so |mean - K| is a few std for all but outlier columns, and
// the row's statistics cost one reduction (one block barrier, and for clustered
// rows one cluster barrier) where the two-pass form takes two.
//
// The guard: S^2 / n <= kShiftMaxRatio * M2, i.e. |mean - K| <= 4 std, bounds
// the loss to log2(1 + 2 * 16) ~ 5 bits of fp32's 24. A row outside it (K an
// outlier, a constant row whose K differs from its value by rounding, NaN) takes
// the exact second pass around the mean instead (`exact_needed`); the decision
// is a function of the reduced sums only, so every thread of a row (and of the
// cluster) makes the same one.
//
// Plain C++ on the host (tests/cpp/test_shifted_moments.cpp checks the algebra).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define NK_SHIFT_FN __host__ __device__ __forceinline__
#else
#define NK_SHIFT_FN inline
#endif

namespace nk {

constexpr float kShiftMaxRatio = 16.f;

struct ShiftedMoments {
  float mean;
  float m2;
  bool exact_needed;  // the guard failed: m2 is not to be trusted
};

NK_SHIFT_FN ShiftedMoments moments_from_shifted_sums(float shift, float s, float q, float n) {
  const float d = s / n;  // mean - shift
  const float between = s * d;  // S^2 / n >= 0
  const float m2 = q - between;
  // Written so that NaN fails it: !(a <= b) is true for NaN operands.
  const bool ok = between <= kShiftMaxRatio * m2;
  return ShiftedMoments{shift + d, m2, !ok};
}

// The moments of a row cut into C slices of n_c elements each (the CTAs of a
// cluster), from each slice's own mean and M2 (pairs[c] = {mean_c, M2_c}, each
// from two passes over the slice around its own mean):
//   mean = sum(mean_c) / C,  M2 = sum(M2_c) + n_c * sum((mean_c - mean)^2).
// Every term of M2 is a sum of non-negative numbers, so nothing cancels, whatever
// the mean's size against the spread (the parallel form of Chan, Golub and
// LeVeque's update, all C at once). Added in slice order: the same bits for every
// caller that holds the same pairs.
struct SliceMoments {
  float mean;
  float m2;
};

template <int C>
NK_SHIFT_FN SliceMoments combine_slice_moments(const float (&pairs)[C][2], float n_c) {
  float mean = 0.f;
  for (int c = 0; c < C; ++c) mean += pairs[c][0];
  mean /= static_cast<float>(C);
  float within = 0.f;
  float between = 0.f;
  for (int c = 0; c < C; ++c) {
    within += pairs[c][1];
    const float d = pairs[c][0] - mean;
    between += d * d;
  }
  return SliceMoments{mean, within + n_c * between};
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// The mean and M2 of a CTA's slice of n elements from the sums of h - around and of
// its square (sums_around(around, acc) adds the thread's to acc[0] and acc[1]),
// reduced over the CTA by cta_sums(float (&)[2]). Exact to first order in
// |mean - around| / std: for `around` a mean already taken once, near enough.
template <class CtaSums, class SumsAround>
__device__ __forceinline__ SliceMoments slice_moments_around(float around, float n, CtaSums&& cta_sums,
                                                             SumsAround&& sums_around) {
  float sums[2] = {0.f, 0.f};
  sums_around(around, sums);
  cta_sums(sums);
  const ShiftedMoments m = moments_from_shifted_sums(around, sums[0], sums[1], n);
  return SliceMoments{m.mean, fmaxf(m.m2, 0.f)};
}

// The mean and M2 of a CTA's slice of n elements (the rings' kernels, where a CTA
// barrier is time the SM's only CTAs issue no stores) from one CTA reduction of each
// thread's sums around `shift`, s = sum(h - shift) and q = sum((h - shift)^2):
// cta_sums(float (&)[2]) sums both over the CTA. Where the guard fails the sums are
// taken again around the mean found (slice_moments_around); uniform over the CTA,
// whose threads hold the same reduced sums. after_first() runs after the first
// reduction, once every thread has made its first pass.
template <class CtaSums, class SumsAround, class AfterFirst>
__device__ __forceinline__ SliceMoments shifted_slice_moments(float shift, float s, float q, float n,
                                                              CtaSums&& cta_sums, SumsAround&& sums_around,
                                                              AfterFirst&& after_first) {
  float sums[2] = {s, q};
  cta_sums(sums);
  after_first();
  const ShiftedMoments m = moments_from_shifted_sums(shift, sums[0], sums[1], n);
  SliceMoments moments{m.mean, m.m2};
  if (m.exact_needed) moments = slice_moments_around(m.mean, n, cta_sums, sums_around);
  return moments;
}
#endif

}  // namespace nk
