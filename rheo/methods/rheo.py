"""RheoSampling: m leads + one sample from the residual (ranked by a proxy) + fills;
stochastic-first verification (rheo.candidates, rheo.verify)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rheo.candidates import Candidates, draws_probe, select_rheo
from rheo.expected import dynamic_path_probs
from rheo.methods.registry import Method, register
from rheo.methods.topk import DYNAMIC_FIELDS, OPTION_FIELDS, check_sparse_top, option_label, top_slots_mass
from rheo.ot import rheo_sets
from rheo.presets import PRESETS
from rheo.probs import DraftDist, clamp_probability, draft_distribution, tempered
from rheo.random import RandomSource
from rheo.tree import build_dynamic_tree
from rheo.verify import verify_dynamic

if TYPE_CHECKING:  # the configuration validates itself against the registry
    from rheo.spec import Spec


def rheo_candidates(dist: DraftDist, cfg: Spec, rng: RandomSource, layer: int) -> Candidates:
    """dist: [f, S] -> leads, one sample per node (one categorical draw of [f] rows), fills."""
    return select_rheo(dist, cfg.k, cfg.m, cfg.temperature, rng, cfg.proxy, cfg.proxy_value, cfg.proxy_eps,
                       cfg.rank, cfg.probe_min, defer=True)


def _validate(cfg: Spec) -> None:
    if not 0 <= cfg.m <= cfg.k - 1:
        raise ValueError(f"m must be in [0, k-1] = [0, {cfg.k - 1}], got m={cfg.m}")
    check_sparse_top(cfg, cfg.k, "k")
    if cfg.m == 0 and cfg.proxy == "tempered":
        raise ValueError("proxy='tempered' ranks the sample below the m leads; with m=0 there is no lead and it is "
                         "the paper's m=0 proxy: give proxy='rheo' for Rheo m=0, or m >= 1 (rheo_auto is m=1)")
    if cfg.m == 0 and cfg.probe_min > 0:
        raise ValueError(f"probe_min={cfg.probe_min:g} compares a node's non-lead draft mass with a floor; with m=0 the "
                         "whole draft is non-lead (mass 1) and every node draws: give probe_min=0 with m=0")
    if getattr(cfg, "adapt", "none") != "none" and cfg.m == 0:
        raise ValueError(f"adapt={cfg.adapt!r} chooses between Rheo m=0 and the configured m per cycle: give m >= 1 "
                         "(rheo_adaptive and rheo_level use m=1), or adapt='none' for Rheo m=0 at every cycle")


#: the values at which a Rheo label leaves a field out (SpecConfig's defaults: tests/test_method_names.py)
LABEL_DEFAULTS = {"verify_order": "stochastic_first", "proxy": "rheo", "adapt": "none"}


def rule_label(m: int, verify_order: str = "stochastic_first", proxy: str = "rheo", adapt=None) -> str:
    """'rheo m=1', 'rheo m=1 proxy=tempered adapt=root': the rule part of a Rheo label, preset or not."""
    label = f"rheo m={int(m)}"
    if verify_order != "stochastic_first":
        label += f" {verify_order}"
    if proxy != "rheo":
        label += f" proxy={proxy}"
    if adapt is not None and adapt == adapt and adapt != "none":  # None / NaN: a row keyed before it existed
        label += f" adapt={adapt}"
    return label


def preset_rule(name: str) -> str:
    """The rule label of the Rheo preset ``name`` (rheo.presets): 'rheo_auto' -> 'rheo m=1 proxy=tempered'."""
    fields = PRESETS[name]
    return rule_label(**{**LABEL_DEFAULTS, **{f: v for f, v in fields.items() if f != "method"}})


#: rule label -> the preset it is: a row of a preset's settings is labelled by the preset's name (a preset
#: that fixes a field outside the rule, e.g. rank, is not named here: its rows keep the rule label)
PRESET_RULES = {preset_rule(name): name for name, fields in PRESETS.items()
                if fields["method"] == "rheo" and set(fields) <= {"method", "m", *LABEL_DEFAULTS}}


def named(label: str) -> str:
    """A Rheo label with its rule part named by the preset it is: 'rheo m=1 proxy=tempered probe_min=0.1'
    -> 'rheo_auto probe_min=0.1'; other labels as they are. Labels stored before presets were named
    (same-state archives) read the same through it."""
    for rule in sorted(PRESET_RULES, key=len, reverse=True):
        rest = label[len(rule):]
        if label.startswith(rule) and all(token.split("=")[0] in OPTION_FIELDS for token in rest.split()):
            return PRESET_RULES[rule] + rest
    return label


def rheo_label(row) -> str:
    """'rheo m=1'; the lossy ablations say so; a preset's settings are its name ('rheo_auto')."""
    rule = rule_label(row.m, row.verify_order, row.proxy, getattr(row, "adapt", None))
    return named(rule + option_label(row))


def rheo_acceptance(target_probs: torch.Tensor, draft_logits: torch.Tensor, cfg: Spec) -> float:
    """alpha_rheo = sum_y min(p, q~) + (1/beta) sum_y max(q~(y) - p(y), 0) * sum_{x in L u F_y} max(p(x) - q~(x), 0)
    with L the m leads, F_y the fills when the sample is y, beta = sum_y max(p(y) - q~(y), 0).
    target_probs: [V] (tempered), draft_logits: [V]."""
    p = target_probs.to(torch.float64)
    dist = draft_distribution(draft_logits.to(torch.float64)[None], cfg.sparse_top)
    ids, logits = dist.ids[0], dist.logits[0]  # [S]
    finite = torch.isfinite(logits)  # [S]
    slots, m = min(cfg.k, ids.shape[0]), cfg.m
    if not 0 <= m < slots:
        raise ValueError(f"m must be in [0, {slots - 1}], got {m}")
    if not bool(draws_probe(dist, m, cfg.temperature, cfg.probe_min)[0]):  # a Top-K node
        return top_slots_mass(p, draft_logits, cfg.sparse_top, slots)
    q_t = tempered(logits[m:], cfg.temperature)  # [S-m] residual q~ on the tail slots
    p_tail = p[ids[m:]]  # [S-m]
    lead_mass = float(p[ids[:m]].sum())
    excess = (p_tail - q_t).clamp(min=0) * finite[m:]  # max(p - q~, 0) on drafted-able slots
    beta = float((p - torch.zeros_like(p).scatter_(0, ids[m:], q_t)).clamp(min=0).sum())
    direct = float(torch.minimum(p_tail, q_t).sum())
    if beta <= 0:
        return clamp_probability(direct)
    n_fill = slots - m - 1
    head = excess[: n_fill + 1]  # fills come from the first n_fill+1 tail slots
    fill_mass = torch.full_like(q_t, float(head[:n_fill].sum()))  # sample outside the head
    in_head = torch.arange(q_t.shape[0]) < n_fill + 1
    fill_mass[in_head] = float(head.sum()) - head[in_head[: head.shape[0]]]
    overflow = (q_t - p_tail).clamp(min=0)  # [S-m]
    return clamp_probability(direct + float((overflow * (lead_mass + fill_mass)).sum()) / beta)


register(Method(
    name="rheo", display="Rheo", kind="dynamic", candidates=rheo_candidates, build=build_dynamic_tree,
    verify=verify_dynamic, fields=DYNAMIC_FIELDS + ("m", "verify_order", "proxy", "probe_min", "adapt"), validate=_validate,
    label=rheo_label, rename=named, acceptance=rheo_acceptance, path_probs=dynamic_path_probs, candidate_sets=rheo_sets))
