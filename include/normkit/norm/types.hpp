// Operator-level vocabulary shared by every norm: element types, where data lives,
// and how a batch of rows is laid out in memory. No CUDA or framework types appear
// here: front ends translate their tensors into these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace normkit::norm {

enum class DType : std::uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  // CPU fallback only, for float64 verification such as torch.autograd.gradcheck:
  // a call with any fp64 tensor computes in double throughout. The GPU kernels
  // reject it (no GPU kernel is built for it).
  kFloat64 = 3,
};

std::size_t dtype_size(DType t);
// Short name used in errors, cache keys and the CLI: "fp16", "bf16", "fp32", "fp64".
const char* dtype_name(DType t);
// Accepts "fp16|float16|half|f16", "bf16|bfloat16", "fp32|float32|float|f32",
// "fp64|float64|double|f64".
std::optional<DType> parse_dtype(std::string_view name);

// Where the operation runs. kAuto looks at the data: host memory (or no usable
// CUDA driver) selects the CPU fallback, device memory its GPU. Front ends that
// already know (PyTorch) pass kCpu or kCuda + index and skip the pointer query.
struct Device {
  enum class Kind : std::uint8_t { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // CUDA ordinal when kind == kCuda
  static Device cpu() { return {Kind::kCpu, -1}; }
  static Device cuda(int ordinal) { return {Kind::kCuda, ordinal}; }
};

// M rows of N contiguous elements. The rows of a batch are numbered r = 0..M-1 and
// row r starts at element
//     (r / rows_inner) * stride_outer + (r % rows_inner) * stride_inner
// where rows_inner comes from the call (RowShape). Two levels cover the common
// strided views without a copy: a plain row stride (rows_inner == M), and a
// slice of heads out of a fused projection, e.g. q = qkv[..., :H, :] of shape
// (T, H, D) with strides (3*H*D, D, 1): rows_inner = H, stride_outer = 3*H*D,
// stride_inner = D. Strides are in elements of this tensor's dtype.
//
// With the default rows_inner (= rows) only stride_inner is used: it is the plain
// row stride (Rows::strided builds that). `data` is const for inputs and outputs
// alike so that one type describes both; the operators write only through the
// output arguments.
struct Rows {
  const void* data = nullptr;  // nullptr: the tensor is absent (for optional tensors)
  DType dtype = DType::kFloat32;
  std::int64_t stride_outer = 0;
  std::int64_t stride_inner = 0;
  bool present() const { return data != nullptr; }
  // Rows `row_stride` elements apart (row_stride == n: contiguous), for a call
  // whose shape.rows_inner is the default (0 or rows).
  static Rows strided(const void* data, DType dtype, std::int64_t row_stride) {
    return Rows{data, dtype, row_stride, row_stride};
  }
};

struct RowShape {
  std::int64_t rows = 0;        // M (may be 0: nothing is launched)
  std::int64_t n = 0;           // N, elements per row (>= 1)
  std::int64_t rows_inner = 0;  // divides rows; 0 means rows (a single row stride)
};

// A weight or bias: H contiguous rows of N elements. H == 1 is the usual shared
// weight; H > 1 is per-head mode, where row r of the batch uses weight row r % H.
struct Param {
  const void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kFloat32;
  bool present() const { return data != nullptr; }
};

// An opaque CUDA stream (CUstream / cudaStream_t). Ignored by the CPU fallback.
using Stream = void*;

}  // namespace normkit::norm
