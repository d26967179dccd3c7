"""The EAGLE-3 draft-head training loop behind ``scripts/train_draft.py``.

:func:`train` runs one command line's worth of work: target features for the corpus
(cached, resumable), then either the held-out measurement of a saved head
(``eval_only``) or training with the training-time test unrolled ``steps_unrolled``
steps, AdamW + a warmed-up cosine schedule, checkpoints every ``ckpt_minutes`` that
``resume`` continues from bit-exactly in data order (CPU), and the exported head.
``args`` is the script's parsed command line (see its ``--help`` for each option).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from tqdm import tqdm

from rheo.io import atomic_write_text, make_dir, open_append, remove_stale_tmp
from rheo.models.eagle3 import Eagle3LoadError
from rheo.models.eagle3_head import Eagle3Head, save_head
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.models.weights import CorruptWeightsError, weights_fingerprint
from rheo.training.corpus import load_corpora
from rheo.training.draft_head import coverage, draft_vocab, init_head, saved_head
from rheo.training.eagle3_train import batch_from_sequences, ttt_forward
from rheo.training.features import FeatureCache, build_features, import_shard_features, length_batches
from rheo.training.run_state import load_state, save_state, trim_metrics
from rheo.training.schedule import BudgetFit, warm_cosine

__all__ = ["train", "evaluate", "epoch_batches", "Trainer"]


@torch.no_grad()
def evaluate(head, embed, cache, held, steps, in_vocab, w_draft, max_tokens, counts: bool = False):
    """Held-out top-1 per unrolled step (teacher-forced); ``counts``: also [steps, 2] (hits, positions)."""
    head.eval()
    tot = torch.zeros(steps, 2)
    lengths = cache.corpus.lengths()
    for b in length_batches(lengths, sorted(held, key=lambda s: lengths[s]), max_tokens):
        batch = batch_from_sequences([cache.sequence(s) for s in b], embed, w_draft)
        with torch.autocast(w_draft.device.type, dtype=torch.bfloat16):
            _, st = ttt_forward(head, batch, steps, in_vocab)
        tot += st.float().cpu()
    head.train()
    acc = (tot[:, 0] / tot[:, 1].clamp_min(1)).tolist()
    return (acc, tot) if counts else acc


def epoch_batches(lengths, train_ids, max_tokens, seed, epoch):
    """The batches of one epoch: a seeded shuffle, cut into blocks sorted by length (little padding)."""
    g = np.random.default_rng([seed, epoch])
    order = g.permutation(train_ids)
    batches = []
    for a in range(0, len(order), 256):
        block = sorted(order[a : a + 256], key=lambda s: lengths[s])
        batches += list(length_batches(lengths, block, max_tokens))
    perm = g.permutation(len(batches))
    return [batches[i] for i in perm]


@dataclass
class TrainingData:
    """The corpus with its cached target features and the float target, split for training."""

    corpus: object
    cache: FeatureCache
    target: torch.nn.Module  # the target LM, fp32 on the device
    first: int               # sequences used: the corpus's first ``first``
    held: np.ndarray         # [<= eval_sequences] held-out sequence ids measured at each checkpoint
    train_ids: np.ndarray    # [N] training sequence ids
    lengths: np.ndarray      # [num_sequences] tokens per sequence


@dataclass
class DraftInputs:
    """What every batch of a head reads: its draft vocabulary and the target's rows for it."""

    draft_ids: torch.Tensor  # [Vd] long target ids, on the host
    in_vocab: torch.Tensor   # [V] bool, on the device
    embed: torch.nn.Module   # the target's token embeddings
    w_draft: torch.Tensor    # [Vd, H] fp32 target output rows, on the device

    @classmethod
    def of(cls, head: Eagle3Head, draft_ids: torch.Tensor, target, device) -> "DraftInputs":
        return cls(draft_ids, head.t2d.clone(), target.model.embed_tokens,
                   target.lm_head.weight.detach()[draft_ids.to(device)].float())


