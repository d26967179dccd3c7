# The front door: `make help` lists the targets. What a study runs (methods, temperatures, items,
# dtype, output folder) is a file under configs/experiment/; a target here is the command that runs
# it. ARGS is appended to every command: Hydra overrides for runs (ARGS="limit=1 hydra.launcher.n_jobs=1"),
# options for scripts and recipes (ARGS=--resume). Everything a target writes lies under OUT (outputs/,
# git-ignored; OUT=DIR moves it); the committed results are read-only input, updated only by `make publish`.
# PLAN=1 runs nothing: the goals' sweeps are planned as one, each configuration once (rheo plan; GPUS=N: each job's
# hours against the SLURM time limit, the wall time on N GPUs); a goal that runs no sweep: "nothing to plan", exit 2.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PY := .venv/bin/python
RUN := $(PY) -m eval.run -m
RECIPE := $(PY) scripts/recipe.py
REPORT := $(PY) scripts/report.py
override OUT := $(or $(OUT),$(RHEO_OUT),outputs)$(if $(word 2,$(or $(OUT),$(RHEO_OUT))),$(error OUT="$(or $(OUT),$(RHEO_OUT))" holds a space, which make would split into two paths (Hydra overrides, make functions): nothing was run; choose a folder without spaces (empty: outputs)))
export RHEO_OUT := $(OUT)$(if $(MAKELEVEL:0=),,$(shell echo "outputs: $(OUT)/ (OUT=DIR moves it; committed results change only by make publish)" >&2))
VENV_STAMP := .venv/.rheo-setup
.PHONY: $(shell sed -nE 's/^([a-z0-9][a-z0-9_ -]*):([^=].*)?$$/\1/p' Makefile)  # every target names a command, not a file
RESULTS ?= $(OUT)/runs
TABLES ?= $(OUT)/tables
FIGURES ?= $(OUT)/figures
SMOKE ?= $(OUT)/smoke
MINE := $(if $(wildcard $(OUT)/experiment/mine/tuned_topk.yaml),mine/)# this machine's tuned presets (make tune), else the committed
DRAFT_TEMP ?= 1.07
ifneq ($(PLAN),)
export RHEO_PLAN_ARGS := $(value ARGS)# ARGS as written: not expanded by make (a $$(shell ...) in it would run)
unexport ARGS
$(or $(MAKECMDGOALS),help):
	@$(if $(filter $@,$(firstword $(MAKECMDGOALS) help)),$(PY) -m eval.plan "$(or $(MAKECMDGOALS),help)" --args "$$RHEO_PLAN_ARGS" $(if $(GPUS),--gpus $(GPUS)),:)
else
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_ -]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-26s %s\n", $$1, $$2}'
setup: ## create .venv: reuse a torch already installed, else the CPU wheel torch==2.13.0; then the project (editable, dev extras)
	bash scripts/setup_venv.sh
	touch $(VENV_STAMP)
$(VENV_STAMP): pyproject.toml  # test, smoke and reproduce set .venv up themselves when missing (or older than pyproject.toml)
	$(MAKE) setup
test: $(VENV_STAMP) ## fast tests (CPU, tiny models), one worker per core (TEST_WORKERS=N to change)
	.venv/bin/pytest -q -n $(or $(TEST_WORKERS),auto) --maxprocesses 8
test-slow: $(VENV_STAMP) ## slow tests too (real SmolLM2, large Monte-Carlo)
	.venv/bin/pytest -q -m slow
bench: ## core time per decoding cycle, Top-K vs Rheo m=1 side by side (no model work; one thread, as docs/harness.md measured)
	$(PY) scripts/bench_core.py --threads 1 $(ARGS)
cycle-cost: ## aten ops, host syncs and ms per target call by phase, tiny 32-layer pair (ARGS="--shape llama31_8b --device cuda --dtype bfloat16"); ENGINE=static|graphs: profiled beside eager, into $(OUT)/cycle_cost
	$(PY) scripts/cycle_cost.py $(if $(ENGINE),--engine $(ENGINE) --out "$(OUT)/cycle_cost",--out "$(TABLES)") $(ARGS)
