"""Train an EAGLE-3 draft head for SmolLM2-135M-Instruct on data from gen_draft_data.py.

Deterministic given --seed (CPU). Writes the head (fp16 safetensors + config.json)
to --out after every evaluation and a JSON log of held-out accuracy per unrolled
step to --run-dir/metrics.jsonl. Usage::

    python scripts/train_draft.py --data .cache/draft_data --run-dir .cache/train_draft \\
        --out rheo/assets/eagle3_smollm2_135m --epochs 3
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from rheo.models.eagle3_head import Eagle3Config, Eagle3Head, save_head
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.training.eagle3_train import choose_draft_vocab, make_batch, soft_targets, ttt_forward


def load_shards(pattern: str):
    out = []
    for path in sorted(glob.glob(pattern)):
        out.extend(torch.load(path))
    return out


def init_head(target, draft_ids: torch.Tensor, from_target: bool) -> Eagle3Head:
    """Head shaped like one target layer; lm_head/norm copied from the target (draft rows)."""
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
        head.lm_head.weight.copy_(target.lm_head.weight[draft_ids])
        head.norm.weight.copy_(target.model.norm.weight)
        if from_target:  # start as target layer L-3 reading its own input; the embedding half at zero
            h = tc.hidden_size
            src = target.model.layers[eagle3_feature_layers(tc.num_hidden_layers)[2]]
            head.fc.weight.zero_()
            head.fc.weight[:, 2 * h :] = torch.eye(h)
            for name in ("q_proj", "k_proj", "v_proj"):
                w = getattr(head.midlayer.self_attn, name).weight
                w.zero_()
                w[:, h:] = getattr(src.self_attn, name).weight
            head.midlayer.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight)
            head.midlayer.mlp.load_state_dict(src.mlp.state_dict())
            head.midlayer.hidden_norm.weight.copy_(src.input_layernorm.weight)
            head.midlayer.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
    return head


def prepare(samples, target, draft_ids):
    w = target.lm_head.weight.detach().float()
    for s in tqdm(samples, desc="soft targets"):
        s["logp"], s["argmax"] = soft_targets(s.pop("final"), w, draft_ids)
    return samples


def batches_by_tokens(samples, max_tokens: int, gen: torch.Generator):
    order = torch.randperm(len(samples), generator=gen).tolist()
    out, cur, width = [], [], 0
    for i in order:
        n = len(samples[i]["input_ids"])
        if cur and max(width, n) * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, width = [], 0
        cur.append(samples[i])
        width = max(width, n)
    if cur:
        out.append(cur)
    return out


@torch.no_grad()
def evaluate(head, embed, held, steps, in_vocab, max_tokens, device):
    head.eval()
    tot = torch.zeros(steps, 2)
    for b in batches_by_tokens(held, max_tokens, torch.Generator().manual_seed(0)):
        _, st = ttt_forward(head, {k: v.to(device) for k, v in make_batch(b, embed).items()}, steps, in_vocab)
        tot += st.float()
    head.train()
    return (tot[:, 0] / tot[:, 1].clamp_min(1)).tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=".cache/draft_data")
    ap.add_argument("--run-dir", default=".cache/train_draft")
    ap.add_argument("--out", default="rheo/assets/eagle3_smollm2_135m")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--steps-unrolled", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--step-decay", type=float, default=0.8)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-init-from-target", action="store_true")
    ap.add_argument("--resume", default="", help="head dir (config.json + model.safetensors) to continue from")
    ap.add_argument("--train-lm-head", action="store_true")
    ap.add_argument("--max-train-samples", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop early (after a checkpoint) past this wall time")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU path is the tested one
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    target, _ = load_smollm2()
    train = load_shards(f"{args.data}/train_*.pt")
    if args.max_train_samples:
        train = train[: args.max_train_samples]
    held = load_shards(f"{args.data}/heldout_*.pt")
    if args.resume:  # same draft vocabulary and weights as the saved head (optimizer restarts)
        from rheo.models.eagle3 import load_eagle3_drafter

        head = load_eagle3_drafter(args.resume, target, dtype=torch.float32).head
        draft_ids = head.draft_to_target().cpu()
    else:
        draft_ids = choose_draft_vocab(train, target.config.vocab_size, args.draft_vocab)
        head = init_head(target, draft_ids, not args.no_init_from_target)
    head = head.to(device).train()
    train, held = prepare(train, target, draft_ids), prepare(held, target, draft_ids)
    embed = target.model.embed_tokens
    in_vocab = head.t2d.clone()

    def to_dev(batch):
        return {k: v.to(device) for k, v in batch.items()}

    head.lm_head.weight.requires_grad_(args.train_lm_head)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    n_per_epoch = len(batches_by_tokens(train, args.max_tokens, torch.Generator().manual_seed(0)))
    total = n_per_epoch * args.epochs
    plan = {"total": total}  # with --max-minutes, shortened once the speed is measured (see below)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / args.warmup)
        * 0.5 * (1 + math.cos(math.pi * min(s, plan["total"]) / plan["total"]))
    )
    n_tok = sum(len(s["input_ids"]) for s in train)
    info = dict(train_samples=len(train), train_tokens=n_tok, held_out_samples=len(held), total_steps=total,
                args=vars(args), device=str(device), threads=args.threads)
    print(json.dumps(info), flush=True)
    metrics = open(run_dir / "metrics.jsonl", "a")

    def checkpoint(step, epoch):
        acc = evaluate(head, embed, held, args.steps_unrolled, in_vocab, args.max_tokens, device)
        rec = dict(step=step, epoch=epoch, wall_s=round(time.time() - t_start, 1), held_out_top1=acc)
        print(json.dumps(rec), flush=True)
        metrics.write(json.dumps(rec) + "\n")
        metrics.flush()
        save_head(head, run_dir / f"ckpt_{step:06d}")
        save_head(head, args.out)
        (run_dir / "last.json").write_text(json.dumps({**info, **rec}, indent=1))

    checkpoint(0, 0)
    step_w = torch.tensor([args.step_decay**k for k in range(args.steps_unrolled)])
    step = 0
    for epoch in range(1, args.epochs + 1):
        pbar = tqdm(batches_by_tokens(train, args.max_tokens, gen), desc=f"epoch {epoch}")
        for b in pbar:
            losses, st = ttt_forward(head, to_dev(make_batch(b, embed)), args.steps_unrolled, in_vocab)
            loss = (losses * step_w).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            sched.step()
            step += 1
            if args.max_minutes and step == 10:  # fit the cosine schedule into the time budget
                t10 = time.time()
            if args.max_minutes and step == 30:
                per_step = (time.time() - t10) / 20 * 1.1  # + evaluation overhead
                fit = step + int((60 * args.max_minutes - (time.time() - t_start)) / per_step)
                plan["total"] = max(step + 1, min(total, fit))
                print(json.dumps(dict(planned_steps=plan["total"], sec_per_step=round(per_step, 2))), flush=True)
            acc = (st[:, 0].float() / st[:, 1].clamp_min(1)).tolist()
            pbar.set_postfix(loss=f"{loss.item():.3f}", acc=" ".join(f"{a:.2f}" for a in acc))
            if step % args.eval_every == 0:
                checkpoint(step, epoch)
            if step >= plan["total"] or (args.max_minutes and time.time() - t_start > 60 * args.max_minutes):
                break
        checkpoint(step, epoch)
        if step >= plan["total"] or (args.max_minutes and time.time() - t_start > 60 * args.max_minutes):
            print(json.dumps(dict(stopped=True, step=step, planned=plan["total"])), flush=True)
            break
    print(json.dumps(dict(done=True, steps=step, wall_s=round(time.time() - t_start, 1))), flush=True)


if __name__ == "__main__":
    main()
