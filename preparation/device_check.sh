#!/usr/bin/env bash
# The accelerator check, run as it is on a fresh GPU or TPU machine, with or without a package index
# (docs/device-check.md):
#
#   bash preparation/device_check.sh                                   # or: make device-check
#   PLATFORM=cpu PIP_NO_INDEX=1 PYTHON=.venv-device/bin/python bash preparation/device_check.sh   # make device-preflight
#
# Set-up. The first of $PYTHON, $VENV/bin/python and python3 that can run the JAX engine (`study device env`), once
# the wheels in DEVICE_WHEELS (preparation/device-wheels, `make device-wheels`) are installed with `pip install
# --no-index --target DEVICE_SITE` (default a temporary folder), which goes last on PYTHONPATH. Where a package index
# answers (PIP_INDEX_URL or pip's configuration, default PyPI; a file:// folder counts), what such a Python lacks
# beside JAX is installed from it into that folder too, never over the machine's own JAX; where no Python has JAX on
# the platform (or DEVICE_BOOTSTRAP=1), bootstrap builds VENV for the platform. Without an index (PIP_NO_INDEX,
# SKIP_BOOTSTRAP=1, or nothing answering) nothing is installed from one. It prints the interpreter and every version.
# SETUP_ONLY=1 stops there.
# Then, within BUDGET_S seconds (default 480, JAX compilation included), most valuable first; a step that no longer
# fits is dropped and named:
#   device-<MAIN_SHAPE>   the JAX engine at real shapes, random weights (qwen3-4b, bf16): AR TPOT against its floor
#                         with the loop's host and device time per step, a DFlash oracle step at K=15 (its cost in
#                         AR steps, the speedup it implies at the published tau), verify(K)/verify(0); PROFILE=1 adds a
#                         jax.profiler trace
#   bench-jax, bench-jax-bf16   the tiny preset on the JAX engine (humaneval, N prompts), float32 then bfloat16
#   bench-vllm            the same on vLLM; skipped, with the reason, when vLLM does not import
#   device-<LAST_SHAPE>   llama-3.1-8b: AR and verify(K), if time remains and it fits the device's memory (else
#                         skipped, its bytes named)
#   grid-<MAIN_SHAPE>     the engine's own step at B = 4, context 8192, plain decoding, against the roofline
#                         (`study device-grid`; GRID_ARGS replaces the points), with what is left
# PLATFORM=cpu runs CPU stand-ins (qwen3-tiny, llama3-tiny). Everything goes under DEVICE_CHECK_OUT, else OUT, else
# results/device-check; when it is the device tool's OUT (DEVICE_CHECK_OUT unset), it is packed into
# device-check.tar.gz beside summary.txt (that tool brings back 8 files). The summary is printed last.
# JAX's persistent compilation cache (JAX_COMPILATION_CACHE_DIR, default DEST/jax-cache; outside the device tool's OUT,
# which every call empties, in TMPDIR) lets a second run skip the compiles; each study prints its compile seconds.
# Exit (the worst wins): 0 all ran; 1 a step failed; 3 a time below its floor; 4 a step dropped for time.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
export VENV="${VENV:-$ROOT/.venv}"
DEST="${DEVICE_CHECK_OUT:-${OUT:-$ROOT/results/device-check}}"
PACK="${DEVICE_CHECK_PACK:-$([ -z "${DEVICE_CHECK_OUT:-}" ] && [ -n "${OUT:-}" ] && echo 1 || echo 0)}"
WHEELS="${DEVICE_WHEELS:-$ROOT/preparation/device-wheels}"
if [ -n "${DEVICE_SITE:-}" ]; then SITE="$DEVICE_SITE"
else SITE="$(mktemp -d "${TMPDIR:-/tmp}/dflash-device-site.XXXXXX")"; trap 'rm -rf "$SITE"' EXIT; fi
BUDGET_S="${BUDGET_S:-480}"
N="${N:-2}"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$PACK" = 1 ]; then JAX_CACHE_DEFAULT="${TMPDIR:-/tmp}/dflash-device-jax-cache"; else JAX_CACHE_DEFAULT="$DEST/jax-cache"; fi
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$JAX_CACHE_DEFAULT}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}"

if [ -z "${PLATFORM:-}" ]; then  # the rule of preparation/bootstrap.sh and benchmarks.hardware.provenance
  if [ -e /dev/accel0 ] || [ -e /dev/vfio/0 ] || [ -n "${TPU_NAME:-}${TPU_ACCELERATOR_TYPE:-}" ]; then PLATFORM=tpu
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then PLATFORM=gpu
  else PLATFORM=cpu; fi
