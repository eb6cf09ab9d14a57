#include "normkit/norm/types.hpp"

#include <cctype>
#include <string>

#include "normkit/runtime/error.hpp"

namespace normkit::norm {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
  }
  // A DType cast from an out-of-range integer (a front end's bug): fail loudly
  // rather than hand back a size that would turn into a wrong memory access.
  NK_THROW("invalid DType value ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat64:
      return "fp64";
  }
  // Used inside error messages, so this must not throw.
  return "invalid-dtype";
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string s;
  s.reserve(name.size());
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s == "fp16" || s == "float16" || s == "half" || s == "f16") return DType::kFloat16;
  if (s == "bf16" || s == "bfloat16") return DType::kBFloat16;
  if (s == "fp32" || s == "float32" || s == "float" || s == "f32") return DType::kFloat32;
  if (s == "fp64" || s == "float64" || s == "double" || s == "f64") return DType::kFloat64;
  return std::nullopt;
}

}  // namespace normkit::norm
