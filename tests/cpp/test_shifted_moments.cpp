// Host checks of LayerNorm's one-reduction statistics (device/normkit/common/shifted_moments.cuh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "normkit/common/shifted_moments.cuh"

namespace {

using nk::moments_from_shifted_sums;

struct Exact {
  double mean, m2;
};

Exact exact(const std::vector<float>& h) {
  double mean = 0;
  for (float v : h) mean += v;
  mean /= static_cast<double>(h.size());
  double m2 = 0;
  for (float v : h) m2 += (v - mean) * (v - mean);
  return {mean, m2};
}

nk::ShiftedMoments shifted(const std::vector<float>& h, float shift) {
  float s = 0.f, q = 0.f;
  for (float v : h) {
    const float c = v - shift;
    s += c;
    q += c * c;
  }
  return moments_from_shifted_sums(shift, s, q, static_cast<float>(h.size()));
}

std::vector<float> gaussian_row(int n, float mean, float spread, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, spread);
  std::vector<float> h(n);
  for (float& v : h) v = mean + dist(gen);
  return h;
}

TEST(ShiftedMoments, SampleShiftIsAccurateFarFromZero) {
  // Rows of 1000 +- 1: the shift by the first element keeps M2 to fp32 accuracy.
  for (unsigned seed = 0; seed < 20; ++seed) {
    const auto h = gaussian_row(4096, 1000.f, 1.f, seed);
    const Exact want = exact(h);
    const auto got = shifted(h, h[0]);
    if (got.exact_needed) continue;  // h[0] beyond 4 std: the kernel re-reduces
    EXPECT_NEAR(got.m2 / want.m2, 1.0, 1e-4) << "seed " << seed;
    EXPECT_NEAR(got.mean, want.mean, 1e-3) << "seed " << seed;
  }
}

TEST(ShiftedMoments, ZeroShiftCancelsAndIsCaught) {
  // Without a shift (E[h^2] - mean^2) the guard refuses: the M2 it would give is garbage.
  const auto h = gaussian_row(4096, 1000.f, 1.f, 7);
  const Exact want = exact(h);
  const auto got = shifted(h, 0.f);
  EXPECT_TRUE(got.exact_needed);
  EXPECT_GT(std::abs(got.m2 / want.m2 - 1.0), 1e-2) << "the guard is what saves this row";
}

TEST(ShiftedMoments, OutlierShiftIsCaught) {
  auto h = gaussian_row(4096, 0.f, 1.f, 3);
  h[0] = 1e4f;  // an outlier column: |mean - K| is ~64 std
  EXPECT_TRUE(shifted(h, h[0]).exact_needed);
  // A shift within a few std passes and is accurate.
  const auto near = shifted(h, 2.f);
  EXPECT_FALSE(near.exact_needed);
  EXPECT_NEAR(near.m2 / exact(h).m2, 1.0, 1e-4);
}

TEST(ShiftedMoments, ConstantRows) {
  const std::vector<float> h(1000, 3.25f);
  const auto same = shifted(h, 3.25f);  // shift equal to every value: exactly zero
  EXPECT_FALSE(same.exact_needed);
  EXPECT_EQ(same.m2, 0.f);
  EXPECT_EQ(same.mean, 3.25f);
  EXPECT_TRUE(shifted(h, 3.f).exact_needed);  // not exactly zero: re-reduced
}

TEST(ShiftedMoments, NanIsCaught) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(moments_from_shifted_sums(0.f, nan, 1.f, 4.f).exact_needed);
  EXPECT_TRUE(moments_from_shifted_sums(0.f, 1.f, nan, 4.f).exact_needed);
}

// combine_slice_moments: a row cut into C equal slices, each slice's mean and M2 from
// two fp32 passes around its own mean (as norm_fwd_bulk_kernel's CTAs take them).
template <int C>
nk::SliceMoments by_slices(const std::vector<float>& h) {
  const int n_c = static_cast<int>(h.size()) / C;
  float pairs[C][2];
  for (int c = 0; c < C; ++c) {
    float sum = 0.f;
    for (int i = 0; i < n_c; ++i) sum += h[c * n_c + i];
    const float mean = sum / static_cast<float>(n_c);
    float m2 = 0.f;
    for (int i = 0; i < n_c; ++i) m2 += (h[c * n_c + i] - mean) * (h[c * n_c + i] - mean);
    pairs[c][0] = mean;
    pairs[c][1] = m2;
  }
  return nk::combine_slice_moments<C>(pairs, static_cast<float>(n_c));
}

TEST(SliceMoments, CombinedSlicesMatchTheRowFarFromZero) {
  // Rows of 1000 +- 1 (where E[h^2] - mean^2 keeps about one bit) and of 0 +- 1.
  for (const float mean : {1000.f, 0.f})
    for (unsigned seed = 0; seed < 10; ++seed) {
      const auto h = gaussian_row(16384, mean, 1.f, seed);
      const Exact want = exact(h);
      for (const nk::SliceMoments got : {by_slices<1>(h), by_slices<4>(h), by_slices<16>(h)}) {
        EXPECT_NEAR(got.m2 / want.m2, 1.0, 1e-4) << "mean " << mean << " seed " << seed;
        EXPECT_NEAR(got.mean, want.mean, 1e-5 * (1.0 + std::abs(want.mean))) << "seed " << seed;
      }
    }
}

TEST(SliceMoments, SlicesOfDifferentMeans) {
  // Slice c around 10 * c: most of M2 is between the slices, which the combination adds
  // as a sum of squares of the slices' mean differences (no cancellation).
  std::vector<float> h(4 * 4096);
  for (int c = 0; c < 4; ++c) {
    const auto part = gaussian_row(4096, 10.f * static_cast<float>(c), 0.5f, 100 + c);
    std::copy(part.begin(), part.end(), h.begin() + c * 4096);
  }
  const Exact want = exact(h);
  const nk::SliceMoments got = by_slices<4>(h);
  EXPECT_NEAR(got.m2 / want.m2, 1.0, 1e-5);
  EXPECT_NEAR(got.mean, want.mean, 1e-4);
  // A constant row: exactly zero, whatever the slices.
  const std::vector<float> flat(4096, 3.25f);
  EXPECT_EQ(by_slices<16>(flat).m2, 0.f);
  EXPECT_EQ(by_slices<16>(flat).mean, 3.25f);
}

}  // namespace
