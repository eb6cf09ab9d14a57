# Grouped rows with and without programmatic dependent launch, and the bench's way
# of timing (input sets rotated) against one input set.
import os, statistics
import torch
import normkit
from normkit.torch import rmsnorm_fwd

def bench(n, sets):
    m = (1 << 27) // n
    data = [(torch.randn(m, n, device="cuda"), torch.randn(m, n, device="cuda")) for _ in range(sets)]
    w = torch.randn(n, device="cuda")
    for x, r in data: rmsnorm_fwd(x, w, residual=r, store_rstd=True)
    torch.cuda.synchronize()
    t = []
    for i in range(12):
        x, r = data[i % sets]
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); rmsnorm_fwd(x, w, residual=r, store_rstd=True); e.record(); e.synchronize()
        t.append(a.elapsed_time(e) * 1000)
    return statistics.median(t)

for pdl in ("1", "0"):
    for g in ("1", "0"):
        os.environ["NORMKIT_PDL"] = pdl; os.environ["NORMKIT_GROUP_ROWS"] = g; normkit._C.reload_config()
        print(f"pdl={pdl} group={g}: N=32768 one set {bench(32768, 1):6.1f} us, 3 sets {bench(32768, 3):6.1f} us; "
              f"N=262144 one set {bench(262144, 1):6.1f} us", flush=True)
