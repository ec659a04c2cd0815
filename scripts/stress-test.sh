#!/usr/bin/env bash
# The test suite on a loaded machine: two busy loops (`python3 -c 'while 1: pass'` x2) run
# while the whole suite runs five times in a row (STRESS_RUNS=N for another count: one flake in
# five runs is what a suite that "never flakes" must not show). The loops are always stopped
# (trap), and the last line is `stress: N/5 runs passed`; the exit status is 0 only for 5/5. The suite runs
# as `make test` runs it (one pytest worker per CPU), so the loops double the load CI sees.
# Extra arguments go to pytest (e.g. `scripts/stress-test.sh tests/tpm/test_sim.py`).
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || scripts/bootstrap.sh || exit 1

runs=${STRESS_RUNS:-5}
case "$runs" in ""|*[!0-9]*|0) echo "stress: STRESS_RUNS must be a positive count" >&2; exit 2;; esac
loops=()
suite=""
passed=0
stop_loops() {
    [ ${#loops[@]} -eq 0 ] && return
    kill "${loops[@]}" 2>/dev/null
    wait "${loops[@]}" 2>/dev/null
    loops=()
}
finish() {
    # a signal while a run was going: stop that run too (pytest ends its swtpms on SIGTERM)
    if [ -n "$suite" ]; then
        kill -TERM "$suite" 2>/dev/null
        wait "$suite" 2>/dev/null
    fi
    stop_loops
    echo "stress: $passed/$runs runs passed"
}
trap finish EXIT
trap 'exit 130' INT TERM HUP

for _ in 1 2; do
    python3 -c 'while 1: pass' &
    loops+=($!)
done
echo "stress: busy loops ${loops[*]} started on $(nproc) CPUs"
for run in $(seq "$runs"); do
    echo "stress: run $run/$runs"
    start=$(date +%s)
    # In the background and waited for, so that a signal to this script is acted on at once.
    "$PY" -m pytest -q -n logical -p no:cacheprovider "$@" &
    suite=$!
    wait "$suite"
    status=$?
    suite=""
    [ "$status" -eq 0 ] && passed=$((passed + 1))
    echo "stress: run $run/$runs took $(( $(date +%s) - start )) s"
done
[ "$passed" -eq "$runs" ]
