#!/usr/bin/env bash
# Every command with --nproc-per-node 2 on a 2-GPU machine, checked against the programs' own counts.
#   bash scripts/gpu/two_gpus.sh OUTDIR
# Workloads: sample_workloads/tp_mlp.py (tensor-parallel MLP, all-reduce in the graph) and
# tests/programs/nccl_in_graph.py (an all-reduce in the graph beside a GEMM on a side stream).
# Steps, each under `timeout` within one budget (TWO_GPUS_BUDGET, 380 s), each headed "===== " with its
# exit status in OUTDIR/two_gpus.log:
#   per workload: capture, export, bench, trace (--max-connections 1 and default), then deps/topo/report
#   on the per-rank outputs; record -- torchrun of nccl_in_graph.py, and of its --hang variant (graph
#   alive at destroy_process_group) under `timeout` with --hang-after; two simulated nodes (two torchrun
#   agents, one GPU each, c10d rendezvous on localhost) running capture, trace and record; pytest -m gpu2.
# Checks: scripts/check_two_gpus.py prints "CHECK ...: OK|FAIL". Packs OUTDIR/two_gpus.tgz with the small
# outputs for tests/data/two_gpus/ (rewritten after each stage).
set -u
OUT=${1:?usage: scripts/gpu/two_gpus.sh OUTDIR}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/cgtool-2gpu.XXXXXX)
PACK="$W/pack/two_gpus"; mkdir -p "$PACK"
export PYTHONUNBUFFERED=1 COLUMNS=110 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$OUT/two_gpus.log") 2>&1
T0=$(date +%s); BUDGET=${TWO_GPUS_BUDGET:-380}
lim() { local l=$1 r=$(( BUDGET - ($(date +%s) - T0) )); (( r < l )) && l=$r; (( l < 1 )) && l=1; echo "$l"; }
step() { echo; echo "===== $* (at $(( $(date +%s) - T0 )) s)"; }
run() {  # limit, command...: run it, print its exit status
  local l; l=$(lim "$1"); shift
  timeout -k 10 "$l" "$@"; local rc=$?
  echo "----- exit status: $rc (limit ${l} s): $*"; return $rc
}
CG=(python3 -m cgtool)
CHK=(python3 scripts/check_two_gpus.py)
pack() { tar -czf "$W/t.tgz" -C "$W/pack" . 2>/dev/null && mv -f "$W/t.tgz" "$OUT/two_gpus.tgz"; }
trap pack EXIT

step environment
nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())"
run 60 python3 setup.py -q build_ext --inplace > "$W/build.txt" 2>&1; tail -n 3 "$W/build.txt"

workload() {  # name script: every command, checked; packed
  local name=$1 T=$2 D="$W/$1"; mkdir -p "$D/traces" "$D/traces_mc1"
  step "$name: capture --nproc-per-node 2"
  run 60 "${CG[@]}" capture $T --nproc-per-node 2 -o "$D/bundle" --force && "${CHK[@]}" bundle "$D/bundle"
  step "$name: export --nproc-per-node 2"
  run 60 "${CG[@]}" export $T --nproc-per-node 2 -o "$D/graph.json" --force && "${CHK[@]}" export "$D/graph"
  step "$name: bench --nproc-per-node 2"
  run 60 "${CG[@]}" bench $T --nproc-per-node 2 --replays 200 --json "$D/bench.json" --force && "${CHK[@]}" bench "$D/bench.json" 200
  step "$name: trace --nproc-per-node 2 --max-connections 1"
  run 60 "${CG[@]}" trace $T --nproc-per-node 2 --max-connections 1 --replays 5 -o "$D/traces_mc1/trace.json.gz" --force \
    && "${CHK[@]}" trace "$D/traces_mc1" 5 1
  step "$name: trace --nproc-per-node 2"
  run 60 "${CG[@]}" trace $T --nproc-per-node 2 --replays 5 -o "$D/traces/trace.json.gz" --force \
    && "${CHK[@]}" trace "$D/traces" 5
  step "$name: deps, topo, report on the per-rank outputs; NCCL figures from the raw events"
  run 30 "${CG[@]}" deps "$D/traces" --json "$D/deps.json" --force
  run 30 "${CG[@]}" deps "$D/traces_mc1" --json "$D/deps_mc1.json" --force
  run 30 "${CG[@]}" topo "$D/bundle"
  run 60 "${CG[@]}" report "$D/traces" "$D/bundle" -o "$D/report.html" --force -q
  "${CHK[@]}" nccl "$D/traces"; "${CHK[@]}" nccl "$D/traces_mc1"
  mkdir -p "$PACK/$name"; cp -r "$D/traces" "$D/traces_mc1" "$PACK/$name/"
  for f in bench.json deps.json deps_mc1.json; do [ -f "$D/$f" ] && gzip -c "$D/$f" > "$PACK/$name/$f.gz"; done
  (cd "$D/bundle" && for f in rank*/graph.json; do mkdir -p "$PACK/$name/bundle/$(dirname $f)"; gzip -c "$f" > "$PACK/$name/bundle/$f.gz"; done)
}

