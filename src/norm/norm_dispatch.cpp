// resolve_device (norm_dispatch.hpp).
#include "norm_dispatch.hpp"

#include <optional>
#include <string>
#include <vector>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"

namespace normkit::norm::detail {

// The lists are only materialized on the kAuto path: an explicit device (what
// the front ends pass on every call) costs no allocation.
int resolve_device(const Device& device, const char* op, std::initializer_list<const void*> pointer_list,
                   std::initializer_list<const char*> name_list) {
  switch (device.kind) {
    case Device::Kind::kCpu: return kHost;
    case Device::Kind::kCuda:
      NK_CHECK(device.index >= 0, op, ": argument 'device' is CUDA with ordinal ", device.index,
               "; a CUDA device needs an ordinal >= 0");
      return device.index;
    case Device::Kind::kAuto: break;
  }
  const std::vector<const void*> pointers(pointer_list);
  const std::vector<const char*> names(name_list);
  rt::Runtime& runtime = rt::Runtime::instance();
  const std::optional<int> first = runtime.pointer_device(pointers.front());
  if (!first) {
    for (size_t i = 1; i < pointers.size(); ++i)
      NK_CHECK(pointers[i] == nullptr || !runtime.pointer_device(pointers[i]), op, ": argument '", names[i],
               "' is device memory but '", names[0], "' is host memory");
    return kHost;
  }
  std::vector<std::string> labelled;
  for (const char* n : names) labelled.push_back(std::string(op) + " argument " + n);
  return runtime.device_of(pointers, labelled);
}

}  // namespace normkit::norm::detail
