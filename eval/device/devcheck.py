"""The checks of ``scripts/gpu_check.py``: a device's correctness, agreement, determinism and speed.

Hydra-, omegaconf- and ``datasets``-free on purpose (a GPU machine without a package
registry runs it with torch, transformers, pandas and pyarrow, plus the ``gguf`` and
``accelerate`` wheels the SmolLM2 GGUF needs): prompts are read from the JSONL files
directly, and rows are written with :mod:`eval.store.storage` in the harness layout, keyed
and hashed by :mod:`eval.store.keys` as the runner's are. Every generation goes through
:func:`eval.measure.generation.generate`; methods are given as :class:`rheo.config.SpecConfig`.

Terms: *identity* - greedy output token-for-token equal to ``generate(do_sample=False)``;
*agreement* - tokens before the first divergence; *margin* - the target's top-1 minus
top-2 logit at the position of a divergence (a near-tie flipped by kernel rounding is
not a bug; a wide margin is).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from baselines import AR, HF_GENERATE
from eval.measure.generation import generate, phase_timer
from eval.measure.rows import peak_memory_mb, reset_peak_memory
from eval.report.agreement import first_divergence
from eval.store import storage
from eval.store.keys import SUITE_FILES, config_hash, generation_seed, method_key
from rheo import config as rheo_config
from rheo.config import SpecConfig
from rheo.decode import speculative_generate
from rheo.methods import get_method

SUITE_ORDER = ("mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "nq")
PAPER_TREE = dict(rheo_config.PAPER_TREE)


@dataclass(frozen=True)
class Prompt:
    suite: str
    item_id: int
    category: str
    text: str  # the first user turn


def load_prompts(data_dir: Path, per_suite: int, suites: Sequence[str] = SUITE_ORDER) -> list[Prompt]:
    """The first ``per_suite`` items of each suite (first turn only), suite by suite."""
    out = []
    for suite in suites:
        with open(Path(data_dir) / SUITE_FILES[suite]) as f:
            rows = [json.loads(line) for line in f if line.strip()][:per_suite]
        out += [Prompt(suite, int(r["question_id"]), str(r["category"]), str(r["turns"][0])) for r in rows]
    return out


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def generator(device, seed: int) -> torch.Generator:
    return torch.Generator(device=torch.device(device).type).manual_seed(seed)


def tree_specs(tree: dict, temperature: float) -> list[SpecConfig]:
    """The tree methods every check compares: Top-K and Rheo m=1 on ``tree`` (k, depth, tree_size, sparse_top)."""
    return [SpecConfig(method="topk", temperature=temperature, **tree),
            SpecConfig(method="rheo", m=1, temperature=temperature, **tree)]


def reference_specs(temperature: float) -> list[SpecConfig]:
    """The reference methods of the speed check: our AR and transformers generate."""
    return [SpecConfig(method=AR.name, temperature=temperature), SpecConfig(method=HF_GENERATE.name,
                                                                            temperature=temperature)]


def label(spec: SpecConfig) -> str:
    """The variant label of a row ('ar', 'topk', 'rheo m=1')."""
    return get_method(spec.method).variant(spec)


# ------------------------------------------------------------------ greedy identity / agreement
@torch.inference_mode()
def top2_margin(hf_model, ids: Sequence[int]) -> tuple[float, int, int]:
    """(top-1 minus top-2 logit, top-1 id, top-2 id) of the target's next-token logits after ``ids``."""
    device = next(hf_model.parameters()).device
    logits = hf_model(input_ids=torch.tensor([list(ids)], device=device)).logits[0, -1].float()
    top = logits.topk(2)
    return float(top.values[0] - top.values[1]), int(top.indices[0]), int(top.indices[1])


@torch.inference_mode()
def greedy_vs_generate(pair, prompts: list[Prompt], max_new: int, tree: dict, device, dtype: str) -> list[dict]:
    """Our AR, Top-K and Rheo m=1 at T=0 against ``generate(do_sample=False)``, prompt by prompt."""
    eos = list(pair.eos_token_ids) or None
    rows = []
    for p in prompts:
        ids = pair.format_chat([{"role": "user", "content": p.text}])
        ref = generate(pair, SpecConfig(method=HF_GENERATE.name, temperature=0.0), ids, max_new,
                       generator(device, 0), eos, device).tokens
        outs = {label(one): generate(pair, one, ids, max_new, generator(device, 0), eos, device)
                for one in [SpecConfig(method=AR.name, temperature=0.0)] + tree_specs(tree, 0.0)}
        for method, out in outs.items():
            div = first_divergence(ref, out.tokens)
            row = {"suite": p.suite, "item_id": p.item_id, "method": method, "dtype": dtype, "ref_len": len(ref),
                   "len": len(out.tokens), "identical": div is None,
                   "agree": len(ref) if div is None else div, "tau": out.tau, "tokens": out.tokens,
                   "margin": None, "top2": None}
            if div is not None and div < len(ref):
                margin, a, b = top2_margin(pair.hf_model, ids + ref[:div])
                row.update(margin=margin, top2=[a, b])
            rows.append(row)
    return rows