fi
export PLATFORM
if [ "$PLATFORM" = cpu ]; then
  MAIN_SHAPE="${MAIN_SHAPE:-qwen3-tiny}"; LAST_SHAPE="${LAST_SHAPE:-llama3-tiny}"
else
  MAIN_SHAPE="${MAIN_SHAPE:-qwen3-4b}"; LAST_SHAPE="${LAST_SHAPE:-llama-3.1-8b}"
fi
# Every variable above against its declaration (benchmarks/core/environment.py), one line each and exit 2, before
# anything is made, installed or removed; CHECK_ONLY=1 stops there (make device-preflight checks before it builds).
if command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  BUDGET_S="$BUDGET_S" N="$N" python3 -E -m benchmarks.core.environment PLATFORM BUDGET_S N DEVICE_CHECK_OUT OUT \
    DEVICE_CHECK_PACK DEVICE_WHEELS DEVICE_SITE DEVICE_BOOTSTRAP SKIP_BOOTSTRAP SETUP_ONLY PROFILE PIP_NO_INDEX \
    PIP_INDEX_URL PYTHON || exit 2
  python3 -E - "$MAIN_SHAPE" "$LAST_SHAPE" <<'EOF' || exit 2
import sys
from benchmarks.studies.device import SHAPE_ALIASES, SHAPES, STANDINS, resolve_shape
for var, name in zip(("MAIN_SHAPE", "LAST_SHAPE"), sys.argv[1:]):
    try:
        resolve_shape(name)
    except KeyError:
        known = ", ".join(sorted({*SHAPES, *SHAPE_ALIASES, *STANDINS}))
        sys.exit(f"error: {var}={name[:80]}: not a named shape; give one of {known}")
EOF
else
  echo "device-check: note: no python3 >= 3.10 on PATH to check the variables with; they are taken as given"
fi
[ "$MAIN_SHAPE" != "$LAST_SHAPE" ] || { echo "error: MAIN_SHAPE=LAST_SHAPE=$MAIN_SHAPE: the two steps would write" \
  "one folder, the second removing the first's measurement; give two different shapes" >&2; exit 2; }
[ ! -e "$DEST" ] || [ -d "$DEST" ] || { echo "error: the output folder $DEST is a file; give DEVICE_CHECK_OUT=" \
  "a folder" >&2; exit 2; }
[ ! -L "$DEST" ] || { echo "error: the output folder $DEST is a link; the check never writes through one: give" \
  "DEVICE_CHECK_OUT=a folder of its own" >&2; exit 2; }
if [ -n "${DEVICE_SITE:-}" ]; then  # emptied before each install: only a folder the check made (or a new one)
  bash preparation/made_folder.sh check DEVICE_SITE device-site || exit 2
fi
[ "${CHECK_ONLY:-0}" = 1 ] && exit 0
if [ -n "${DEVICE_SITE:-}" ]; then
  mkdir -p "$SITE" && bash preparation/made_folder.sh mark DEVICE_SITE device-site || exit 1
fi

mkdir -p "$DEST"
written=(setup.log)
: >"$DEST/setup.log"
say() { echo "device-check: $*" | tee -a "$DEST/setup.log"; }

# The package index pip would use: PIP_INDEX_URL, else pip's own configuration, else PyPI.
index_url() {
  if [ -n "${PIP_INDEX_URL:-}" ]; then echo "$PIP_INDEX_URL"; return; fi
  local configured=""
  command -v python3 >/dev/null 2>&1 && configured="$(python3 -m pip config get global.index-url 2>/dev/null)"
  echo "${configured:-https://pypi.org/simple}"
}

# Why no package index is used (printed), or nothing when one answers: a file:// index answers when its folder is
# there, an http(s) one when a HEAD request at it does within 5 s.
no_index_reason() {
  [ "${SKIP_BOOTSTRAP:-0}" = 1 ] && { echo "SKIP_BOOTSTRAP=1"; return; }
  case "${PIP_NO_INDEX:-}" in 1|[Tt]rue|TRUE|[Yy]es|YES|on|ON) echo "PIP_NO_INDEX=$PIP_NO_INDEX"; return ;; esac
  case "$INDEX" in
    file://*) [ -d "${INDEX#file://}" ] || echo "the index $INDEX is no folder here"; return ;;
  esac
  command -v python3 >/dev/null 2>&1 || { echo "no python3 to look for a package index with"; return; }
  python3 - "$INDEX" <<'EOF'
import sys, urllib.request
url = sys.argv[1].rstrip("/") + "/pip/"
try:
    urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
