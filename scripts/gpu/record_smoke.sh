#!/usr/bin/env bash
# A short check of `cgtool record` on the GPU machine (about 2 minutes on one H100): the record GPU
# tests, a recording of tests/programs/server_runner.py read back into its types
# (cgtool.artifacts.recording), `cgtool topo`/`deps`/`report` on it, and the one libcupti locator in a
# process that has torch and cupti-python loaded (one mapped copy).
#   OUT=DIR bash scripts/gpu/record_smoke.sh     (DIR gets deps.json, report.html, rec.tgz)
set -u
OUT=${OUT:?set OUT to a folder for the results}
mkdir -p "$OUT"
python3 setup.py -q build_ext --inplace >/tmp/build.txt 2>&1; echo "build rc $?"
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
echo "===== gpu tests"; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_record_gpu.py 2>&1 | tail -8
R=/tmp/rec_server
echo "===== record"; timeout 90 python3 -m cgtool record -o $R --trace-replays 3 --coverage -- python3 tests/programs/server_runner.py > /tmp/rec.txt 2>&1; echo "record rc $?"; tail -22 /tmp/rec.txt
echo "===== typed"; python3 -c "
from cgtool.artifacts.recording import load_tree
t = load_tree('$R'); print('tree', type(t.index).__name__, 'processes', len(t.processes), 'complete', t.complete)
for r in t.recordings:
    i = r.index; print(type(i).__name__, 'pid', i.pid, 'graphs', [(g.seq, g.nodes, g.replays, len(g.traced_launches)) for g in i.graphs])
    print('ledger pools', [(p.pool, p.bytes_reserved, p.graphs) for p in i.ledger.pools] if i.ledger else None, 'trace', i.trace, 'subscriber', i.subscriber, 'errors', i.recorder_errors)
"
echo "===== topo"; timeout 60 python3 -m cgtool topo $R 2>&1 | tail -12; echo "topo rc ${PIPESTATUS[0]}"
echo "===== deps"; timeout 60 python3 -m cgtool deps $R --json $OUT/deps.json 2>&1 | tail -22; echo "deps rc ${PIPESTATUS[0]}"
echo "===== report"; timeout 60 python3 -m cgtool report $R -o $OUT/report.html 2>&1 | tail -3; echo "report rc ${PIPESTATUS[0]}"
echo "===== libcupti locator"; timeout 60 python3 -c "
import torch; torch.zeros(1, device='cuda')
from cgtool.capture._libcupti import load_libcupti, mapped_libcupti
a = load_libcupti(); print('first', a._name, 'mapped', mapped_libcupti())
from cupti import cupti; b = load_libcupti(cupti); cupti.get_timestamp()
print('with cupti', b._name, 'mapped', mapped_libcupti())
"
tar czf $OUT/rec.tgz -C /tmp rec_server rec.txt 2>/dev/null; echo done
