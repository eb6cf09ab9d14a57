// normkit._C: thin nanobind bindings over the runtime. Conversion only; every
// decision lives in the C++ runtime so that the C++ tests cover it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "normkit/runtime/config.hpp"
#include "normkit/runtime/disk_cache.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/kernel.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/selftest.hpp"
#include "normkit/runtime/target.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

namespace rt = normkit::rt;

rt::Runtime& runtime() { return rt::Runtime::instance(); }

const char* cache_mode_name(rt::CacheMode mode) {
  switch (mode) {
    case rt::CacheMode::disk: return "disk";
    case rt::CacheMode::memory: return "memory";
    case rt::CacheMode::off: return "off";
  }
  return "unknown";
}

// Text that comes from files, drivers or compilers is not guaranteed to be UTF-8
// (a corrupt cache entry is the common case): undecodable bytes become U+FFFD
// rather than making the call itself fail.
nb::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

// Paths round-trip to os functions (e.g. os.remove in `normkit cache verify`).
nb::str path_text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (o == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

nb::dict string_map(const std::map<std::string, std::string>& values) {
  nb::dict d;
  for (const auto& [k, v] : values) d[text(k)] = text(v);
  return d;
}

void translate_error(const std::exception_ptr& p, void* type) {
  try {
    std::rethrow_exception(p);
  } catch (const normkit::Error& e) {
    PyErr_SetObject(static_cast<PyObject*>(type), text(e.what()).ptr());
  }
}

std::string cc_string(int major, int minor) { return std::to_string(major) + "." + std::to_string(minor); }

// Python passes device pointers and stream handles as plain integers (e.g.
// tensor.data_ptr(), torch.cuda.current_stream().cuda_stream).
template <typename T>
T* as_pointer(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

}  // namespace

void register_norm_bindings(nb::module_& m);  // norm_bindings.cpp
void register_c_api(nb::module_& m);          // c_api.cpp

NB_MODULE(_C, m) {
  m.doc() = "normkit runtime bindings (internal; use the normkit package)";

  nb::exception<normkit::Error> error_type(m, "NormkitError", PyExc_RuntimeError);
  // Replaces the default translator (the newest registered runs first) so that a
  // message with non-UTF-8 bytes (an NVRTC log, a file name) still arrives whole.
  nb::register_exception_translator(translate_error, error_type.ptr());

  // --- counters & configuration -------------------------------------------
  m.def("counters", [] {
    const rt::Counters c = runtime().counters();
    nb::dict d;
    d["compiles"] = c.compiles;
    d["memory_hits"] = c.memory_hits;
    d["disk_hits"] = c.disk_hits;
    d["disk_invalid"] = c.disk_invalid;
    d["module_loads"] = c.module_loads;
    d["launches"] = c.launches;
    d["compile_ns"] = c.compile_ns;
    d["disk_read_ns"] = c.disk_read_ns;
    d["load_ns"] = c.load_ns;
    return d;
  }, "Runtime counters of this process (compiles, cache hits, loads, launches, timings).");
  m.def("reset_counters", [] { runtime().reset_counters(); });
  m.def("reload_config", [] { runtime().reload_config(); },
        "Re-read the NORMKIT_* environment variables.");
  m.def("config", [] {
    const rt::Config c = runtime().config();
    nb::dict d;
    d["cache_mode"] = cache_mode_name(c.cache_mode);
    d["cache_dir"] = path_text(c.cache_dir.string());
    d["run_only"] = c.run_only;
    d["arch"] = c.arch ? nb::object(text(*c.arch)) : nb::none();
    d["nvrtc_path"] = path_text(c.nvrtc_path);
    d["driver_path"] = path_text(c.driver_path);
    d["dump_dir"] = path_text(c.dump_dir.string());
    d["ptxas_verbose"] = c.ptxas_verbose;
    d["assert_no_spills"] = c.assert_no_spills;
    d["log_compiles"] = c.log_compiles;
    d["lineinfo"] = c.lineinfo;
    nb::list flags;
    for (const auto& f : c.extra_nvrtc_flags) flags.append(text(f));
    d["extra_nvrtc_flags"] = flags;
    return d;
  }, "The runtime's current settings.");

  // --- caches ---------------------------------------------------------------
  m.def("cache_dir", [] { return path_text(runtime().cache_dir()); });
  m.def("disk_cache_usable", [] { return runtime().disk_cache_usable(); });
  m.def("cache_list", [](bool verify) {
    std::vector<rt::DiskEntryInfo> entries;
    {
      nb::gil_scoped_release release;
      entries = rt::DiskCache(runtime().cache_dir()).list(verify);
    }
    nb::list out;
    for (const auto& e : entries) {
      nb::dict d;
      d["path"] = path_text(e.path.string());
      d["key"] = text(e.key);
      d["size"] = static_cast<std::uint64_t>(e.size);
      d["valid"] = e.valid;
      d["problem"] = text(e.problem);
      d["meta"] = string_map(e.meta);
      out.append(d);
    }
    return out;
  }, "verify"_a = false, "Entries of the disk cache; verify=True checks each checksum.");
  m.def("cache_clear", [] {
    nb::gil_scoped_release release;
    return static_cast<std::uint64_t>(rt::DiskCache(runtime().cache_dir()).clear());
  }, "Remove every disk cache entry; returns how many were removed.");
  m.def("clear_memory_cache", [] { runtime().clear_memory_cache(); });

  // --- toolchain & devices --------------------------------------------------
  m.def("toolchain", [](bool need_driver) {
    rt::ToolchainInfo t;
    {
      nb::gil_scoped_release release;
      t = runtime().toolchain(need_driver);
    }
    nb::dict d;
    d["nvrtc_version"] = cc_string(t.nvrtc_major, t.nvrtc_minor);
    d["nvrtc_archs"] = t.nvrtc_archs;
    d["driver_version"] = t.driver_version;
    return d;
  }, "need_driver"_a = false);
  m.def("driver_error", [] { return text(runtime().driver_error()); },
        "Why the CUDA driver is unavailable ('' if it loaded or was not tried yet).");
  m.def("device_count", [] {
    nb::gil_scoped_release release;
    return runtime().device_count();
  });
  m.def("device_info", [](int device) {
    rt::DeviceInfo info;
    {
      nb::gil_scoped_release release;
      info = runtime().device_info(device);
    }
    nb::dict d;
    d["ordinal"] = info.ordinal;
    d["name"] = text(info.name);
    d["cc"] = cc_string(info.cc_major, info.cc_minor);
    d["sm_count"] = info.sm_count;
    d["device_sm_count"] = info.device_sm_count;
    d["memory_gbps"] = info.memory_gbps;
    d["driver_memory_gbps"] = info.driver_memory_gbps;
    d["slower_memory"] = normkit::rt::slower_memory(info.memory_gbps);
    d["target"] = info.target.str();
    return d;
  }, "device"_a);
  m.def("target_for_device", [](int device) {
    nb::gil_scoped_release release;
    return runtime().target_for_device(device).str();
  }, "device"_a);
  m.def("resolve_target",
        [](int cc_major, int cc_minor, int nvrtc_major, int nvrtc_minor, std::vector<int> nvrtc_archs,
           int driver_version) {
          rt::ToolchainInfo tools;
          tools.nvrtc_major = nvrtc_major;
          tools.nvrtc_minor = nvrtc_minor;
          tools.nvrtc_archs = std::move(nvrtc_archs);
          tools.driver_version = driver_version;
          return rt::resolve_target(cc_major, cc_minor, tools).str();
        },
        "cc_major"_a, "cc_minor"_a, "nvrtc_major"_a, "nvrtc_minor"_a, "nvrtc_archs"_a, "driver_version"_a,
        "Pure target resolution for a given capability and toolchain (no GPU needed).");
  m.def("parse_target", [](const std::string& text) { return rt::Target::parse(text).str(); }, "text"_a);
  m.def("add_nvrtc_search_dirs", [](const std::vector<std::string>& dirs) { rt::add_nvrtc_search_dirs(dirs); },
        "dirs"_a);

  // --- self-test kernel -----------------------------------------------------
  m.def("selftest_compile", [](const std::string& target, int unroll) {
    std::shared_ptr<const rt::CompiledKernel> k;
    {
      nb::gil_scoped_release release;
      k = runtime().compile(rt::selftest::axpy_source(unroll), rt::Target::parse(target));
    }
    nb::dict d;
    d["key"] = k->key;
    d["target"] = k->target.str();
    d["lowered_name"] = k->lowered_name;
    d["registers"] = k->registers;
    d["spill_store_bytes"] = k->spill_store_bytes;
    d["spill_load_bytes"] = k->spill_load_bytes;
    d["binary_size"] = static_cast<std::uint64_t>(k->binary.size());
    d["ptxas_log"] = k->ptxas_log;
    return d;
  }, "target"_a, "unroll"_a = 1, "Compile the self-test kernel for an explicit target (no GPU needed).");
  m.def("selftest_axpy",
        [](std::uintptr_t x, std::uintptr_t y, std::int64_t n, float a, std::uintptr_t stream, int unroll,
           unsigned cluster, bool pdl) {
          nb::gil_scoped_release release;
          rt::selftest::axpy(as_pointer<const float>(x), as_pointer<float>(y), n, a, as_pointer<void>(stream),
                             unroll, cluster, pdl);
        },
        "x"_a, "y"_a, "n"_a, "a"_a, "stream"_a = 0, "unroll"_a = 1, "cluster"_a = 0, "pdl"_a = false,
        "y = a * x + y on device pointers x, y (fp32, length n) on the given stream handle; "
        "cluster > 0 launches thread-block clusters of that size, pdl sets programmatic dependent launch.");
  m.def("selftest_prepare", [](const std::vector<int>& devices, int unroll) {
    nb::gil_scoped_release release;
    runtime().prepare(rt::selftest::axpy_source(unroll), devices);
  }, "devices"_a, "unroll"_a = 1);
  m.def("selftest_run", [](int device) {
    std::string problem;
    {
      nb::gil_scoped_release release;
      problem = rt::selftest::run_on_device(device);
    }
    return text(problem);
  }, "device"_a, "Run the self-test on a device; returns '' on success, else what went wrong.");
  m.def("stream_is_capturing", [](std::uintptr_t stream, int device) {
    nb::gil_scoped_release release;
    return runtime().stream_is_capturing(as_pointer<void>(stream), device);
  }, "stream"_a, "device"_a);

  register_norm_bindings(m);
  register_c_api(m);
}
