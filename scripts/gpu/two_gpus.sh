#!/usr/bin/env bash
# Every command with --nproc-per-node 2 on a 2-GPU machine, checked against the programs' own counts.
#   bash scripts/gpu/two_gpus.sh OUTDIR        (TWO_GPUS_BUDGET: seconds for the whole run, default 400)
# Workloads: sample_workloads/tp_mlp.py (tensor-parallel MLP, all-reduce in the graph) and
# tests/programs/nccl_in_graph.py (an all-reduce in the graph beside a GEMM on a side stream).
# Every step runs under `timeout` within the one budget and is headed "===== " in OUTDIR/two_gpus.log,
# with a "----- exit status" line after it. Stages:
#   1. three lanes at once, each on both GPUs (separate processes and ports; NCCL allows concurrent
#      communicators): per workload capture, export, trace (--max-connections 1 and default), then
#      deps/topo/report on the per-rank outputs; record -- torchrun of nccl_in_graph.py, record
#      --nproc-per-node 2 of it, and torchrun of its --hang variant (graph alive at
#      destroy_process_group) stopped by `timeout -s TERM` with --hang-after;
#   2. bench of both workloads, alone on the GPUs (its figures are timings);
#   3. two lanes: two simulated nodes (two torchrun agents, one GPU each, c10d rendezvous on localhost)
#      running capture, trace and record; pytest -m gpu2.
# Checks: scripts/check_two_gpus.py prints "CHECK ...: OK|FAIL"; the tally ends the log. Packs
# OUTDIR/two_gpus.tgz with the small outputs for tests/data/two_gpus/ (rewritten after each stage).
set -u
OUT=${1:?usage: scripts/gpu/two_gpus.sh OUTDIR}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/cgtool-2gpu.XXXXXX)
PACK="$W/pack/two_gpus"; mkdir -p "$PACK"
export PYTHONUNBUFFERED=1 COLUMNS=110 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > "$OUT/two_gpus.log" 2>&1
T0=$(date +%s); BUDGET=${TWO_GPUS_BUDGET:-400}
lim() { local l=$1 r=$(( BUDGET - ($(date +%s) - T0) )); (( r < l )) && l=$r; (( l < 1 )) && l=1; echo "$l"; }
step() { echo; echo "===== $* (at $(( $(date +%s) - T0 )) s)"; }
run() {  # limit, command...: run it, print its exit status
  local l; l=$(lim "$1"); shift
  timeout -k 10 "$l" "$@"; local rc=$?
  echo "----- exit status: $rc (limit ${l} s, at $(( $(date +%s) - T0 )) s): $*"; return $rc
}
runr() {  # stdout-file stderr-file limit command...: run with its output in files, print its exit status
  local o=$1 e=$2 l; l=$(lim "$3"); shift 3
  timeout -k 10 "$l" "$@" > "$o" 2> "$e"; local rc=$?
  echo "----- exit status: $rc (limit ${l} s, at $(( $(date +%s) - T0 )) s): $*"; return $rc
}
CG=(python3 -m cgtool)
CHK=(python3 scripts/check_two_gpus.py)
pack() { tar -czf "$W/t.tgz" -C "$W/pack" . 2>/dev/null && mv -f "$W/t.tgz" "$OUT/two_gpus.tgz"; }
trap pack EXIT

step environment
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -n 4
timeout 60 python3 -c "import torch; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count(), 'NCCL', torch.cuda.nccl.version())"

