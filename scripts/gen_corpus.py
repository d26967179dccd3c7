"""Generate the draft-head training corpus: the target answers offline prompts, in batches.

The plan is fixed by the seed (and the installed packages the passages come from):

* pass ``a``: every first-turn prompt of :func:`rheo.training.prompts.build_corpus_prompts`;
  the sampling setting of a prompt is chosen by its hash: greedy (50%), T=0.7 (25%), T=1.0 (25%);
* pass ``f``: second turns (:func:`followup_turns`) on pass-a answers (every second one);
* pass ``b``: every first-turn prompt again, sampled (T=1.0 / 0.7 alternating), for more data.

Each pass is cut into batches of ``--batch`` prompts (blocks of 8 batches sorted by prompt
length, to waste little on padding); batch ``k`` of a pass is done by worker ``k % workers``
and written atomically as one JSON shard, so any number of workers (one torch thread each)
can run side by side, be killed, and resume. Each shard holds its key (rheo.training.shard_keys: the model,
dtype, device kind, seed, batch size, length and the batch's conversations): a rerun skips a shard only
when its key is the one it would write, and generates it again otherwise. Generation stops once the shards hold
``--target-tokens`` response tokens. ``scripts/pack_corpus.py`` packs the shards into the
committed ``data/draft_corpus/``.

    python scripts/gen_corpus.py --worker 0 --workers 2 &  python scripts/gen_corpus.py --worker 1 --workers 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from tqdm import tqdm
from transformers import LogitsProcessorList

from rheo.cli import ArgumentParser, positive_int, run_main
from rheo.io import atomic_write, atomic_write_text, make_dir
from rheo.models.hf_target import eagle3_feature_layers
from rheo.models.smollm2 import load_smollm2
from rheo.paths import folder
from rheo.training.corpus import read_shard
from rheo.training.prompts import build_corpus_prompts, followup_turns, split_prompts
from rheo.training.shard_keys import counted, features_key, run_settings, shard_key, stored_key

SETTINGS = (0.0, 0.0, 0.7, 1.0)  # chosen by prompt hash in pass a


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def plan_batches(convs: List[Dict], batch: int) -> List[List[Dict]]:
    """Blocks of 8 batches; inside a block, conversations sorted by prompt length."""
    out = []
    for a in range(0, len(convs), 8 * batch):
        block = sorted(convs[a : a + 8 * batch], key=lambda c: c["n_chars"])
        out += [block[i : i + batch] for i in range(0, len(block), batch)]
    return out


def response_tokens(shard_dir: Path, run: dict, expected: Dict[str, dict] | None = None) -> int:
    """Response tokens of the shards in ``shard_dir`` that count for a run of the settings ``run``
    (rheo.training.shard_keys.counted; a shard being written by another worker does not)."""
    return sum(len(s["response"]) for f in counted(shard_dir.glob("*.json"), run, expected)
               for s in read_shard(f)["samples"])


def left_padded(ids: List[List[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists as one left-padded batch: (input_ids [B, W] long, attention_mask [B, W])."""
    width = max(len(x) for x in ids)
    inp = torch.full((len(ids), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(inp)
    for i, x in enumerate(ids):
        inp[i, width - len(x) :] = torch.tensor(x)
        attn[i, width - len(x) :] = 1
    return inp, attn


def sampling_kwargs(temperature: float) -> dict:
    """``generate`` options: greedy at T=0, else plain sampling at T (no top-k / top-p truncation)."""
    if temperature == 0:
        return dict(do_sample=False)
    return dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)


def generate_batch(model, tok, convs: List[Dict], max_new: int, seed: int, layers=None):
    """convs: dicts with 'messages', 'temperature' (one value per batch).

    Returns (samples, features). With ``layers`` (the EAGLE-3 feature layers), the hidden
    states that generation computes anyway are kept, so training needs no second forward:
    features = dict(feats [N, 3H] fp16, final [N, H] fp16, argmax [N] int32) over the batch's
    sequences concatenated (prompt + response, in sample order). The last token of a sequence
    is never fed back, so its row is zero; ``argmax`` is filled from the last prompt position
    on (-1 before: training never reads those).
    """
    ids = [tok.apply_chat_template(c["messages"], tokenize=True, add_generation_prompt=True) for c in convs]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    inp, attn = left_padded(ids, tok.pad_token_id)
    width = inp.shape[1]
    temp = convs[0]["temperature"]
    torch.manual_seed(seed)
    kw = sampling_kwargs(temp)
    capture = layers is not None
    argmaxes: List[torch.Tensor] = []  # per step [B]: argmax of the logits (temperature keeps it)

    def record_argmax(input_ids, scores):
        argmaxes.append(scores.argmax(-1))
        return scores

    dev = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(input_ids=inp.to(dev), attention_mask=attn.to(dev), max_new_tokens=max_new, return_dict_in_generate=True,
                             output_hidden_states=capture, logits_processor=LogitsProcessorList([record_argmax]),
                             cache_implementation="static", **kw)  # 1.7x faster than the growing cache on CPU
    seqs = out.sequences.cpu()  # [B, W + G]
    eos = tok.eos_token_id
    samples = []
    for i, c in enumerate(convs):
        resp = seqs[i, width:].tolist()
        if eos in resp:
            resp = resp[: resp.index(eos) + 1]
        else:
            while resp and resp[-1] == tok.pad_token_id:  # pad == eos for SmolLM2; kept for other models
                resp.pop()
        samples.append(dict(prompt=ids[i], response=resp, kind=c["kind"], temperature=temp,
                            split=c["split"], key=c["key"]))
    if not capture:
        return samples, None
    return samples, kept_features(out.hidden_states, torch.stack(argmaxes, dim=1), samples, width, layers)


def complete_batch(model, tok, convs: List[Dict], max_new: int, seed: int, stop_ids: List[int]) -> List[Dict]:
    """Plain completion (no chat template) of ``conv['text']``, stopping at a newline token."""
    ids = [tok(c["text"])["input_ids"] for c in convs]
    inp, attn = left_padded(ids, tok.pad_token_id)
    width = inp.shape[1]
    temp = convs[0]["temperature"]
    torch.manual_seed(seed)
    kw = sampling_kwargs(temp)
    dev = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(input_ids=inp.to(dev), attention_mask=attn.to(dev), max_new_tokens=max_new,
                             eos_token_id=stop_ids, pad_token_id=tok.pad_token_id, cache_implementation="static", **kw)
    texts = tok.batch_decode(out[:, width:].cpu(), skip_special_tokens=True)
    return [dict(key=c["key"], text=t, temperature=temp, **c.get("meta", {})) for c, t in zip(convs, texts)]


def kept_features(hs, argmax: torch.Tensor, samples: List[Dict], width: int, layers) -> Dict[str, np.ndarray]:
    """The training features of ``samples`` from the hidden states generation computed.

    hs: steps x (L+1) x [B, W or 1, H] (step t > 0 feeds response token t-1); argmax: [B, S]
    (step t predicts response token t); width: W, the left-padded prompt width. Returns
    feats [N, 3H] fp16, final [N, H] fp16, argmax [N] int32 over the samples concatenated.
    """
    def stack(layer_idx):  # [B, W + steps - 1, H]
        return torch.cat([hs[0][layer_idx]] + [h[layer_idx] for h in hs[1:]], dim=1)

    feats = torch.cat([stack(i) for i in layers], dim=-1).to(torch.float16).cpu()  # [B, W + S - 1, 3H]
    final = stack(-1).to(torch.float16).cpu()
    argmax = argmax.to(torch.int32).cpu()
    f_rows, fin_rows, am_rows = [], [], []
    for i, smp in enumerate(samples):
        p, r = len(smp["prompt"]), len(smp["response"])
        n = p + r
        cols = slice(width - p, width + r - 1)  # fed positions: prompt, then response[:-1]
        f = torch.zeros(n, feats.shape[-1], dtype=torch.float16)
        fin = torch.zeros(n, final.shape[-1], dtype=torch.float16)
        am = torch.full((n,), -1, dtype=torch.int32)
        f[: n - 1], fin[: n - 1] = feats[i, cols], final[i, cols]
        am[p - 1 : n - 1] = argmax[i, :r]
        f_rows.append(f)
        fin_rows.append(fin)
        am_rows.append(am)
    return dict(feats=torch.cat(f_rows).numpy(), final=torch.cat(fin_rows).numpy(),
                argmax=torch.cat(am_rows).numpy())


def first_turns(seed: int) -> List[Dict]:
    prompts = build_corpus_prompts(seed)
    train, held = split_prompts(prompts)
    convs = []
    for split, group in (("train", train), ("heldout", held)):
        for p in group:
            convs.append(dict(messages=[{"role": "user", "content": p.text}], kind=p.kind, split=split,
                              key=p.text, n_chars=len(p.text), h=_hash(p.text)))
    convs.sort(key=lambda c: c["h"])  # a fixed shuffle independent of the prompt builder's order
    return convs


def pass_a(seed: int) -> List[Dict]:
    return [dict(c, temperature=SETTINGS[c["h"] % 4]) for c in first_turns(seed)]


def pass_b(seed: int) -> List[Dict]:
    return [dict(c, temperature=(1.0, 0.7)[c["h"] % 2], key=c["key"] + "#b") for c in first_turns(seed)]


def pass_f(shard_dir: Path, tok, seed: int) -> List[Dict]:
    """Second turns on every second pass-a answer (ordered by shard name, so deterministic)."""
    firsts = []
    for f in sorted(shard_dir.glob("a_*.json")):
        firsts += read_shard(f)["samples"]
    firsts = [s for s in firsts if s["response"] and s["response"][-1] == tok.eos_token_id][::2]
    follow = followup_turns(seed, len(firsts))
    convs = []
    for s, u in zip(firsts, follow):
        answer = tok.decode(s["response"][:-1])
        msgs = [{"role": "user", "content": s["key"]}, {"role": "assistant", "content": answer},
                {"role": "user", "content": u}]
        convs.append(dict(messages=msgs, kind="followup", split=s["split"], key=s["key"] + "#f", n_chars=len(answer),
                          temperature=s["temperature"], h=_hash(s["key"] + u)))
    # one setting per batch: group by temperature, then the usual blocks
    convs.sort(key=lambda c: (c["temperature"], c["h"]))
    return convs


def run_pass(name: str, convs: List[Dict], model, tok, args, shard_dir: Path) -> bool:
    """Returns False once the token target is reached."""
    layers = eagle3_feature_layers(model.config.num_hidden_layers) if args.features else None
    batches = batches_by_setting(convs, args.batch)
    mine = [k for k in range(len(batches)) if k % args.workers == args.worker]
    bar = tqdm(mine, desc=f"pass {name} worker {args.worker}", mininterval=30)
    t0, done = time.time(), 0
    run = run_settings(args)
    keys = {f"{name}_{k:05d}.json": shard_key(run, name, k, b) for k, b in enumerate(batches)}
    for k in bar:
        path = shard_dir / f"{name}_{k:05d}.json"
        key = keys[path.name]
        if stored_key(path) == key:  # done by this run or an earlier one of the same key; else (re)generated
            continue
        if response_tokens(shard_dir, run, keys) >= args.target_tokens:
            return False
        t_batch = time.time()
        samples, feats = generate_batch(model, tok, batches[k], args.max_new_tokens,
                                        args.seed * 100003 + _hash(name) + k, layers)
        if feats is not None:  # written first: the JSON's presence marks the shard complete
            feats["key"] = np.array(features_key(samples, args.dtype, layers))
            atomic_write(path.with_name(f"{path.stem}.feats.npz"), lambda f: np.savez(f, **feats))
        record = dict(pass_=name, batch=k, seconds=round(time.time() - t_batch, 2), worker=args.worker,
                      workers=args.workers, threads=args.threads, dtype=args.dtype, device=args.device, key=key,
                      samples=samples)
        atomic_write_text(path, json.dumps(record))
        done += sum(len(s["response"]) for s in samples)
        bar.set_postfix(tok_s=f"{done / (time.time() - t0):.0f}")
    return True


def main() -> None:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(folder("cache", "draft_corpus", "shards")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=positive_int, default=64)
    ap.add_argument("--max-new-tokens", type=positive_int, default=256)
    ap.add_argument("--target-tokens", type=positive_int, default=1_050_000)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=positive_int, default=1)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i] (a GPU generates the corpus in minutes)")
    ap.add_argument("--passes", default="a,f,b")
    ap.add_argument("--no-features", dest="features", action="store_false",
                    help="do not keep the target features computed during generation")
    args = ap.parse_args()
    if not 0 <= args.worker < args.workers:
        ap.error(f"--worker must be in [0, {args.workers - 1}]")
    torch.set_num_threads(args.threads)
    shard_dir = make_dir(Path(args.out))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available here")
    model, tok = load_smollm2(dtype=getattr(torch, args.dtype))
    model = model.to(args.device)
    for name in args.passes.split(","):
        if name == "f":
            # every worker needs all of pass a: wait for the other workers' shards
            n_a = len(batches_by_setting(pass_a(args.seed), args.batch))
            while sum((stored_key(p) or {}).get("run") == run_settings(args) for p in shard_dir.glob("a_*.json")) < n_a:
                time.sleep(20)
            convs = pass_f(shard_dir, tok, args.seed)
        else:
            convs = pass_a(args.seed) if name == "a" else pass_b(args.seed)
        if not run_pass(name, convs, model, tok, args, shard_dir):
            break
    print(f"worker {args.worker}: {response_tokens(shard_dir, run_settings(args))} response tokens in {shard_dir}")


def batches_by_setting(convs: List[Dict], batch: int) -> List[List[Dict]]:
    """One sampling setting per batch: group by temperature, then :func:`plan_batches`."""
    temps = sorted({c["temperature"] for c in convs})
    return [b for t in temps for b in plan_batches([c for c in convs if c["temperature"] == t], batch)]


if __name__ == "__main__":
    run_main(main)
