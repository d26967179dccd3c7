"""Toy model pairs over tiny vocabularies (float64 tables, deterministic in the prefix)."""

from __future__ import annotations

import torch

from rheo.models.toy import PrefixLM


def prefix_seed(prefix: tuple[int, ...], salt: int) -> int:
    s = salt
    for t in prefix:
        s = (s * 1_000_003 + t + 1) % (2**31 - 1)
    return s


def random_logits_fn(vocab: int, salt: int, scale: float = 1.5):
    def fn(prefix: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator().manual_seed(prefix_seed(prefix, salt))
        return torch.randn(vocab, generator=g, dtype=torch.float64) * scale
    return fn


def toy_pair(vocab: int, salt: int = 0, scale: float = 1.5):
    """(target, drafter, target_logits_fn): independent random tables per prefix."""
    t_fn = random_logits_fn(vocab, 2 * salt + 1, scale)
    d_fn = random_logits_fn(vocab, 2 * salt + 2, scale)
    return PrefixLM(t_fn, vocab), PrefixLM(d_fn, vocab), t_fn


def constant_pair(target_logits: torch.Tensor, draft_logits: torch.Tensor):
    """Context-free toy models: the same distribution after every prefix."""
    v = target_logits.shape[0]
    return PrefixLM(lambda p: target_logits, v), PrefixLM(lambda p: draft_logits, v)


def chi_square_pvalue(counts: dict, probs: dict, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson chi-square of observed counts vs probabilities; small cells pooled.
    Returns (p-value, degrees of freedom)."""
    n = sum(counts.values())
    keys = sorted(set(probs) | set(counts), key=lambda k: -probs.get(k, 0.0))
    cells, pool_o, pool_e = [], 0.0, 0.0
    for key in keys:
        e, o = n * probs.get(key, 0.0), counts.get(key, 0)
        if e >= min_expected:
            cells.append((o, e))
        else:
            pool_o, pool_e = pool_o + o, pool_e + e
    if pool_e > 0 or pool_o > 0:
        if pool_e == 0:
            return 0.0, len(cells)  # mass where the target has none
        cells.append((pool_o, pool_e))
    stat = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    p = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                torch.tensor(stat / 2, dtype=torch.float64))
    return float(p), dof


NEAR_TIE = 1e-4  # top-2 logit gap below which float32 kernels of another platform may flip an argmax


@torch.no_grad()
def assert_greedy_match(got: list[int], want: list[int], hf_model, prompt: list[int]) -> bool:
    """Greedy speculative output vs the model's own greedy decode (``want``), token for token.

    The two run different kernels (a tree forward vs one token at a time), whose float32
    rounding differs by ~1e-6 and by platform. So a first difference is accepted only where
    the model is at a near tie: its two best logits there within NEAR_TIE, and ``got`` picked
    one of them (after it the sequences legitimately part). Returns True when identical.
    """
    if got == want:
        return True
    i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    assert i < min(len(got), len(want)), f"lengths differ: {len(got)} vs {len(want)} tokens"
    logits = hf_model(input_ids=torch.tensor([list(prompt) + want[:i]])).logits[0, -1].float()
    top = logits.topk(2)
    gap = float(top.values[0] - top.values[1])
    assert gap < NEAR_TIE and got[i] in top.indices.tolist(), (
        f"greedy outputs differ at token {i} ({got[i]} vs {want[i]}) where the model is not at a near tie "
        f"(top-2 logit gap {gap:.3g} >= {NEAR_TIE})")
    return False


def root_to_leaf_paths(parents: torch.Tensor) -> list[list[int]]:
    """parents: [n] -> every root-to-leaf path as node indices (root first)."""
    par = parents.tolist()
    has_child = {p for p in par if p >= 0}
    paths = []
    for leaf in range(len(par)):
        if leaf in has_child:
            continue
        path = [leaf]
        while par[path[-1]] >= 0:
            path.append(par[path[-1]])
        paths.append(path[::-1])
    return paths


def draft_fn(lm, prompt):
    """A drafter session after ``prompt``: its ``draft`` callable, as build_tree takes it."""
    sess = lm.new_session()
    sess.prefill(prompt, None)
    return sess.draft


def assert_verify_matches_reference(cfg, reference_verify, vocab: int, trees: int = 12) -> None:
    """On up to ``trees`` enumerated random trees of ``cfg`` over a toy pair, verify_tree and
    ``reference_verify`` give the same output distribution to float64 precision."""
    from rheo.exact import enumerate_outcomes, enumerate_runs
    from rheo.methods import build_tree, verify_tree

    target, drafter, _ = toy_pair(vocab, salt=8)
    t_sess = target.new_session()
    t_sess.prefill([0])
    checked = 0
    for built, _ in enumerate_runs(lambda rng: build_tree(draft_fn(drafter, [0, 1]), 1, cfg, rng)):
        logits = t_sess.score_tree(built.tree).logits
        fast = enumerate_outcomes(lambda rng: tuple(verify_tree(built, logits, cfg, rng).tokens))
        slow = enumerate_outcomes(lambda rng: tuple(reference_verify(built, logits, cfg, rng).tokens))
        assert set(fast) | set(slow)
        for key in set(fast) | set(slow):
            assert abs(fast.get(key, 0.0) - slow.get(key, 0.0)) < 1e-12
        checked += 1
        if checked == trees:
            break
    assert checked >= 1
