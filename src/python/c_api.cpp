// normkit._C._c_api: the operator table of c_api.hpp, filled from normkit_norm.
#include "c_api.hpp"

#include <nanobind/nanobind.h>

#include <exception>
#include <string>

namespace nb = nanobind;

namespace {

namespace nn = normkit::norm;

thread_local std::string last_error;

// Runs `call`; nullptr on success, else its error text (see c_api.hpp).
template <class Call>
const char* guarded(Call&& call) noexcept {
  try {
    call();
    return nullptr;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return last_error.c_str();
}

const char* rmsnorm_fwd(const nn::RmsNormFwdArgs* args) noexcept {
  return guarded([&] { nn::rmsnorm_fwd(*args); });
}

const char* rmsnorm_bwd(const nn::RmsNormBwdArgs* args, void* (*allocate)(std::size_t, void*), void* context) noexcept {
  return guarded([&] { nn::rmsnorm_bwd(*args, allocate, context); });
}

const char* layernorm_fwd(const nn::LayerNormFwdArgs* args) noexcept {
  return guarded([&] { nn::layernorm_fwd(*args); });
}

const char* layernorm_bwd(const nn::LayerNormBwdArgs* args, void* (*allocate)(std::size_t, void*),
                          void* context) noexcept {
  return guarded([&] { nn::layernorm_bwd(*args, allocate, context); });
}

const char* fused_add_rmsnorm(const nn::FusedAddNormArgs* args) noexcept {
  return guarded([&] { nn::fused_add_rmsnorm(*args); });
}

const char* fused_add_layernorm(const nn::FusedAddNormArgs* args) noexcept {
  return guarded([&] { nn::fused_add_layernorm(*args); });
}

const normkit::capi::Table table{
    normkit::capi::kVersion,
    static_cast<std::uint32_t>(sizeof(nn::RmsNormFwdArgs)),
    static_cast<std::uint32_t>(sizeof(nn::RmsNormBwdArgs)),
    &rmsnorm_fwd,
    &rmsnorm_bwd,
    static_cast<std::uint32_t>(sizeof(nn::LayerNormFwdArgs)),
    static_cast<std::uint32_t>(sizeof(nn::LayerNormBwdArgs)),
    static_cast<std::uint32_t>(sizeof(nn::FusedAddNormArgs)),
    &layernorm_fwd,
    &layernorm_bwd,
    &fused_add_rmsnorm,
    &fused_add_layernorm,
};

}  // namespace

void register_c_api(nb::module_& m) {
  m.attr("_c_api") = nb::capsule(&table, normkit::capi::kCapsuleName);
}