def train(args) -> None:
    """Run the command line ``args`` (checked by the script): features, then eval-only or training."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (torch {torch.__version__})")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    run_dir = make_dir(Path(args.run_dir))
    for folder in (run_dir, Path(args.out)):  # temporary files of a writer killed mid-checkpoint
        for path in remove_stale_tmp(folder) if folder.is_dir() else []:
            print(f"removed {path}: left by a killed checkpoint", flush=True)
    resume = None
    if args.resume and not (args.eval_only or args.features_only):
        resume = load_state(run_dir / "state.pt", device)
        trim_metrics(run_dir / "metrics.jsonl", resume["step"])
    t_start = time.time()
    data = prepare_data(args, device)
    if args.features_only:
        return
    if args.eval_only:
        measure_saved_head(args, data, device)
        return
    if resume:
        draft_ids = resume["draft_ids"]
    elif args.keep_draft_vocab:  # the warm start's own vocabulary, so that its trained output rows carry over
        draft_ids = saved_head(args.warm_start, data.target, "cpu").draft_to_target()
    else:
        draft_ids = draft_vocab(data.corpus, data.train_ids, args.draft_vocab)
    draft_ids = draft_ids.cpu()
    head = init_head(data.target, draft_ids, "" if resume else args.warm_start,
                     warm_output=args.train_lm_head).to(device)  # built on the host
    Trainer(args, data, head, DraftInputs.of(head, draft_ids, data.target, device), device, t_start).run(resume)


def prepare_data(args, device) -> TrainingData:
    """Load the corpus and the target, and compute (or import) the target features not cached yet."""
    corpus, corpus_sha = load_corpora(args.corpus)
    target, _ = load_smollm2()
    meta = dict(corpus_sha256=corpus_sha, dtype="bfloat16",
                layers=list(eagle3_feature_layers(target.config.num_hidden_layers)))
    cache = FeatureCache(args.features, corpus, target.config.hidden_size, meta, create=True)
    first = args.first_sequences or len(corpus)
    if args.shard_features and Path(args.shard_features).is_dir() and not cache.done[:first].all():
        print(f"imported features of {import_shard_features(cache, args.shard_features)} sequences", flush=True)
    if not cache.done[:first].all():  # a run on the first sequences needs only theirs
        build_features(target.to(device), cache, first=first)
    return TrainingData(corpus=corpus, cache=cache, target=target.float().to(device), first=first,
                        held=np.flatnonzero(corpus.held_out[:first])[: args.eval_sequences],
                        train_ids=np.flatnonzero(~corpus.held_out[:first]), lengths=corpus.lengths())


def held_out_coverage(data: TrainingData, inputs: DraftInputs) -> float:
    """Share of all held-out response positions whose target argmax is in the draft vocabulary."""
    return coverage(data.cache, np.flatnonzero(data.corpus.held_out[:data.first]), inputs.in_vocab.cpu())


def measure_saved_head(args, data: TrainingData, device) -> None:
    """Print a saved head's held-out top-1 per unrolled step (with its own draft vocabulary) as JSON."""
    try:
        head = saved_head(args.eval_only, data.target, device)
    except (FileNotFoundError, Eagle3LoadError, CorruptWeightsError) as e:
        raise SystemExit(f"--eval-only: {e}") from e
    inputs = DraftInputs.of(head, head.draft_to_target().cpu(), data.target, device)
    cov = held_out_coverage(data, inputs)
    acc, tot = evaluate(head, inputs.embed, data.cache, data.held, args.steps_unrolled, inputs.in_vocab,
                        inputs.w_draft, args.max_tokens, counts=True)
    se = [math.sqrt(a * (1 - a) / max(n, 1)) for a, n in zip(acc, tot[:, 1].tolist())]
    print(json.dumps(dict(head=args.eval_only, head_sha=weights_fingerprint(Path(args.eval_only)),
                          first_sequences=data.first, held_out_sequences=len(data.held), positions=int(tot[0, 1]),
                          held_out_argmax_coverage=round(cov, 4), held_out_top1=[round(a, 4) for a in acc],
                          binomial_se=[round(x, 4) for x in se])), flush=True)


def make_optimizer(head: Eagle3Head, args) -> tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]:
    """AdamW over the trained parameters. The output rows start as the target's; they are frozen
    unless ``train_lm_head`` (then at lr x ``lm_head_lr_mult``). Returns (optimizer, parameters)."""
    head.lm_head.weight.requires_grad_(args.train_lm_head)
    body = [p for n, p in head.named_parameters() if p.requires_grad and not n.startswith("lm_head.")]
    groups = [dict(params=body, lr=args.lr)]
    if args.train_lm_head:
        groups.append(dict(params=[head.lm_head.weight], lr=args.lr * args.lm_head_lr_mult))
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    return opt, [p for p in head.parameters() if p.requires_grad]


