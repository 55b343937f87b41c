#!/usr/bin/env bash
# Which environment a TPU machine gets: vLLM's (vllm-tpu with tpu-inference, and JAX) or the JAX engine's alone.
#
#   bash preparation/tpu_plan.sh RELEASE SOURCE     # RELEASE SOURCE as preparation/tpu_release.sh prints them
#
# Prints one tab-separated line:
#   vllm<TAB><python 3.12>                      the package index has vllm-tpu==RELEASE (and, without the submodule,
#                                               tpu-inference==RELEASE) for Python 3.12, and a Python 3.12 is here;
#   jax<TAB><python><TAB><jax><TAB><why>        otherwise: <python> builds a JAX-engine environment. <jax> is
#                                               "machine" when that Python imports its own JAX (kept, never
#                                               replaced: the venv sees the system's site packages), else "index".
#                                               <why> names why vLLM is absent and what would bring it.
# The index is the one pip is configured with (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS); asked with `pip download
# --no-deps` for Python 3.12 wheels, whatever Python asks. PYTHON=/path picks the Python (for vLLM it must be 3.12).
# Messages go to stderr; exit 1 when no Python can build either environment.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RELEASE="${1:?usage: tpu_plan.sh RELEASE SOURCE}" SOURCE="${2:?usage: tpu_plan.sh RELEASE SOURCE}"

# A Python of 3.11 or later (the harness's floor, pyproject.toml) with the venv module; prints its executable.
usable() {
  "$1" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11); print(sys.executable)' 2>/dev/null
}

# The Python that builds a JAX-engine environment, and where its JAX comes from: $PYTHON, else the first Python on
# PATH that imports JAX (the machine's own, matched to its libtpu), else one preparation/find_python.sh finds.
jax_python() {
  local c exe
  if [ -n "${PYTHON:-}" ]; then
    exe="$(usable "$PYTHON")" \
      || { echo "bootstrap: error: PYTHON=$PYTHON does not run, is older than 3.11 or lacks venv." >&2; return 1; }
    if "$exe" -c 'import jax' >/dev/null 2>&1; then printf '%s\tmachine\n' "$exe"; else printf '%s\tindex\n' "$exe"; fi
    return 0
  fi
  for c in python3 python3.12 python3.11 python3.13 python; do
    exe="$(usable "$c")" || continue
    "$exe" -c 'import jax' >/dev/null 2>&1 && { printf '%s\tmachine\n' "$exe"; return 0; }
  done
  exe="$(bash "$ROOT/preparation/find_python.sh" cpu)" || return 1
  printf '%s\tindex\n' "$exe"
}

# Any pip of this machine, to ask the index.
PIP_PY=""
for c in "${PYTHON:-}" python3 python; do
  [ -n "$c" ] && "$c" -m pip --version >/dev/null 2>&1 && { PIP_PY="$c"; break; }
done

WANTED=("vllm-tpu==$RELEASE")
[ "$SOURCE" = wheels ] && WANTED+=("tpu-inference==$RELEASE")
# pip's own view of where it looks (its files and PIP_* variables), for the message.
INDEX="$(${PIP_PY:-python3} -m pip config list 2>/dev/null \
  | sed -n "s/^[^.]*\.\(index-url\|extra-index-url\|find-links\)='\(.*\)'$/\2/p" | sort -u | paste -sd' ' -)"
INDEX="${INDEX:-PyPI}"
WHY=""
if [ -z "$PIP_PY" ]; then
  WHY="no pip on this machine to ask the package index for ${WANTED[*]}"
else
  PROBE="$(mktemp -d)"
  trap 'rm -rf "$PROBE"' EXIT
  if ! "$PIP_PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$PROBE" "${WANTED[@]}" \
    >/dev/null 2>&1; then
    WHY="the package index ($INDEX) has no ${WANTED[*]} for Python 3.12"
  fi
fi
if [ -z "$WHY" ]; then
  if PY312="$(bash "$ROOT/preparation/find_python.sh" tpu 2>/dev/null)" \
    && "$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    printf 'vllm\t%s\n' "$PY312"
    exit 0
  fi
  WHY="no Python 3.12 with the venv module here (vllm-tpu $RELEASE is a cp312 wheel)"
  WHY="$WHY${PYTHON:+; PYTHON=$PYTHON is not one}"
fi
WHY="vLLM is absent: $WHY. A Python 3.12 (with JAX on the TPU) and a package index that has ${WANTED[*]} for it"
WHY="$WHY would bring it (remove the venv and rerun bootstrap)"
IFS=$'\t' read -r PY JAX < <(jax_python) || exit 1
printf 'jax\t%s\t%s\t%s\n' "$PY" "$JAX" "$WHY"
