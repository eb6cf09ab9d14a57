#include "normkit/runtime/target.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "normkit/runtime/error.hpp"

namespace normkit::rt {

std::string Target::str() const {
  NK_CHECK(arch > 0, "empty compile target: no architecture was resolved or given");
  return (ptx ? "compute_" : "sm_") + std::to_string(arch) + (arch_specific ? "a" : "");
}

bool uses_arch_specific_suffix(int arch) {
  // From Hopper on, the arch-specific features (wgmma, setmaxnreg, tcgen05, ...)
  // exist only under the "a" target; a kernel resolved per device may use them.
  return arch >= 90;
}

Target Target::parse(const std::string& text) {
  static const std::regex sm(R"(^sm_(\d{2,3})(a?)$)");
  static const std::regex compute(R"(^compute_(\d{2,3})$)");
  static const std::regex bare(R"(^(\d{2,3})(a?)$)");
  static const std::regex capability(R"(^(\d{1,2})\.(\d)$)");
  std::smatch m;
  Target t;
  if (std::regex_match(text, m, sm) || std::regex_match(text, m, bare)) {
    t.arch = std::stoi(m[1]);
    t.arch_specific = m[2].length() > 0;
  } else if (std::regex_match(text, m, compute)) {
    t.arch = std::stoi(m[1]);
    t.ptx = true;
  } else if (std::regex_match(text, m, capability)) {
    t.arch = std::stoi(m[1]) * 10 + std::stoi(m[2]);
    t.arch_specific = uses_arch_specific_suffix(t.arch);
  } else {
    NK_THROW("invalid compile target '", text,
             "': expected sm_XY[a] (cubin), compute_XY (PTX) or a compute capability like 9.0");
  }
  NK_CHECK(t.arch >= 50, "invalid compile target '", text, "': architecture ", t.arch, " is too old");
  return t;
}

Target resolve_target(int cc_major, int cc_minor, const ToolchainInfo& tools) {
  NK_CHECK(cc_major > 0 && cc_minor >= 0, "invalid compute capability ", cc_major, ".", cc_minor);
  NK_CHECK(!tools.nvrtc_archs.empty(), "NVRTC reported no supported architectures");
  const int arch = cc_major * 10 + cc_minor;
  std::vector<int> archs = tools.nvrtc_archs;
  std::sort(archs.begin(), archs.end());
  const std::string nvrtc = std::to_string(tools.nvrtc_major) + "." + std::to_string(tools.nvrtc_minor);

  Target t;
  if (std::binary_search(archs.begin(), archs.end(), arch)) {
    t.arch = arch;
    t.arch_specific = uses_arch_specific_suffix(arch);
    return t;
  }
  NK_CHECK(arch > archs.front(), "GPU of compute capability ", cc_major, ".", cc_minor,
           " is older than every target NVRTC ", nvrtc, " supports (oldest: sm_", archs.front(),
           "); use an NVRTC that still supports it (NORMKIT_NVRTC_PATH)");
  // The device is newer than this NVRTC (or an arch NVRTC skips): PTX of the newest
  // arch below it, which the driver JIT-compiles at load. "a" targets are not
  // forward compatible, so PTX never carries the suffix.
  const int below = *std::prev(std::lower_bound(archs.begin(), archs.end(), arch));
  t.arch = below;
  t.ptx = true;
  const int nvrtc_as_driver = tools.nvrtc_major * 1000 + tools.nvrtc_minor * 10;
  NK_CHECK(tools.driver_version == 0 || tools.driver_version >= nvrtc_as_driver,
           "GPU sm_", arch, " needs PTX (NVRTC ", nvrtc, " has no cubin target for it), but the driver (CUDA ",
           tools.driver_version / 1000, ".", (tools.driver_version % 1000) / 10,
           ") is older than NVRTC and could not load that PTX; use an NVRTC no newer than the driver");
  return t;
}

}  // namespace normkit::rt
