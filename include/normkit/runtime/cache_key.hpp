// The compile-cache key: SHA-256 over everything that changes the binary.
//
// Covered: family + template arguments, full generated source, the content hash of
// every embedded header the source (transitively) includes, normalized options
// (sorted, de-duplicated: option order never changes NVRTC's output for the
// options we pass), the exact target string, NVRTC version, the cache-format
// version and the codegen-affecting NORMKIT_* variables. Not covered, on purpose:
// eps-like runtime values (never in the source), log/dump settings, cache paths.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normkit/runtime/kernel.hpp"
#include "normkit/runtime/target.hpp"

namespace normkit::rt {

inline constexpr int kCacheFormatVersion = 1;

struct KeyInputs {
  const KernelSource* kernel = nullptr;
  std::vector<std::string> options;  // full option list given to NVRTC (minus the target)
  Target target;
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<std::pair<std::string, std::string>> codegen_env;
  const std::map<std::string, std::string>* headers = nullptr;  // default: device_headers()
  int format_version = kCacheFormatVersion;
};

std::vector<std::string> normalize_options(std::vector<std::string> options);
// Names of embedded headers reachable from `source` through #include "name" lines.
std::vector<std::string> included_headers(const std::string& source,
                                          const std::map<std::string, std::string>& headers);
std::string compute_cache_key(const KeyInputs& in);

}  // namespace normkit::rt
