"""Probe: what cupti.subscribe raises when another subscriber holds CUPTI (torch.profiler / Kineto)."""
import torch
from cupti import cupti
x = torch.randn(64, device="cuda")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    x.sin()
    try:
        s = cupti.subscribe(lambda *a: None, None)
        print("subscribe inside profiler OK", s)
        cupti.unsubscribe(s)
    except Exception as e:
        print("subscribe inside profiler ERR", type(e).__name__, e, getattr(e, "status", None))
try:
    s = cupti.subscribe(lambda *a: None, None)
    print("subscribe after profiler OK", s)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        x.sin()
    print("profiler while subscribed: events", len(p.events()))
except Exception as e:
    print("subscribe after profiler ERR", type(e).__name__, e)
