// NVRTC front of the runtime: KernelSource + Target -> CompiledKernel. Internal.
#pragma once

#include <string>
#include <vector>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/kernel.hpp"

namespace normkit::rt {

// The full NVRTC option list for a kernel (without the -arch option), as it enters the cache key.
std::vector<std::string> compile_options(const KernelSource& kernel, const Target& target, const Config& config);

// Compiles with NVRTC. `key` is recorded in the result. Throws normkit::Error with
// the NVRTC log on failure, and on spills when config.assert_no_spills.
CompiledKernel nvrtc_compile(const KernelSource& kernel, const Target& target, const std::string& key,
                             const Config& config);

// Fills registers / spill / stack fields from a ptxas -v report (exposed for tests).
void parse_ptxas_report(const std::string& log, const std::string& lowered_name, CompiledKernel& out);

}  // namespace normkit::rt