class Trainer:
    """The optimisation state of one run (head, optimiser, schedule, data position) and its steps."""

    def __init__(self, args, data: TrainingData, head: Eagle3Head, inputs: DraftInputs, device,
                 t_start: float) -> None:
        self.args, self.data, self.head, self.inputs, self.device = args, data, head, inputs, device
        self.t_start, self.run_dir = t_start, Path(args.run_dir)
        self.opt, self.params = make_optimizer(head, args)
        self.per_epoch = len(epoch_batches(data.lengths, data.train_ids, args.max_tokens, args.seed, 0))
        self.plan = dict(total=max(1, int(self.per_epoch * args.epochs)))  # ``minutes`` may shorten it once
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, warm_cosine(args.warmup, self.plan))
        self.step = self.epoch = self.pos = self.tokens_seen = 0
        self.step_w = torch.tensor([args.step_decay**k for k in range(args.steps_unrolled)], device=device)
        self.metrics = None

    def restore(self, resume: dict) -> None:
        """Continue from a checkpoint of :meth:`checkpoint`: weights, optimiser, schedule, position, RNG."""
        self.head.load_state_dict(resume["head"])
        self.opt.load_state_dict(resume["opt"])
        self.sched.load_state_dict(resume["sched"])
        self.step, self.epoch, self.pos = resume["step"], resume["epoch"], resume["pos"]
        self.tokens_seen = resume["tokens_seen"]
        self.plan.update(resume["plan"])
        torch.set_rng_state(resume["torch_rng"].cpu())
        if self.device.type == "cuda" and resume.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(resume["cuda_rng"].cpu(), self.device)

    def write_info(self) -> None:
        """Print and save ``info.json``: the data, the vocabulary and the plan of this run."""
        d, lengths = self.data, self.data.lengths
        info = dict(train_sequences=len(d.train_ids), train_tokens=int(lengths[d.train_ids].sum()),
                    train_response_tokens=int((lengths - d.corpus.resp_start)[d.train_ids].sum()),
                    held_out_sequences=len(d.held), draft_vocab=len(self.inputs.draft_ids),
                    held_out_argmax_coverage=round(held_out_coverage(d, self.inputs), 4),
                    batches_per_epoch=self.per_epoch, total_steps=self.plan["total"], resumed_at=self.step,
                    args=vars(self.args))
        print(json.dumps(info), flush=True)
        atomic_write_text(self.run_dir / "info.json", json.dumps(info, indent=1))

    def checkpoint(self, final: bool = False) -> None:
        """Measure held-out top-1, log it, export the head and save the full state (atomically)."""
        a, i = self.args, self.inputs
        acc = evaluate(self.head, i.embed, self.data.cache, self.data.held, a.steps_unrolled, i.in_vocab,
                       i.w_draft, a.max_tokens)
        rec = dict(step=self.step, epoch=self.epoch, tokens_seen=self.tokens_seen,
                   wall_s=round(time.time() - self.t_start, 1), held_out_top1=[round(x, 4) for x in acc], final=final)
        print(json.dumps(rec), flush=True)
        self.metrics.write(json.dumps(rec) + "\n")
        self.metrics.flush()
        save_head(self.head, a.out)
        cuda = self.device.type == "cuda"
        save_state(self.run_dir / "state.pt", head=self.head.state_dict(), opt=self.opt.state_dict(),
                   sched=self.sched.state_dict(), step=self.step, epoch=self.epoch, pos=self.pos,
                   tokens_seen=self.tokens_seen, torch_rng=torch.get_rng_state(), draft_ids=i.draft_ids,
                   plan=dict(self.plan), cuda_rng=torch.cuda.get_rng_state(self.device) if cuda else None)

    def running(self) -> bool:
        return self.step < self.plan["total"] and not (self.args.max_steps and self.step >= self.args.max_steps)

    def train_step(self, b: list[int]) -> tuple[float, list[float]]:
        """One optimiser step on the sequences ``b``; returns (loss, top-1 per unrolled step)."""
        i = self.inputs
        batch = batch_from_sequences([self.data.cache.sequence(s) for s in b], i.embed, i.w_draft)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            losses, st = ttt_forward(self.head, batch, self.args.steps_unrolled, i.in_vocab)
        loss = (losses.float() * self.step_w).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 0.5)
        self.opt.step()
        self.sched.step()
        self.step, self.pos = self.step + 1, self.pos + 1
        self.tokens_seen += int(self.data.lengths[b].sum())
        return loss.item(), (st[:, 0].float() / st[:, 1].clamp_min(1)).tolist()

    def run(self, resume: Optional[dict]) -> None:
        """Train until the plan (or ``max_steps``) is done, checkpointing as the options say."""
        if resume:
            self.restore(resume)
        self.write_info()
        with open_append(self.run_dir / "metrics.jsonl") as self.metrics:
            if not resume:
                self.checkpoint()
            elif not self.running():  # a finished run: its final record and head are already written
                print(json.dumps(dict(done=True, steps=self.step, note="the checkpoint is already at the end")),
                      flush=True)
                return
            self.run_epochs()
            self.checkpoint(final=True)
        print(json.dumps(dict(done=True, steps=self.step, wall_s=round(time.time() - self.t_start, 1))), flush=True)

    def run_epochs(self) -> None:
        a, lengths = self.args, self.data.lengths
        last_ckpt, step0 = time.time(), self.step
        fit = BudgetFit(a.minutes, self.t_start) if a.minutes and not self.plan.get("fitted") else None
        bar = tqdm(total=self.plan["total"], initial=self.step, desc="train", mininterval=30)
        while self.running():
            batches = epoch_batches(lengths, self.data.train_ids, a.max_tokens, a.seed, self.epoch)
            while self.pos < len(batches) and self.running():
                loss, acc = self.train_step(batches[self.pos])
                bar.update(1)
                if fit and fit.observe(self.step - step0, self.step, self.plan):
                    bar.total, fit = self.plan["total"], None
                bar.set_postfix(loss=f"{loss:.3f}", acc=" ".join(f"{x:.2f}" for x in acc),
                                tok_s=f"{self.tokens_seen / (time.time() - self.t_start):.0f}")
                if self.step % a.eval_every == 0 or time.time() - last_ckpt > 60 * a.ckpt_minutes:
                    self.checkpoint()
                    last_ckpt = time.time()
            if self.pos >= len(batches):
                self.epoch, self.pos = self.epoch + 1, 0