# ------------------------------------------------------------------ make reproduce (docs/harness.md)
reproduce: $(VENV_STAMP) ## CPU protocol: tau experiments (two jobs at a time), then speed alone; tables, figures, archives; its wall time
	$(PY) -m eval.measure.wall_clock start $(OUT)/.reproduce-clock.json
	$(MAKE) reproduce-tau reproduce-speed
	$(MAKE) report ARGS=
	for s in runs speed; do $(PY) scripts/export_results.py --results $(OUT)/$$s --out $(OUT)/$$s.parquet || exit 1; done
	$(PY) -m eval.measure.wall_clock finish $(OUT)/.reproduce-clock.json $(OUT)/reproduce_time.json
reproduce-tau: $(VENV_STAMP) ## main table + same-state m ablation and temperature study (configs/experiment/reproduce_tau.yaml)
	$(RUN) experiment=reproduce_tau $(ARGS)
reproduce-speed: $(VENV_STAMP) ## speed, alone, one thread: paper tree + the tuned trees (this machine's from `make tune`, else the committed), AR paired, generate reference
	$(RUN) experiment=speed output_dir=$(OUT)/speed limit=1 max_new_tokens=64 dtype=bfloat16 num_threads=1 $(ARGS)
	$(RUN) experiment=$(MINE)tuned_topk output_dir=$(OUT)/speed limit=1 max_new_tokens=64 num_threads=1 $(ARGS)
	$(RUN) experiment=$(MINE)tuned_rheo output_dir=$(OUT)/speed limit=1 max_new_tokens=64 num_threads=1 $(ARGS)
speed-check: $(VENV_STAMP) ## the speed tables' noise floor: Top-K against an exact copy of itself, side by side (embedded pair, one thread, alone; ~25 min; ARGS="--limit 1" for a look) -> TABLES/speed_check
	$(PY) scripts/speed_check.py --out "$(TABLES)/speed_check" $(ARGS)
speed-launches: $(VENV_STAMP) ## ops, syncs and predicted GPU speedup of the speed tables' configurations next to their measured CPU speedup (embedded pair, counted; minutes)
	for s in speed speed_options speed_rule; do $(PY) scripts/cycle_cost.py --rows $(OUT)/$$s.parquet --shape smollm2 --out "$(TABLES)/$$s" || exit 1; done
reproduce-full: ## paper protocol: 80 items x 6 suites, 3 seeds, m ablation, T sweep, then speed, alone (ARGS="model=... device=cuda dtype=bfloat16"; make -j3: the tau sweeps at once; docs/slurm.md)
	$(MAKE) reproduce-full-main_table reproduce-full-m_ablation reproduce-full-temperature
	$(MAKE) reproduce-full-speed
reproduce-full-main_table reproduce-full-m_ablation reproduce-full-temperature reproduce-full-speed: ## one sweep of reproduce-full (the speed part alone on its node: docs/slurm.md)
	$(RUN) experiment=$(@:reproduce-full-%=%) $(if $(findstring speed,$@),output_dir=$(OUT)/speed seed=0 limit=10,limit=null) max_new_tokens=1024 $(ARGS)
report: ## make reproduce's tables, figures and same-state archive (the report lists of configs/experiment/{reproduce_tau,speed}.yaml)
	$(REPORT) reproduce_tau speed $(ARGS)
tables: ## Markdown tables from RESULTS (a folder, else RESULTS.parquet, else the committed archive) -> TABLES
	$(PY) scripts/make_tables.py --results "$(RESULTS)" --out "$(TABLES)" $(ARGS)
figures: ## PNG figures from RESULTS (as tables) -> FIGURES; with the theory Monte-Carlo (~1.5 min on 2 cores; ARGS=--no-theory skips it)
	$(PY) scripts/make_figures.py --results "$(RESULTS)" --out "$(FIGURES)" $(ARGS)
docs: ## refill the README's and docs/' generated tables from results/tables (a test checks they are current)
	$(PY) scripts/make_docs.py
notebook: ## execute notebooks/analysis.ipynb on the committed archives -> OUT/notebooks/ (make publish commits it)
	mkdir -p $(OUT)/notebooks && $(PY) -m jupyter execute notebooks/analysis.ipynb --output=$(abspath $(OUT))/notebooks/analysis
smoke: $(VENV_STAMP) ## a few-minute CPU check of the pipeline (configs/experiment/cpu_smoke.yaml) -> SMOKE/{runs,tables,figures}
	$(RUN) experiment=cpu_smoke "output_dir='$(SMOKE)/runs'" $(ARGS)
	$(PY) scripts/make_tables.py --results "$(SMOKE)/runs" --out "$(SMOKE)/tables" --no-theory
	$(PY) scripts/make_figures.py --results "$(SMOKE)/runs" --out "$(SMOKE)/figures" --no-theory
	@echo "smoke: rows in $(SMOKE)/runs, tables in $(SMOKE)/tables, figures in $(SMOKE)/figures"
