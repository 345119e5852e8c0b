#!/usr/bin/env bash
# One window of runs through an offline bundle, for a lent GPU machine with no network (issue
# 57 item 7). Made here: `python -m lab bundle BUNDLE --python 3.12 --have FREEZE` (FREEZE: the
# machine's `pip freeze`, so that its own CUDA build of jax is used and little travels). There:
#
#   scripts/gpu_window.sh BUNDLE SECONDS [python -m lab run arguments]   # default: --all --preset gpu
#
# records the machine (nvidia-smi, jax's devices, pip freeze), runs `BUNDLE/run.sh run ARGS
# --time-limit SECONDS` (with --all also --resume: each unfinished run continues, the rest
# start; reports under BUNDLE/project/reports), and packs the run folders, checkpoints included, into
# $OUT/runs.tgz (or ./window-out/runs.tgz): unpack it into the next window's bundle to go on.
# Exits with `lab run`'s status (0: all finished; 130: the deadline interrupted some).
set -uo pipefail
if [ $# -lt 2 ] || [ ! -x "$1/run.sh" ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/gpu_window.sh BUNDLE SECONDS [lab run arguments]: BUNDLE must hold" \
         "run.sh (python -m lab bundle), SECONDS a whole number" >&2
    exit 2
fi
bundle="$(cd "$1" && pwd)"
seconds=$2
shift 2
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--all --preset gpu)
out="${OUT:-$PWD/window-out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
{
    date -u +%FT%TZ
    nvidia-smi -L 2>&1 || echo "no nvidia-smi"
    "$py" -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1
} > "$out/machine.txt"
"$py" -m pip freeze > "$out/freeze.txt" 2>/dev/null
begin=$(date +%s)
resume=()  # with --all, each notebook's unfinished run continues (one run: --resume RUN_DIR)
[[ " ${args[*]} " == *" --all "* ]] && resume=(--resume)
"$bundle/run.sh" run "${args[@]}" --time-limit "$seconds" "${resume[@]}" --no-progress \
    --out "$bundle/project/reports" > "$out/run.log" 2>&1
status=$?
echo "exit $status after $(( $(date +%s) - begin )) s" >> "$out/run.log"
tail -n 25 "$out/run.log"
tar -czf "$out/runs.tgz" -C "$bundle/project" reports/runs
ls -l "$out"
exit $status
