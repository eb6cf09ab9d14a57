// The column-chunk geometry of the split backward (params.cuh), checked on the
// host: every vector of a row has exactly one owner, the owners of a warp are
// adjacent, and the host plan counts the chunks the kernels use.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "normkit/norm/params.cuh"
#include "rmsnorm_heuristics.hpp"

namespace {

using normkit::norm::detail::plan_rows;
using normkit::norm::detail::RowPlan;
using normkit::norm::detail::RowPlanInputs;

TEST(RmsNormSplitGeometry, EveryVectorHasExactlyOneOwner) {
  for (int tpr : {32, 256}) {
    for (int items : {1, 2, 4}) {
      for (long long nv : {1LL, 31LL, 256LL, 1023LL, 1024LL, 1025LL, 16384LL, 32768LL + 7}) {
        std::vector<int> owners(static_cast<std::size_t>(nv), 0);
        const long long chunks = nk::split_chunks(nv, tpr, items);
        for (long long c = 0; c < chunks; ++c)
          for (int k = 0; k < items; ++k)
            for (int t = 0; t < tpr; ++t) {
              const long long v = nk::split_vector(c, k, t, tpr, items);
              ASSERT_GE(v, 0);
              if (v < nv) ++owners[static_cast<std::size_t>(v)];
            }
        for (long long v = 0; v < nv; ++v)
          ASSERT_EQ(owners[static_cast<std::size_t>(v)], 1) << "nv=" << nv << " tpr=" << tpr << " items=" << items;
        // No chunk is empty: the last one starts inside the row.
        EXPECT_LT(nk::split_vector(chunks - 1, 0, 0, tpr, items), nv);
      }
    }
  }
}

TEST(RmsNormSplitGeometry, AWarpReadsAdjacentVectors) {
  for (int k = 0; k < 4; ++k)
    for (int t = 1; t < 32; ++t)
      EXPECT_EQ(nk::split_vector(3, k, t, 256, 4), nk::split_vector(3, k, t - 1, 256, 4) + 1);
}

TEST(RmsNormSplitGeometry, HostPlanCountsTheKernelsChunks) {
  RowPlanInputs in;
  in.n = 262144;
  in.max_vec = 8;
  in.x_bytes = 2;
  in.dout_bytes = 2;
  in.backward = true;
  in.param_grads = true;
  in.arch = 100;  // sm_90 holds these rows in a cluster (plan_cluster_rows)
  const RowPlan p = plan_rows(in);
  ASSERT_TRUE(p.split) << p.str();
  EXPECT_EQ(normkit::norm::detail::split_chunks(in.n, p), nk::split_chunks(in.n / p.vec, p.tpr, p.split_items));
  EXPECT_EQ(normkit::norm::detail::split_chunks(in.n, p), 32);  // 256 threads of four 8-element vectors
}

}  // namespace