P=tests/programs/nccl_in_graph.py
records() {
  step "record -- torchrun --nproc-per-node 2 nccl_in_graph.py"
  run 90 "${CG[@]}" record -o "$W/rec_nig" --force -- python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29531 $P \
    > "$W/rec_nig.stdout" 2> "$W/rec_nig.stderr"
  tail -n 25 "$W/rec_nig.stderr"; "${CHK[@]}" record "$W/rec_nig" "$W/rec_nig.stdout"
  step "record --hang-after 8 of nccl_in_graph.py --hang, stopped by timeout -s TERM 30 (graph alive at destroy_process_group)"
  run 90 timeout -s TERM -k 50 30 "${CG[@]}" record -o "$W/rec_hang" --force --hang-after 8 -- python3 -m torch.distributed.run \
    --nproc-per-node 2 --master-port 29532 $P --hang > "$W/rec_hang.stdout" 2> "$W/rec_hang.stderr"
  tail -n 30 "$W/rec_hang.stderr"; "${CHK[@]}" record "$W/rec_hang" "$W/rec_hang.stdout"
  for d in "$W"/rec_hang/p*/; do echo "--- $d stacks.txt (head)"; head -n 30 "$d/stacks.txt" 2>/dev/null; done
  for r in rec_nig rec_hang; do
    mkdir -p "$W/packrec/record_$r.run"; cp "$W/$r.stdout" "$W/packrec/record_$r.run/stdout.txt"
    cp "$W/$r.stderr" "$W/packrec/record_$r.run/stderr.txt"; cp -r "$W/$r" "$W/packrec/record_$r"
  done
  (cd "$W/packrec" && tar -czf "$PACK/recordings.tgz" .)
}

step "three lanes at once (log of each below): tp_mlp | nccl_in_graph | record"
( workload tp_mlp sample_workloads/tp_mlp.py > "$W/lane_tp.log" 2>&1 ) &
( workload nig $P > "$W/lane_nig.log" 2>&1 ) &
( records > "$W/lane_rec.log" 2>&1 ) &
wait
for l in tp nig rec; do echo; echo "########## lane $l"; cat "$W/lane_$l.log"; done
pack

N2="$W/twonode"
agents() {  # id port, then the command each agent runs (in its node's folder), with TORCHRUN standing for the launcher's args
  local id=$1 port=$2; shift 2
  for k in 0 1; do
    mkdir -p "$N2/node$k"
    local tr=(python3 -m torch.distributed.run --nnodes 2 --node-rank $k --nproc-per-node 1 --rdzv-backend c10d
              --rdzv-endpoint localhost:$port --rdzv-id $id)
    local cmd=() a
    for a in "$@"; do if [ "$a" = TORCHRUN ]; then cmd+=("${tr[@]}"); else cmd+=("$a"); fi; done
    ( cd "$N2/node$k" && CUDA_VISIBLE_DEVICES=$k timeout -k 10 "$(lim 90)" "${cmd[@]}" > "$N2/node$k/$id.out" 2>&1;
      echo "node $k $id exit $?" ) &
  done
  wait
  tail -n 6 "$N2"/node*/$id.out
}
twonode() {
  step "two simulated nodes: two torchrun agents, one GPU each (CUDA_VISIBLE_DEVICES), c10d rendezvous on localhost"
  R=$PWD
  agents cap 29541 TORCHRUN -m cgtool capture "$R/sample_workloads/tp_mlp.py" -o bundle --force
  agents tr 29542 TORCHRUN -m cgtool trace "$R/sample_workloads/tp_mlp.py" --replays 5 -o trace.json.gz --force
  agents rec 29543 python3 -m cgtool record -o rec --force -- TORCHRUN "$R/$P"
  for k in 0 1; do find "$N2/node$k" -maxdepth 3 | head -n 20; done
  "${CHK[@]}" ranks "$N2/node0" "$N2/node1"
  run 30 "${CG[@]}" topo "$N2"
  run 30 "${CG[@]}" deps "$N2" --json "$N2/deps.json" --force
  run 30 "${CG[@]}" report "$N2/node0/rec" "$N2/node1/rec" -o "$N2/report.html" --force -q
  mkdir -p "$PACK/twonode"; cp -r "$N2"/node* "$PACK/twonode/" 2>/dev/null
}
step "two lanes: two nodes | pytest -m gpu2"
( twonode > "$W/lane_2n.log" 2>&1 ) &
( step "pytest -m gpu2"; run 150 python3 -m pytest -q -m gpu2 tests/gpu/test_two_gpus.py ) > "$W/lane_py.log" 2>&1 &
wait
for l in 2n py; do echo; echo "########## lane $l"; cat "$W/lane_$l.log"; done
pack
step "sizes"; du -sh "$PACK"/* "$OUT/two_gpus.tgz"
grep -h "^CHECK" "$W"/lane_*.log | sort | uniq -c | sort -rn | head -50
