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

BENCH_ARGS := --dataset $(DATASET) \
	$(if $(ENGINE),--engine $(ENGINE)) $(if $(METHODS),--methods $(METHODS)) $(if $(K),--k $(K)) \
	$(if $(N),--n $(N)) $(if $(PRESET),--preset $(PRESET)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	$(if $(MAX_NEW_TOKENS),--max-new-tokens $(MAX_NEW_TOKENS))

.PHONY: setup test bench matrix report figures clean

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

clean:
	rm -rf .venv .cache results/runs results/figures/runs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