@torch.inference_mode()
def greedy_runs(pair, prompts: list[Prompt], max_new: int, tree: dict, device) -> list[dict]:
    """Top-K and Rheo m=1 at T=0 alone (the tau-parity reference): suite, method, tau, tokens."""
    eos = list(pair.eos_token_ids) or None
    rows = []
    for p in prompts:
        ids = pair.format_chat([{"role": "user", "content": p.text}])
        for one in tree_specs(tree, 0.0):
            out = generate(pair, one, ids, max_new, generator(device, 0), eos, device)
            rows.append({"suite": p.suite, "method": label(one), "tau": out.tau, "tokens": out.tokens})
    return rows


# ------------------------------------------------------------------ determinism, chi-square
@torch.inference_mode()
def same_seed_twice(pair, prompts: list[Prompt], max_new: int, tree: dict, device) -> list[dict]:
    eos = list(pair.eos_token_ids) or None
    rows = []
    for p in prompts:
        ids = pair.format_chat([{"role": "user", "content": p.text}])
        for one in tree_specs(tree, 1.0):
            runs = [generate(pair, one, ids, max_new, generator(device, 1234), eos, device).tokens for _ in range(2)]
            rows.append({"suite": p.suite, "method": label(one), "same": runs[0] == runs[1], "len": len(runs[0])})
    return rows


#: the chi-square's level: a lossless case fails at p < ALPHA (one fresh seed in 10,000 if correct)
ALPHA = 1e-4
#: the negative control must be detected; its chance of a miss at LOSSY_RUNS is bounded by MAX_MISS
MAX_MISS = 1e-6
LOSSY_RUNS = 400
#: the negative control: Rheo verifying its two deterministic children before its sampled one
#: (lossy). The draft nearly never proposes token 2, which the target emits 30% of the time, so
#: the lossy order emits it 3.9% of the time (exact, by enumeration): total variation 0.26.
LOSSY_TARGET_PROBS = (0.3, 0.3, 0.3, 0.1)
LOSSY_DRAFT_PROBS = (0.33, 0.27, 0.02, 0.38)
LOSSY_CONFIG = SpecConfig(k=3, m=1, depth=1, tree_size=3, sparse_top=None, temperature=1.0,
                          verify_order="deterministic_first")


def chi_square_on_device(device, n_runs: int) -> list[dict]:
    """Seeded chi-square on toy pairs whose tensors and generator live on ``device``.

    Lossless cases (Rheo m=1, Top-K; first two tokens, ``n_runs`` runs) fail at p < ALPHA.
    The negative control (:data:`LOSSY_CONFIG` on a context-free pair, one token, LOSSY_RUNS
    runs) must be *detected* (p < ALPHA); its exact output distribution is enumerated on the
    device and ``miss`` is an exact upper bound on the chance that LOSSY_RUNS runs miss it
    (:mod:`eval.device.power`): the control's power is at least 1 - miss, and the row fails if
    miss > MAX_MISS.
    """
    from collections import Counter

    from toys import chi_square_pvalue, random_logits_fn  # tests/toys.py

    from rheo.exact import target_distribution
    from rheo.models.toy import PrefixLM

    t_fn, d_fn = random_logits_fn(6, 43), random_logits_fn(6, 44)
    target = PrefixLM(lambda pre: t_fn(pre).to(device), 6)
    drafter = PrefixLM(lambda pre: d_fn(pre).to(device), 6)
    drafter.device = torch.device(device)
    rows = []
    for name, cfg in (("rheo m=1", SpecConfig(k=4, m=1, depth=3, tree_size=8, sparse_top=5, temperature=1.0)),
                      ("topk", SpecConfig(method="topk", k=4, depth=3, tree_size=8, sparse_top=5, temperature=1.0))):
        g = generator(device, 1)
        counts = Counter(tuple(speculative_generate(target, drafter, [0, 1], 2, cfg, g).tokens) for _ in range(n_runs))
        p, dof = chi_square_pvalue(counts, target_distribution(t_fn, [0, 1], 2, cfg.temperature))
        rows.append({"case": name, "runs": n_runs, "tokens": 2, "dof": dof, "p": p, "ok": p > ALPHA,
                     "expect": f"p > {ALPHA:g}", "tv": None, "miss": None})
    return rows + [lossy_control(device, LOSSY_RUNS)]


