// The C function table that normkit._C publishes, as the capsule normkit._C._c_api,
// for normkit._torch_C (src/torch).
//
// Why a table instead of linking normkit_norm into the torch extension as well:
// a process must hold exactly one normkit runtime (one kernel cache, one CUDA
// context per device, one set of counters). normkit_norm and the runtime are
// static libraries, so a second module linking them would carry a second,
// independent runtime. The torch extension therefore calls the operators of the
// one in normkit._C through these pointers.
//
// Both modules are compiled from this header in the same build; the version and
// the argument structs' sizes are still checked when normkit._torch_C is imported,
// so a stale module from another build is refused instead of misreading memory.
// Entries never throw: they return nullptr on success, or the error text, which
// stays valid until the calling thread's next call into the table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"

namespace normkit::capi {

inline constexpr std::uint32_t kVersion = 2;
inline constexpr const char* kCapsuleName = "normkit._C._c_api";

struct Table {
  std::uint32_t version;
  std::uint32_t fwd_args_size;  // sizeof(norm::RmsNormFwdArgs)
  std::uint32_t bwd_args_size;  // sizeof(norm::RmsNormBwdArgs)
  const char* (*rmsnorm_fwd)(const norm::RmsNormFwdArgs* args) noexcept;
  // The backward, asking `allocate` for its workspace when it needs one (device
  // data with weight or dbias) and args->workspace is null: one call where the
  // C++ API takes a size query and a call. `allocate` returns device memory of at
  // least `bytes` that stays valid until the kernels have run (stream-ordered),
  // or throws.
  const char* (*rmsnorm_bwd)(const norm::RmsNormBwdArgs* args, void* (*allocate)(std::size_t bytes, void* context),
                             void* context) noexcept;
  // Version 2: LayerNorm (same conventions as the RMSNorm entries) and the
  // in-place fused adds.
  std::uint32_t ln_fwd_args_size;     // sizeof(norm::LayerNormFwdArgs)
  std::uint32_t ln_bwd_args_size;     // sizeof(norm::LayerNormBwdArgs)
  std::uint32_t fused_add_args_size;  // sizeof(norm::FusedAddNormArgs)
  const char* (*layernorm_fwd)(const norm::LayerNormFwdArgs* args) noexcept;
  const char* (*layernorm_bwd)(const norm::LayerNormBwdArgs* args, void* (*allocate)(std::size_t bytes, void* context),
                               void* context) noexcept;
  const char* (*fused_add_rmsnorm)(const norm::FusedAddNormArgs* args) noexcept;
  const char* (*fused_add_layernorm)(const norm::FusedAddNormArgs* args) noexcept;
};

}  // namespace normkit::capi
