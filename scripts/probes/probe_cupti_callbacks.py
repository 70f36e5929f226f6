"""One-off probe (GPU machine): what cupti-python's callback API gives from Python.

Checks: subscribe/enable_callback, the cbdata type of RESOURCE graph callbacks, GraphData fields,
whether the Python stack of the node-creating code is live in the callback, the thread of backward
graph nodes, cudaGraphLaunch params (exec handle), exporting inside GRAPHEXEC_CREATED, the cost.
"""
import ctypes, json, os, sys, threading, time, traceback, logging
from collections import Counter

from cupti import cupti
import torch

R = cupti.CallbackIdResource
events = []
counts = Counter()
first_dump = {}
launches = Counter()
exports = {}
MAIN = threading.get_ident()


def short_stack(f, n=6):
    out = []
    while f is not None and len(out) < n:
        out.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}:{f.f_code.co_name}")
        f = f.f_back
    return out


def cb(userdata, domain, cbid, cbdata):
    t0 = time.perf_counter_ns()
    if domain == cupti.CallbackDomain.RESOURCE:
        name = R(cbid).name
        counts[name] += 1
        if name not in first_dump:
            first_dump[name] = {"type": type(cbdata).__name__, "dir": [a for a in dir(cbdata) if not a.startswith("__")]}
        if name in ("GRAPHNODE_CREATED", "GRAPHNODE_CLONED", "GRAPHEXEC_CREATED", "GRAPH_CREATED", "GRAPH_CLONED"):
            try:
                gd = cupti.GraphData.from_ptr(cbdata.resource_descriptor)
                rec = {"cb": name, "graph": gd.graph, "node": gd.node, "orig_node": gd.original_node,
                       "orig_graph": gd.original_graph, "exec": gd.graph_exec, "node_type": gd.node_type,
                       "thread_is_main": threading.get_ident() == MAIN}
            except Exception as e:
                rec = {"cb": name, "err": repr(e)}
            rec["stack"] = short_stack(sys._getframe(1))
            if not rec.get("thread_is_main", True):
                mf = sys._current_frames().get(MAIN)
                rec["main_stack"] = short_stack(mf)
            if name == "GRAPHEXEC_CREATED" and "exec" in rec:
                try:
                    from cgtool.capture.export import graph_data
                    t1 = time.perf_counter()
                    d = graph_data(rec["graph"], rec["exec"])
                    exports[d["exec_graph_id"]] = d
                    rec["export_ok"] = (d["exec_graph_id"], len(d["nodes"]), time.perf_counter() - t1)
                except Exception as e:
                    rec["export_err"] = repr(e)[:300]
                try:
                    rec["exec_id"] = cupti.get_graph_exec_id(rec["exec"])
                    rec["graph_id"] = cupti.get_graph_id(rec["graph"])
                except Exception as e:
                    rec["id_err"] = repr(e)
            if name == "GRAPHNODE_CREATED" and "node" in rec:
                try:
                    rec["node_id"] = cupti.get_graph_node_id(rec["node"])
                except Exception as e:
                    rec["id_err"] = repr(e)
            events.append(rec)
    else:
        site = cbdata.callback_site
        key = (cbdata.function_name, int(site))
        counts[str(key)] += 1
        if "api" not in first_dump:
            first_dump["api"] = {"type": type(cbdata).__name__, "dir": [a for a in dir(cbdata) if not a.startswith("__")]}
        if site == cupti.ApiCallbackSite.API_ENTER and "Launch" in cbdata.function_name:
            try:
                h = ctypes.c_void_p.from_address(cbdata.function_params).value
            except Exception as e:
                h = repr(e)
            launches[(cbdata.function_name, h)] += 1
        elif site == cupti.ApiCallbackSite.API_ENTER:
            events.append({"cb": cbdata.function_name, "corr": cbdata.correlation_id, "stack": short_stack(sys._getframe(1), 3)})
    cost[0] += time.perf_counter_ns() - t0
    cost[1] += 1


cost = [0, 0]
print("cupti version", cupti.get_version() if hasattr(cupti, "get_version") else "?")
sub = cupti.subscribe(cb, None)
print("subscriber", sub)
for n in ("GRAPHNODE_CREATED", "GRAPHNODE_CLONED", "GRAPHEXEC_CREATED", "GRAPH_CREATED", "GRAPH_CLONED", "GRAPHEXEC_DESTROY_STARTING"):
    cupti.enable_callback(1, sub, cupti.CallbackDomain.RESOURCE, getattr(R, n))