def lossy_control(device, n_runs: int) -> dict:
    """The negative control's row (see :func:`chi_square_on_device`)."""
    from collections import Counter

    from toys import chi_square_pvalue  # tests/toys.py

    from eval.device.power import miss_log10
    from rheo.exact import decoder_distribution, target_distribution, total_variation
    from rheo.models.toy import PrefixLM

    t_logits = torch.tensor(LOSSY_TARGET_PROBS, dtype=torch.float64).log()  # [4]
    d_logits = torch.tensor(LOSSY_DRAFT_PROBS, dtype=torch.float64).log()  # [4]
    target = PrefixLM(lambda pre: t_logits.to(device), len(LOSSY_TARGET_PROBS))
    drafter = PrefixLM(lambda pre: d_logits.to(device), len(LOSSY_DRAFT_PROBS))
    drafter.device = torch.device(device)
    want = target_distribution(lambda pre: t_logits, [0], 1, LOSSY_CONFIG.temperature)
    actual = decoder_distribution(target, drafter, [0], 1, LOSSY_CONFIG)  # exact, on the device
    miss = 10 ** miss_log10(want, actual, n_runs, ALPHA)
    g = generator(device, 1)
    counts = Counter(tuple(speculative_generate(target, drafter, [0], 1, LOSSY_CONFIG, g).tokens)
                     for _ in range(n_runs))
    p, dof = chi_square_pvalue(counts, want)
    return {"case": "rheo deterministic_first (lossy)", "runs": n_runs, "tokens": 1, "dof": dof, "p": p,
            "ok": p < ALPHA and miss <= MAX_MISS, "expect": f"p < {ALPHA:g} (detected)",
            "tv": total_variation(actual, want), "miss": miss}


# ------------------------------------------------------------------ speed rows (harness layout)
@torch.inference_mode()
def timed_row(pair, meta: dict, root: Optional[Path], p: Prompt, spec: SpecConfig, max_new: int) -> dict:
    """Generate once with ``spec`` (timed, phases profiled) and store the row under ``root`` (None: a
    warm-up, not stored); returns it. Keyed as the runner keys a run of seed 0 with default weights."""
    device = meta["device"]
    key = method_key(spec, model=meta["model"], device=device, dtype=meta["dtype"], seed=0, max_new_tokens=max_new)
    chash = config_hash(key)
    ids = pair.format_chat([{"role": "user", "content": p.text}])
    eos = list(pair.eos_token_ids) or None
    seed = generation_seed(p.suite, p.item_id, 0, 0)
    tm = phase_timer(spec, device)
    g = generator(device, seed)
    reset_peak_memory(device)
    sync(device)
    t0 = time.perf_counter()
    out = generate(pair, spec, ids, max_new, g, eos, device, timer=tm)
    sync(device)
    wall = time.perf_counter() - t0
    row = storage.key_row(key)
    row.update(meta, dataset=p.suite, item_id=p.item_id, turn=0, category=p.category, gen_seed=seed,
               config_hash=chash, prompt_tokens=len(ids), new_tokens=len(out.tokens),
               target_calls=out.target_calls, tau=out.tau, accept_lengths=list(out.accept_lengths),
               drafted_nodes_mean=_mean(out.drafted_nodes), kept_nodes_mean=_mean(out.kept_nodes),
               samples_kept=sum(out.sample_kept), samples_accepted=sum(out.sample_accepted), wall_s=wall,
               tokens_per_s=len(out.tokens) / wall if wall > 0 else None, output_tokens=list(out.tokens),
               status="ok", finished_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               peak_memory_mb=peak_memory_mb(device))
    if tm is not None:
        row.update(tm.summary(out.target_calls, wall * 1e3))
    if root is not None:
        cdir = storage.prepare_config_dir(root, meta["model"], chash, key)
        storage.write_row(storage.shard_path(cdir, p.suite, p.item_id, 0), row)
    return row


def _mean(xs) -> Optional[float]:
    return float(sum(xs)) / len(xs) if xs else None
