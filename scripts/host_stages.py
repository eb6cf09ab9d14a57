#!/usr/bin/env python3
"""The host time of one eager no-grad RMSNorm call (issue 4 requirement 4: M=1,
N=4096 bf16 with a weight, <= 5 us per call over 10,000 calls), split into the
stages it is made of, each timed in C++ with no Python around it.

scripts/host_breakdown.py times the call's layers from Python; each of its lines
carries the interpreter's own cost and a pybind11 conversion. This script compiles
a small extension (torch.utils.cpp_extension.load_inline, ~1 min) that times, in
C++ loops, what the C++ path does per call:

  empty_generic 1x4096 bf16     the output allocation as tensor_glue.hpp's new_tensor
                                makes it (CUDA caching allocator, no dispatcher), freed
  allocator 8 KiB               the caching allocator's allocate + free alone
  at::empty 1x4096 bf16         the same through the dispatcher
  THPVariable_Wrap              a tensor handed to Python and dropped
  normkit C API, free           normkit's forward through the C function table on
                                preallocated tensors (plan memo + launch), back to back
  normkit C API, queued         the same while the stream waits behind a spinning
                                kernel: the host's own cost, no GPU back-pressure
  cuLaunchKernelEx PDL, free    an empty kernel with the PDL attribute (the driver floor)
  cuLaunchKernelEx PDL, queued  the same behind the spinning kernel
  cuLaunchKernelEx no attribute, cuLaunchKernel, empty_kernel<<<>>>
                                the empty kernel without PDL, by the older driver
                                entry point and by the runtime (as PyTorch launches)

NORMKIT_PDL=0 in the environment takes PDL off normkit's own launches (the C API and
the public call), to compare a run with it against one without.

and from Python, for the layers above: the public call, torch.empty_like, and a
call of an empty C function (the interpreter's floor).

    python scripts/host_stages.py [--calls 10000] [--rounds 5] [--json OUT.json]

Free loops: --calls calls a round, median of --rounds rounds, a synchronize closing
each round. Queued loops: 256 launches a round (the stream's queue must not fill),
median of 4x --rounds rounds. A diagnostic, not a test: needs a CUDA device.
"""

import json
import os
import statistics
import time

from host_breakdown import host_args  # beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CPP = r"""
#include <torch/extension.h>
#include <ATen/EmptyTensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/autograd/python_variable.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "c_api.hpp"

namespace nn = normkit::norm;

void launch_spin(volatile int* flag, cudaStream_t s);
void launch_empty(cudaStream_t s);
void* empty_kernel_address();

