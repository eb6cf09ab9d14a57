#include <mutex>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/kernel.hpp"

namespace normkit::rt {
namespace {
std::map<std::string, std::string>& registry() {
  static std::map<std::string, std::string> headers;
  return headers;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void register_device_header(const std::string& name, const std::string& content) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto [it, inserted] = registry().emplace(name, content);
  // Two different files under one include name would make the cache key ambiguous.
  NK_CHECK(inserted || it->second == content, "device header '", name, "' registered twice with different content");
}

std::map<std::string, std::string> device_headers() {
  // Registration happens once at start-up (embedded headers); readers after that see a stable map.
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry();
}

}  // namespace normkit::rt
