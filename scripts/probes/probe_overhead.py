"""Probe: capture+instantiate time of a 1000-kernel graph with and without graph callbacks that grab the stack."""
import sys, time, traceback
from cupti import cupti
import torch
R = cupti.CallbackIdResource
store = []
def cb(u, d, cbid, data):
    if d == cupti.CallbackDomain.RESOURCE:
        gd = cupti.GraphData.from_ptr(data.resource_descriptor)
        f = sys._getframe(1)
        fr = []
        while f is not None:
            fr.append((f.f_code, f.f_lineno)); f = f.f_back
        store.append((gd.node, fr))
x = torch.randn(64, device="cuda")
def work():
    y = x
    for _ in range(1000):
        y = y + 1
    return y
work(); torch.cuda.synchronize()
def cap():
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.cuda.graph(g):
        work()
    torch.cuda.synchronize()
    return time.perf_counter() - t
sub = None
res = {"bare": [], "cb": []}
for rnd in range(4):
    for mode in ("bare", "cb"):
        if mode == "cb":
            sub = cupti.subscribe(cb, None)
            for n in ("GRAPHNODE_CREATED", "GRAPHEXEC_CREATED"):
                cupti.enable_callback(1, sub, cupti.CallbackDomain.RESOURCE, getattr(R, n))
        res[mode].append(cap())
        if mode == "cb":
            cupti.unsubscribe(sub)
print({k: [round(v * 1e3, 2) for v in vs] for k, vs in res.items()}, "nodes seen", len(store))
try:
    s1 = cupti.subscribe(cb, None)
    s2 = cupti.subscribe(cb, None)
    print("double subscribe OK?!")
except Exception as e:
    print("double subscribe ERR", type(e).__name__, e, getattr(e, "status", None))