publish: ## the one way to update committed results: OUT's tables, figures, archives, tuned presets -> results/ (checked; shows the changes; ARGS=--yes writes them)
	$(PY) -m rheo.commands publish $(ARGS)
tune: ## measure this machine (fp32, bf16): cost by nodes, tau per shape -> OUT/tune, OUT/experiment/mine/tuned_*.yaml (experiment=mine/tuned_topk)
	$(PY) scripts/tune_tree.py --threads 1 $(ARGS)
# ------------------------------------------------------------------ studies (one experiment file each)
study-reports: ## every study's tables and figures, from its folder, else its archive (the report lists of configs/experiment/)
	$(REPORT) --all $(ARGS)
same-state-studies same-state-fp32 same-state-dilemma same-state-heads: $(VENV_STAMP) ## a same-state study, then its tables (configs/experiment/same_state_*.yaml: studies = temperatures + m ablation, bf16, 24 items per suite; fp32 = the same in float32; dilemma = Top-K, Rheo, RSD, SpecInfer, chain at T=1, 0, 0.5; heads = Top-K vs Rheo m=1 with the weaker heads; hours)
	$(RUN) experiment=$(@:same-state-%=same_state_%) $(ARGS)
	$(REPORT) $(@:same-state-%=same_state_%)
reproduce-studies: ## every full-size same-state study: the above four (hours on two cores; resumable)
	$(MAKE) same-state-studies same-state-dilemma same-state-heads ARGS="limit=24 $(ARGS)"
sampled-studies: $(VENV_STAMP) ## the m ablation and temperature study on separate trajectories (realized tau), then tables
	$(RUN) experiment=sampled_m_ablation $(ARGS)
	$(RUN) experiment=sampled_temperature $(ARGS)
	$(REPORT) sampled_temperature
methods: $(VENV_STAMP) ## every method at the paper's node budget (T=0 and 1, 8 items per suite), into the main table's folder; its reports
	$(RUN) experiment=methods seed=0 limit=8 max_new_tokens=128 $(ARGS)
	$(REPORT) reproduce_tau
speed-cost: $(VENV_STAMP) ## Top-K vs Rheo m=1 cost per cycle, tau and tokens/s on the same prompts (float32, alone)
	$(RUN) experiment=speed_cost $(ARGS)
	$(REPORT) speed_cost
expected-replay: $(VENV_STAMP) ## the main table's Rheo rows on new seeds: realized - expected per row (ARGS="--rows 24 --mc 50 ...")
	OMP_NUM_THREADS=1 $(PY) -m eval.measure.expected_replay $(OUT)/runs.parquet --rows 0 --order first --mc 0 --seed-offset 1 \
	  --jsonl $(OUT)/expected_replay/rows.jsonl --out "$(TABLES)/expected_replay.md" $(ARGS)
serving-study: $(VENV_STAMP) ## the ranking options on shared states at seven temperatures (configs/experiment/serving_temps.yaml; hours)
	$(RUN) experiment=serving_temps $(ARGS)
dial-study: $(VENV_STAMP) ## the draft-quality dial on shared states (configs/experiment/draft_dial.yaml; hours)
	$(RUN) experiment=draft_dial $(ARGS)
head-reading: $(VENV_STAMP) ## rheo_adaptive's root acceptance and m=0 share along the dial: where a drafter sits (~40 min on one core)
	OMP_NUM_THREADS=1 $(PY) -m eval.measure.head_reading $(ARGS)
option-tables: ## tables, figures and archives of the two option studies (their folders, else their archives)
	$(REPORT) serving_temps draft_dial
verifier-study: $(VENV_STAMP) ## which lossless verifier: every (tree rule x verifier) combination on shared states, T = 1, 0.8, 0.6, head + two dial points (float32, one core; resumable), then its table and figure
	$(RUN) experiment=verifiers $(ARGS)
	$(REPORT) verifiers
protocol-study: $(VENV_STAMP) ## tau of Rheo m=1 under the template and eagle3 prompt protocols, T = 0 and 1, 10 items per suite (float32, one core; resumable), then its table
	$(RUN) experiment=protocol $(ARGS)
	$(REPORT) protocol
