#include "rmsnorm_kernels.hpp"

#include <algorithm>
#include <mutex>
#include <sstream>

#include "normkit/runtime/error.hpp"

namespace normkit::embedded {
void register_norm_device_headers();  // generated from device/ at build time
}

namespace normkit::norm::detail {
namespace {

// NORMKIT_FORWARD_PLAN / NORMKIT_BACKWARD_PLAN's fields, copied into the planner's
// inputs (which do not depend on the runtime's configuration types).
void force_plan(RowPlanInputs& in, const rt::PlanOverride& o) {
  in.forced_elems_per_thread = o.elems_per_thread;
  in.forced_cta_threads = o.cta_threads;
  in.forced_min_blocks = o.min_blocks;
  in.forced_no_prefetch = o.no_prefetch;
  in.forced_cluster = o.cluster;
  in.forced_smem_sums = o.smem_sums;
  in.forced_smem_row = o.smem_row;
  in.forced_bulk_rows = o.bulk_rows;
  in.forced_bulk_stages = o.bulk_stages;
  in.forced_group_rows = o.group_rows;
  in.forced_weight_smem = o.weight_smem;
  in.forced_l2_next = o.l2_next;
  in.forced_shared_reads = o.shared_reads;
  in.forced_dro_direct = o.dro_direct;
  in.forced_early_refill = o.early_refill;
  in.forced_early_params = o.early_params;
  in.forced_sm_ctas = o.sm_ctas;
  in.forced_l1_max = o.l1_max;
}

const char* flag(bool b) { return b ? "true" : "false"; }

// Kernel families are named per operator (counters, logs); the kernels are shared.
std::string family(bool center, const char* suffix) { return std::string(center ? "layernorm" : "rmsnorm") + suffix; }

const char* device_type(std::optional<DType> t) {
  if (!t) return "nk::none";
  switch (*t) {
    case DType::kFloat16: return "nk::f16";
    case DType::kBFloat16: return "nk::bf16";
    case DType::kFloat32: return "float";
    case DType::kFloat64:
      // The CUDA entry points and precompilation reject fp64 before planning,
      // naming the argument; this only guards other callers of the generator.
      NK_THROW("rmsnorm kernels: there is no GPU kernel for fp64; float64 runs only on the CPU fallback "
               "(the GPU kernels take fp16, bf16 and fp32)");
  }
  return "nk::none";
}

std::string row_config(const RowPlan& p, std::int64_t n) {
  std::ostringstream os;
  os << "nk::RowConfig<" << n << ", " << p.vec << ", " << p.tpr << ", " << p.rows << ", " << p.cluster << ", "
     << flag(p.regs) << ", " << p.min_blocks << ">";
  return os.str();
}

std::string split_config(const RowPlan& p, std::int64_t n) {
  std::ostringstream os;
  os << "nk::SplitConfig<" << n << ", " << p.vec << ", " << p.tpr << ", " << p.split_items << ", " << p.min_blocks
     << ">";
  return os.str();
}

rt::KernelSource make(const std::string& family, const std::string& header, const std::string& entry) {
  ensure_device_headers();
  rt::KernelSource k;
  k.family = family;
  // The entry names every template argument, so it is the canonical description
  // of what this instantiation is specialized on.
  k.template_args = entry;
  k.source = "#include \"" + header + "\"\n";
  k.entry = entry;
  return k;
}

}  // namespace

void ensure_device_headers() {
  static std::once_flag once;
  std::call_once(once, [] { normkit::embedded::register_norm_device_headers(); });
}

RowPlan plan_fwd(const RmsFwdSpec& s, int max_vec, int arch) {
  RowPlanInputs in;
  in.n = s.n;
  in.max_vec = max_vec;
  in.x_bytes = static_cast<int>(dtype_size(s.x));
  in.arch = arch;
  in.residual = s.residual.has_value();
  in.residual_out = s.residual_out.has_value();
  in.residual_bytes = s.residual ? static_cast<int>(dtype_size(*s.residual)) : 0;
  in.center = s.center;
  in.bias = s.bias.has_value();
  in.few_rows = s.few_rows;
  in.decode_rows = s.few_rows && s.decode_rows;
  in.x_fp16 = s.x == DType::kFloat16;
  in.weight_as_x = !s.weight || *s.weight == s.x;
  in.weight_bytes = s.weight ? static_cast<int>(dtype_size(*s.weight)) : 0;
  in.bias_bytes = s.bias ? static_cast<int>(dtype_size(*s.bias)) : 0;
  in.params_smem_allowed = s.params_smem_allowed;
  in.group_rows_allowed = s.group_rows_allowed;
  in.store_stats = s.store_rstd;
  in.memory_gbps = s.memory_gbps;
  force_plan(in, s.plan_override);
  return plan_rows(in);
}

RowPlan plan_bwd(const RmsBwdSpec& s, int max_vec, int arch) {
  RowPlanInputs in;
  in.n = s.n;
  in.max_vec = max_vec;
  in.x_bytes = static_cast<int>(std::max(dtype_size(s.x), dtype_size(s.dout)));
  in.dout_bytes = static_cast<int>(dtype_size(s.dout));
  in.h_bytes = static_cast<int>(dtype_size(s.x));
  in.backward = true;
  in.dbias = s.dbias.has_value();
  in.param_grads = s.weight.has_value() || s.dbias.has_value();
  in.weight_bytes = s.weight ? static_cast<int>(dtype_size(*s.weight)) : 0;
  in.arch = arch;
  in.few_rows = s.few_rows;
  in.center = s.center;
  in.residual = s.dresidual_out.has_value();
  in.dresidual_output = s.dresidual.has_value();
  in.dresidual_bytes = static_cast<int>(std::max(s.dresidual_out ? dtype_size(*s.dresidual_out) : 0,
                                                 s.dresidual ? dtype_size(*s.dresidual) : 0));
  in.dresidual_out_bytes = s.dresidual_out ? static_cast<int>(dtype_size(*s.dresidual_out)) : 0;
  in.x_fp16 = s.x == DType::kFloat16 || s.dout == DType::kFloat16;
  in.smem_sums_allowed = s.smem_sums_allowed;
  in.async_rows_allowed = s.async_rows_allowed;
  in.many_heads = s.many_heads;
  in.group_rows_allowed = s.group_rows_allowed;
  in.memory_gbps = s.memory_gbps;
  force_plan(in, s.plan_override);
  return plan_rows(in);
}

RmsBwdSources bwd_sources(const RmsBwdSpec& s) {
  RmsBwdSources out{bwd_source(s), std::nullopt, std::nullopt, std::nullopt};
  if (s.plan.split && !s.plan.synced && !s.plan.wait_dots) {
    std::ostringstream e;
    e << "nk::norm_bwd_dot_kernel<" << split_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.weight) << ", " << device_type(s.dout) << ", " << flag(s.center) << ">";
    out.row_dots = make(family(s.center, "_bwd_dot"), "normkit/norm/rmsnorm_bwd_split.cuh", e.str());
  }
  if (!s.weight && !s.dbias) return out;
  if (!s.plan.row_sums) {
    RmsBwdColumnSpec col;
    col.n = s.n;
    col.vec = s.plan.vec;
    col.x = s.x;
    col.dout = s.dout;
    col.dweight = s.weight.has_value();
    col.dbias = s.dbias.has_value();
    col.center = s.center;
    out.columns = bwd_column_source(col);
  }
  out.param_reduce = param_reduce_source({s.weight, s.dbias});
  return out;
}