except Exception as exc:
    print(f"no package index answers at {url} ({type(exc).__name__}: {exc})")
EOF
}

# Install the device wheels for interpreter $1 into SITE/wheels (pip --no-index: nothing is fetched).
install_wheels() {
  rm -rf "${SITE:?}"/*
  compgen -G "$WHEELS/*.whl" >/dev/null || return 0
  "$1" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$SITE/wheels" \
    "$WHEELS"/*.whl 2>&1 | tee -a "$DEST/setup.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { say "$1: could not install the wheels of $WHEELS"; return 1; }
}

# probe PYTHON [INDEX]: can it run the JAX engine on PLATFORM? (prints what it has and lacks; with INDEX, what it
# lacks beside JAX is first installed from there into SITE/index)
probe() {
  "$1" -m benchmarks.studies.device env --platform "$PLATFORM" --wheels-site "$SITE/wheels" \
    ${2:+--index-url "$2" --index-site "$SITE/index"} --json "$DEST/env.json" 2>&1 | tee -a "$DEST/setup.log"
  return "${PIPESTATUS[0]}"
}

INDEX="$(index_url)"
REASON="$(no_index_reason)"
# The device wheels (small, pure Python) come first on the path; what an index adds comes after the machine's own
# packages, so that a JAX or numpy it brings along never hides the machine's.
export PYTHONPATH="$SITE/wheels${PYTHONPATH:+:$PYTHONPATH}:$SITE/index"
if [ -z "$REASON" ]; then
  say "platform=$PLATFORM: the package index $INDEX answers; looking for a Python with JAX on $PLATFORM first"
else
  say "platform=$PLATFORM: nothing is installed from an index ($REASON); looking for a Python that has the JAX engine"
fi
PY="" seen=" "
if [ "${DEVICE_BOOTSTRAP:-0}" != 1 ]; then
  for cand in "${PYTHON:-}" "$VENV/bin/python" python3; do
    [ -n "$cand" ] || continue
    cand="$(command -v "$cand")" || continue
    case "$seen" in *" $cand "*) continue ;; esac
    seen="$seen$cand "
    if install_wheels "$cand" && probe "$cand" "$([ -z "$REASON" ] && echo "$INDEX")"; then PY="$cand"; break; fi
    say "$cand cannot run the JAX engine on $PLATFORM (above)"
  done
fi
if [ -n "$PY" ] && [ -z "$REASON" ]; then
  SETUP="machine's own Python $PY, wheels from ${WHEELS#"$ROOT"/} and what it lacked from $INDEX in $SITE"
elif [ -n "$PY" ]; then
  SETUP="machine's own Python $PY, wheels from ${WHEELS#"$ROOT"/} in $SITE ($REASON)"
elif [ -z "$REASON" ]; then
  say "no Python here runs the JAX engine on $PLATFORM (or DEVICE_BOOTSTRAP=1); bootstrapping $VENV"
  bash preparation/bootstrap.sh 2>&1 | tee -a "$DEST/setup.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { say "bootstrap failed; see above"; exit 1; }
  PY="$VENV/bin/python"
  probe "$PY" || { say "the bootstrapped $VENV cannot run the JAX engine (above)"; exit 1; }
  SETUP="bootstrapped $VENV"
else
  say "error: no Python here can run the JAX engine on $PLATFORM, and nothing can be installed ($REASON); give" \
    "one with PYTHON=/path/to/python"
  exit 1
fi
written+=(env.json)
say "using $PY; $SETUP; compilation cache $JAX_COMPILATION_CACHE_DIR"
[ "${SETUP_ONLY:-0}" = 1 ] && { say "SETUP_ONLY=1: stopping after the set-up"; exit 0; }

T0=$SECONDS
failed=() dropped=() skipped=()
left() { echo $((BUDGET_S - (SECONDS - T0))); }
# step NAME MIN_S CMD...: CMD under the time left, its output in DEST/NAME.log (and DEST/NAME/ if it writes one);
# dropped when less than MIN_S seconds are left.
step() {
  local name="$1" min="$2" start=$SECONDS rem rc; shift 2
  rem=$(left)
  rm -rf "${DEST:?}/$name" "$DEST/$name.log"  # a fresh measurement: no bench run folder to resume
  if [ "$rem" -lt "$min" ] || [ "$rem" -lt 1 ]; then
    dropped+=("$name (needs >= $min s, $rem s of the $BUDGET_S s budget left)")
    echo "device-check: [$name] dropped: $rem s left of $BUDGET_S s"
    return
  fi
  written+=("$name" "$name.log")
  echo "device-check: [$name] $* ($rem s left)"
  timeout -k 10 "$rem" "$@" 2>&1 | tee "$DEST/$name.log"
  rc=${PIPESTATUS[0]}
  echo "device-check: [$name] exit $rc after $((SECONDS - start)) s"
  case "$rc" in
    0) ;;
    124|137) dropped+=("$name (stopped at the $BUDGET_S s budget after $((SECONDS - start)) s; see $name.log)") ;;
    *) failed+=("$name (exit $rc, see $name.log)") ;;
  esac
}
profile=()
[ "${PROFILE:-0}" = 1 ] && profile=(--profile)
tiny_bench=(-m benchmarks bench --dataset humaneval --preset tiny --engine jax --n "$N")

step "device-$MAIN_SHAPE" 30 "$PY" -m benchmarks study device run --shape "$MAIN_SHAPE" \
  --out "$DEST/device-$MAIN_SHAPE" --budget-s "$(($(left) - 15))" "${profile[@]}"
# float32 at the highest matmul precision: on GPUs XLA's default float32 matmul may round through TF32.
step bench-jax 60 env JAX_DEFAULT_MATMUL_PRECISION=highest "$PY" "${tiny_bench[@]}" --run-dir "$DEST/bench-jax"
cat >"$DEST/tiny-bf16.yaml" <<EOF
# The tiny preset on the JAX engine in bfloat16 (written by preparation/device_check.sh).
name: device-check-tiny-bf16
preset: tiny
engine: jax
interleave: true
datasets: [humaneval]
num_prompts: $N
engine_options: {dtype: bfloat16}
EOF
written+=(tiny-bf16.yaml)
step bench-jax-bf16 60 "$PY" -m benchmarks matrix "$DEST/tiny-bf16.yaml" --run-dir "$DEST/bench-jax-bf16"
rm -f "$DEST/vllm-import.log"
if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)'; then
  skipped+=("bench-vllm: vLLM is not installed for $PY")
  echo "device-check: [bench-vllm] skipped: ${skipped[-1]#*: }"
elif [ "$(left)" -ge 90 ] && ! "$PY" -c 'import vllm' >"$DEST/vllm-import.log" 2>&1; then
  skipped+=("bench-vllm: vLLM does not import ($(tail -n 1 "$DEST/vllm-import.log"))")
  echo "device-check: [bench-vllm] skipped: ${skipped[-1]#*: }"
else
  step bench-vllm 90 "$PY" -m benchmarks bench --dataset humaneval --preset tiny --engine vllm --n "$N" \
    --run-dir "$DEST/bench-vllm"
fi
[ -e "$DEST/vllm-import.log" ] && written+=(vllm-import.log)
[ -L "$DEST/latest" ] && written+=(latest)  # the bench runs' latest-run link
step "device-$LAST_SHAPE" 30 "$PY" -m benchmarks study device run --shape "$LAST_SHAPE" --parts ar,verify \
  --out "$DEST/device-$LAST_SHAPE" --budget-s "$(($(left) - 15))" "${profile[@]}"
# The engine's own step past batch 1 and at a long context, with what is left (GRID_ARGS replaces the points).
read -r -a grid_points <<<"${GRID_ARGS:---batch 4 --context 8192 --ks 0}"
step "grid-$MAIN_SHAPE" 45 "$PY" -m benchmarks study device-grid --shape "$MAIN_SHAPE" "${grid_points[@]}" \
  --profile-above 1.15 --profile-max 1 --out "$DEST/grid-$MAIN_SHAPE" --budget-s "$(($(left) - 10))"

args=(--note "set-up: $SETUP" --note "budget: $((SECONDS - T0)) s of $BUDGET_S s used")
for x in ${failed[@]+"${failed[@]}"}; do args+=(--failed "$x"); done
for x in ${dropped[@]+"${dropped[@]}"}; do args+=(--dropped "$x"); done
for x in ${skipped[@]+"${skipped[@]}"}; do args+=(--skipped "$x"); done
"$PY" -m benchmarks device summary "$DEST" "${args[@]}" >"$DEST/summary.txt"
rc=$?
if [ "$PACK" = 1 ]; then
  present=()
  for x in "${written[@]}"; do [ -e "$DEST/$x" ] && present+=("$x"); done
  tar -czf "$DEST/device-check.tar.gz" -C "$DEST" "${present[@]}" && (cd "$DEST" && rm -rf -- "${present[@]}")
  echo "device-check: packed ${#present[@]} outputs into $DEST/device-check.tar.gz"
fi
cat "$DEST/summary.txt"
exit "$rc"
