// Runtime settings, read from NORMKIT_* environment variables when the runtime is
// created (and again on Runtime::reload_config()), never on the launch path.
// The README's environment table documents each one; keep the two in sync.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace normkit::rt {

enum class CacheMode {
  disk,    // memory cache in front of the disk cache (default)
  memory,  // memory cache only (NORMKIT_CACHE_MODE=memory)
  off,     // no caching at all: every request compiles (NORMKIT_CACHE_MODE=off)
};

// NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN: fields of the row kernels' launch
// plan forced for every forward (backward) call, for measuring plans the heuristics
// do not pick (the rest of the plan follows from its own rules). Zero or false: the
// plan's own choice.
struct PlanOverride {
  int elems_per_thread = 0;  // ept=: elements (backward: columns) of a row each thread holds
  int cta_threads = 0;       // cta=: most threads per CTA; longer rows take a cluster (sm_90+)
  int min_blocks = 0;        // minb=: CTAs per SM in __launch_bounds__ (caps the registers)
  bool no_prefetch = false;  // prefetch=0: no two-row pipeline (backward: nor the cp.async ring)
  int cluster = 0;           // cluster= (backward; forward with row=bulk): rows over a cluster of this many CTAs
  bool smem_sums = false;    // sums=smem (backward only): the rows' dw/db sums in shared memory
  bool bulk_rows = false;    // row=bulk: the bulk-copy ring (RowPlan::bulk_stages)
  int bulk_stages = 0;       // stages= (with row=bulk or row=group): the ring's stages
  bool group_rows = false;   // row=group: the grouped ring (RowPlan::group_stages)
  int smem_row = 0;          // row= (forward only): 1 smem (the CTA's slice of the row staged in shared memory), -1 regs, 0 the plan's
  int weight_smem = 0;       // w= (backward only): 1 smem (the CTA's slice of the weight read from shared memory), -1 global, 0 the plan's
  int l2_next = 0;           // l2= (backward only): 1 next (the next row's slice prefetched into L2), -1 off, 0 the plan's
  int shared_reads = 0;      // reads= (backward, row=bulk): 1 shared (RowPlan::shared_reads), -1 pointer, 0 the plan's
  int dro_direct = 0;        // dro= (backward, row=group): 1 direct (RowPlan::dro_direct), -1 stage, 0 the plan's
  bool early_params = false;  // early=1 (forward only): RowPlan::early_params in calls of many rows too
  int sm_ctas = 0;           // occ= (forward only): at most this many CTAs per SM (RowPlan::sm_ctas)
  bool l1_max = false;       // l1=max (forward, with occ=): the cap from the smallest shared-memory carveout (RowPlan::carveout_percent)
  bool early_refill = false;  // refill=early (backward, row=bulk): RowPlan::early_refill
  bool any() const {
    return elems_per_thread || cta_threads || min_blocks || no_prefetch || cluster || smem_sums || smem_row ||
           weight_smem || l2_next || bulk_rows || bulk_stages || group_rows || shared_reads || dro_direct ||
           early_params || sm_ctas || l1_max || early_refill;
  }
};

// Parses such a value ("ept=64,cta=512,minb=2,prefetch=0", any subset) of the
// environment variable `variable`; an unknown key or a bad value is an error naming it.
PlanOverride parse_plan_override(const char* variable, const std::string& text);

// The configuration's switches that every call reads (its plans and launches),
// without the strings and paths of Config: copying a Config on each call was
// ~0.1 us of malloc and free (a backward call read it twice). Filled from the
// Config by Runtime::switches(); the fields and their defaults are Config's.
struct CallSwitches {
  bool smem_sums;
  bool async_rows;
  bool params_smem;
  bool group_rows;
  bool pdl;
  std::uint64_t sync_timeout_us;
  PlanOverride forward_plan;
  PlanOverride backward_plan;
};

struct Config {
  CacheMode cache_mode = CacheMode::disk;
  std::filesystem::path cache_dir;      // resolved: NORMKIT_CACHE_DIR > XDG_CACHE_HOME/normkit > ~/.cache/normkit
  bool run_only = false;                // NORMKIT_RUN_ONLY=1: a cache miss is an error
  std::optional<std::string> arch;      // NORMKIT_ARCH: explicit target (sm_90a, compute_90, ...)
  std::string nvrtc_path;               // NORMKIT_NVRTC_PATH: file or directory
  std::string driver_path;              // NORMKIT_CUDA_DRIVER_PATH: libcuda to open instead of libcuda.so.1
  std::filesystem::path dump_dir;       // NORMKIT_DUMP_DIR: write source / PTX / SASS / ptxas report per compile
  bool ptxas_verbose = false;           // NORMKIT_PTXAS_VERBOSE=1: log the ptxas report of each compile
  bool assert_no_spills = false;        // NORMKIT_ASSERT_NO_SPILLS=1: a compile with local-memory spills is an error
  bool log_compiles = false;            // NORMKIT_LOG_COMPILES=1: log every compile with its time
  // NORMKIT_SYNC_TIMEOUT_US: how long a CTA of a kernel whose CTAs wait for each
  // other waits before it does the missing work itself (never a hang; 0: at once).
  std::uint64_t sync_timeout_us = 2000;
  // NORMKIT_SMEM_SUMS=0: backward dw/db sums never kept in shared memory (the
  // column pass instead, as before they existed); on by default.
  bool smem_sums = true;
  // NORMKIT_ASYNC_ROWS=0: the backward's row pipeline in registers instead of the
  // cp.async shared-memory ring; on by default.
  bool async_rows = true;
  // NORMKIT_PARAMS_SMEM=0: the RMSNorm forward's clustered rows of 16-bit x and weight
  // read weight and bias from global memory in the epilogue, as before
  // RowPlan::params_smem; on by default.
  bool params_smem = true;
  // NORMKIT_GROUP_ROWS=0: neither direction plans grouped rows (norm_fwd_group_kernel,
  // norm_bwd_group_kernel; RowPlan::group_stages), neither by itself nor under
  // row=group; on by default.
  bool group_rows = true;
  // NORMKIT_PDL=0: launch the norm kernels without programmatic dependent launch
  // (device/normkit/common/pdl.cuh); on by default, used on sm_90+ only.
  bool pdl = true;
  // NORMKIT_MEMORY_GBPS: the peak DRAM bandwidth (GB/s) the plans read instead of the
  // driver's (DeviceInfo::memory_gbps), e.g. 3352 to measure an H100's memory-class plans
  // on an H200; 0 (unset): the driver's.
  int memory_gbps = 0;
  PlanOverride forward_plan;            // NORMKIT_FORWARD_PLAN (above)
  PlanOverride backward_plan;           // NORMKIT_BACKWARD_PLAN (above)
  // Codegen-affecting variables: they change the binary, so they are part of every cache key.
  bool lineinfo = false;                // NORMKIT_LINEINFO=1: compile with -lineinfo
  std::vector<std::string> extra_nvrtc_flags;  // NORMKIT_NVRTC_FLAGS: extra NVRTC options, whitespace separated

  static Config from_environment();
  // name=value pairs of the codegen-affecting variables, for cache keys.
  std::vector<std::pair<std::string, std::string>> codegen_environment() const;
};

// Resolves the cache directory from the environment (see Config::cache_dir).
std::filesystem::path default_cache_dir();

// Reads an environment variable as a boolean (1/true/yes/on); anything else is false.
bool env_flag(const char* name);

}  // namespace normkit::rt
