"""Train the EAGLE-3 draft head of SmolLM2-135M-Instruct on the committed corpus.

Pipeline (each stage resumable; nothing here reads the benchmarks):

1. the corpus: ``data/draft_corpus/`` (token ids; ``scripts/gen_corpus.py`` + ``pack_corpus.py``);
2. target features (``rheo.training.features``), cached under ``--features`` (outside git);
3. the draft vocabulary: the ``--draft-vocab`` most frequent response tokens of the training
   split; its coverage of the target's argmax on held-out responses is printed;
4. training: EAGLE-3 training-time test unrolled ``--steps-unrolled`` steps, loss against the
   target's own next-token distribution over the draft vocabulary, AdamW + cosine schedule
   planned over ``--epochs`` (fractional allowed). A full checkpoint (head, optimiser,
   scheduler, data position) is written every ``--ckpt-minutes``; ``--resume`` continues
   bit-exactly in data order. Held-out top-1 per unrolled step vs tokens seen is logged to
   ``<run-dir>/metrics.jsonl``; the head is exported (fp16, official layout) to ``--out``.

    python scripts/train_draft.py --run-dir .cache/train_head --out .cache/head_new --epochs 1

``--device cuda`` runs feature extraction and training on a GPU (the same code: tensors are
built on the host and moved; bf16 autocast on either device). ``--resume`` is bit-exact on
CPU; on CUDA it continues from the same data position, with CUDA's own kernel nondeterminism.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rheo.io import atomic_write, remove_stale_tmp
from rheo.models.eagle3 import Eagle3LoadError, load_eagle3_drafter
from rheo.models.eagle3_head import Eagle3Config, Eagle3Head, dequantize_int8, save_head
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.models.weights import CorruptWeightsError
from rheo.training.corpus import DEFAULT_DIR, load_corpus, sha256
from rheo.training.eagle3_train import batch_from_sequences, ttt_forward
from rheo.training.features import FeatureCache, build_features, import_shard_features, length_batches
from rheo.cli import (ArgumentParser, non_negative_float, non_negative_int, one_line, positive_float, positive_int,
                      run_main)


def draft_vocab(corpus, train_ids: np.ndarray, size: int) -> torch.Tensor:
    """[size] long, ascending: most frequent training-response tokens (ties: lower id)."""
    counts = np.zeros(2**16, dtype=np.int64)
    for s in train_ids:
        seq = corpus.sequence(s)
        np.add.at(counts, seq[corpus.resp_start[s]:].astype(np.int64), 1)
    ranked = np.lexsort((np.arange(len(counts)), -counts))[:size]
    return torch.from_numpy(np.sort(ranked)).long()


def coverage(cache: FeatureCache, held: np.ndarray, in_vocab: torch.Tensor) -> float:
    """Share of held-out response positions whose target argmax is in the draft vocabulary."""
    hits = total = 0
    for s in held:
        a, r, b = int(cache.corpus.offsets[s]), int(cache.corpus.resp_start[s]), int(cache.corpus.offsets[s + 1])
        am = torch.from_numpy(np.asarray(cache.argmax[a + r - 1 : b - 1]).astype(np.int64))
        hits += int(in_vocab[am].sum())
        total += len(am)
    return hits / max(total, 1)


def init_head(target, draft_ids: torch.Tensor, warm_start: str, warm_output: bool = False) -> Eagle3Head:
    """Head shaped like one target layer, on the host; lm_head/norm = the target's (draft rows).

    draft_ids: [Vd] long on the host; ``target`` may sit on any device.

    ``warm_start``: a head dir whose fc / midlayer weights are copied (its draft vocabulary
    may differ: lm_head rows come from the target). ``warm_output``: also copy its lm_head and
    norm (a head trained with ``--train-lm-head``); its draft vocabulary must then be the same."""
    tc = target.config
    cfg = Eagle3Config(
        hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, intermediate_size=tc.intermediate_size,
        vocab_size=tc.vocab_size, draft_vocab_size=len(draft_ids), target_hidden_size=tc.hidden_size,
        head_dim=getattr(tc, "head_dim", None), rms_norm_eps=tc.rms_norm_eps,
        rope_theta=tc.rope_parameters.get("rope_theta", 10000.0), max_position_embeddings=tc.max_position_embeddings,
    )
    head = Eagle3Head(cfg)
    with torch.no_grad():
        head.d2t.copy_(draft_ids - torch.arange(len(draft_ids)))
        head.t2d.zero_()
        head.t2d[draft_ids] = True
        head.lm_head.weight.copy_(target.lm_head.weight[draft_ids.to(target.lm_head.weight.device)])
        head.norm.weight.copy_(target.model.norm.weight)
        if warm_start:
            from safetensors.torch import load_file

            state = dequantize_int8(load_file(str(Path(warm_start) / "model.safetensors")))
            keep = {k: v.float() for k, v in state.items() if k.startswith(("fc.", "midlayer."))}
            if warm_output:
                if "d2t" not in state or not torch.equal(state["d2t"].long(), head.d2t.long()):
                    raise ValueError(f"warm start {warm_start}: --train-lm-head continues a head with the same "
                                     "draft vocabulary; this one's differs (drop --train-lm-head or the warm start)")
                keep.update({k: state[k].float() for k in ("lm_head.weight", "norm.weight")})
            missing = head.load_state_dict(keep, strict=False)
            if missing.unexpected_keys:
                raise ValueError(f"warm start {warm_start}: unexpected keys {missing.unexpected_keys}")
    return head


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


def saved_head(head_dir: str, target, device) -> Eagle3Head:
    """A saved head (official layout) for ``target``, fp32 on ``device``, via the project's loader."""
    return load_eagle3_drafter(head_dir, target, device=device, dtype=torch.float32).head


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