speed-options: $(VENV_STAMP) ## speed table: AR, Top-K, Rheo m=1, rheo_auto at T=0.7 and 1 on the tuned trees (alone)
	$(RUN) experiment=$(MINE)tuned_topk temperature=0.7,1.0 output_dir=$(OUT)/speed_options limit=2 max_new_tokens=64 $(ARGS)
	$(RUN) experiment=speed_options $(ARGS)
	$(REPORT) speed_options
speed-rule: $(VENV_STAMP) ## speed table: rheo_adaptive and rheo_level next to rheo_auto at T=0.7 and 1 on Rheo's tuned tree (alone)
	$(RUN) experiment=speed_rule $(ARGS)
	$(REPORT) speed_rule
# ------------------------------------------------------------------ draft head (recipes: configs/recipe/)
corpus corpus-selfinstruct train-head eval-head head-mid heads-top1 head-broad broad-top1: ## a draft-head recipe (configs/recipe/<name>.yaml; ARGS="--resume", "--head DIR", ...)
	$(RECIPE) $@ $(ARGS)
calibrate-head: $(VENV_STAMP) ## fit one draft temperature for the embedded head on held-out corpus sequences (minutes) -> OUT/draft_head/calibration.json
	PYTHONPATH=$(CURDIR) $(PY) scripts/calibrate_head.py $(ARGS)
calibrated-cells: $(VENV_STAMP) ## the dial's a = 0 cells (T = 0.7, 1) with the calibrated head (DRAFT_TEMP, calibration.json); Rheo's gain paired with the trained head's
	$(RUN) experiment=draft_dial draft_mix=0.0 draft_temp=$(DRAFT_TEMP) temperature=0.7,1.0 output_dir=$(OUT)/same_state_calibrated $(ARGS)
	$(PY) -m eval.states.calibrated $(OUT)/same_state_dial.parquet $(OUT)/same_state_calibrated --archive $(OUT)/same_state_calibrated.parquet --out "$(TABLES)/calibrated_head.md"
# ------------------------------------------------------------------ GPU (docs/gpu.md)
GPU_BUNDLE ?= .gpu_bundle
GPU_OUT ?= $(OUT)/gpu
GPU_PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
DEVICE ?= cuda
# the checkout (and tests/, whose toy models the chi-square check reads) and the bundle on the import path
GPU_ENV = PYTHONPATH=$(CURDIR):$(CURDIR)/tests$(if $(wildcard $(GPU_BUNDLE)/site),:$(CURDIR)/$(GPU_BUNDLE)/site) $(if \
	$(wildcard $(GPU_BUNDLE)/smollm2.gguf),RHEO_SMOLLM2_GGUF=$(CURDIR)/$(GPU_BUNDLE)/smollm2.gguf RHEO_CACHE=$(CURDIR)/$(GPU_BUNDLE)/cache)
gpu-wheels: ## the wheels a registry-less GPU machine lacks -> .gpu_bundle/a/wheels
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py wheels --bundle $(GPU_BUNDLE)
gpu-bundle: gpu-wheels ## wheels + the SmolLM2 GGUF in <= 30 MB parts under .gpu_bundle/{a,b}
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py split --bundle $(GPU_BUNDLE)
gpu-setup: ## on the GPU machine: reassemble the GGUF (SHA-256 checked), install the wheels, build the model cache
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_bundle.py setup --bundle $(GPU_BUNDLE)
gpu-check: ## the GPU path checked and timed (greedy identity, bf16 agreement, chi-square, tau parity, speed; ENGINE=static|graphs: that engine against eager, under 8 min) -> GPU_OUT
	$(GPU_ENV) OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),4) $(GPU_PY) scripts/gpu_check.py --device $(DEVICE) --device-setting DEVICE --out "$(GPU_OUT)" $(if $(ENGINE),--engine $(ENGINE)) $(GPU_ARGS)
gpu-reference: ## the CPU reference of gpu-check's tau parity -> GPU_OUT
	$(GPU_ENV) $(GPU_PY) scripts/gpu_check.py --device cpu --out "$(GPU_OUT)" --make-reference $(GPU_ARGS)
gpu-corpus gpu-train-head: ## on a lent GPU: the draft-head corpus, then the head (configs/recipe/gpu_*.yaml) -> GPU_OUT
	$(GPU_ENV) $(GPU_PY) scripts/recipe.py $@ --device $(DEVICE) --bundle $(GPU_BUNDLE) --out "$(GPU_OUT)" $(ARGS)
endif
