// Ahead-of-time compilation of RMSNorm's and LayerNorm's kernels: one
// implementation, LayerNorm's being the same kernels with `center`. The specs and
// plans are built as the CUDA dispatch builds them (rmsnorm_cuda.cpp) so that a
// precompiled cache holds exactly what a call will ask for.
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <vector>

#include "normkit/norm/layernorm.hpp"
#include "normkit/norm/rmsnorm.hpp"
#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/target.hpp"
#include "norm_validate.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_kernels.hpp"

namespace normkit::norm {
namespace {

const char* op_name(bool center) { return center ? "layernorm_precompile" : "rmsnorm_precompile"; }

std::string describe(const NormVariant& v, bool center) {
  std::ostringstream os;
  auto opt = [](const std::optional<DType>& t) { return t ? dtype_name(*t) : "none"; };
  os << (center ? "layernorm" : "rmsnorm") << (v.backward ? "_bwd" : "_fwd") << " n=" << v.n
     << " x=" << dtype_name(v.x) << " weight=" << opt(v.weight) << " bias=" << opt(v.bias)
     << " residual=" << opt(v.residual) << " residual_out=" << opt(v.residual_out) << " out=" << opt(v.out);
  if (v.backward) os << " dout=" << opt(v.dout);
  if (!v.backward) os << " rstd=" << (v.store_rstd ? 1 : 0);
  return os.str();
}

// The memory classes a compile-only target may be (RowPlanInputs::slower_memory): both,
// or the one NORMKIT_MEMORY_GBPS names, as a call on a device would plan under it.
std::vector<int> memory_classes() {
  if (const int forced = rt::Runtime::instance().config().memory_gbps; forced > 0) return {forced};
  return {std::begin(detail::RowPlanInputs::kMemoryClasses), std::end(detail::RowPlanInputs::kMemoryClasses)};
}

std::vector<rt::KernelSource> variant_sources(const NormVariant& v, bool center, const std::string& arch) {
  const char* op = op_name(center);
  NK_CHECK(v.n >= 1, op, ": argument 'n' must be >= 1, got ", v.n);
  // Checked here, where the variant's field can be named; the kernel generator
  // would refuse fp64 too, without saying which.
  auto named = [](const char* name, const std::optional<DType>& t) {
    return detail::Named{name, t.has_value(), t.value_or(DType::kBFloat16)};
  };
  detail::reject_fp64(op, {named("x", v.x), named("weight", v.weight), named("bias", v.bias),
                           named("residual", v.residual), named("residual_out", v.residual_out),
                           named("out", v.out), named("dout", v.dout)});
  const int target_arch = rt::Runtime::instance().compile_only_target(arch).arch;
  constexpr int kAlignedVec = 8;  // 16-byte-aligned data, the layout frameworks allocate
  if (!v.backward) {
    detail::RmsFwdSpec s;
    s.n = v.n;
    s.x = v.x;
    s.residual = v.residual;
    s.residual_out = v.residual_out;
    s.weight = v.weight;
    s.bias = v.bias;
    s.out = v.out.value_or(v.x);
    s.store_rstd = v.store_rstd;
    s.center = center;
    // The switches a call plans under (rmsnorm_cuda.cpp): NORMKIT_PARAMS_SMEM,
    // NORMKIT_GROUP_ROWS and NORMKIT_FORWARD_PLAN change the kernels too.
    const rt::CallSwitches switches = rt::Runtime::instance().switches();
    s.params_smem_allowed = switches.params_smem;
    s.plan_override = switches.forward_plan;
    // Calls of few rows may take another plan (RowPlan::early_params), decode calls
    // another still (with_decode_rows), devices that cannot hold a row group at once
    // the plan without grouped rows, and the in-place fused add (residual_out over the
    // residual, out over x) grouped rows of its own (RmsFwdSpec::in_place): each
    // kernel once. A compile-only target may be either memory class (memory_classes).
    const bool fused_add_shape = s.residual && s.residual_out == s.residual && s.out == s.x;
    std::vector<rt::KernelSource> fwd;
    for (const int memory_gbps : memory_classes())
    for (const bool group_rows : {switches.group_rows, false})
    for (const bool in_place : {false, fused_add_shape})
    for (const auto& [few_rows, decode_rows] : {std::pair{false, false}, {true, false}, {true, true}}) {
      s.in_place = in_place;
      s.memory_gbps = memory_gbps;
      s.group_rows_allowed = group_rows;
      s.few_rows = few_rows;
      s.decode_rows = decode_rows;
      s.plan = detail::plan_fwd(s, kAlignedVec, target_arch);
      rt::KernelSource k = detail::fwd_source(s);
      bool seen = false;
      for (const rt::KernelSource& o : fwd) seen = seen || (o.entry == k.entry && o.options == k.options);
      if (!seen) fwd.push_back(std::move(k));
    }
    return fwd;
  }
  detail::RmsBwdSpec s;
  s.n = v.n;
  s.x = v.x;
  s.weight = v.weight;
  s.dout = v.dout.value_or(v.x);
  s.dresidual_out = v.residual;
  s.dx = v.out.value_or(v.x);
  s.dresidual = v.residual_out;
  s.dbias = v.bias;
  s.center = center;
  // The plan switches of the configuration, as a call would see them: a cache
  // built with NORMKIT_SMEM_SUMS=0 (or a NORMKIT_BACKWARD_PLAN) is one a run with it
  // finds complete.
  const rt::CallSwitches switches = rt::Runtime::instance().switches();
  s.smem_sums_allowed = switches.smem_sums;
  s.async_rows_allowed = switches.async_rows;
  s.plan_override = switches.backward_plan;
  // Calls with few rows may take another plan (RowPlanInputs::few_rows): both
  // plans' kernels, each once.
  std::vector<rt::KernelSource> out;
  auto add = [&](std::optional<rt::KernelSource> k) {
    if (!k) return;
    for (const rt::KernelSource& o : out)
      if (o.entry == k->entry && o.source == k->source && o.options == k->options) return;
    out.push_back(std::move(*k));
  };
  // Per-head calls (many_heads) may plan otherwise too (no wait in split rows), and
  // devices that cannot hold a row group at once without grouped rows; and either
  // memory class.
  for (const int memory_gbps : memory_classes())
  for (const bool group_rows : {switches.group_rows, false})
  for (const bool few_rows : {false, true})
  for (const bool many_heads : {false, true}) {
    s.memory_gbps = memory_gbps;
    s.group_rows_allowed = group_rows;
    s.few_rows = few_rows;
    s.many_heads = many_heads;
    s.plan = detail::plan_bwd(s, kAlignedVec, target_arch);
    detail::RmsBwdSources sources = detail::bwd_sources(s);
    add(std::move(sources.rows));
    add(std::move(sources.row_dots));
    add(std::move(sources.columns));
    add(std::move(sources.param_reduce));
  }
  return out;
}

std::vector<PrecompiledKernel> precompile(const NormVariant& variant, bool center, const std::string& arch,
                                          const std::function<void(const PrecompiledKernel&)>& on_kernel) {
  rt::Runtime& runtime = rt::Runtime::instance();
  const rt::Target target = runtime.compile_only_target(arch);
  std::vector<PrecompiledKernel> done;
  for (const rt::KernelSource& source : variant_sources(variant, center, arch)) {
    const std::uint64_t compiles_before = runtime.counters().compiles;
    const auto compiled = runtime.compile(source, target);
    PrecompiledKernel k;
    k.family = source.family;
    k.template_args = source.template_args;
    k.cache_key = compiled->key;
    k.registers = compiled->registers;
    k.spill_bytes = compiled->spill_store_bytes < 0 ? -1 : compiled->spill_store_bytes + compiled->spill_load_bytes;
    // Another thread may compile concurrently; the counter is a good-enough hint for a CLI summary.
    k.from_cache = runtime.counters().compiles == compiles_before;
    if (on_kernel) on_kernel(k);
    done.push_back(std::move(k));
  }
  return done;
}

}  // namespace

std::string RmsNormVariant::describe() const { return norm::describe(*this, /*center=*/false); }
std::string LayerNormVariant::describe() const { return norm::describe(*this, /*center=*/true); }

std::size_t rmsnorm_precompile_count(const RmsNormVariant& variant, const std::string& arch) {
  return variant_sources(variant, /*center=*/false, arch).size();
}

std::size_t layernorm_precompile_count(const LayerNormVariant& variant, const std::string& arch) {
  return variant_sources(variant, /*center=*/true, arch).size();
}

std::vector<PrecompiledKernel> rmsnorm_precompile(const RmsNormVariant& variant, const std::string& arch,
                                                  const std::function<void(const PrecompiledKernel&)>& on_kernel) {
  return precompile(variant, /*center=*/false, arch, on_kernel);
}

std::vector<PrecompiledKernel> layernorm_precompile(const LayerNormVariant& variant, const std::string& arch,
                                                    const std::function<void(const PrecompiledKernel&)>& on_kernel) {
  return precompile(variant, /*center=*/true, arch, on_kernel);
}

}  // namespace normkit::norm