def save_state(path: Path, **state) -> None:
    atomic_write(path, lambda f: torch.save(state, f))


def load_state(path: Path, device) -> dict:
    """A checkpoint of :func:`save_state`, read with ``weights_only=True``: tensors, numbers, strings
    and containers only, so a crafted file cannot run code; anything else is refused naming it."""
    try:
        return torch.load(path, weights_only=True, map_location=device)
    except pickle.UnpicklingError as e:
        raise SystemExit(f"--resume: {path} holds objects other than tensors and numbers, so it is not a "
                         f"checkpoint of this script and was not loaded ({one_line(e)[:200]}); delete it "
                         f"or choose another --run-dir") from None
    except (RuntimeError, EOFError, OSError) as e:
        raise SystemExit(f"--resume: {path} is unreadable ({type(e).__name__}: {one_line(e)[:200]}): "
                         f"truncated? Delete it (training restarts) or choose another --run-dir") from None


def check_inputs(args) -> None:
    """Everything that can be checked before the corpus, the model or the features are touched."""
    run_dir, state = Path(args.run_dir), Path(args.run_dir) / "state.pt"
    if args.threads > (os.cpu_count() or 1):
        raise SystemExit(f"--threads {args.threads}: this machine has {os.cpu_count()} cores; choose "
                         f"--threads <= {os.cpu_count()}")
    for flag, head in (("--eval-only", args.eval_only), ("--warm-start", args.warm_start)):
        if head and not ((Path(head) / "config.json").is_file() and (Path(head) / "model.safetensors").is_file()):
            raise SystemExit(f"{flag} {head}: no EAGLE-3 head there (config.json and model.safetensors): "
                             f"give a head folder, e.g. rheo/assets/eagle3_smollm2_135m")
    if args.eval_only or args.features_only:
        return
    if args.resume and not state.is_file():
        raise SystemExit(f"--resume: no checkpoint {state}: check --run-dir, or drop --resume to start afresh")
    if not args.resume and (state.is_file() or (run_dir / "metrics.jsonl").is_file()):
        raise SystemExit(f"--run-dir {run_dir} holds an earlier run (state.pt / metrics.jsonl): pass --resume "
                         f"to continue it, or delete it or choose another --run-dir to start afresh")


def trim_metrics(path: Path, step: int) -> None:
    """Drop records logged after checkpoint ``step`` (a run killed between its log line and its
    checkpoint): the resumed run logs them again, so no step is logged twice."""
    if not path.is_file():
        return
    lines = [x for x in path.read_text().splitlines() if x.strip()]
    keep = [x for x in lines if json.loads(x).get("step", 0) <= step]
    if len(keep) != len(lines):
        atomic_write(path, lambda f: f.write("".join(x + "\n" for x in keep).encode()))


