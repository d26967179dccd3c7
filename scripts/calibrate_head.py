"""Fit one draft temperature for an EAGLE-3 head on held-out corpus sequences (never the benchmarks).

The head drafts from q_tau ∝ exp(l / tau) (``draft_temp``, rheo.models.scaled). This script picks
the tau that minimises the mean KL(p || q_tau) over response positions of held-out sequences of
the self-instructed corpus, where p is the target's next-token distribution at T = 1 restricted
to the head's draft vocabulary and renormalised (q_tau has no mass outside it; the tau that
minimises the cross-entropy of p under q_tau is the same). The head is run as it drafts (the
training-time test of rheo.training.eagle3_train): unrolled step 1 reads the target's features,
steps 2.. the head's own hidden state, so step k is a node at draft depth k. The fit pools
``--steps`` steps; the per-step optimum is reported beside it.

Also reported: the expected calibration error (ECE) of the head's top-1 before and after, with
confidence max_v q_tau(v) and accuracy p(top-1 token) under the full target distribution (the
chance the target's sample at T = 1 is that token), in ``--bins`` equal-width bins.

    python scripts/calibrate_head.py                     # the embedded head, 16 held-out sequences
    make calibrate-head ARGS="--sequences 32"

Writes ``--out`` (JSON) and ``--table`` (Markdown).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from eval.report.markdown import markdown_table
from rheo.cli import ArgumentParser, positive_float, positive_int, run_main
from eval.store.committed import refuse_committed, write_outputs
from rheo.paths import REPO_ROOT, folder, start_git_sha

HEAD = "rheo/assets/eagle3_smollm2_135m"
CORPUS = "data/draft_corpus/selfinstruct"
CURVE = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)  # the pooled KL reported at these tau too


def parse_args(argv=None) -> argparse.Namespace:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default=HEAD, help="an EAGLE-3 head folder for SmolLM2-135M-Instruct")
    ap.add_argument("--corpus", default=CORPUS, help="a packed corpus folder; only its held-out split is read")
    ap.add_argument("--sequences", type=positive_int, default=16, help="the first N held-out sequences")
    ap.add_argument("--steps", type=positive_int, default=3, help="unrolled draft steps (depths) pooled in the fit")
    ap.add_argument("--tau-min", type=positive_float, default=0.5)
    ap.add_argument("--tau-max", type=positive_float, default=3.0)
    ap.add_argument("--iters", type=positive_int, default=14, help="bisection steps of the 1-D search (in 1 / tau)")
    ap.add_argument("--bins", type=positive_int, default=15, help="ECE bins")
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--out", default=str(folder("out", "draft_head", "calibration.json")))
    ap.add_argument("--table", default=str(folder("tables", "head_calibration.md")))
    args = ap.parse_args(argv)
    if args.tau_min >= args.tau_max:
        ap.error(f"--tau-min {args.tau_min} must be below --tau-max {args.tau_max}")
    if not (Path(args.head) / "config.json").is_file():
        ap.error(f"--head {args.head}: no EAGLE-3 head there (config.json); give a head folder, e.g. {HEAD}")
    if Path(args.corpus).resolve().is_relative_to((REPO_ROOT / "data" / "benchmarks").resolve()):
        ap.error(f"--corpus {args.corpus}: the benchmarks are the test set; give a training corpus, e.g. {CORPUS}")
    refuse_committed(args.out, args.table, source=args.corpus)  # before minutes of fitting
    return args


@torch.no_grad()
def positions(target, head, seq: np.ndarray, resp_start: int, steps: int) -> list[tuple]:
    """Per unrolled step k = 1..steps: (draft logits l [P, Vd], target p over the draft vocabulary,
    renormalised [P, Vd], p of each draft token under the full target [P, Vd]) at the response
    pairs of one sequence (``seq`` [n] token ids, response from ``resp_start``)."""
    from rheo.models.hf_target import eagle3_feature_layers
    from rheo.training.eagle3_train import ttt_steps

    ids = torch.from_numpy(seq.astype(np.int64))[None]  # [1, n]
    out = target(input_ids=ids, output_hidden_states=True)
    layers = eagle3_feature_layers(target.config.num_hidden_layers)
    feats = torch.cat([out.hidden_states[i] for i in layers], dim=-1)[:, :-1]  # [1, n-1, 3H]: pair j = (f_j, x_{j+1})
    embeds = target.model.embed_tokens(ids[:, 1:])  # [1, n-1, H]
    m = ids.shape[1] - 1
    d2t = head.draft_to_target()  # [Vd]
    p_full = torch.softmax(out.logits[0, 1:].float(), dim=-1)[:, d2t]  # [n-1, Vd]: pair j is scored by p_{j+1}
    got = []
    for k, logits in enumerate(ttt_steps(head, feats, embeds, steps), start=1):
        j = torch.arange(max(resp_start - 2, k - 1), m - 1)  # pairs predicting a response token, valid at step k
        p_in = p_full[j]  # [P, Vd]
        got.append((logits[0, j].float(), p_in / p_in.sum(-1, keepdim=True), p_in))
    return got


class Objective:
    """KL(p || q_tau) per row as a function of beta = 1 / tau: with l [P, Vd] the draft logits and p [P, Vd],
    KL = sum p log p - beta E_p[l] + logsumexp(beta l), convex in beta, with derivative E_q[l] - E_p[l]
    (q = softmax(beta l)). The beta-free parts are computed once."""

    def __init__(self, logits: torch.Tensor, p: torch.Tensor, chunk: int = 2048) -> None:
        self.logits, self.chunk = logits, chunk
        self.neg_entropy = torch.special.xlogy(p, p).sum(-1)  # [P]
        self.p_mean_logit = (p * logits).sum(-1)  # [P]

    def kl(self, tau: float) -> float:
        """Mean over rows of KL(p || softmax(l / tau))."""
        lse = torch.cat([torch.logsumexp(x / tau, -1) for x in self.logits.split(self.chunk)])  # [P]
        return float((self.neg_entropy - self.p_mean_logit / tau + lse).mean())

    def slope(self, beta: float) -> float:
        """d mean KL / d beta at ``beta``: mean of E_q[l] - E_p[l]."""
        q_mean = torch.cat([(torch.softmax(x * beta, -1) * x).sum(-1) for x in self.logits.split(self.chunk)])
        return float((q_mean - self.p_mean_logit).mean())

    def best_tau(self, tau_min: float, tau_max: float, iters: int) -> float:
        """The tau in [tau_min, tau_max] of the least mean KL: bisection on the slope in beta (the
        objective is convex in beta, so its slope rises); a bound when the slope keeps one sign."""
        lo, hi = 1.0 / tau_max, 1.0 / tau_min
        if self.slope(lo) >= 0:
            return tau_max
        if self.slope(hi) <= 0:
            return tau_min
        for _ in tqdm(range(iters), desc="bisection", unit="step", leave=False):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.slope(mid) < 0 else (lo, mid)
        return 1.0 / ((lo + hi) / 2)


def ece(logits: torch.Tensor, p_full: torch.Tensor, tau: float, bins: int) -> dict:
    """Top-1 calibration at ``tau``: ECE, mean confidence, mean accuracy (module docstring)."""
    q = torch.softmax(logits / tau, dim=-1)
    conf, top = q.max(-1)  # [P]
    acc = p_full.gather(1, top[:, None])[:, 0]  # [P]
    which = torch.clamp((conf * bins).long(), max=bins - 1)
    err = sum(abs(float(conf[which == b].sum() - acc[which == b].sum())) for b in range(bins))
    n = max(len(conf), 1)
    return {"ece": err / n, "confidence": float(conf.mean()), "accuracy": float(acc.mean())}


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from rheo.models.eagle3 import load_eagle3_drafter
    from rheo.models.smollm2 import load_smollm2
    from rheo.training.corpus import load_corpus

    started = time.time()
    corpus = load_corpus(args.corpus)
    held = np.flatnonzero(corpus.held_out)[: args.sequences]
    if len(held) < args.sequences:
        raise SystemExit(f"--sequences {args.sequences}: {args.corpus} has only {len(held)} held-out sequences")
    target, _ = load_smollm2(dtype=torch.float32)
    head = load_eagle3_drafter(args.head, target, dtype=torch.float32).head.eval()
    per_step = [[] for _ in range(args.steps)]
    for s in tqdm(held, desc="held-out sequences", unit="seq"):
        for k, part in enumerate(positions(target, head, corpus.sequence(int(s)), int(corpus.resp_start[s]), args.steps)):
            per_step[k].append(part)
    steps = [tuple(torch.cat(x) for x in zip(*parts)) for parts in per_step]  # per step: (l, p, p_full)
    logits, p, p_full = (torch.cat(x) for x in zip(*steps))
    pooled = Objective(logits, p)
    tau = round(pooled.best_tau(args.tau_min, args.tau_max, args.iters), 2)  # the value a run is given
    by_step = []
    for k, (lk, pk, fk) in enumerate(steps, start=1):
        own = Objective(lk, pk)
        by_step.append({"step": k, "positions": len(lk), "best_tau": round(own.best_tau(args.tau_min, args.tau_max, args.iters), 2),
                        "kl_before": own.kl(1.0), "kl_after": own.kl(tau),
                        "ece_before": ece(lk, fk, 1.0, args.bins), "ece_after": ece(lk, fk, tau, args.bins)})
    result = {
        "what": "one draft temperature tau for the head: q_tau ∝ exp(l / tau), minimising the mean KL(p || q_tau) "
                "over response positions of held-out corpus sequences (p: the target at T = 1 on the draft vocabulary, "
                "renormalised), unrolled draft steps pooled; 1-D search: bisection on the slope in 1 / tau",
        "head": args.head, "corpus": args.corpus, "split": "held_out", "sequences": [int(s) for s in held],
        "steps": args.steps, "positions": int(len(logits)),
        "in_vocab_mass": float(p_full.sum(-1).mean()),
        "tau": tau, "tau_range": [args.tau_min, args.tau_max], "kl_before": pooled.kl(1.0), "kl_after": pooled.kl(tau),
        "ece_before": ece(logits, p_full, 1.0, args.bins), "ece_after": ece(logits, p_full, tau, args.bins),
        "bins": args.bins, "by_step": by_step,
        "curve": {f"{t:g}": round(pooled.kl(t), 6) for t in CURVE if args.tau_min <= t <= args.tau_max},
        "command": " ".join(["python scripts/calibrate_head.py"] + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)]),
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}, torch {torch.__version__}, "
                   f"{args.threads} thread(s), float32",
        "wall_s": round(time.time() - started, 1), "git_sha": start_git_sha(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    write_outputs([(Path(args.out), (json.dumps(result, indent=1) + "\n").encode()),
                   (Path(args.table), table(result).encode())], args.corpus)
    print(json.dumps({k: result[k] for k in ("tau", "kl_before", "kl_after", "ece_before", "ece_after", "positions")}))


def table(r: dict) -> str:
    """The Markdown table of a fit ``r``: pooled and per draft step, before (tau = 1) and after."""
    head = (f"### The head's draft temperature: tau = {r['tau']:g} ({len(r['sequences'])} held-out sequences of "
            f"`{r['corpus']}`, {r['positions']} positions over {r['steps']} draft steps)\n\n"
            "KL: mean KL(p || q_tau) in nats, p the target at T = 1 on the draft vocabulary (renormalised; "
            f"{r['in_vocab_mass']:.3f} of its mass on average). ECE of the top-1 in {r['bins']} bins: confidence "
            "max q_tau against accuracy p(top-1). Before: tau = 1 (the head as trained). "
            f"`{r['command']}`, {r['machine']}, {r['date'][:10]}.\n\n")
    header = ["draft step", "positions", "best tau (step alone)", "KL before", "KL after", "ECE before", "ECE after",
              "confidence before", "confidence after", "accuracy"]
    rows = [("pooled", r["positions"], f"{r['tau']:g}", r["kl_before"], r["kl_after"], r["ece_before"], r["ece_after"])]
    rows += [(s["step"], s["positions"], f"{s['best_tau']:g}", s["kl_before"], s["kl_after"], s["ece_before"],
              s["ece_after"]) for s in r["by_step"]]
    cells = [(a, n, t, f"{kb:.4f}", f"{ka:.4f}", f"{eb['ece']:.4f}", f"{ea['ece']:.4f}", f"{eb['confidence']:.3f}",
              f"{ea['confidence']:.3f}", f"{eb['accuracy']:.3f}") for a, n, t, kb, ka, eb, ea in rows]
    return head + markdown_table(header, cells) + "\n"


if __name__ == "__main__":
    run_main(main)
