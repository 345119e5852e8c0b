#!/usr/bin/env bash
# CI's `make test` from a fresh clone, timed, with CPU-bound processes beside it the whole time.
#
#   scripts/ci_under_load.sh            two busy processes (`python3 -c "while True: pass"`)
#   scripts/ci_under_load.sh 0          idle: the 20-minute budget
#   HOGS=4 scripts/ci_under_load.sh     any number
#
# Clones this repository's HEAD (commit first: uncommitted changes are not tested) into a new
# temporary folder, runs `make test` there (setup included, as on a fresh machine's clone),
# and prints one line: exit status, wall time, the budget it is held to (20 min idle, 45 min
# under load, benchmarks/RESULTS.md) and the load average at the end. The busy processes are
# killed on every exit path; the clone and its log stay for a look (their path is printed).
set -euo pipefail

hogs=${1:-${HOGS:-2}}
[[ $hogs =~ ^[0-9]+$ ]] || { echo "error: the number of busy processes must be a whole" \
    "number, got '$hogs' (e.g. scripts/ci_under_load.sh 2)" >&2; exit 2; }
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d "${TMPDIR:-/tmp}/lab-ci-load-XXXXXX")
git clone --quiet "$repo" "$work/lab"
[ -d "$repo/../shared" ] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"

pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 "$hogs"); do
    python3 -c "while True: pass" &
    pids+=($!)
done

budget=$(( hogs == 0 ? 20 : 45 ))
echo "make test in $work/lab beside $hogs busy processes (budget $budget min); log:" \
     "$work/make-test.log"
start=$(date +%s)
set +e
(cd "$work/lab" && make test) >"$work/make-test.log" 2>&1
status=$?
set -e
seconds=$(( $(date +%s) - start ))
tail -n 25 "$work/make-test.log"
verdict=$([ $status -eq 0 ] && [ $seconds -le $(( budget * 60 )) ] && echo within || echo OVER)
printf 'make test, fresh clone, %d busy processes: exit %d in %d min %02d s (%s the %d min' \
       "$hogs" "$status" $(( seconds / 60 )) $(( seconds % 60 )) "$verdict" "$budget"
printf ' budget); load average at the end %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
