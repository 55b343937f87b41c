#!/usr/bin/env bash
# Run tpu-inference's own DFlash unit tests on JAX CPU, in a separate Python >= 3.12 venv (make test-tpu-inference).
#
#   bash preparation/test_tpu_inference.sh                # the release requirements-tpu.txt pins (the TPU set's)
#   TPU_INFERENCE_VERSION=0.32.0 VLLM_VERSION=0.32.0 VENV=/elsewhere PYTHON=python3.12 \
#     bash preparation/test_tpu_inference.sh             # another release
#
# tpu-inference needs Python >= 3.12 (0.32.0 pins jax 0.11.2, which needs it; the TPU set is Python 3.12 only), so it
# cannot share .venv (Python 3.11 on CPU); it runs on the Python that preparation/find_python.sh picks for the TPU
# platform (3.12). The default release is the tpu-inference pin of requirements-tpu.txt; with it, every install is
# constrained to preparation/locks/tpu.txt, the TPU set's own resolution. Another release takes the companion
# versions that 0.32.0 needed (below), unconstrained.
# The tests come from the populated submodule tpu-inference/ when present (committed at the pinned release), else
# from the `tests/` folder that the tpu-inference wheel installs into site-packages. The full engine needs a TPU;
# these unit tests do not, except those that set TPU-only XLA compile options, which fail on CPU and are named in
# the summary.
# Optional and not part of CI: the install is large (jax, a CUDA torch, flax, tokamax, vllm's Python code, ...).
# Measured with 0.32.0 on JAX CPU (not rerun with 0.27.0): 20 of 22 pass; the 2 failures in
# tests/spec_decode/test_dflash.py (test_propose_uses_target_model_logits, test_propose_returns_2d_int_ids) set the
# TPU-only XLA compile option xla_tpu_all_gather_collective_matmul_mode, which the CPU compiler rejects.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQ="$ROOT/requirements-tpu.txt"
LOCK="$ROOT/preparation/locks/tpu.txt"
PIN="$(sed -n 's/^tpu-inference==\([^ #]*\).*/\1/p' "$REQ" | head -n1)"
VENV="${VENV:-$ROOT/.venv-tpu-inference}"
VERSION="${TPU_INFERENCE_VERSION:-$PIN}"
VLLM_VERSION="${VLLM_VERSION:-$VERSION}"  # the vllm release a tpu-inference release is built against
SUBMODULE="$ROOT/tpu-inference"
REPORT_DIR="${REPORT_DIR:-$VENV}"

die() { echo "test-tpu-inference: error: $*" >&2; exit 2; }
step() { echo "test-tpu-inference: $*"; }
# The variables against their declarations (benchmarks/core/environment.py), one line each, before any work.
(cd "$ROOT" && python3 -E -m benchmarks.core.environment TPU_INFERENCE_VERSION VLLM_VERSION PYTHON REPORT_DIR) \
  || exit 2
[ -n "$VERSION" ] || die "requirements-tpu.txt pins no tpu-inference==X; set TPU_INFERENCE_VERSION."

# The TPU platform's Python (3.12: vllm-tpu is a cp312 wheel), found or installed as bootstrap does.
PY="$(bash "$ROOT/preparation/find_python.sh" tpu)" || exit 2

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $($PY --version 2>&1)"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
if [ "$VERSION" = "$PIN" ] && [ "$VLLM_VERSION" = "$PIN" ]; then
  # The TPU set's own resolution (Python 3.12) fixes every package below, the companions of vllm included.
  CONSTRAINTS=(-c "$LOCK")
  COMPANIONS=(transformers xgrammar compressed-tensors)
else
  CONSTRAINTS=()
  COMPANIONS=("transformers>=5.16.1,<5.20.0" "xgrammar==0.2.8" "compressed-tensors==0.17.0")  # what 0.32.0 needed
