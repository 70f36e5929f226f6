#!/usr/bin/env bash
# The README's test command, timed: `python -m pytest` (after `pip install -e '.[test]'`) with the
# machine it ran on, for docs/performance.md. Run it on an idle machine (it says when the machine
# is not idle); the slowest tests are listed after the time.
#
#   bash scripts/time_tests.sh            # in an environment where `pip install -e '.[test]'` was run
#   bash scripts/time_tests.sh --repeat   # .ci/run's step that runs the tests starting processes 20 times
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=(python -m pytest -p no:cacheprovider --durations=15)
what="README test command"
if [ "${1:-}" = "--repeat" ]; then
  cmd=(python -m pytest -q -p no:cacheprovider -m "subprocess and not slow" --repeat 20 -x --durations=15)
  what="20x step of the tests that start processes"
fi
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || true)
echo "machine: $(nproc) cores ($cpu), Python $(python -c 'import sys; print(sys.version.split()[0])')"
load=$(cut -d' ' -f1 /proc/loadavg)
if awk "BEGIN {exit !($load > 0.5)}"; then
  echo "warning: load average $load: the machine is not idle, the time below is not the figure to quote" >&2
fi
out=$(mktemp)
start=$(date +%s.%N)
set +e
"${cmd[@]}" >"$out" 2>&1
rc=$?
set -e
end=$(date +%s.%N)
sed -n '/slowest 15 durations/,$p' "$out" | head -18
tail -1 "$out"
wall=$(python -c "print(round($end - $start))")
echo "$what: ${wall} s wall ($((wall / 60)) min $((wall % 60)) s), exit $rc, on $(nproc) cores"
rm -f "$out"
exit $rc