rt_names = [n for n in cupti.runtime_api_trace_cbid.__members__ if n.startswith(("cudaGraphLaunch", "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate"))]
print("runtime cbids", rt_names)
for n in rt_names:
    cupti.enable_callback(1, sub, cupti.CallbackDomain.RUNTIME_API, getattr(cupti.runtime_api_trace_cbid, n))
drv_names = [n for n in cupti.driver_api_trace_cbid.__members__ if n.startswith(("cuGraphLaunch",))]
for n in drv_names:
    cupti.enable_callback(1, sub, cupti.CallbackDomain.DRIVER_API, getattr(cupti.driver_api_trace_cbid, n))

# --- A: raw torch.cuda.graph with a fork
x = torch.randn(256, 256, device="cuda")
s2 = torch.cuda.Stream()
def step(x):
    y = x @ x                          # PROBE_LINE_A1
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s2):
        z = torch.relu(x)              # PROBE_LINE_A2
    torch.cuda.current_stream().wait_stream(s2)
    return (y + z).softmax(-1)         # PROBE_LINE_A3
for _ in range(3):
    step(x)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
t0 = time.perf_counter()
with torch.cuda.graph(g):
    out = step(x)
print("A capture+inst s", time.perf_counter() - t0)
print("A raw exec", g.raw_cuda_graph_exec() if hasattr(g, "raw_cuda_graph_exec") else None, "pool", g.pool())
for _ in range(7):
    g.replay()
torch.cuda.synchronize()
print("A launches", dict(launches))
print("A events:")
for e in events:
    print("  ", json.dumps(e, default=str)[:600])
events.clear()

# --- B: make_graphed_callables (backward thread)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
inp = torch.randn(16, 64, device="cuda", requires_grad=False)
gm = torch.cuda.make_graphed_callables(model, (inp,))
print("B events:", len(events))
th = Counter((e["cb"], e.get("thread_is_main")) for e in events)
print("  threads", th)
for e in events:
    if e["cb"] in ("GRAPHNODE_CREATED",) and not e.get("thread_is_main", True):
        print("  bwd node", json.dumps(e, default=str)[:700]); break
for e in events:
    if e["cb"] == "GRAPHEXEC_CREATED":
        print("  exec", json.dumps({k: v for k, v in e.items() if k != "stack"}, default=str))
events.clear()

# --- C: torch.compile reduce-overhead and a skip reason
skips = []
class H(logging.Handler):
    def emit(self, r):
        skips.append(r.getMessage())
logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").addHandler(H())
mdl = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.Linear(128, 128)).cuda()
cm = torch.compile(mdl, mode="reduce-overhead")
xi = torch.randn(32, 128, device="cuda")
t0 = time.perf_counter()
with torch.no_grad():
    for i in range(5):
        cm(xi)
torch.cuda.synchronize()
print("C compile+run s", time.perf_counter() - t0)
def f_skip(a, b):
    return (a + b.cuda()).sin()
cf = torch.compile(f_skip, mode="reduce-overhead")
for i in range(3):
    cf(torch.randn(8, device="cuda"), torch.randn(8))
print("C skips", skips)
print("C events", Counter(e["cb"] for e in events))
for e in events:
    if e["cb"] == "GRAPHNODE_CREATED":
        print("  node", json.dumps(e, default=str)[:900]); break
for e in events:
    if e["cb"] == "GRAPHEXEC_CREATED":
        print("  exec", json.dumps(e, default=str)[:1500])
print("launch counts", dict(launches))
print("counts", dict(counts))
print("first_dump", json.dumps(first_dump)[:3000])
print("callback cost ns total/calls", cost, (cost[0] / max(cost[1], 1)))
print("exports", {k: len(v["nodes"]) for k, v in exports.items()})
segs = torch.cuda.memory_snapshot()
print("segment keys", sorted(segs[0].keys()) if segs else None)
print("pools", Counter(tuple(s.get("segment_pool_id", ())) for s in segs))
cupti.unsubscribe(sub)

# --- D: callback cost per node creation, large graph
sub2 = None