rt::KernelSource fwd_source(const RmsFwdSpec& s) {
  std::ostringstream e;
  if (s.plan.group_stages > 0) {
    e << "nk::norm_fwd_group_kernel<" << split_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.residual) << ", " << device_type(s.residual_out) << ", " << device_type(s.weight) << ", "
      << device_type(s.bias) << ", " << device_type(s.out) << ", " << flag(s.store_rstd) << ", " << flag(s.center)
      << ", " << flag(s.plan.params_smem) << ", " << s.plan.group_stages << (s.in_place ? ", true" : "") << ">";
    return make(family(s.center, "_fwd_group"), "normkit/norm/norm_fwd_group.cuh", e.str());
  }
  if (s.plan.bulk_stages > 0) {
    e << "nk::norm_fwd_bulk_kernel<" << row_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.residual) << ", " << device_type(s.residual_out) << ", " << device_type(s.weight) << ", " << device_type(s.bias) << ", " << device_type(s.out) << ", "
      << flag(s.store_rstd) << ", " << flag(s.center) << ", " << flag(s.plan.params_smem) << ", "
      << s.plan.bulk_stages << ">";
    return make(family(s.center, "_fwd_bulk"), "normkit/norm/norm_fwd_bulk.cuh", e.str());
  }
  e << "nk::norm_fwd_kernel<" << row_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
    << device_type(s.residual) << ", " << device_type(s.residual_out) << ", " << device_type(s.weight) << ", "
    << device_type(s.bias) << ", " << device_type(s.out) << ", " << flag(s.store_rstd) << ", " << flag(s.center)
    << ", " << flag(s.plan.prefetch) << ", " << flag(s.plan.early_params) << ", " << flag(s.plan.params_smem) << ", "
    << flag(s.plan.smem_row) << ">";
  return make(family(s.center, "_fwd"), "normkit/norm/rmsnorm_fwd.cuh", e.str());
}

