// NVRTC compile step. Device code is compiled with no include path at all: every
// header it includes must be one of the embedded device headers, handed to NVRTC
// by name. That makes the binary a function of the cache key's inputs only (no
// stray system header can change it) and keeps cold compiles fast.
#include "compiler.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <system_error>

#include "cuda_driver.hpp"
#include "normkit/runtime/cache_key.hpp"
#include "normkit/runtime/log.hpp"

namespace normkit::rt {
namespace {

namespace fs = std::filesystem;

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) nvrtc().nvrtcDestroyProgram(&prog);
  }
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtc().nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  nvrtc().nvrtcGetProgramLog(prog, log.data());
  // NVRTC's size counts the terminator, and ptxas output appended to the log can
  // carry one of its own: keep the text only.
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

void write_file(const fs::path& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) log(LogLevel::warn, "NORMKIT_DUMP_DIR: could not write " + path.string());
}

// SASS through the toolkit's disassembler when one is installed; a dump is a
// diagnostic, so its absence is a note, not an error.
void dump_sass(const fs::path& cubin, const fs::path& out) {
  std::vector<std::string> tools;
  if (const char* home = std::getenv("CUDA_HOME")) tools.push_back((fs::path(home) / "bin" / "cuobjdump").string());
  tools.push_back("/usr/local/cuda/bin/cuobjdump");
  tools.push_back("cuobjdump");
  for (const auto& tool : tools) {
    if (tool.find('/') != std::string::npos && !fs::exists(tool)) continue;
    const std::string cmd = "'" + tool + "' --dump-sass '" + cubin.string() + "' > '" + out.string() + "' 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) return;
  }
  // The shell's redirection created the file before a missing tool failed: no empty dump.
  std::error_code ignored;
  fs::remove(out, ignored);
  log(LogLevel::info, "NORMKIT_DUMP_DIR: no working cuobjdump (and nvdisasm) found; SASS not written for " +
                          cubin.string());
}

}  // namespace

std::vector<std::string> compile_options(const KernelSource& kernel, const Target& target, const Config& config) {
  std::vector<std::string> opts = {"-std=c++17", "-default-device"};
  // ptxas's resource report feeds the entry metadata and the no-spill check; it does not change the binary.
  if (!target.ptx) opts.push_back("--ptxas-options=-v");
  if (config.lineinfo) opts.push_back("-lineinfo");
  opts.insert(opts.end(), kernel.options.begin(), kernel.options.end());
  opts.insert(opts.end(), config.extra_nvrtc_flags.begin(), config.extra_nvrtc_flags.end());
  return normalize_options(opts);
}

void parse_ptxas_report(const std::string& log, const std::string& lowered_name, CompiledKernel& out) {
  static const std::regex function_line(R"re(Function properties for (\S+))re");
  static const std::regex frame_line(
      R"re((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)re");
  static const std::regex entry_line(R"re(Compiling entry function '([^']+)')re");
  static const std::regex regs_line(R"re(Used (\d+) registers)re");
  // Spills anywhere in the program count (a called device function spills too);
  // registers are those of the entry we launch.
  std::string current;
  bool any = false;
  int stores = 0, loads = 0, frame = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry_line) || std::regex_search(line, m, function_line)) {
      current = m[1];
    } else if (std::regex_search(line, m, frame_line)) {
      any = true;
      const int f = std::stoi(m[1]);
      stores += std::stoi(m[2]);
      loads += std::stoi(m[3]);
      if (current == lowered_name || lowered_name.empty()) frame = std::max(frame, f);
    } else if (std::regex_search(line, m, regs_line) && (current == lowered_name || lowered_name.empty())) {
      out.registers = std::stoi(m[1]);
    }
  }
  if (any) {
    out.spill_store_bytes = stores;
    out.spill_load_bytes = loads;
    out.stack_frame_bytes = frame;
  }
}

