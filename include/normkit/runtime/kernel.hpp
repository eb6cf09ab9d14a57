// What an operator hands the runtime (KernelSource) and what comes back from a
// compile (CompiledKernel). The runtime never looks inside the source beyond
// following its #include "..." lines to hash the embedded device headers it uses.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "normkit/runtime/target.hpp"

namespace normkit::rt {

struct KernelSource {
  std::string family;           // kernel family, e.g. "selftest_axpy" (file names, logs, errors)
  std::string template_args;    // canonical text of everything the instantiation is specialized on
  std::string source;           // the generated translation unit (includes embedded headers by name)
  std::string entry;            // name expression of the __global__ to fetch, e.g. "axpy<float, 4>"
  std::vector<std::string> options;  // NVRTC options beyond the runtime's own (order-insensitive)
};

struct CompiledKernel {
  std::string key;              // hex SHA-256 cache key
  Target target;
  std::string lowered_name;     // mangled name of `entry`
  std::vector<char> binary;     // cubin, or PTX text when target.ptx
  // Resource report from ptxas (-1 when not reported, e.g. PTX targets).
  int registers = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
  int stack_frame_bytes = -1;
  std::string ptxas_log;
  std::map<std::string, std::string> meta;  // anything else recorded with the entry
};

// Embedded device headers: name -> content. Operator libraries register theirs at
// static-initialization time (the build embeds them; nothing is read from disk).
void register_device_header(const std::string& name, const std::string& content);
// A snapshot (copy): registration may run concurrently with compiles in other threads.
std::map<std::string, std::string> device_headers();

}  // namespace normkit::rt
