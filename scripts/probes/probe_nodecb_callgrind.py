"""The compiled node callback (`_nodecb.c`) called N times from a stack of ~25 frames, on a CPU,
through the fake CUPTI of tests/test_record_recorder_fake.py: instructions per node under callgrind.

    valgrind --tool=callgrind --callgrind-out-file=cg.out python3 scripts/probes/probe_nodecb_callgrind.py 2000
    callgrind_annotate --inclusive=yes --threshold=100 cg.out | grep _nodecb

(inclusive cost of the callback, node_info and pack_info, divided by N). On the CPU machine, Python
3.11: callback ~3.6k instructions a node, node_info ~2.05k of it (pack_info ~0.7k).
"""
import ctypes, os, sys, types, tempfile
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests")); sys.path.insert(0, ROOT)
import fake_cupti_abi as T
from fake_cupti_abi import Res, Dom, GraphData, ResData
N = int(sys.argv[1])
f = T.FakeCupti()
pkg = types.ModuleType("cupti"); pkg.cupti = f; sys.modules["cupti"] = pkg
os.environ["CGTOOL_RECORD_SUBSCRIBER"] = "c"
T.install(f, setattr)
from cgtool.capture.record import _subscriber, attribution
_subscriber.load_libcupti = lambda: T.FakeLibcupti(f)
from cgtool.capture.record.recorder import Recorder
rec = Recorder(tempfile.mkdtemp(), program=["p.py"]); rec.start()
fn = f.cb  # lambda u, dom, cbid, data: cfn(...)
class Mod:
    _modules = {}
    def forward(self, depth):
        return deep(depth)
structs = []
def deep(d):
    if d:
        return deep(d - 1)
    for i in range(N):
        gd = GraphData(100, 0, 1000 + i, 0, 0, None, 0); rd = ResData(None, None, ctypes.addressof(gd))
        structs.append((gd, rd))
        fn(None, int(Dom.RESOURCE), int(Res.GRAPHNODE_CREATED), types.SimpleNamespace(ptr=ctypes.addressof(rd)))
def lvl(k):
    return lvl(k - 1) if k else Mod().forward(10)
lvl(12)
print("nodes", len(rec.tracker.nodes.get(100, {})))
os._exit(0)