workload() {  # name script: every command but bench, checked; packed
  local name=$1 T=$2 D="$W/$1"; mkdir -p "$D/traces" "$D/traces_mc1"
  step "$name: capture --nproc-per-node 2"
  run 75 "${CG[@]}" capture $T --nproc-per-node 2 -o "$D/bundle" --force && "${CHK[@]}" bundle "$D/bundle"
  step "$name: export --nproc-per-node 2"
  run 75 "${CG[@]}" export $T --nproc-per-node 2 -o "$D/graph.json" --force && "${CHK[@]}" export "$D/graph"
  step "$name: trace --nproc-per-node 2 --max-connections 1"
  run 75 "${CG[@]}" trace $T --nproc-per-node 2 --max-connections 1 --replays 5 -o "$D/traces_mc1/trace.json.gz" --force \
    && "${CHK[@]}" trace "$D/traces_mc1" 5 1
  step "$name: trace --nproc-per-node 2"
  run 75 "${CG[@]}" trace $T --nproc-per-node 2 --replays 5 -o "$D/traces/trace.json.gz" --force \
    && "${CHK[@]}" trace "$D/traces" 5
  step "$name: deps, topo, report on the per-rank outputs; NCCL figures against the raw events"
  run 40 "${CG[@]}" deps "$D/traces" --json "$D/deps.json" --force
  run 40 "${CG[@]}" deps "$D/traces_mc1" --json "$D/deps_mc1.json" --force
  run 40 "${CG[@]}" topo "$D/bundle"
  run 60 "${CG[@]}" report "$D/traces" "$D/bundle" -o "$D/report.html" --force -q
  "${CHK[@]}" nccl "$D/traces" "$D/deps.json"; "${CHK[@]}" nccl "$D/traces_mc1" "$D/deps_mc1.json"
  mkdir -p "$PACK/$name"; cp -r "$D/traces" "$D/traces_mc1" "$PACK/$name/"
  for f in deps.json deps_mc1.json; do [ -f "$D/$f" ] && gzip -c "$D/$f" > "$PACK/$name/$f.gz"; done
  (cd "$D/bundle" && for f in rank*/graph.json; do mkdir -p "$PACK/$name/bundle/$(dirname $f)"; gzip -c "$f" > "$PACK/$name/bundle/$f.gz"; done)
}

P=tests/programs/nccl_in_graph.py
records() {
  step "record -- torchrun --nproc-per-node 2 nccl_in_graph.py"
  runr "$W/rec_nig.stdout" "$W/rec_nig.stderr" 100 "${CG[@]}" record -o "$W/rec_nig" --force -- \
    python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29531 $P
  echo $? > "$W/rec_nig.rc"
  tail -n 25 "$W/rec_nig.stderr"; "${CHK[@]}" record "$W/rec_nig" "$W/rec_nig.stdout"
  step "record --nproc-per-node 2 nccl_in_graph.py (the option, not -- torchrun)"
  runr "$W/rec_opt.stdout" "$W/rec_opt.stderr" 100 "${CG[@]}" record -o "$W/rec_opt" --force --nproc-per-node 2 \
    --rdzv-endpoint localhost:29533 $P
  echo $? > "$W/rec_opt.rc"
  tail -n 25 "$W/rec_opt.stderr"; "${CHK[@]}" record "$W/rec_opt" "$W/rec_opt.stdout"
  step "record --hang-after 8 of nccl_in_graph.py --hang, stopped by timeout -s TERM 30 (graph alive at destroy_process_group)"
  runr "$W/rec_hang.stdout" "$W/rec_hang.stderr" 100 timeout -s TERM -k 45 30 "${CG[@]}" record -o "$W/rec_hang" --force \
    --hang-after 8 -- python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29532 $P --hang
  echo $? > "$W/rec_hang.rc"
  tail -n 30 "$W/rec_hang.stderr"; "${CHK[@]}" record "$W/rec_hang" "$W/rec_hang.stdout" hang "$W/rec_hang.stderr"
  for d in "$W"/rec_hang/p*/; do echo "--- $d stacks.txt (head)"; head -n 24 "$d/stacks.txt" 2>/dev/null; done
  for r in rec_nig rec_opt rec_hang; do
    mkdir -p "$PACK/record_$r"; cp -r "$W/$r/." "$PACK/record_$r/"
    cp "$W/$r.stdout" "$PACK/record_$r/stdout.txt"; tail -n 60 "$W/$r.stderr" > "$PACK/record_$r/stderr.txt"
    cp "$W/$r.rc" "$PACK/record_$r/exit_code.txt"
  done
}

step "stage 1: three lanes at once (the log of each below): tp_mlp | nccl_in_graph | record"
( workload tp_mlp sample_workloads/tp_mlp.py > "$W/lane_tp.log" 2>&1 ) &
( workload nig $P > "$W/lane_nig.log" 2>&1 ) &
( records > "$W/lane_rec.log" 2>&1 ) &
wait
for l in tp nig rec; do echo; echo "########## lane $l"; cat "$W/lane_$l.log"; done
pack

