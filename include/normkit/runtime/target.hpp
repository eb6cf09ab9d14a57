// Compile-target resolution: compute capability -> exact NVRTC target string.
//
// Rules (DESIGN §2): the device's own cubin target when NVRTC supports the arch,
// with the "a" suffix from Hopper on (sm_90a, sm_100a, sm_120a) so kernels may use
// arch-specific instructions; PTX (compute_XY, never "a") for the newest arch NVRTC
// knows below the device only when NVRTC is older than the device; an error when
// the device is older than anything NVRTC supports, or when the PTX would come
// from an NVRTC newer than the driver (the driver could not JIT it). There is no
// default architecture: without a device or an explicit override, there is no target.
// Everything here is pure so that tests can inject capabilities and NVRTC versions.
#pragma once

#include <string>
#include <vector>

namespace normkit::rt {

struct Target {
  int arch = 0;             // e.g. 90 for sm_90a / compute_90
  bool arch_specific = false;  // "a" suffix
  bool ptx = false;          // compute_XY (PTX, JIT-compiled by the driver at load)

  std::string str() const;   // "sm_90a", "sm_80", "compute_90"
  // Parses "sm_90a", "sm_80", "compute_90", also "90a" / "9.0" shorthand; throws on anything else.
  static Target parse(const std::string& text);
  bool operator==(const Target&) const = default;
};

struct ToolchainInfo {
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<int> nvrtc_archs;  // nvrtcGetSupportedArchs(), e.g. {75, 80, ..., 90, 100, 120}
  int driver_version = 0;        // cuDriverGetVersion(), e.g. 13000; 0 = unknown (compile-only)
};

// Whether cubins for this arch get the "a" suffix.
bool uses_arch_specific_suffix(int arch);

// The target for a device of compute capability (major, minor).
Target resolve_target(int cc_major, int cc_minor, const ToolchainInfo& tools);

}  // namespace normkit::rt