namespace {
rt::KernelSource bwd_rows_source(const RmsBwdSpec& s) {
  std::ostringstream e;
  if (s.plan.synced) {
    NK_CHECK(!s.weight && !s.dbias, "rmsnorm_bwd: synced split plan with dw/db (internal)");
    e << "nk::norm_bwd_synced_kernel<" << split_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.dout) << ", " << device_type(s.dresidual_out) << ", " << device_type(s.dx) << ", "
      << device_type(s.dresidual) << ", " << flag(s.center) << ">";
    return make(family(s.center, "_bwd_synced"), "normkit/norm/rmsnorm_bwd_split.cuh", e.str());
  }
  if (s.plan.group_stages > 0) {
    e << "nk::norm_bwd_group_kernel<" << split_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.weight) << ", " << device_type(s.dout) << ", " << device_type(s.dresidual_out) << ", "
      << device_type(s.dx) << ", " << device_type(s.dresidual) << ", " << flag(s.dbias.has_value()) << ", "
      << flag(s.center) << ", " << flag(s.plan.weight_smem) << ", " << flag(s.plan.dro_direct) << ", "
      << s.plan.group_stages << ">";
    return make(family(s.center, "_bwd_group"), "normkit/norm/norm_bwd_group.cuh", e.str());
  }
  if (s.plan.bulk_stages > 0) {
    e << "nk::norm_bwd_bulk_kernel<" << row_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.weight) << ", " << device_type(s.dout) << ", " << device_type(s.dresidual_out) << ", "
      << device_type(s.dx) << ", " << device_type(s.dresidual) << ", " << flag(s.dbias.has_value()) << ", "
      << flag(s.center) << ", " << flag(s.plan.weight_smem) << ", " << flag(s.plan.shared_reads) << ", "
      << s.plan.bulk_stages << ", " << flag(s.plan.early_refill) << ">";
    return make(family(s.center, "_bwd_bulk"), "normkit/norm/norm_bwd_bulk.cuh", e.str());
  }
  if (s.plan.split) {
    e << "nk::norm_bwd_split_kernel<" << split_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
      << device_type(s.weight) << ", " << device_type(s.dout) << ", " << device_type(s.dresidual_out) << ", "
      << device_type(s.dx) << ", " << device_type(s.dresidual) << ", " << flag(s.dbias.has_value()) << ", "
      << flag(s.center) << ", " << flag(s.plan.wait_dots) << ">";
    return make(family(s.center, "_bwd_split"), "normkit/norm/rmsnorm_bwd_split.cuh", e.str());
  }
  e << "nk::norm_bwd_kernel<" << row_config(s.plan, s.n) << ", " << device_type(s.x) << ", "
    << device_type(s.weight) << ", " << device_type(s.dout) << ", " << device_type(s.dresidual_out) << ", "
    << device_type(s.dx) << ", " << device_type(s.dresidual) << ", " << flag(s.dbias.has_value()) << ", "
    << flag(s.plan.row_sums) << ", " << flag(s.plan.stash) << ", "
    << flag(s.plan.prefetch) << ", " << flag(s.center) << ", " << flag(s.plan.smem_sums) << ", "
    << flag(s.plan.async_rows) << ", " << flag(s.plan.weight_smem) << ", " << flag(s.plan.l2_next) << ">";
  return make(family(s.center, "_bwd"), "normkit/norm/rmsnorm_bwd.cuh", e.str());
}
}  // namespace

rt::KernelSource bwd_source(const RmsBwdSpec& s) {
  rt::KernelSource k = bwd_rows_source(s);
  // The row kernel's stores (dx, dresidual) evict-first (vector_io.cuh's NK_STORE_CACHE,
  // which NORMKIT_NVRTC_FLAGS' -DNK_STORE_CACHE=0 turns off again for measuring).
  if (s.plan.evict_first) k.options.push_back("-DNK_PLAN_STORE_CACHE=1");
  return k;
}

rt::KernelSource bwd_column_source(const RmsBwdColumnSpec& s) {
  std::ostringstream e;
  e << "nk::norm_bwd_param_kernel<" << s.n << ", " << s.vec << ", " << kColumnThreads << ", " << device_type(s.x)
    << ", " << device_type(s.dout) << ", " << flag(s.dweight) << ", " << flag(s.dbias) << ", " << flag(s.center)
    << ">";
  return make(family(s.center, "_bwd_param"), "normkit/norm/rmsnorm_bwd.cuh", e.str());
}

rt::KernelSource param_reduce_source(const ParamReduceSpec& s) {
  std::ostringstream e;
  e << "nk::param_grad_reduce_kernel<" << device_type(s.dweight) << ", " << device_type(s.dbias) << ">";
  return make("param_grad_reduce", "normkit/norm/param_grad_reduce.cuh", e.str());
}

}  // namespace normkit::norm::detail
