#!/usr/bin/env bash
# The README's path as a new user walks it, each step timed: bootstrap (from an empty venv, then again), the tiny
# bench, math500 (offline: exit 5 expected), the notebook, make figures. Writes steps.tsv (step, exit status,
# seconds) and one log per step into DIR; never stops at a failed step.
#
#   bash preparation/readme_path.sh DIR [STEP ...]     # steps: bootstrap rerun tiny math500 notebook figures
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${1:?usage: readme_path.sh DIR [STEP ...]}"; shift
STEPS=("$@"); [ ${#STEPS[@]} -gt 0 ] || STEPS=(bootstrap rerun tiny math500 notebook figures)
mkdir -p "$OUTDIR"; OUTDIR="$(cd "$OUTDIR" && pwd)"; cd "$ROOT"
VENV="${VENV:-.venv}"

step() {  # step NAME COMMAND...: run, time, log; one line to steps.tsv
  local name="$1"; shift
  local t0 t1 rc
  echo "== $name: $*" >&2
  t0=$(date +%s%N)
  "$@" >"$OUTDIR/$name.log" 2>&1; rc=$?
  t1=$(date +%s%N)
  printf '%s\t%s\t%d.%d\n' "$name" "$rc" $(((t1 - t0) / 1000000000)) $(((t1 - t0) / 100000000 % 10)) \
    | tee -a "$OUTDIR/steps.tsv" >&2
  tail -n 8 "$OUTDIR/$name.log" >&2
}

for s in "${STEPS[@]}"; do
  case "$s" in
    bootstrap) rm -rf "$VENV"; step bootstrap bash preparation/bootstrap.sh ;;
    rerun) step rerun bash preparation/bootstrap.sh ;;
    tiny) step tiny make bench DATASET=humaneval PRESET=tiny N=8 ;;
    math500) step math500 make bench DATASET=math500 ;;
    notebook) step notebook "$VENV/bin/python" -m preparation.execute_notebook --out "$OUTDIR/reproduce.ipynb" \
      CLONE=False ENGINE=jax PRESET=tiny DATASET=humaneval N=8 ;;
    figures) step figures make figures ;;
    *) echo "readme_path: unknown step $s (bootstrap rerun tiny math500 notebook figures)" >&2; exit 2 ;;
  esac
done
