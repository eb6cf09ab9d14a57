#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/log.hpp"

namespace normkit::rt {
namespace {

namespace fs = std::filesystem;

template <typename Api>
struct LazyLibrary {
  std::once_flag once;
  std::optional<Api> api;
  std::string error;
};

LazyLibrary<DriverApi>& driver_state() {
  static LazyLibrary<DriverApi> s;
  return s;
}
LazyLibrary<NvrtcApi>& nvrtc_state() {
  static LazyLibrary<NvrtcApi> s;
  return s;
}

std::mutex& search_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& nvrtc_search_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

template <typename Api>
void resolve_symbols(void* handle, Api& api, std::string& missing);

#define NK_RESOLVE(name)                                                             \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, NK_STRINGIZE(name))); \
  if (api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + NK_STRINGIZE(name);

template <>
void resolve_symbols<DriverApi>(void* handle, DriverApi& api, std::string& missing) {
  NK_DRIVER_FUNCTIONS(NK_RESOLVE)
}
template <>
void resolve_symbols<NvrtcApi>(void* handle, NvrtcApi& api, std::string& missing) {
  NK_NVRTC_FUNCTIONS(NK_RESOLVE)
}
#undef NK_RESOLVE

void* try_open(const std::string& name, std::string& tried) {
  // RTLD_LOCAL: our lookups are explicit; never leak these symbols into the process.
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    tried += "\n  " + name + ": " + (why ? why : "not found");
  }
  return h;
}

// Candidates in documented order: NORMKIT_NVRTC_PATH, pip-wheel dirs, CUDA_HOME, system loader.
std::vector<std::string> nvrtc_candidates() {
  const std::string soname = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
  std::vector<std::string> out;
  auto add_dir = [&](const fs::path& dir) {
    out.push_back((dir / soname).string());
    out.push_back((dir / "libnvrtc.so").string());
  };
  const Config cfg = Config::from_environment();
  if (!cfg.nvrtc_path.empty()) {
    std::error_code ec;
    if (fs::is_directory(cfg.nvrtc_path, ec)) add_dir(cfg.nvrtc_path);
    else out.push_back(cfg.nvrtc_path);
  }
  {
    std::lock_guard<std::mutex> lock(search_mutex());
    for (const auto& d : nvrtc_search_dirs()) add_dir(d);
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* home = std::getenv(var); home && *home) {
      add_dir(fs::path(home) / "lib64");
      add_dir(fs::path(home) / "lib");
    }
  }
  out.push_back(soname);
  out.push_back("libnvrtc.so");
  add_dir("/usr/local/cuda/lib64");
  return out;
}

template <typename Api>
const Api& open_once(LazyLibrary<Api>& lib, const char* what, void (*open)(LazyLibrary<Api>&)) {
  std::call_once(lib.once, [&] {
    try {
      open(lib);
    } catch (const Error& e) {
      lib.error = e.message();
    }
  });
  if (!lib.api) throw Error(std::string(what) + " unavailable: " + lib.error, __FILE__, __LINE__);
  return *lib.api;
}

void open_driver(LazyLibrary<DriverApi>& lib) {
  const Config cfg = Config::from_environment();
  const std::string name = cfg.driver_path.empty() ? "libcuda.so.1" : cfg.driver_path;
  std::string tried;
  void* h = try_open(name, tried);
  if (h == nullptr) {
    lib.error = "could not open the NVIDIA driver library (no NVIDIA driver installed, or not visible to this process):" +
                tried + "\nGPU calls need an NVIDIA driver (set NORMKIT_CUDA_DRIVER_PATH if libcuda is somewhere unusual).";
    return;
  }
  DriverApi api;
  api.library = name;
  std::string missing;
  resolve_symbols(h, api, missing);
  if (!missing.empty()) {
    lib.error = name + " is too old: missing " + missing;
    return;
  }
  const CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NO_DEVICE) {
    lib.error = "cuInit failed: " + api.error_text(r);
    return;
  }
  api.cuDriverGetVersion(&api.version);
  lib.api = api;
}

void open_nvrtc(LazyLibrary<NvrtcApi>& lib) {
  std::string tried;
  for (const auto& candidate : nvrtc_candidates()) {
    void* h = try_open(candidate, tried);
    if (h == nullptr) continue;
    NvrtcApi api;
    api.library = candidate;
    std::string missing;
    resolve_symbols(h, api, missing);
    if (!missing.empty()) {
      tried += "\n  " + candidate + ": missing " + missing;
      continue;
    }
    api.nvrtcVersion(&api.major, &api.minor);
    int n = 0;
    api.nvrtcGetNumSupportedArchs(&n);
    api.archs.resize(n);
    if (n > 0) api.nvrtcGetSupportedArchs(api.archs.data());
    log(LogLevel::debug, "opened NVRTC " + std::to_string(api.major) + "." + std::to_string(api.minor) + " from " + candidate);
    lib.api = api;
    return;
  }
  lib.error = "could not open NVRTC (the CUDA runtime compiler). Tried, in order:" + tried +
              "\nInstall the nvidia-cuda-nvrtc wheel or a CUDA toolkit, or set NORMKIT_NVRTC_PATH.";
}

}  // namespace

std::string DriverApi::error_text(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA_ERROR_?") + " (" + std::to_string(static_cast<int>(r)) + "): " +
         (text ? text : "unknown error");
}

const DriverApi& driver() { return open_once(driver_state(), "CUDA driver", open_driver); }
const NvrtcApi& nvrtc() { return open_once(nvrtc_state(), "NVRTC", open_nvrtc); }

std::string driver_unavailable_reason() {
  try {
    driver();
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

void add_nvrtc_search_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(search_mutex());
  nvrtc_search_dirs().push_back(dir);
}

}  // namespace normkit::rt
