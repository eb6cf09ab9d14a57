// Public entry points of RMSNorm: validate, pick the backend from where the data
// lives, dispatch. Also ahead-of-time compilation of the kernels a variant uses.
#include "normkit/norm/rmsnorm.hpp"

#include <initializer_list>
#include <sstream>
#include <vector>

#include "normkit/runtime/error.hpp"
#include "normkit/runtime/runtime.hpp"
#include "normkit/runtime/target.hpp"
#include "norm_dispatch.hpp"
#include "rmsnorm_heuristics.hpp"
#include "rmsnorm_internal.hpp"
#include "rmsnorm_kernels.hpp"

namespace normkit::norm {

using detail::kHost;
using detail::resolve_device;

void rmsnorm_fwd(const RmsNormFwdArgs& args) {
  const RmsNormFwdArgs a = detail::checked(args);
  const int device = resolve_device(a.device, "rmsnorm_fwd",
                                    {a.x.data, a.residual.data, a.out.data, a.residual_out.data, a.weight.data,
                                     a.bias.data, a.rstd},
                                    {"x", "residual", "out", "residual_out", "weight", "bias", "rstd"});
  if (device == kHost) {
    detail::rmsnorm_fwd_cpu(a);
  } else {
    detail::rmsnorm_fwd_cuda(a, device);
  }
}

namespace {
int resolve_bwd_device(const RmsNormBwdArgs& a) {
  return resolve_device(a.device, "rmsnorm_bwd",
                        {a.x.data, a.dout.data, a.dresidual_out.data, a.dx.data, a.dresidual.data, a.weight.data,
                         a.rstd, a.dweight, a.dbias.data},
                        {"x", "dout", "dresidual_out", "dx", "dresidual", "weight", "rstd", "dweight", "dbias"});
}
}  // namespace

void rmsnorm_bwd(const RmsNormBwdArgs& args) { rmsnorm_bwd(args, nullptr, nullptr); }

void rmsnorm_bwd(const RmsNormBwdArgs& args, WorkspaceAllocator allocate, void* context) {
  const RmsNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  if (device == kHost) {
    detail::rmsnorm_bwd_cpu(a);
  } else {
    detail::rmsnorm_bwd_cuda(a, device, allocate, context);
  }
}

std::size_t rmsnorm_bwd_workspace_bytes(const RmsNormBwdArgs& args) {
  const RmsNormBwdArgs a = detail::checked(args);
  const int device = resolve_bwd_device(a);
  return device == kHost ? 0 : detail::rmsnorm_bwd_workspace_bytes_cuda(a, device);
}

// ---------------------------------------------------------------------------
// Ahead-of-time compilation

std::string RmsNormVariant::describe() const {
  std::ostringstream os;
  auto opt = [](const std::optional<DType>& t) { return t ? dtype_name(*t) : "none"; };
  os << (backward ? "rmsnorm_bwd" : "rmsnorm_fwd") << " n=" << n << " x=" << dtype_name(x)
     << " weight=" << opt(weight) << " bias=" << opt(bias) << " residual=" << opt(residual)
     << " residual_out=" << opt(residual_out) << " out=" << opt(out);
  if (backward) os << " dout=" << opt(dout);
  if (!backward) os << " rstd=" << (store_rstd ? 1 : 0);
  return os.str();
}

namespace {

std::vector<rt::KernelSource> variant_sources(const RmsNormVariant& v, const std::string& arch) {
  NK_CHECK(v.n >= 1, "rmsnorm_precompile: argument 'n' must be >= 1, got ", v.n);
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
    s.plan = detail::plan_fwd(s, kAlignedVec, target_arch);
    return {detail::fwd_source(s)};
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
  // Calls with few rows may take another plan (RowPlanInputs::few_rows): both
  // plans' kernels, each once.
  std::vector<rt::KernelSource> out;
  auto add = [&](std::optional<rt::KernelSource> k) {
    if (!k) return;
    for (const rt::KernelSource& o : out)
      if (o.entry == k->entry && o.source == k->source) return;
    out.push_back(std::move(*k));
  };
  for (const bool few_rows : {false, true}) {
    s.few_rows = few_rows;
    s.plan = detail::plan_bwd(s, kAlignedVec, target_arch);
    detail::RmsBwdSources sources = detail::bwd_sources(s);
    add(std::move(sources.rows));
    add(std::move(sources.row_dots));
    add(std::move(sources.columns));
    add(std::move(sources.param_reduce));
  }
  return out;
}

}  // namespace

std::size_t rmsnorm_precompile_count(const RmsNormVariant& variant, const std::string& arch) {
  return variant_sources(variant, arch).size();
}

std::vector<PrecompiledKernel> rmsnorm_precompile(const RmsNormVariant& variant, const std::string& arch,
                                                  const std::function<void(const PrecompiledKernel&)>& on_kernel) {
  rt::Runtime& runtime = rt::Runtime::instance();
  const rt::Target target = runtime.compile_only_target(arch);
  std::vector<PrecompiledKernel> done;
  for (const rt::KernelSource& source : variant_sources(variant, arch)) {
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

}  // namespace normkit::norm
