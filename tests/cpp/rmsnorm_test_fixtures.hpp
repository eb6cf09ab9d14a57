// Set-up and checks shared by the forward and backward CPU tests, so that both
// directions build their buffers, wire their arguments and judge their outputs
// the same way: inputs filled with representable values, outputs left poisoned
// inside guard bytes, each output compared with the reference and its guards
// checked, and the thread-count and validation loops.
//
// A run holds a case's buffers and the arguments that point into them, so it is
// never moved once set up: callers hold it by unique_ptr.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rmsnorm_test_reference.hpp"

namespace rmsref {

inline constexpr DType kAllDtypes[] = {kF16, kBF16, kF32};

// The trace prefix for the fields every case has.
template <class Case>
std::string describe_layout(const Case& c) {
  return "rows=" + std::to_string(c.rows) + " n=" + std::to_string(c.n) +
         " rows_inner=" + std::to_string(c.rows_inner) + " heads=" + std::to_string(c.heads) +
         " x=" + normkit::norm::dtype_name(c.x) + " offset=" + std::to_string(c.weight_offset) +
         " pads=" + std::to_string(c.in_pad) + "/" + std::to_string(c.in_pad_outer) + "/" + std::to_string(c.out_pad) +
         "/" + std::to_string(c.out_pad_outer);
}

// Resolves the shape once for the buffers and passes the unresolved one to the
// library, which must resolve rows_inner itself.
template <class Run, class Case>
std::unique_ptr<Run> new_run(const Case& c) {
  auto r = std::make_unique<Run>();
  r->s = resolved(c.rows, c.n, c.rows_inner);
  r->args.shape = {c.rows, c.n, c.rows_inner};
  r->args.heads = c.heads;
  if constexpr (requires { r->args.weight_offset; }) r->args.weight_offset = c.weight_offset;  // not LayerNorm
  return r;
}

// Rows for the library to read. A broadcast input is a single row (strides 0),
// so only that row is filled.
inline Rows input_rows(Strided& dst, DType t, const RowShape& s, std::mt19937_64& rng, std::int64_t pad_inner,
                       std::int64_t pad_outer, bool broadcast = false) {
  dst = make_strided(t, s, pad_inner, pad_outer, broadcast);
  fill_rows(dst, broadcast ? RowShape{1, s.n, 1} : s, rng);
  return dst.rows();
}

// Rows for the library to write, left poisoned so that an element it skips
// fails the comparison.
inline Rows output_rows(Strided& dst, DType t, const RowShape& s, std::int64_t pad_inner, std::int64_t pad_outer) {
  dst = make_strided(t, s, pad_inner, pad_outer);
  return dst.rows();
}

// Gemma-style weights are stored as (w - 1): centre them on 0 when offset by 1.
inline Buf make_weight(DType t, std::int64_t count, std::mt19937_64& rng, double weight_offset) {
  return make_param(t, count, rng, 1.0 - weight_offset, 0.5);
}

// The reference takes null for an operand the case leaves out.
template <class T>
const T* if_given(const std::optional<DType>& t, const T& operand) {
  return t ? &operand : nullptr;
}

// An output is judged both on its values and on the bytes around them, so a
// stray write fails even where the values are right.
inline void expect_rows_match(const char* what, const Strided& got, const RowShape& s, const Values& ref) {
  EXPECT_TRUE(close_rows(what, got, s, ref));
  EXPECT_TRUE(got.buf.untouched_except(got.row_mask(s))) << what;
}

inline void expect_buf_match(const char* what, const Buf& got, const Values& ref) {
  EXPECT_TRUE(close_buf(what, got, ref));
  EXPECT_TRUE(got.untouched_except(std::vector<bool>(static_cast<std::size_t>(got.elems()), true))) << what;
}

struct Output {
  const char* name;
  const Buf* buf;
};

// Each run is set up afresh, so the only thing that differs between thread
// counts (0: automatic) is the partitioning; the bytes must not.
template <class Setup, class Outputs>
void expect_bitwise_across_thread_counts(const Setup& setup, const Outputs& outputs) {
  std::vector<std::vector<unsigned char>> first;
  for (int threads : {1, 2, 3, 7, 16, 0}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    ForceThreads force(threads);
    auto r = setup();
    ASSERT_NO_THROW(run_cpu(r->args));
    const std::vector<Output> got = outputs(*r);
    if (threads == 1) {
      for (const Output& o : got) first.push_back(o.buf->bytes());
      continue;
    }
    for (std::size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].buf->bytes(), first[k]) << got[k].name;
  }
}

template <class Args>
using Rejections = std::vector<std::pair<std::function<void(Args&)>, std::string>>;

// Validation must happen before anything is written, so every output of the
// run is checked after each rejected call.
template <class Run, class Args>
void expect_each_rejected_before_writing(Run& run, const Rejections<Args>& cases) {
  for (const auto& [mutate, needle] : cases) {
    expect_rejected(run, mutate, needle);
    for (const Output& o : run->outputs()) EXPECT_TRUE(o.buf->untouched()) << o.name;
  }
}

// The dtype grid both directions share: every x dtype, with the weight in x's
// dtype, in fp32 and absent, over every row length in kNs.
template <class Case, class Check>
void check_dtype_grid(std::uint64_t seed_base, const Check& check) {
  for (DType x : kAllDtypes)
    for (int w = 0; w < 3; ++w)
      for (std::int64_t n : kNs) {
        Case c;
        c.x = x;
        c.n = n;
        c.rows = n > 1024 ? 3 : 7;
        c.weight = w == 0 ? std::optional<DType>(x) : w == 1 ? std::optional<DType>(kF32) : std::nullopt;
        c.seed = seed_base + n + 7 * w + 31 * static_cast<int>(x);
        check(c);
      }
}

}  // namespace rmsref
