#!/usr/bin/env bash
# The accelerator check, run as it is on a fresh GPU or TPU machine (CPU too, with small sizes):
#
#   bash preparation/device_check.sh                     # or: make device-check
#   DEVICE_CHECK_OUT=/tmp/dc PLATFORM=cpu bash preparation/device_check.sh
#
# 1. bootstrap for the platform (skipped with SKIP_BOOTSTRAP=1 when VENV already holds the environment);
# 2. the tiny preset on both engines (humaneval, N prompts), each into its own run folder;
# 3. the K-flat benchmark on random weights of each KFLAT_SHAPES shape (no download);
# 4. a summary: AR TPOT against its memory-bandwidth floor, tau and speedup per method, verify(K)/verify(0).
# Everything goes under one folder: DEVICE_CHECK_OUT, else OUT, else results/device-check. No hub access.
# Exit 0 when every step ran and nothing fell below a floor, else 1 (the summary says which).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
DEST="${DEVICE_CHECK_OUT:-${OUT:-$ROOT/results/device-check}}"
N="${N:-2}"
ENGINES="${ENGINES:-vllm jax}"
export HF_HUB_OFFLINE=1

if [ "${SKIP_BOOTSTRAP:-0}" != 1 ]; then
  bash preparation/bootstrap.sh || { echo "device-check: bootstrap failed; see above" >&2; exit 1; }
fi
PLATFORM="${PLATFORM:-$("$PY" -c 'from benchmarks.core.provenance import detect_platform; print(detect_platform())')}"
if [ "$PLATFORM" = cpu ]; then  # what a CPU can do in minutes: the tiny shape, few points
  KFLAT_SHAPES="${KFLAT_SHAPES:-tiny}"; KFLAT_ARGS="${KFLAT_ARGS:---quick}"
else  # 7 K values at one long context: a few compilations per shape keep the check within minutes
  KFLAT_SHAPES="${KFLAT_SHAPES:-qwen3-4b llama-3.1-8b}"; KFLAT_ARGS="${KFLAT_ARGS:---ks 0,1,3,7,15,31,63 --contexts 2048 --repeats 20}"
fi
mkdir -p "$DEST"
echo "device-check: platform=$PLATFORM out=$DEST engines=[$ENGINES] kflat=[$KFLAT_SHAPES] $KFLAT_ARGS"

failed=()
run() {  # run NAME CMD...: output to DEST/NAME.log and the terminal; a failure is noted, the check goes on
  local name="$1" start=$SECONDS; shift
  echo "device-check: [$name] $*"
  "$@" 2>&1 | tee "$DEST/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "device-check: [$name] exit $rc after $((SECONDS - start)) s"
  [ "$rc" = 0 ] || failed+=("$name (exit $rc, see $name.log)")
}

for engine in $ENGINES; do
  run "bench-$engine" "$PY" -m benchmarks bench --dataset humaneval --preset tiny --engine "$engine" --n "$N" \
    --run-dir "$DEST/bench-$engine"
done
for shape in $KFLAT_SHAPES; do
  # shellcheck disable=SC2086  # KFLAT_ARGS is a list of options
  run "kflat-$shape" "$PY" -m benchmarks study kflat --random-weights --shape "$shape" $KFLAT_ARGS --out "$DEST/kflat-$shape"
done

"$PY" -m benchmarks device summary "$DEST" "${failed[@]}" | tee "$DEST/summary.txt"
exit "${PIPESTATUS[0]}"