step "stage 2: bench --nproc-per-node 2, alone on the GPUs"
for w in tp_mlp:sample_workloads/tp_mlp.py nig:$P; do
  name=${w%%:*}; T=${w#*:}
  run 60 "${CG[@]}" bench $T --nproc-per-node 2 --replays 200 --json "$W/bench_$name.json" --force \
    && "${CHK[@]}" bench "$W/bench_$name.json" 200 | tee -a "$W/lane_bench.log"
  mkdir -p "$PACK/$name"; [ -f "$W/bench_$name.json" ] && gzip -c "$W/bench_$name.json" > "$PACK/$name/bench.json.gz"
done
pack

N2="$W/twonode"  # per command: N2/<command>/node<k>/ holds node k's output, as two machines' folders copied together
agents() {  # id port, then the command each agent runs (in N2/id/node<k>), with TORCHRUN standing for the launcher's args
  local id=$1 port=$2; shift 2
  mkdir -p "$N2/logs"
  for k in 0 1; do
    mkdir -p "$N2/$id/node$k"
    local tr=(python3 -m torch.distributed.run --nnodes 2 --node-rank $k --nproc-per-node 1 --rdzv-backend c10d
              --rdzv-endpoint localhost:$port --rdzv-id $id)
    local cmd=() a
    for a in "$@"; do if [ "$a" = TORCHRUN ]; then cmd+=("${tr[@]}"); else cmd+=("$a"); fi; done
    ( cd "$N2/$id/node$k" && CUDA_VISIBLE_DEVICES=$k timeout -k 10 "$(lim 75)" "${cmd[@]}" > "$N2/logs/$id.node$k.out" 2>&1;
      echo "----- exit status: $? node $k $id (at $(( $(date +%s) - T0 )) s)" ) &
  done
  wait
  tail -n 6 "$N2"/logs/$id.node*.out
}
twonode() {
  step "two simulated nodes: two torchrun agents, one GPU each (CUDA_VISIBLE_DEVICES), c10d rendezvous on localhost"
  R=$PWD
  agents cap 29541 TORCHRUN -m cgtool capture "$R/sample_workloads/tp_mlp.py" -o bundle --force
  agents tr 29542 TORCHRUN -m cgtool trace "$R/sample_workloads/tp_mlp.py" --replays 5 -o trace.json.gz --force
  agents rec 29543 python3 -m cgtool record -o rec --force -- TORCHRUN "$R/$P"
  find "$N2" | sort | head -n 40
  "${CHK[@]}" ranks bundle "$N2/cap/node0" "$N2/cap/node1"
  "${CHK[@]}" ranks trace "$N2/tr/node0" "$N2/tr/node1"
  "${CHK[@]}" ranks record "$N2/rec/node0" "$N2/rec/node1" "$N2/logs/rec.node0.out" "$N2/logs/rec.node1.out"
  step "both nodes' folders read as one run"
  run 40 "${CG[@]}" topo "$N2/cap"
  run 40 "${CG[@]}" deps "$N2/tr" --json "$N2/deps.json" --force && "${CHK[@]}" trace "$N2/tr" 5 && "${CHK[@]}" nccl "$N2/tr" "$N2/deps.json"
  run 60 "${CG[@]}" report "$N2/rec/node0/rec" "$N2/rec/node1/rec" -o "$N2/report.html" --force -q
  mkdir -p "$PACK/twonode"; cp -r "$N2/cap" "$N2/tr" "$N2/rec" "$N2/logs" "$PACK/twonode/" 2>/dev/null
  [ -f "$N2/deps.json" ] && gzip -c "$N2/deps.json" > "$PACK/twonode/deps.json.gz"
}
step "stage 3: two lanes: two nodes | pytest -m gpu2"
( twonode > "$W/lane_2n.log" 2>&1 ) &
( step "pytest -m gpu2"; run 150 python3 -m pytest -q -p no:cacheprovider -m gpu2 tests/gpu/test_two_gpus.py ) > "$W/lane_py.log" 2>&1 &
wait
for l in 2n py; do echo; echo "########## lane $l"; cat "$W/lane_$l.log"; done
pack
step "sizes"; du -sh "$PACK"/* "$OUT/two_gpus.tgz"
echo "===== CHECK tally (at $(( $(date +%s) - T0 )) s)"
grep -h "^CHECK" "$W"/lane_*.log | grep -oE ": (OK|FAIL)" | sort | uniq -c
grep -h "^CHECK.*FAIL" "$W"/lane_*.log | head -40