CompiledKernel nvrtc_compile(const KernelSource& kernel, const Target& target, const std::string& key,
                             const Config& config) {
  const NvrtcApi& api = nvrtc();
  const auto start = std::chrono::steady_clock::now();

  const auto registry = device_headers();
  const auto header_names = included_headers(kernel.source, registry);
  std::vector<const char*> names, contents;
  for (const auto& n : header_names) {
    names.push_back(n.c_str());
    contents.push_back(registry.at(n).c_str());
  }
  ProgramGuard guard;
  const std::string file_name = kernel.family + ".cu";
  NK_NVRTC_CHECK(api.nvrtcCreateProgram(&guard.prog, kernel.source.c_str(), file_name.c_str(),
                                        static_cast<int>(names.size()), contents.data(), names.data()));
  NK_NVRTC_CHECK(api.nvrtcAddNameExpression(guard.prog, kernel.entry.c_str()));

  std::vector<std::string> opts = compile_options(kernel, target, config);
  opts.push_back("-arch=" + target.str());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult result = api.nvrtcCompileProgram(guard.prog, static_cast<int>(argv.size()), argv.data());
  const std::string log_text = program_log(guard.prog);
  if (result != NVRTC_SUCCESS) {
    NK_THROW("NVRTC failed to compile kernel '", kernel.family, "' ", kernel.template_args, " for ", target.str(),
             ": ", api.nvrtcGetErrorString(result), "\n--- NVRTC log ---\n", log_text);
  }

  CompiledKernel out;
  out.key = key;
  out.target = target;
  const char* lowered = nullptr;
  NK_NVRTC_CHECK(api.nvrtcGetLoweredName(guard.prog, kernel.entry.c_str(), &lowered));
  out.lowered_name = lowered;
  size_t size = 0;
  if (target.ptx) {
    NK_NVRTC_CHECK(api.nvrtcGetPTXSize(guard.prog, &size));
    out.binary.resize(size);
    NK_NVRTC_CHECK(api.nvrtcGetPTX(guard.prog, out.binary.data()));
  } else {
    NK_NVRTC_CHECK(api.nvrtcGetCUBINSize(guard.prog, &size));
    out.binary.resize(size);
    NK_NVRTC_CHECK(api.nvrtcGetCUBIN(guard.prog, out.binary.data()));
  }
  out.ptxas_log = log_text;
  parse_ptxas_report(log_text, out.lowered_name, out);
  // NVRTC (12.9+) serves repeated PTX->cubin steps from the CUDA compute cache
  // when a driver is present, and then prints no ptxas report: resources stay -1
  // and the spill check falls back to the loaded function's local memory size.
  if (!target.ptx && out.spill_store_bytes < 0) out.meta["ptxas_report"] = "absent (cubin from the CUDA compute cache)";
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.meta["family"] = kernel.family;
  out.meta["template_args"] = kernel.template_args;
  out.meta["nvrtc"] = std::to_string(api.major) + "." + std::to_string(api.minor);
  out.meta["compile_ms"] = std::to_string(ms);
  out.meta["created_unix"] = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());

  const std::string what = "kernel '" + kernel.family + "' " + kernel.template_args + " for " + target.str();
  if (config.log_compiles) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f ms", ms);
    log(LogLevel::warn, "compiled " + what + " in " + buf + " (registers " + std::to_string(out.registers) +
                            ", spill bytes " + std::to_string(out.spill_store_bytes) + ")");
  }
  if (config.ptxas_verbose && !log_text.empty()) log(LogLevel::warn, "ptxas report for " + what + ":\n" + log_text);
  if (!config.dump_dir.empty()) {
    std::error_code ec;
    fs::create_directories(config.dump_dir, ec);
    const fs::path base = config.dump_dir / (kernel.family + "-" + key.substr(0, 16));
    write_file(base.string() + ".cu", kernel.source.data(), kernel.source.size());
    write_file(base.string() + ".ptxas.txt", log_text.data(), log_text.size());
    size_t ptx_size = 0;
    if (api.nvrtcGetPTXSize(guard.prog, &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
      std::string ptx(ptx_size, '\0');
      api.nvrtcGetPTX(guard.prog, ptx.data());
      write_file(base.string() + ".ptx", ptx.data(), ptx_size - 1);
    }
    if (!target.ptx) {
      const fs::path cubin = base.string() + ".cubin";
      write_file(cubin, out.binary.data(), out.binary.size());
      dump_sass(cubin, base.string() + ".sass");
    }
  }
  if (config.assert_no_spills && (out.spill_store_bytes > 0 || out.spill_load_bytes > 0)) {
    NK_THROW("NORMKIT_ASSERT_NO_SPILLS: ", what, " spills to local memory (", out.spill_store_bytes,
             " bytes stores, ", out.spill_load_bytes, " bytes loads)\n--- ptxas report ---\n", log_text);
  }
  return out;
}

}  // namespace normkit::rt