fi
STAMP="$VENV/.tpu-inference-$VERSION"
if [ ! -f "$STAMP" ]; then
  step "installing tpu-inference==$VERSION, tokamax and pytest (large: ~15 min, several GB)"
  "${PIP[@]}" install -q --upgrade pip
  "${PIP[@]}" install "tpu-inference==$VERSION" tokamax pytest "${CONSTRAINTS[@]}" \
    || die "pip could not install tpu-inference==$VERSION; see its output above."
  # tpu-inference imports vllm without depending on it, and vllm's own pins (a CUDA torch of another version)
  # would replace the torch that tpu-inference pins: install vllm alone, then only what its imports need,
  # holding the installed torch, jax and their companions fixed.
  step "installing vllm==$VLLM_VERSION without its dependencies, and the modules its imports need"
  "${PIP[@]}" install -q --no-deps "vllm==$VLLM_VERSION" || die "pip could not install vllm==$VLLM_VERSION."
  HOLD="$VENV/hold-constraints.txt"
  "${PIP[@]}" freeze | grep -iE '^(torch|torchvision|triton|jax|jaxlib|libtpu|flax|numpy)==' > "$HOLD"
  "${PIP[@]}" install -q -c "$HOLD" "${CONSTRAINTS[@]}" cbor2 einops pyzmq openai openai-harmony pybase64 cachetools \
    msgspec cloudpickle py-cpuinfo partial-json-parser llguidance loguru apache-tvm-ffi "${COMPANIONS[0]}" \
    || die "pip could not install vllm's import-time modules; see its output above."
  "${PIP[@]}" install -q --no-deps "${CONSTRAINTS[@]}" "${COMPANIONS[@]:1}" \
    || die "pip could not install xgrammar / compressed-tensors."
  touch "$STAMP"
fi

SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -f "$SUBMODULE/tests/spec_decode/test_dflash.py" ]; then
  TESTS_ROOT="$SUBMODULE"
  SRC_VERSION="$(git -C "$SUBMODULE" describe --tags --always 2>/dev/null || echo unknown)"
  step "tests from the submodule ($SRC_VERSION), run against the installed tpu-inference $VERSION"
elif [ -f "$SITE/tests/spec_decode/test_dflash.py" ]; then
  TESTS_ROOT="$SITE"
  step "tests from the tpu-inference $VERSION wheel ($SITE/tests)"
else
  cat >&2 <<EOF
test-tpu-inference: error: no tpu-inference DFlash tests found.
  The submodule tpu-inference/ is empty and the installed wheel ships no tests/spec_decode/test_dflash.py.
  Populate the submodule, then rerun:
    git submodule update --init tpu-inference
  or install a tpu-inference version whose wheel ships its tests:
    TPU_INFERENCE_VERSION=<version> bash preparation/test_tpu_inference.sh
EOF
  exit 2
fi

cd "$TESTS_ROOT"
FILES=(tests/spec_decode/test_dflash.py)
for f in tests/models/jax/test_*dflash*.py; do [ -f "$f" ] && FILES+=("$f"); done
mkdir -p "$REPORT_DIR"
JUNIT="$REPORT_DIR/junit.xml"
step "running ${FILES[*]} on JAX CPU"
set +e
# -c /dev/null --rootdir: tpu-inference's tests under their own root, not under a pytest.ini found above them.
JAX_PLATFORMS=cpu "$VENV/bin/python" -m pytest -p no:cacheprovider -c /dev/null --rootdir "$TESTS_ROOT" -q -rfE \
  --junitxml="$JUNIT" "${FILES[@]}"
RC=$?

# One line per test, from the JUnit report; exit 1 only for a failure that is not a known TPU-only one.
"$VENV/bin/python" - "$JUNIT" <<'EOF'
import sys
import xml.etree.ElementTree as ET

# Failure messages of what exists only on a TPU: XLA:TPU compile options, libtpu, Mosaic (Pallas TPU kernels).
TPU_ONLY = ("compile option: 'xla_tpu", "libtpu", "mosaic")
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
counts = {"passed": 0, "failed": 0, "skipped": 0}
unexpected = 0
for c in cases:
    name = f"{c.get('classname')}::{c.get('name')}"
    bad = c.find("failure") if c.find("failure") is not None else c.find("error")
    if c.find("skipped") is not None:
        counts["skipped"] += 1
        print(f"SKIPPED  {name}")
    elif bad is not None:
        counts["failed"] += 1
        message = bad.get("message") or ""
        tpu = any(m in message.lower() for m in TPU_ONLY)
        unexpected += not tpu
        why = "TPU-only, expected on CPU" if tpu else "NOT a known TPU-only failure"
        print(f"FAILED   {name}  [{why}] {message.splitlines()[0][:160] if message else ''}")
    else:
        counts["passed"] += 1
        print(f"PASSED   {name}")
print(f"test-tpu-inference: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
if unexpected:
    print(f"test-tpu-inference: {unexpected} failure(s) are not TPU-only: see above")
sys.exit(1 if unexpected else 0)
EOF
SUMMARY_RC=$?
set -e
step "JUnit report: $JUNIT"
if [ "$RC" -gt 1 ]; then exit "$RC"; fi  # pytest itself failed (collection error, no tests, ...)
exit "$SUMMARY_RC"
