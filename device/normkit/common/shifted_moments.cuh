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

}  // namespace nk
