# Is the grouped forward's gap to its prototype host time inside the timed call
# (the stream-ordered scratch)? Single calls timed by CUDA events (as the bench) and
# 20 calls back to back, grouped rows on and off, then again with the default memory
# pool's release threshold raised (its memory kept between calls).
import ctypes, os, statistics, sys
import torch
import normkit
from normkit.torch import rmsnorm_fwd, layernorm_fwd

def bench(op, n, res):
    m = (1 << 27) // n
    x = torch.randn(m, n, device="cuda"); r = torch.randn_like(x) if res else None
    w = torch.randn(n, device="cuda"); b = torch.randn(n, device="cuda")
    f = (lambda: rmsnorm_fwd(x, w, residual=r, store_rstd=True)) if op == "rms" else \
        (lambda: layernorm_fwd(x, w, b, residual=r, store_rstd=True, store_mean=True))
    for _ in range(3): f()
    torch.cuda.synchronize()
    single = []
    for _ in range(15):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); e.record(); e.synchronize(); single.append(a.elapsed_time(e) * 1000)
    a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(20): f()
    e.record(); e.synchronize()
    return statistics.median(single), a.elapsed_time(e) * 1000 / 20

def run(tag):
    for op, n, res in [("rms", 32768, True), ("rms", 262144, True), ("ln", 262144, False)]:
        for g in ("1", "0"):
            os.environ["NORMKIT_GROUP_ROWS"] = g; normkit._C.reload_config()
            s, bb = bench(op, n, res)
            print(f"{tag:10s} {op} N={n} res={res} group={g}: single {s:7.1f} us  back-to-back {bb:7.1f} us", flush=True)

run("default")
rt = ctypes.CDLL("libcudart.so.13")
pool = ctypes.c_void_p()
assert rt.cudaDeviceGetDefaultMemPool(ctypes.byref(pool), 0) == 0
thr = ctypes.c_uint64(1 << 62)
assert rt.cudaMemPoolSetAttribute(pool, 4, ctypes.byref(thr)) == 0
run("kept")
