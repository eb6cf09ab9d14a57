#include "normkit/runtime/config.hpp"

#include <cstdlib>
#include <optional>
#include <sstream>

#include "normkit/runtime/error.hpp"

namespace normkit::rt {
namespace {

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// An on/off variable whose default is on: unset keeps `fallback`; anything but
// 1/0 (true/false, yes/no, on/off) is an error naming the variable, since a typo
// must not silently keep the default.
bool env_switch(const char* name, bool fallback) {
  const std::string v = env_string(name);
  if (v.empty()) return fallback;
  const bool on = v == "1" || v == "true" || v == "yes" || v == "on";
  NK_CHECK(on || v == "0" || v == "false" || v == "no" || v == "off", name, "='", v,
           "' is not one of 1, 0 (true/false, yes/no, on/off)");
  return on;
}

}  // namespace

PlanOverride parse_plan_override(const char* variable, const std::string& text) {
  PlanOverride o;
  // cluster= is the backward's, and the forward's with row=bulk; stages= the forward's with row=bulk.
  const bool backward = std::string(variable) != "NORMKIT_FORWARD_PLAN";
  std::stringstream fields(text);
  std::string field;
  while (std::getline(fields, field, ',')) {
    if (field.empty()) continue;
    const std::size_t eq = field.find('=');
    NK_CHECK(eq != std::string::npos, variable, ": '", field, "' is not key=value");
    const std::string key = field.substr(0, eq);
    const std::string value = field.substr(eq + 1);
    long v = -1;
    try {
      std::size_t used = 0;
      v = std::stol(value, &used);
      if (used != value.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
    const bool pow2 = v > 0 && (v & (v - 1)) == 0;
    if (key == "ept") {
      NK_CHECK(pow2 && v <= 256, variable, ": ept='", value, "' is not a power of two from 1 to 256");
      o.elems_per_thread = static_cast<int>(v);
    } else if (key == "cta") {
      NK_CHECK(pow2 && v >= 32 && v <= 1024, variable, ": cta='", value,
               "' is not a power of two from 32 to 1024");
      o.cta_threads = static_cast<int>(v);
    } else if (key == "minb") {
      NK_CHECK(v >= 1 && v <= 16, variable, ": minb='", value, "' is not from 1 to 16");
      o.min_blocks = static_cast<int>(v);
    } else if (key == "prefetch") {
      NK_CHECK(v == 0 || v == 1, variable, ": prefetch='", value, "' is not 0 or 1");
      o.no_prefetch = v == 0;
    } else if (key == "cluster") {
      NK_CHECK(pow2 && v >= 2 && v <= 16, variable, ": cluster='", value, "' is not a power of two from 2 to 16");
      o.cluster = static_cast<int>(v);
    } else if (key == "stages") {
      // One stage: the forward's ring only (the backward's reads its stage in both passes).
      NK_CHECK(v >= (backward ? 2 : 1) && v <= 8, variable, ": stages='", value, "' is not from ", backward ? 2 : 1,
               " to 8");
      o.bulk_stages = static_cast<int>(v);
    } else if (key == "sums" && backward) {
      NK_CHECK(value == "smem" || value == "regs", variable, ": sums='", value, "' is not smem or regs");
      o.smem_sums = value == "smem";
    } else if (key == "w" && backward) {
      NK_CHECK(value == "smem" || value == "global", variable, ": w='", value, "' is not smem or global");
      o.weight_smem = value == "smem" ? 1 : -1;
    } else if (key == "reads" && backward) {
      NK_CHECK(value == "shared" || value == "pointer", variable, ": reads='", value, "' is not shared or pointer");
      o.shared_reads = value == "shared" ? 1 : -1;
    } else if (key == "dro" && backward) {
      NK_CHECK(value == "direct" || value == "stage", variable, ": dro='", value, "' is not direct or stage");
      o.dro_direct = value == "direct" ? 1 : -1;
    } else if (key == "early" && !backward) {
      NK_CHECK(v == 1, variable, ": early='", value, "' is not 1 (the plans' own decide otherwise)");
      o.early_params = true;
    } else if (key == "occ" && !backward) {
      NK_CHECK(v >= 1 && v <= 8, variable, ": occ='", value, "' is not from 1 to 8");
      o.sm_ctas = static_cast<int>(v);
    } else if (key == "l1" && !backward) {
      NK_CHECK(value == "max", variable, ": l1='", value, "' is not max");
      o.l1_max = true;
    } else if (key == "refill" && backward) {
      NK_CHECK(value == "early", variable, ": refill='", value, "' is not early (the ring's own refill is after pass 2)");
      o.early_refill = true;
    } else if (key == "l2" && backward) {
      NK_CHECK(value == "next" || value == "off", variable, ": l2='", value, "' is not next or off");
      o.l2_next = value == "next" ? 1 : -1;
    } else if (key == "row") {
      // regs: the planner's register rows (the backward's: its register, stash or split
      // rows), neither the staged row nor the bulk ring.
      NK_CHECK(value == "bulk" || value == "regs" || value == "group" || (!backward && value == "smem"), variable,
               ": row='", value,
               backward ? "' is not bulk, group or regs (smem is the forward's)" : "' is not smem, regs, bulk or group");
      o.bulk_rows = value == "bulk";
      o.group_rows = value == "group";
      if (!o.bulk_rows && !o.group_rows) o.smem_row = value == "smem" ? 1 : -1;
    } else {
      NK_THROW(variable, ": unknown key '", key, "' (keys: ept, cta, minb, prefetch",
               backward ? ", cluster, sums, w, l2, row=bulk, group or regs, and with row=bulk or row=group stages, with row=bulk reads and refill, with row=group dro)"
                        : ", row, early, occ, with occ l1=max, with row=bulk cluster and stages, with row=group stages)");
    }
  }
  NK_CHECK(o.bulk_rows || o.group_rows || o.bulk_stages == 0, variable, ": stages= applies to row=bulk and row=group only");
  NK_CHECK(o.group_rows || o.dro_direct == 0, variable, ": dro= applies to row=group only");
  NK_CHECK(o.bulk_rows || !o.early_refill, variable, ": refill= applies to row=bulk only");
  NK_CHECK(!o.l1_max || o.sm_ctas, variable, ": l1=max applies with occ= only");
  // The grouped ring keeps two rows between publish and normalize (kGroupLookahead).
  NK_CHECK(!o.group_rows || o.bulk_stages == 0 || o.bulk_stages >= 4, variable, ": stages='", o.bulk_stages,
           "' is below 4, the fewest row=group takes");
  NK_CHECK(backward || o.bulk_rows || o.cluster == 0, variable,
           ": cluster= applies to row=bulk only (the forward's other plans choose their own cluster)");
  return o;
}

// `text` as a whole number in decimal digits alone (no sign, space or suffix), or nothing:
// what the numeric variables accept.
std::optional<unsigned long long> whole_number(const std::string& text) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return std::nullopt;
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

bool env_flag(const char* name) {
  const std::string v = env_string(name);
  return v == "1" || v == "true" || v == "TRUE" || v == "yes" || v == "on" || v == "ON";
}

std::filesystem::path default_cache_dir() {
  if (auto dir = env_string("NORMKIT_CACHE_DIR"); !dir.empty()) return dir;
  if (auto xdg = env_string("XDG_CACHE_HOME"); !xdg.empty()) return std::filesystem::path(xdg) / "normkit";
  if (auto home = env_string("HOME"); !home.empty()) return std::filesystem::path(home) / ".cache" / "normkit";
  // No HOME (some daemons): fall back to a per-user temp location rather than failing.
  return std::filesystem::temp_directory_path() / "normkit-cache";
}

Config Config::from_environment() {
  Config c;
  const std::string mode = env_string("NORMKIT_CACHE_MODE");
  if (mode.empty() || mode == "disk") {
    c.cache_mode = CacheMode::disk;
  } else if (mode == "memory") {
    c.cache_mode = CacheMode::memory;
  } else if (mode == "off") {
    c.cache_mode = CacheMode::off;
  } else {
    NK_THROW("NORMKIT_CACHE_MODE='", mode, "' is not one of disk, memory, off");
  }
  c.cache_dir = default_cache_dir();
  c.run_only = env_flag("NORMKIT_RUN_ONLY");
  if (auto arch = env_string("NORMKIT_ARCH"); !arch.empty()) c.arch = arch;
  c.nvrtc_path = env_string("NORMKIT_NVRTC_PATH");
  c.driver_path = env_string("NORMKIT_CUDA_DRIVER_PATH");
  c.dump_dir = env_string("NORMKIT_DUMP_DIR");
  c.ptxas_verbose = env_flag("NORMKIT_PTXAS_VERBOSE");
  c.assert_no_spills = env_flag("NORMKIT_ASSERT_NO_SPILLS");
  c.log_compiles = env_flag("NORMKIT_LOG_COMPILES");
  if (auto t = env_string("NORMKIT_SYNC_TIMEOUT_US"); !t.empty()) {
    const std::optional<unsigned long long> us = whole_number(t);
    NK_CHECK(us.has_value(), "NORMKIT_SYNC_TIMEOUT_US='", t, "' is not a whole number of microseconds (>= 0)");
    c.sync_timeout_us = *us;
  }
  if (auto g = env_string("NORMKIT_MEMORY_GBPS"); !g.empty()) {
    const std::optional<unsigned long long> gbps = whole_number(g);
    NK_CHECK(gbps.has_value() && g[0] != '0' && *gbps <= 100000, "NORMKIT_MEMORY_GBPS='", g,
             "' is not a whole number of GB/s from 1 to 100000 (the peak DRAM bandwidth the plans read)");
    c.memory_gbps = static_cast<int>(*gbps);
  }
  c.smem_sums = env_switch("NORMKIT_SMEM_SUMS", c.smem_sums);
  c.async_rows = env_switch("NORMKIT_ASYNC_ROWS", c.async_rows);
  c.params_smem = env_switch("NORMKIT_PARAMS_SMEM", c.params_smem);
  c.group_rows = env_switch("NORMKIT_GROUP_ROWS", c.group_rows);
  c.pdl = env_switch("NORMKIT_PDL", c.pdl);
  c.forward_plan = parse_plan_override("NORMKIT_FORWARD_PLAN", env_string("NORMKIT_FORWARD_PLAN"));
  c.backward_plan = parse_plan_override("NORMKIT_BACKWARD_PLAN", env_string("NORMKIT_BACKWARD_PLAN"));
  c.lineinfo = env_flag("NORMKIT_LINEINFO");
  std::istringstream flags(env_string("NORMKIT_NVRTC_FLAGS"));
  for (std::string f; flags >> f;) c.extra_nvrtc_flags.push_back(f);
  return c;
}

std::vector<std::pair<std::string, std::string>> Config::codegen_environment() const {
  std::string flags;
  for (const auto& f : extra_nvrtc_flags) flags += f + ' ';
  return {{"NORMKIT_LINEINFO", lineinfo ? "1" : "0"}, {"NORMKIT_NVRTC_FLAGS", flags}};
}

}  // namespace normkit::rt
