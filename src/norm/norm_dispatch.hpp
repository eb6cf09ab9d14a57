// Where a norm call runs, shared by every operator's entry points.
#pragma once

#include <initializer_list>

#include "normkit/norm/types.hpp"

namespace normkit::norm::detail {

inline constexpr int kHost = -1;

// kHost or the CUDA ordinal the call runs on. Device::kAuto asks the driver where
// the first pointer lives and then requires every other one to agree; `names`
// label the pointers in errors, `op` the public function.
int resolve_device(const Device& device, const char* op, std::initializer_list<const void*> pointers,
                   std::initializer_list<const char*> names);

}  // namespace normkit::norm::detail
