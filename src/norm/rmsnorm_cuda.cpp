// CUDA path of RMSNorm and LayerNorm (norm_cuda.hpp): arguments (already
// validated) -> vector width from the data's alignment -> launch plan
// (heuristics) -> kernel from the runtime -> launch on the caller's stream.
#include <algorithm>
#include <cstdint>
#include <string>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/log.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/norm/params.cuh"
#include "kernel_memo.hpp"
#include "norm_cuda.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_internal.hpp"
#include "rmsnorm_kernels.hpp"

namespace normkit::norm::detail {
namespace {

std::optional<DType> dtype_if(const Rows& t) { return t.present() ? std::optional<DType>(t.dtype) : std::nullopt; }
std::optional<DType> dtype_if(const Param& t) { return t.present() ? std::optional<DType>(t.dtype) : std::nullopt; }

// Widest vector every row tensor and parameter allows (see max_vec_for).
struct VecLimit {
  const RowShape& shape;
  int vec = 8;
  void rows(const Rows& t) {
    if (!t.present()) return;
    const bool outer_used = shape.rows > shape.rows_inner;
    const bool inner_used = shape.rows_inner > 1;
    vec = std::min(vec, max_vec_for(t.data, static_cast<int>(dtype_size(t.dtype)), t.stride_outer, outer_used,
                                    t.stride_inner, inner_used));
  }
  void param(const void* data, DType dtype) {
    if (data != nullptr) vec = std::min(vec, max_vec_for(data, static_cast<int>(dtype_size(dtype)), 0, false, 0, false));
  }
};

nk::RowsParam rows_param(const Rows& t) {
  return nk::RowsParam{const_cast<void*>(t.data), static_cast<long long>(t.stride_outer),
                       static_cast<long long>(t.stride_inner)};
}

nk::RowsShape rows_shape(const RowShape& s, std::int64_t heads) {
  return nk::RowsShape{static_cast<long long>(s.rows), static_cast<long long>(s.rows_inner),
                       static_cast<long long>(heads)};
}

unsigned checked_grid(std::int64_t blocks, const char* what) {
  NK_CHECK(blocks <= 0x7fffffffLL, what, ": ", blocks, " CTAs exceed the grid limit; split the batch");
  return static_cast<unsigned>(blocks);
}

// forced_by: the environment variable that forced part of the plan
// (NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN), or nullptr.
void log_plan(const char* op, std::int64_t n, const RowPlan& plan, const char* forced_by, bool group_asked = false,
              bool refill_asked = false) {
  if (forced_by != nullptr)
    rt::warn_once(std::string(op) + ":override:" + std::to_string(n),
                  std::string(op) + ": " + forced_by + " forces the plan of N=" + std::to_string(n) + ": " +
                      plan.str());
  // row=group asked for but not planned: the other forced fields then shape another
  // kernel, which is easy to mistake for the grouped one in a measurement.
  if (forced_by != nullptr && group_asked && plan.group_stages == 0)
    rt::warn_once(std::string(op) + ":group-refused:" + std::to_string(n),
                  std::string(op) + ": " + forced_by + "'s row=group does not apply to rows of N=" + std::to_string(n) +
                      " here (it needs sm_90+, NORMKIT_GROUP_ROWS on, 16-byte vectors, N a multiple of the slice, at "
                      "most 128 slices, four stages in the shared memory minb= leaves; the README's table), so "
                      "the rest of the override shapes the plan above");
  if (forced_by != nullptr && refill_asked && !plan.early_refill)
    rt::warn_once(std::string(op) + ":refill-refused:" + std::to_string(n),
                  std::string(op) + ": " + forced_by + "'s refill=early does not apply to rows of N=" +
                      std::to_string(n) +
                      " here (it needs the bulk ring, dout and dresidual_out of h's width and registers for the "
                      "thread's vectors of them beside its dw/db sums), so the ring refills after pass 2");
  if (!plan.regs && !plan.stash && !plan.split)
    rt::warn_once(std::string(op) + ":stream:" + std::to_string(n),
                  std::string(op) + ": rows of N=" + std::to_string(n) +
                      " are too long to keep in registers on this target; the two-pass kernel reads its "
                      "inputs twice (slower than the register-resident kernels)");
  if (plan.vec == 1 && n % 2 == 0)
    rt::warn_once(std::string(op) + ":vec1",
                  std::string(op) + ": data is not 16-byte aligned (pointer or row stride); using scalar loads");
}

// Clusters (CTAs, without a cluster) of a plan's row kernel the device holds at
// once with `shared_bytes` of dynamic shared memory a CTA: the most its persistent
// grid launches (a cluster beyond them would start only as others finish).
std::int64_t resident_groups(rt::Runtime& runtime, const rt::LoadedKernel& kernel, const RowPlan& plan,
                             int shared_bytes) {
  rt::LaunchConfig probe;
  probe.block.x = static_cast<unsigned>(plan.threads());
  probe.shared_bytes = static_cast<unsigned>(shared_bytes);
  if (plan.cluster > 1) probe.cluster = {static_cast<unsigned>(plan.cluster), 1, 1};
  return std::max<std::int64_t>(1, runtime.max_resident_ctas(kernel, probe) / plan.cluster);
}

}  // namespace

namespace {
// Slices (CTAs of a group) of a row of n elements under a grouped plan (RowPlan::group_stages).
std::int64_t group_slices(const RowPlan& plan, std::int64_t n) {
  return n / plan.vec / (std::int64_t{plan.tpr} * plan.split_items);
}

struct FwdKernel {
  RowPlan plan;
  rt::LoadedKernel kernel;
  std::int64_t resident_groups = 0;  // plan.prefetch: clusters (CTAs) the device holds at once
  bool pdl = false;                  // launched with programmatic dependent launch
};

// Programmatic dependent launch for the norm kernels (device/normkit/common/pdl.cuh):
// where the configuration allows it and the device has it. H200, bf16 forward by
// graph replay, without -> with (8e1deac): M=1 N=4096 2.43 -> 2.25 us, M=16
// 2.81 -> 2.22, M=128 N=8192 3.52 -> 2.84; the sweep's ratios to copy moved
// within run-to-run noise.
bool use_pdl(rt::Runtime& runtime, int device) {
  return runtime.switches().pdl && runtime.target_for_device(device).arch >= 90;
}

// The kernel of spec.plan, and for a persistent grid (the pipelined rows, the bulk
// ring) the row groups the device holds at once. Grouped rows count theirs apart.
FwdKernel load_fwd(rt::Runtime& runtime, const RmsFwdSpec& spec, int device, rt::Stream stream) {
  FwdKernel k{spec.plan, runtime.get(fwd_source(spec), device, stream), 0, use_pdl(runtime, device)};
  if (spec.plan.prefetch || spec.plan.bulk_stages) {
    k.resident_groups =
        resident_groups(runtime, k.kernel, spec.plan,
                        spec.plan.params_smem || spec.plan.bulk_stages || spec.plan.sm_ctas ? spec.plan.smem_bytes : 0);
    // The occupancy API does not see a launch's carveout (RowPlan::carveout_percent): the cap itself.
    if (spec.plan.sm_ctas)
      k.resident_groups = std::min<std::int64_t>(
          k.resident_groups, std::int64_t{runtime.device_info(device).sm_count} * spec.plan.sm_ctas / spec.plan.cluster);
  }
  return k;
}
}  // namespace

void rmsnorm_fwd_cuda(const RmsNormFwdArgs& a, int device) { norm_fwd_cuda(a, nullptr, kRmsNorm, device); }

void norm_fwd_cuda(const RmsNormFwdArgs& a, float* mean, const NormKind& kind, int device) {
  reject_fp64_on_gpu(a);
  if (a.shape.rows == 0) return;
  rt::Runtime& runtime = rt::Runtime::instance();
  VecLimit limit{a.shape};
  for (const Rows* t : {&a.x, &a.residual, &a.out, &a.residual_out}) limit.rows(*t);
  if (a.weight.present()) limit.param(a.weight.data, a.weight.dtype);
  if (a.bias.present()) limit.param(a.bias.data, a.bias.dtype);

  RmsFwdSpec spec;
  spec.n = a.shape.n;
  spec.x = a.x.dtype;
  spec.residual = dtype_if(a.residual);
  spec.residual_out = dtype_if(a.residual_out);
  spec.weight = dtype_if(a.weight);
  spec.bias = dtype_if(a.bias);
  spec.out = a.out.dtype;
  // One kernel stores whichever of mean and rstd is asked for.
  spec.store_rstd = a.rstd != nullptr || mean != nullptr;
  spec.center = kind.center;
  spec.few_rows = a.shape.rows * a.shape.n <= kFewRowsForwardElements;
  spec.decode_rows = spec.few_rows && a.shape.rows <= kDecodeRows;
  const rt::CallSwitches switches = runtime.switches();
  spec.params_smem_allowed = switches.params_smem;
  spec.plan_override = switches.forward_plan;
  // The in-place fused add (residual_out is residual, out is x): its grouped rows are
  // launched cooperatively and wait for their group with no deadline, so that no CTA
  // reads another's slice, which may be overwritten by then (norm_fwd_group_kernel's
  // COOPERATIVE). NORMKIT_GROUP_ROWS=0 takes none at all.
  spec.in_place = a.residual.present() && a.residual_out.data == a.residual.data;
  spec.group_rows_allowed = switches.group_rows;

  static KernelMemo<FwdKernel> memo;
  const MemoKey key{device | (static_cast<std::int64_t>(limit.vec) << 16) | (spec.store_rstd ? 1LL << 24 : 0) |
                        (spec.center ? 1LL << 25 : 0) | (spec.few_rows ? 1LL << 26 : 0) |
                        (spec.decode_rows ? 1LL << 27 : 0) | (spec.group_rows_allowed ? 1LL << 28 : 0) |
                        (spec.in_place ? 1LL << 29 : 0),
                    spec.n,
                    dtype_code(spec.x) | dtype_code(spec.residual) << 4 | dtype_code(spec.residual_out) << 8 |
                        dtype_code(spec.weight) << 12 | dtype_code(spec.bias) << 16 | dtype_code(spec.out) << 20,
                    0};
  // The plan of spec on this device and its kernel (off the hot path: memo misses and
  // the fallbacks without grouped rows).
  auto plan_and_load = [&] {
    spec.memory_gbps = runtime.device_info(device).memory_gbps;
    spec.plan = plan_fwd(spec, limit.vec, runtime.target_for_device(device).arch);
    return load_fwd(runtime, spec, device, a.stream);
  };
  // Both fallbacks below: say why once (tag, the start of the message), then the plan
  // without grouped rows.
  auto plan_without_groups = [&](const std::string& tag, const std::string& why) {
    rt::warn_once(std::string(kind.fwd_name) + ":" + tag + ":" + std::to_string(a.shape.n),
                  std::string(kind.fwd_name) + ": " + why + "; planned without grouped rows (slower there)");
    spec.group_rows_allowed = false;
    return plan_and_load();
  };
  auto log_and_memoize = [&](const FwdKernel& k) {
    log_plan(kind.fwd_name, a.shape.n, spec.plan, spec.plan_override.any() ? "NORMKIT_FORWARD_PLAN" : nullptr,
             spec.plan_override.group_rows);
    memo.put(key, k);
  };
  std::optional<FwdKernel> found = memo.find(key);
  if (!found) {
    found = plan_and_load();
    if (spec.plan.group_stages > 0) {
      // A group's CTAs wait for each other: the device must hold one group at once,
      // and the slots come from its memory pool. Otherwise the plan without it.
      const std::int64_t slices = group_slices(spec.plan, a.shape.n);
      const bool pools = runtime.memory_pools_supported(device);
      found->resident_groups =
          pools ? resident_groups(runtime, found->kernel, spec.plan, spec.plan.smem_bytes) / slices : 0;
      if (found->resident_groups < 1)
        found = plan_without_groups(
            "group", "rows of N=" + std::to_string(a.shape.n) + " planned as " + spec.plan.str() + " need " +
                         (pools ? std::to_string(slices) + " CTAs resident at once, more than this device holds"
                                : std::string("memory pools (cuMemAllocFromPoolAsync), which this device lacks")));
    }
    log_and_memoize(*found);
  }
  const RowPlan& plan = found->plan;
  // The in-place fused add (residual_out is residual): only register-resident rows
  // read all of a row before writing it; the two-pass kernel re-reads residual.
  NK_CHECK(plan.regs || !a.residual.present() || a.residual_out.data != a.residual.data, kind.fwd_name,
           ": in place (residual_out is residual), rows of N=", a.shape.n,
           " are too long for the register-resident kernel on this GPU; pass a separate residual_out");

  nk::NormFwdParams p{};
  p.shape = rows_shape(a.shape, a.heads);
  p.x = rows_param(a.x);
  p.residual = rows_param(a.residual);
  p.out = rows_param(a.out);
  p.residual_out = rows_param(a.residual_out);
  p.weight = a.weight.data;
  p.bias = a.bias.data;
  p.rstd = a.rstd;
  p.mean = mean;
  p.eps = a.eps;
  p.weight_offset = a.weight_offset;

  rt::LaunchConfig cfg;
  // The pipelined kernel and the bulk ring walk rows: as many row groups as the
  // device holds at once, each taking every resident_groups-th group of rows.
  std::int64_t groups = (a.shape.rows + plan.rows - 1) / plan.rows;
  if (plan.prefetch || plan.bulk_stages || plan.group_stages) groups = std::min(groups, found->resident_groups);
  const std::int64_t ctas_per_group = plan.group_stages ? group_slices(plan, a.shape.n) : plan.cluster;
  cfg.grid.x = checked_grid(groups * ctas_per_group, kind.fwd_name);
  cfg.block.x = static_cast<unsigned>(plan.threads());
  if (plan.cluster > 1) cfg.cluster = {static_cast<unsigned>(plan.cluster), 1, 1};
  if (plan.params_smem || plan.smem_row || plan.bulk_stages || plan.group_stages || plan.sm_ctas)
    cfg.shared_bytes = static_cast<unsigned>(plan.smem_bytes);
  cfg.stream = a.stream;
  cfg.cooperative = plan.group_stages > 0 && spec.in_place;
  cfg.carveout_percent = plan.carveout_percent;
  cfg.pdl = found->pdl && !cfg.cooperative;
  void* args[] = {&p};
  if (!plan.group_stages) {
    runtime.launch(found->kernel, cfg, args);
    return;
  }
  // Grouped rows: one 64-bit slot a (row, slice), zeroed, from the stream's memory
  // pool (stream-ordered, so a CUDA graph captures it as allocation nodes) and given
  // back after the kernel.
  const std::size_t slots = static_cast<std::size_t>(a.shape.rows) * static_cast<std::size_t>(ctas_per_group);
  p.group_slots = static_cast<unsigned long long*>(runtime.alloc_async(device, slots * 8, a.stream));
  p.sync_timeout_ns = static_cast<unsigned>(runtime.switches().sync_timeout_us * 1000ull);
  bool launched = false;
  try {
    runtime.zero_async(device, p.group_slots, 2 * slots, a.stream);
    launched = runtime.launch_unless_cooperative_refused(found->kernel, cfg, args);
  } catch (...) {
    runtime.free_async(device, p.group_slots, a.stream);
    throw;
  }
  runtime.free_async(device, p.group_slots, a.stream);
  if (launched) return;
  // The driver holds fewer CTAs at once than the occupancy said (a process given part
  // of the SMs, as under MPS): the in-place rows without grouped rows from now on.
  log_and_memoize(plan_without_groups(
      "cooperative", "in place, rows of N=" + std::to_string(a.shape.n) + " planned as " + plan.str() + " launch " +
                         std::to_string(cfg.grid.x) +
                         " CTAs cooperatively, which the driver refused as more than it holds at once"
                         " (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)"));
  norm_fwd_cuda(a, mean, kind, device);  // finds the plan just memoized
}

namespace {

struct BwdKernels {
  RowPlan plan;
  int sm_count = 0;
  rt::LoadedKernel rows;          // the per-row kernel (dx, dresidual; partial sums when plan.row_sums)
  rt::LoadedKernel row_dots;      // split plans: the rows' dot products in column chunks, before `rows`
  rt::LoadedKernel columns;       // plans whose row kernel does not sum dw/db: the column pass (else empty)
  rt::LoadedKernel param_reduce;  // partials -> dweight/dbias (function == nullptr if neither)
  bool pdl = false;               // every kernel launched with programmatic dependent launch
  // Row kernels over a cluster: the clusters the device holds at once (its
  // persistent grid launches no more; a cluster that waited for a whole free GPC
  // slice would start after the others and finish late). 0: not asked.
  std::int64_t resident_clusters = 0;
};

struct BwdLaunch {
  BwdKernels kernels;
  std::int64_t row_ctas = 0;  // CTAs (clusters) per head of the row kernel
  std::int64_t parts = 0;     // partial sums per head (rows of the workspace)
  std::int64_t chunks = 0;    // split plans: column chunks of a row
  std::size_t sums_floats = 0;  // the dw/db partials at the start of the workspace
  std::size_t dot_floats = 0;   // split plans: the rows' chunk sums after them
  std::size_t sync_words = 0;   // synced plans: counters at the end of the workspace
  // Grouped plans: a row's slices (CTAs of a group), and the 64-bit slots of the rows'
  // slice sums (as 32-bit words) at slots_at (floats; 8-byte aligned) after the partials.
  std::int64_t slices = 0;
  std::size_t slots_at = 0;
  std::size_t slot_words = 0;
  std::size_t workspace = 0;
  // One row-kernel CTA (cluster) per head summing dw in registers, no dbias: it
  // writes dweight itself (NormBwdParams::dweight_final); no reduction launch.
  bool dweight_direct = false;
};

// Plan (and, when `load`, the loaded kernels) of a backward call.
BwdLaunch plan_backward(const RmsNormBwdArgs& a, const NormKind& kind, int device, bool load) {
  rt::Runtime& runtime = rt::Runtime::instance();
  VecLimit limit{a.shape};
  for (const Rows* t : {&a.x, &a.dout, &a.dresidual_out, &a.dx, &a.dresidual}) limit.rows(*t);
  if (a.weight.present()) limit.param(a.weight.data, a.weight.dtype);

  RmsBwdSpec spec;
  spec.n = a.shape.n;
  spec.x = a.x.dtype;
  spec.weight = dtype_if(a.weight);
  spec.dout = a.dout.dtype;
  spec.dresidual_out = dtype_if(a.dresidual_out);
  spec.dx = a.dx.dtype;
  spec.dresidual = dtype_if(a.dresidual);
  spec.dbias = dtype_if(a.dbias);
  spec.few_rows = a.shape.rows * a.shape.n <= kFewRowsElements;
  spec.center = kind.center;
  const rt::CallSwitches switches = runtime.switches();
  spec.smem_sums_allowed = switches.smem_sums;
  spec.async_rows_allowed = switches.async_rows;
  spec.many_heads = a.heads > 1;
  spec.group_rows_allowed = switches.group_rows;
  spec.plan_override = switches.backward_plan;

  static KernelMemo<BwdKernels> memo;
  const MemoKey key{device | (static_cast<std::int64_t>(limit.vec) << 16), spec.n,
                    dtype_code(spec.x) | dtype_code(spec.weight) << 4 | dtype_code(spec.dout) << 8 |
                        dtype_code(spec.dresidual_out) << 12 | dtype_code(spec.dx) << 16 |
                        dtype_code(spec.dresidual) << 20 | dtype_code(spec.dbias) << 24,
                    (spec.few_rows ? 1 : 0) | (spec.center ? 2 : 0) | (spec.many_heads ? 4 : 0) |
                        (spec.group_rows_allowed ? 8 : 0)};
  std::optional<BwdKernels> found = memo.find(key);
  if (!found) {
    BwdKernels k;
    const rt::DeviceInfo info = runtime.device_info(device);
    k.sm_count = info.sm_count;
    spec.memory_gbps = info.memory_gbps;
    k.pdl = use_pdl(runtime, device);
    const int arch = runtime.target_for_device(device).arch;
    // A group's CTAs wait for each other: the device must hold one group at once
    // (by its SMs here, by the loaded kernel's occupancy below). Otherwise the plan
    // without grouped rows, said once.
    auto without_groups = [&](const std::string& why) {
      rt::warn_once(std::string(kind.bwd_name) + ":group:" + std::to_string(a.shape.n),
                    std::string(kind.bwd_name) + ": rows of N=" + std::to_string(a.shape.n) + " planned as " +
                        spec.plan.str() + " need " + why + "; planned without grouped rows (slower there)");
      spec.group_rows_allowed = false;
      spec.plan = fit_to_device(plan_bwd(spec, limit.vec, arch), spec.n, k.sm_count);
    };
    spec.plan = fit_to_device(plan_bwd(spec, limit.vec, arch), spec.n, k.sm_count);
    if (spec.plan.group_stages > 0 &&
        group_slices(spec.plan, spec.n) > static_cast<std::int64_t>(k.sm_count) * spec.plan.min_blocks)
      without_groups(std::to_string(group_slices(spec.plan, spec.n)) + " CTAs resident at once, more than " +
                     std::to_string(k.sm_count) + " SMs x " + std::to_string(spec.plan.min_blocks));
    if (load) {
      k.rows = runtime.get(bwd_source(spec), device, a.stream);
      if (spec.plan.group_stages > 0) {
        const std::int64_t slices = group_slices(spec.plan, spec.n);
        k.resident_clusters = resident_groups(runtime, k.rows, spec.plan, spec.plan.smem_bytes) / slices;
        if (k.resident_clusters < 1) {
          without_groups(std::to_string(slices) + " CTAs resident at once, more than this device holds");
          k.resident_clusters = 0;
          k.rows = runtime.get(bwd_source(spec), device, a.stream);
        }
      }
      log_plan(kind.bwd_name, a.shape.n, spec.plan, spec.plan_override.any() ? "NORMKIT_BACKWARD_PLAN" : nullptr,
               spec.plan_override.group_rows, spec.plan_override.early_refill);
      const RmsBwdSources sources = bwd_sources(spec);
      if (spec.plan.cluster > 1 && !spec.plan.split)
        k.resident_clusters = resident_groups(runtime, k.rows, spec.plan, spec.plan.smem_bytes);
      if (sources.row_dots) k.row_dots = runtime.get(*sources.row_dots, device, a.stream);
      if (sources.columns) k.columns = runtime.get(*sources.columns, device, a.stream);
      if (sources.param_reduce) k.param_reduce = runtime.get(*sources.param_reduce, device, a.stream);
    }
    k.plan = spec.plan;
    if (load) memo.put(key, k);
    found = k;
  }
  BwdLaunch l;
  l.kernels = *found;
  const RowPlan& plan = found->plan;
  if (a.shape.rows > 0) {
    const std::int64_t rows_per_head = a.shape.rows / a.heads;
    if (plan.group_stages > 0) {
      // Groups of slices, as many as the device holds at once (its SMs x min_blocks
      // before the kernel is loaded: an upper bound, so the workspace asked for then
      // covers the call), each a part of the dw/db partials.
      l.slices = group_slices(plan, a.shape.n);
      l.row_ctas = std::min(a.shape.rows, static_cast<std::int64_t>(found->sm_count) * plan.min_blocks / l.slices);
      if (found->resident_clusters > 0) l.row_ctas = std::min(l.row_ctas, found->resident_clusters);
      l.row_ctas = std::max<std::int64_t>(1, l.row_ctas);
      l.parts = l.row_ctas;
    } else if (plan.split) {
      l.chunks = split_chunks(a.shape.n, plan);
      l.row_ctas = plan.synced ? 0 : plan_bwd_split_parts(plan, a.shape.n, rows_per_head, a.heads, found->sm_count);
      l.parts = l.row_ctas;
    } else {
      l.row_ctas = plan_bwd_parts(plan, rows_per_head, a.heads, found->sm_count);
      if (found->resident_clusters > 0)
        l.row_ctas = std::min(l.row_ctas, std::max<std::int64_t>(1, found->resident_clusters / a.heads));
      l.parts = plan.row_sums ? l.row_ctas
                              : plan_bwd_column_parts(a.shape.n, plan.vec, rows_per_head, a.heads,
                                                      found->sm_count, kColumnThreads);
    }
  }
  l.dweight_direct = a.weight.present() && !a.dbias.present() && plan.row_sums && !plan.split &&
                     !plan.group_stages && l.parts == 1;
  const std::size_t sums = (a.weight.present() && !l.dweight_direct ? 1 : 0) + (a.dbias.present() ? 1 : 0);
  l.sums_floats = sums * static_cast<std::size_t>(l.parts) * static_cast<std::size_t>(a.heads) *
                  static_cast<std::size_t>(a.shape.n);
  // Chunk sums of g * xhat, and of g for LayerNorm (NormBwdParams::row_dot_partial).
  l.dot_floats = (kind.center ? 2 : 1) * static_cast<std::size_t>(a.shape.rows) * static_cast<std::size_t>(l.chunks);
  // Synced and waiting plans: the ticket (synced) and per-row counters after the chunk sums.
  l.sync_words = (plan.synced || plan.wait_dots) && a.shape.rows > 0 ? 1 + static_cast<std::size_t>(a.shape.rows) : 0;
  // Grouped plans: one slot per (row, sum, slice) after the partials (64-bit aligned).
  l.slots_at = (l.sums_floats + 1) / 2 * 2;
  l.slot_words = 2 * (kind.center ? 2 : 1) * static_cast<std::size_t>(a.shape.rows) * static_cast<std::size_t>(l.slices);
  l.workspace = (l.slot_words > 0 ? l.slots_at + l.slot_words : l.sums_floats + l.dot_floats + l.sync_words) *
                sizeof(float);
  return l;
}

}  // namespace

std::size_t rmsnorm_bwd_workspace_bytes_cuda(const RmsNormBwdArgs& a, int device) {
  return norm_bwd_workspace_bytes_cuda(a, kRmsNorm, device);
}

void rmsnorm_bwd_cuda(const RmsNormBwdArgs& call, int device, WorkspaceAllocator allocate, void* context) {
  norm_bwd_cuda(call, nullptr, kRmsNorm, device, allocate, context);
}

std::size_t norm_bwd_workspace_bytes_cuda(const RmsNormBwdArgs& a, const NormKind& kind, int device) {
  reject_fp64_on_gpu(a, kind.center ? "layernorm_bwd_workspace_bytes" : "rmsnorm_bwd_workspace_bytes");
  if (a.shape.rows == 0) return 0;
  return plan_backward(a, kind, device, /*load=*/false).workspace;
}

void norm_bwd_cuda(const RmsNormBwdArgs& call, const float* mean, const NormKind& kind, int device,
                   WorkspaceAllocator allocate, void* context) {
  reject_fp64_on_gpu(call, kind.bwd_name);
  NK_CHECK(!kind.center || mean != nullptr || call.shape.rows == 0, kind.bwd_name, ": argument 'mean' is required");
  RmsNormBwdArgs a = call;
  const bool param_grads = a.weight.present() || a.dbias.present();
  // With no rows the sums are zero: dweight/dbias are still written (by the
  // reduction over zero parts), dx has nothing to hold.
  if (a.shape.rows == 0 && !param_grads) return;
  rt::Runtime& runtime = rt::Runtime::instance();
  const BwdLaunch l = plan_backward(a, kind, device, /*load=*/true);
  if (l.workspace > 0 && a.workspace == nullptr && allocate != nullptr) {
    a.workspace = allocate(l.workspace, context);
    a.workspace_bytes = l.workspace;
  }
  NK_CHECK(l.workspace == 0 || (a.workspace != nullptr && a.workspace_bytes >= l.workspace),
           kind.bwd_name, ": argument 'workspace' holds ", a.workspace_bytes, " bytes but ", l.workspace,
           " are needed (ask ", kind.bwd_name, "_workspace_bytes)");
  // The kernels store the fp32 partials as 16-byte vectors (write_partial, rmsnorm_bwd.cuh).
  NK_CHECK(l.workspace == 0 || reinterpret_cast<std::uintptr_t>(a.workspace) % 16 == 0, kind.bwd_name,
           ": argument 'workspace' must be 16-byte aligned");
  NK_CHECK(a.heads <= 65535, kind.bwd_name, ": argument 'weight' has ", a.heads,
           " heads; at most 65535 are supported");
  const std::size_t per_sum = static_cast<std::size_t>(l.parts) * a.heads * a.shape.n;
  float* ws = static_cast<float*>(a.workspace);
  float* dweight_partial = a.weight.present() && !l.dweight_direct ? ws : nullptr;
  float* dbias_partial = a.dbias.present() ? ws + (dweight_partial != nullptr ? per_sum : 0) : nullptr;

  if (a.shape.rows > 0) {
    nk::NormBwdParams p{};
    p.shape = rows_shape(a.shape, a.heads);
    p.x = rows_param(a.x);
    p.dout = rows_param(a.dout);
    p.dresidual_out = rows_param(a.dresidual_out);
    p.dx = rows_param(a.dx);
    p.dresidual = rows_param(a.dresidual);
    p.weight = a.weight.data;
    p.rstd = a.rstd;
    p.mean = mean;
    p.dweight_partial = dweight_partial;
    p.dbias_partial = dbias_partial;
    p.dweight_final = l.dweight_direct ? a.dweight : nullptr;
    p.weight_offset = a.weight_offset;
    void* args[] = {&p};

    const RowPlan& plan = l.kernels.plan;
    if (plan.group_stages > 0) {
      // Grouped rows: G groups of slices; the slots zeroed before the launch.
      p.group_slots = reinterpret_cast<unsigned long long*>(ws + l.slots_at);
      p.sync_timeout_ns = static_cast<unsigned>(runtime.switches().sync_timeout_us * 1000ull);
      runtime.zero_async(device, p.group_slots, l.slot_words, a.stream);
      rt::LaunchConfig cfg;
      cfg.grid.x = checked_grid(l.row_ctas * l.slices, kind.bwd_name);
      cfg.block.x = static_cast<unsigned>(plan.tpr);
      cfg.shared_bytes = static_cast<unsigned>(plan.smem_bytes);
      cfg.stream = a.stream;
      cfg.pdl = l.kernels.pdl;
      runtime.launch(l.kernels.rows, cfg, args);
    } else if (plan.split) {
      // One CTA per (row, chunk): the dot-product kernel, or the synced kernel
      // (chunk sums, a wait per row, dx), whose counters start at zero.
      p.row_dot_partial = ws + l.sums_floats;
      rt::LaunchConfig per_chunk;
      per_chunk.grid.x = checked_grid(a.shape.rows * l.chunks, kind.bwd_name);
      per_chunk.block.x = static_cast<unsigned>(plan.tpr);
      per_chunk.stream = a.stream;
      per_chunk.pdl = l.kernels.pdl;
      // Kernels whose CTAs wait for each other's chunk sums: per-row counters after
      // the sums, zeroed before the launch, and how long a CTA waits before it does
      // the missing work itself.
      auto start_sync_counters = [&] {
        p.sync_counters = reinterpret_cast<unsigned*>(p.row_dot_partial + l.dot_floats);
        p.sync_timeout_ns = runtime.switches().sync_timeout_us * 1000ull;
        runtime.zero_async(device, p.sync_counters, l.sync_words, a.stream);
      };
      if (plan.synced) {
        start_sync_counters();
        runtime.launch(l.kernels.rows, per_chunk, args);
      } else {
        // Then dx (and dw/db) per chunk, for a strided set of rows per CTA; with
        // wait_dots that kernel exchanges the chunk sums itself (counters at zero).
        rt::LaunchConfig rows = per_chunk;
        rows.grid.x = checked_grid(l.chunks * l.row_ctas, kind.bwd_name);
        rows.grid.y = static_cast<unsigned>(a.heads);
        if (plan.wait_dots) {
          // The dw/db running sums in shared memory (norm_bwd_split_kernel's SUMS_SMEM).
          const unsigned sums = (dweight_partial != nullptr ? 1u : 0u) + (dbias_partial != nullptr ? 1u : 0u);
          rows.shared_bytes = sums * static_cast<unsigned>(plan.split_items * plan.vec * plan.tpr) * 4u;
          start_sync_counters();
        } else {
          runtime.launch(l.kernels.row_dots, per_chunk, args);
        }
        runtime.launch(l.kernels.rows, rows, args);
      }
    } else {
      rt::LaunchConfig cfg;
      cfg.grid.x = checked_grid(l.row_ctas * plan.cluster, kind.bwd_name);
      cfg.grid.y = static_cast<unsigned>(a.heads);
      cfg.block.x = static_cast<unsigned>(plan.threads());
      if (plan.cluster > 1) cfg.cluster = {static_cast<unsigned>(plan.cluster), 1, 1};
      cfg.shared_bytes = static_cast<unsigned>(plan.smem_bytes);
      cfg.stream = a.stream;
      cfg.pdl = l.kernels.pdl;
      runtime.launch(l.kernels.rows, cfg, args);
      if (!plan.row_sums && param_grads) {
        rt::LaunchConfig col;
        col.grid.x =
            checked_grid((a.shape.n / plan.vec + kColumnThreads - 1) / kColumnThreads, kind.bwd_name);
        col.grid.y = static_cast<unsigned>(l.parts);
        col.grid.z = static_cast<unsigned>(a.heads);
        col.block.x = kColumnThreads;
        col.stream = a.stream;
        col.pdl = l.kernels.pdl;
        runtime.launch(l.kernels.columns, col, args);
      }
    }
  }
  if (!param_grads || l.dweight_direct) return;

  nk::ParamGradReduceParams rp{};
  rp.dweight_partial = dweight_partial;
  rp.dbias_partial = dbias_partial;
  rp.dweight = a.dweight;
  rp.dbias = const_cast<void*>(a.dbias.data);
  rp.parts = l.parts;
  rp.cols = a.heads * a.shape.n;
  const ParamReduceShape shape = param_reduce_shape(rp.parts);
  rt::LaunchConfig cfg;
  cfg.grid.x = checked_grid((rp.cols + shape.width - 1) / shape.width, kind.bwd_name);
  cfg.block = {static_cast<unsigned>(shape.width), static_cast<unsigned>(shape.lanes), 1};
  cfg.stream = a.stream;
  cfg.pdl = l.kernels.pdl;
  void* args[] = {&rp};
  runtime.launch(l.kernels.param_reduce, cfg, args);
}

}  // namespace normkit::norm::detail