def parse_args(argv=None) -> argparse.Namespace:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_DIR))
    ap.add_argument("--features", default=".cache/draft_features")
    ap.add_argument("--run-dir", default=".cache/train_head")
    ap.add_argument("--out", default=".cache/train_head/head")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-vocab", type=positive_int, default=8192)
    ap.add_argument("--steps-unrolled", type=positive_int, default=3)
    ap.add_argument("--epochs", type=positive_float, default=1.0)
    ap.add_argument("--max-tokens", type=positive_int, default=4096, help="padded tokens per batch")
    ap.add_argument("--lr", type=positive_float, default=5e-4)
    ap.add_argument("--warmup", type=positive_int, default=50)
    ap.add_argument("--step-decay", type=positive_float, default=0.8)
    ap.add_argument("--eval-every", type=positive_int, default=200)
    ap.add_argument("--eval-sequences", type=positive_int, default=120)
    ap.add_argument("--ckpt-minutes", type=positive_float, default=10.0)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]: where features are computed and the head trains")
    ap.add_argument("--warm-start", default="", help="head dir to copy fc/midlayer from")
    ap.add_argument("--train-lm-head", action="store_true",
                    help="train the head's output rows too (they start as the target's draft-vocabulary rows)")
    ap.add_argument("--lm-head-lr-mult", type=positive_float, default=0.1, help="lr of the output rows / --lr")
    ap.add_argument("--resume", action="store_true", help="continue from <run-dir>/state.pt")
    ap.add_argument("--features-only", action="store_true")
    ap.add_argument("--eval-only", default="", metavar="HEAD_DIR",
                    help="only measure this saved head's held-out top-1 on --eval-sequences held-out sequences "
                         "(with its own draft vocabulary), print it as JSON and exit; nothing is trained or written")
    ap.add_argument("--first-sequences", type=non_negative_int, default=0,
                    help="train and evaluate on the corpus's first N sequences only (0 = all)")
    ap.add_argument("--shard-features", default=".cache/draft_corpus/shards",
                    help="generation shards whose kept features are imported instead of recomputed")
    ap.add_argument("--max-steps", type=non_negative_int, default=0, help="stop after this many steps (a smoke test)")
    ap.add_argument("--minutes", type=non_negative_float, default=0.0,
                    help="wall budget: after 25 steps the cosine schedule is shortened to fit it (saved for --resume)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    check_inputs(args)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (torch {torch.__version__})")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for folder in (run_dir, Path(args.out)):  # temporary files of a writer killed mid-checkpoint
        for path in remove_stale_tmp(folder) if folder.is_dir() else []:
            print(f"removed {path}: left by a killed checkpoint", flush=True)
    state_path = run_dir / "state.pt"
    resume = load_state(state_path, device) if args.resume and not (args.eval_only or args.features_only) else None
    if resume:
        trim_metrics(run_dir / "metrics.jsonl", resume["step"])
    t_start = time.time()

    corpus = load_corpus(args.corpus)
    target, _ = load_smollm2()
    meta = dict(corpus_sha256=sha256(Path(args.corpus) / "corpus.npz"), dtype="bfloat16",
                layers=list(eagle3_feature_layers(target.config.num_hidden_layers)))
    cache = FeatureCache(args.features, corpus, target.config.hidden_size, meta, create=True)
    if args.shard_features and Path(args.shard_features).is_dir() and not cache.done.all():
        print(f"imported features of {import_shard_features(cache, args.shard_features)} sequences", flush=True)
    if not cache.done.all():
        build_features(target.to(device), cache)
    target = target.float().to(device)
    if args.features_only:
        return
    first = args.first_sequences or len(corpus)
    held = np.flatnonzero(corpus.held_out[:first])[: args.eval_sequences]
    train_ids = np.flatnonzero(~corpus.held_out[:first])
    lengths = corpus.lengths()

    if args.eval_only:  # a saved head, with its own draft vocabulary, through the project's loader
        try:
            head = saved_head(args.eval_only, target, device)
        except (FileNotFoundError, Eagle3LoadError, CorruptWeightsError) as e:
            raise SystemExit(f"--eval-only: {e}") from e
        draft_ids = head.draft_to_target().cpu()
    else:
        draft_ids = resume["draft_ids"] if resume else draft_vocab(corpus, train_ids, args.draft_vocab)
        draft_ids = draft_ids.cpu()
        head = init_head(target, draft_ids, "" if resume else args.warm_start,
                         warm_output=args.train_lm_head).to(device)  # built on the host
    in_vocab = head.t2d.clone()  # [V] bool, on the device
    cov = coverage(cache, np.flatnonzero(corpus.held_out[:first]), in_vocab.cpu())
    embed = target.model.embed_tokens
    w_draft = target.lm_head.weight.detach()[draft_ids.to(device)].float()  # [Vd, H], on the device
    if args.eval_only:
        acc, tot = evaluate(head, embed, cache, held, args.steps_unrolled, in_vocab, w_draft, args.max_tokens,
                            counts=True)
        se = [math.sqrt(a * (1 - a) / max(n, 1)) for a, n in zip(acc, tot[:, 1].tolist())]
        print(json.dumps(dict(head=args.eval_only, held_out_sequences=len(held), positions=int(tot[0, 1]),
                              held_out_argmax_coverage=round(cov, 4), held_out_top1=[round(a, 4) for a in acc],
                              binomial_se=[round(x, 4) for x in se])), flush=True)
        return
    # the output rows start as the target's; frozen unless --train-lm-head (then at lr x lm_head_lr_mult)
    head.lm_head.weight.requires_grad_(args.train_lm_head)
    body = [p for n, p in head.named_parameters() if p.requires_grad and not n.startswith("lm_head.")]
    params = [p for p in head.parameters() if p.requires_grad]
    groups = [dict(params=body, lr=args.lr)]
    if args.train_lm_head:
        groups.append(dict(params=[head.lm_head.weight], lr=args.lr * args.lm_head_lr_mult))
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    per_epoch = len(epoch_batches(lengths, train_ids, args.max_tokens, args.seed, 0))
    plan = dict(total=max(1, int(per_epoch * args.epochs)))  # --minutes may shorten it once (saved in state)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * min(s, plan["total"]) / plan["total"])))
    step, epoch, pos, tokens_seen = 0, 0, 0, 0
    if resume:
        head.load_state_dict(resume["head"])
        opt.load_state_dict(resume["opt"])
        sched.load_state_dict(resume["sched"])
        step, epoch, pos, tokens_seen = resume["step"], resume["epoch"], resume["pos"], resume["tokens_seen"]
        plan.update(resume["plan"])
        torch.set_rng_state(resume["torch_rng"].cpu())
        if device.type == "cuda" and resume.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(resume["cuda_rng"].cpu(), device)
    info = dict(train_sequences=len(train_ids), train_tokens=int(lengths[train_ids].sum()),
                train_response_tokens=int((lengths - corpus.resp_start)[train_ids].sum()),
                held_out_sequences=len(held), draft_vocab=len(draft_ids), held_out_argmax_coverage=round(cov, 4),
                batches_per_epoch=per_epoch, total_steps=plan["total"], resumed_at=step, args=vars(args))
    print(json.dumps(info), flush=True)
    (run_dir / "info.json").write_text(json.dumps(info, indent=1))
    metrics = open(run_dir / "metrics.jsonl", "a")

    def checkpoint(final: bool = False):
        acc = evaluate(head, embed, cache, held, args.steps_unrolled, in_vocab, w_draft, args.max_tokens)
        rec = dict(step=step, epoch=epoch, tokens_seen=tokens_seen, wall_s=round(time.time() - t_start, 1),
                   held_out_top1=[round(a, 4) for a in acc], final=final)
        print(json.dumps(rec), flush=True)
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()
        save_head(head, args.out)
        save_state(state_path, head=head.state_dict(), opt=opt.state_dict(), sched=sched.state_dict(), step=step,
                   epoch=epoch, pos=pos, tokens_seen=tokens_seen, torch_rng=torch.get_rng_state(), draft_ids=draft_ids,
                   plan=dict(plan), cuda_rng=torch.cuda.get_rng_state(device) if device.type == "cuda" else None)

    if not resume:
        checkpoint()
    step_w = torch.tensor([args.step_decay**k for k in range(args.steps_unrolled)], device=device)
    last_ckpt = time.time()
    bar = tqdm(total=plan["total"], initial=step, desc="train", mininterval=30)
    t_fit, step0 = None, step

    def running() -> bool:
        return step < plan["total"] and not (args.max_steps and step >= args.max_steps)

    if resume and not running():  # a finished run: its final record and head are already written
        print(json.dumps(dict(done=True, steps=step, note="the checkpoint is already at the end")), flush=True)
        return
    while running():
        batches = epoch_batches(lengths, train_ids, args.max_tokens, args.seed, epoch)
        while pos < len(batches) and running():
            b = batches[pos]
            batch = batch_from_sequences([cache.sequence(s) for s in b], embed, w_draft)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                losses, st = ttt_forward(head, batch, args.steps_unrolled, in_vocab)
            loss = (losses.float() * step_w).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            sched.step()
            step, pos = step + 1, pos + 1
            tokens_seen += int(lengths[b].sum())
            acc = (st[:, 0].float() / st[:, 1].clamp_min(1)).tolist()
            bar.update(1)
            if args.minutes and not plan.get("fitted"):  # fit the cosine schedule into the time budget, once
                if step - step0 == 5:
                    t_fit = time.time()
                elif step - step0 == 25:
                    per_step = (time.time() - t_fit) / 20 * 1.05  # + evaluations
                    left = 60 * args.minutes - (time.time() - t_start)
                    plan.update(total=max(step + 1, min(plan["total"], step + int(left / per_step))), fitted=True)
                    bar.total = plan["total"]
                    print(json.dumps(dict(planned_steps=plan["total"], sec_per_step=round(per_step, 2))), flush=True)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=" ".join(f"{a:.2f}" for a in acc),
                            tok_s=f"{tokens_seen / (time.time() - t_start):.0f}")
            if step % args.eval_every == 0 or time.time() - last_ckpt > 60 * args.ckpt_minutes:
                checkpoint()
                last_ckpt = time.time()
        if pos >= len(batches):
            epoch, pos = epoch + 1, 0
    checkpoint(final=True)
    print(json.dumps(dict(done=True, steps=step, wall_s=round(time.time() - t_start, 1))), flush=True)


if __name__ == "__main__":
    run_main(main)