namespace {

double per_call_us(const std::function<void()>& fn, int calls) {
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::map<std::string, double> stages(torch::Tensor x, torch::Tensor w, torch::Tensor out, py::capsule capsule,
                                     int calls, int rounds) {
  const auto* api = static_cast<const normkit::capi::Table*>(capsule.get_pointer());
  TORCH_CHECK(api->fwd_args_size == sizeof(nn::RmsNormFwdArgs), "normkit C API of another build");
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  const int64_t n = x.size(-1);
  nn::RmsNormFwdArgs a;
  a.shape = {1, n, 1};
  a.x = nn::Rows::strided(x.data_ptr(), nn::DType::kBFloat16, n);
  a.out = nn::Rows::strided(out.data_ptr(), nn::DType::kBFloat16, n);
  a.weight = nn::Param{w.data_ptr(), nn::DType::kBFloat16};
  a.eps = 1e-6f;
  a.device = nn::Device::cuda(x.get_device());
  a.stream = stream;
  auto normkit_fwd = [&] {
    const char* err = api->rmsnorm_fwd(&a);
    if (err != nullptr) throw std::runtime_error(err);
  };
  CUfunction empty_fn = nullptr;
  TORCH_CHECK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&empty_fn), empty_kernel_address()) == cudaSuccess);
  CUlaunchAttribute pdl{};
  pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  pdl.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig lc{};
  lc.gridDimX = lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = 32;
  lc.blockDimY = lc.blockDimZ = 1;
  lc.hStream = stream;
  lc.attrs = &pdl;
  lc.numAttrs = 1;
  auto empty_launch = [&] { TORCH_CHECK(cuLaunchKernelEx(&lc, empty_fn, nullptr, nullptr) == CUDA_SUCCESS); };
  // The same launch without the attribute, and through the older entry points: what PDL
  // itself costs the host, against what PyTorch's own launches (cudaLaunchKernel) pay.
  CUlaunchConfig plain_lc = lc;
  plain_lc.attrs = nullptr;
  plain_lc.numAttrs = 0;
  auto empty_launch_plain = [&] {
    TORCH_CHECK(cuLaunchKernelEx(&plain_lc, empty_fn, nullptr, nullptr) == CUDA_SUCCESS);
  };
  auto empty_launch_legacy = [&] {
    TORCH_CHECK(cuLaunchKernel(empty_fn, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr) == CUDA_SUCCESS);
  };
  auto empty_launch_runtime = [&] { launch_empty(stream); };

  c10::Allocator* alloc = c10::GetAllocator(c10::DeviceType::CUDA);
  const std::vector<int64_t> sizes{1, n};
  std::map<std::string, std::function<void()>> free_loops{
      {"empty_generic 1x4096 bf16", [&] {
         auto t = at::detail::empty_generic(sizes, alloc, c10::DispatchKeySet(c10::DispatchKey::CUDA), at::kBFloat16,
                                            c10::MemoryFormat::Contiguous);
       }},
      {"allocator 8 KiB", [&] { auto d = alloc->allocate(2 * n); }},
      {"at::empty 1x4096 bf16", [&] { auto t = at::empty(sizes, x.options()); }},
      {"THPVariable_Wrap", [&] {
         PyObject* o = THPVariable_Wrap(out);
         Py_DECREF(o);
       }},
      {"normkit C API, free", normkit_fwd},
      {"cuLaunchKernelEx PDL, free", empty_launch},
      {"cuLaunchKernelEx no attribute, free", empty_launch_plain},
      {"cuLaunchKernel, free", empty_launch_legacy},
      {"empty_kernel<<<>>> (runtime), free", empty_launch_runtime},
  };
  std::map<std::string, double> result;
  for (auto& [name, fn] : free_loops) {
    for (int i = 0; i < 200; ++i) fn();
    TORCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    std::vector<double> r;
    for (int k = 0; k < rounds; ++k) {
      const auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) fn();
      TORCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      r.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / calls);
    }
    result[name] = median(r);
  }

  int* flag = nullptr;
  TORCH_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped) == cudaSuccess);
  int* flag_dev = nullptr;
  TORCH_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0) == cudaSuccess);
  const int queued = 256;
  for (auto& [name, fn] : std::map<std::string, std::function<void()>>{
           {"normkit C API, queued", normkit_fwd}, {"cuLaunchKernelEx PDL, queued", empty_launch}}) {
    std::vector<double> r;
    for (int k = 0; k < 4 * rounds; ++k) {
      *reinterpret_cast<volatile int*>(flag) = 0;
      launch_spin(flag_dev, stream);
      r.push_back(per_call_us(fn, queued));
      *reinterpret_cast<volatile int*>(flag) = 1;
      TORCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    }
    result[name] = median(r);
  }
  cudaFreeHost(flag);
  return result;
}
"""

CU = r"""
#include <cuda_runtime.h>
__global__ void spin_kernel(volatile int* flag) { while (*flag == 0) { } }
__global__ void empty_kernel() {}
void launch_spin(volatile int* flag, cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(flag); }
void launch_empty(cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); }
void* empty_kernel_address() { return reinterpret_cast<void*>(&empty_kernel); }
"""


def main():
    args = host_args(__doc__, "host_stages")
    import torch
    from torch.utils.cpp_extension import load_inline

    import normkit
    import normkit.torch as nkt
    from normkit.bench.timing import host_loop

    def python_loop(fn, calls, rounds, sync):
        # The bench's own host loop (200 warm-up calls, one synchronize closing each round).
        return statistics.median(host_loop(fn, calls, rounds, sync))

    t0 = time.time()
    ext = load_inline(
        name="normkit_host_stages", cpp_sources=[CPP], cuda_sources=[CU], functions=["stages"],
        extra_include_paths=[os.path.join(ROOT, "src", "python"), os.path.join(ROOT, "include")],
        extra_ldflags=["-lcuda"], extra_cflags=["-O2"], verbose=False)
    build_s = time.time() - t0

    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    out = torch.empty_like(x)
    torch.testing.assert_close(nkt.rmsnorm(x, w), torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), 1e-6)
                               .to(x.dtype), rtol=2e-2, atol=2e-2)
    results = dict(ext.stages(x, w, out, normkit._C._c_api, args.calls, args.rounds))
    sync = torch.cuda.synchronize
    with torch.no_grad():
        results["python: normkit.torch.rmsnorm(x, w)"] = python_loop(lambda: nkt.rmsnorm(x, w), args.calls,
                                                                     args.rounds, sync)
        results["python: torch.empty_like(x)"] = python_loop(lambda: torch.empty_like(x), args.calls, args.rounds, sync)
        results["python: abs(1) (a C function)"] = python_loop(lambda: abs(1), args.calls, args.rounds, sync)
        results["python: F.rms_norm"] = python_loop(
            lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6), args.calls, args.rounds, sync)
    width = max(map(len, results))
    print(f"host stages, M=1 N=4096 bf16 with a weight, no grad (extension built in {build_s:.0f} s):")
    for name, us in results.items():
        print(f"  {name:<{width}}  {us:6.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls": args.calls, "rounds": args.rounds, "us_per_call": results,
                       "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, f, indent=1)


if __name__ == "__main__":
    main()
