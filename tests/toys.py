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
