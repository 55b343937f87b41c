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
CONFIG ?= configs/matrices/smoke.yaml
RUN ?= results/runs/latest
PYTEST_ARGS ?=
KFLAT_ARGS ?=
TPU_VENV ?= .venv-tpu
PARITY_TPU_ARGS ?=

BENCH_ARGS := --dataset $(DATASET) \
	$(if $(ENGINE),--engine $(ENGINE)) $(if $(METHODS),--methods $(METHODS)) $(if $(K),--k $(K)) \
	$(if $(N),--n $(N)) $(if $(PRESET),--preset $(PRESET)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	$(if $(MAX_NEW_TOKENS),--max-new-tokens $(MAX_NEW_TOKENS))

.PHONY: setup test bench matrix report figures tiny-models kflat test-tpu-inference parity-tpu-inference clean

setup:
	@bash preparation/bootstrap.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) -m benchmarks bench $(BENCH_ARGS)

matrix: setup
	$(PY) -m benchmarks matrix $(CONFIG)

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

# Optional, not in CI: tpu-inference's own DFlash draft model against ours on JAX CPU, step by step over 8 HumanEval
# prompts (verification/parity_tpu_inference.py), in the TPU venv: it needs tpu-inference, hence Python >= 3.12.
parity-tpu-inference:
	@test -x $(TPU_VENV)/bin/python || { echo "parity-tpu-inference: error: no TPU venv at $(TPU_VENV); create it with PLATFORM=tpu VENV=$(TPU_VENV) bash preparation/bootstrap.sh, or point TPU_VENV at a venv that has tpu-inference" >&2; exit 2; }
	JAX_PLATFORMS=cpu $(TPU_VENV)/bin/python -m verification.parity_tpu_inference $(PARITY_TPU_ARGS)

clean:
	rm -rf .venv .cache results/runs results/figures/runs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
