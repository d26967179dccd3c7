"""EAGLE-3 checkpoints: read a head in the official layout and check it fits a target.

:func:`load_head` reads ``config.json`` and the weights (``model.safetensors``, int8 or not,
or ``pytorch_model.bin``), follows the official EAGLE-3 code on its edge cases and refuses,
with :class:`Eagle3LoadError`, a head that does not fit the target (feature width, id map,
head size, embeddings); :func:`rheo.models.eagle3.load_eagle3_drafter` puts the result
behind the DraftModel protocol.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

import torch

from rheo.models.eagle3_head import Eagle3Config, Eagle3Head, dequantize_int8
from rheo.models.weights import CorruptWeightsError, check_weight_files
from rheo.files import read_bounded, require_regular_file
from rheo.models.config_checks import check_head_config_values
from rheo.paths import REPO_ROOT

log = logging.getLogger(__name__)


CONFIG_BYTES = 1 << 20  # a head config.json is a few hundred bytes


class Eagle3LoadError(ValueError):
    """An EAGLE-3 checkpoint that cannot be used with the given target."""


def head_weights_fix(head_dir: Path) -> str:
    """What to do about an unreadable weights file of the head in ``head_dir``."""
    try:
        rel = head_dir.resolve().relative_to(REPO_ROOT)
    except ValueError:
        return f"re-download (or re-train) the head into {head_dir}, or point head_path at a good copy"
    return f"restore the committed head: `git checkout -- {rel}` (in {REPO_ROOT})"


def _read_state(head_dir: Path) -> dict:
    st, binf = head_dir / "model.safetensors", head_dir / "pytorch_model.bin"
    for path in (st, binf):
        if path.exists():
            require_regular_file(path, "EAGLE-3 head weights", head_weights_fix(head_dir))
    if st.exists():
        from safetensors.torch import load_file

        check_weight_files(head_dir, "EAGLE-3 head", head_weights_fix(head_dir))
        return dequantize_int8(load_file(str(st)))
    if binf.exists():
        try:
            return torch.load(binf, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated zip, garbage, pickle refusing an object
            raise CorruptWeightsError(f"EAGLE-3 head: {binf} is unreadable ({type(e).__name__}: {e}).\n"
                                      f"    fix: {head_weights_fix(head_dir)}") from e
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {head_dir}")


def load_head(head_dir, target_hf_model) -> tuple[Eagle3Head, torch.Tensor]:
    """(head on the CPU in torch's default dtype, token embeddings [t_vocab, H]) of the checkpoint
    in ``head_dir`` for ``target_hf_model``, with the checks and edge cases that
    :func:`rheo.models.eagle3.load_eagle3_drafter` documents."""
    head_dir = Path(head_dir)
    cfg_path = head_dir / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(f"no config.json in {head_dir}")
    try:
        raw = json.loads(read_bounded(cfg_path, CONFIG_BYTES, "EAGLE-3 head config", head_weights_fix(head_dir)))
    except ValueError as e:
        raise Eagle3LoadError(f"{cfg_path} is not valid JSON ({e}): truncated?") from e
    check_head_config_values(raw, str(cfg_path))
    cfg = Eagle3Config.from_dict(raw)
    state = _read_state(head_dir)
    ints = [k for k, t in state.items() if k not in ("d2t", "t2d") and not t.is_floating_point()]
    if ints:
        raise Eagle3LoadError(f"{head_dir}: weights {ints[:3]} are stored as {state[ints[0]].dtype}, not floating "
                              f"point (they would be cast silently): not an EAGLE-3 head; {head_weights_fix(head_dir)}")
    tcfg = target_hf_model.config
    t_hidden, t_vocab = int(tcfg.hidden_size), int(tcfg.vocab_size)
    fc = state.get("fc.weight")
    if fc is None:
        raise Eagle3LoadError(f"{head_dir}: no fc.weight: not an EAGLE-3 head")
    if fc.shape[1] != 3 * t_hidden:
        raise Eagle3LoadError(f"{head_dir}: fc.weight takes {fc.shape[1]} features, the target gives "
                              f"3 * hidden = {3 * t_hidden}")
    _follow_official_head_dim(head_dir, cfg, state)
    declared = raw.get("target_hidden_size")
    cfg.target_hidden_size = t_hidden
    embed = _embeddings(head_dir, cfg, state.pop("embed_tokens.weight", None), declared, target_hf_model, t_vocab)
    _check_vocabulary_maps(head_dir, cfg, state, t_vocab)
    cfg.vocab_size = t_vocab
    head = Eagle3Head(cfg)
    _check_shapes(head_dir, state, head.state_dict())
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as e:  # size mismatches
        raise Eagle3LoadError(f"{head_dir}: checkpoint tensors do not fit its config.json: {e}") from e
    missing = [k for k in missing if not k.startswith("rotary.")]
    if missing or unexpected:
        raise Eagle3LoadError(f"{head_dir}: checkpoint keys do not match the EAGLE-3 layout; "
                              f"missing {missing}, unexpected {unexpected}")
    return head, embed


def _check_shapes(head_dir: Path, state: dict, wanted: dict) -> None:
    """Eagle3LoadError naming the first checkpoint tensor whose shape is not the one its config.json gives."""
    wrong = [(k, list(t.shape), list(wanted[k].shape)) for k, t in state.items()
             if k in wanted and t.shape != wanted[k].shape]
    if wrong:
        name, shape, want = wrong[0]
        more = f" (and {len(wrong) - 1} more tensor(s) of other shapes)" if len(wrong) > 1 else ""
        raise Eagle3LoadError(f"{head_dir}: checkpoint tensors do not fit its config.json: {name} is {shape} in "
                              f"the checkpoint, the config.json gives {want}{more}; {head_weights_fix(head_dir)}")


def _check_vocabulary_maps(head_dir: Path, cfg: Eagle3Config, state: dict, t_vocab: int) -> None:
    """Check the draft -> target id map and complete the state in place: ``d2t`` [draft_vocab] long
    offsets (target id = draft id + d2t; none = identity), ``t2d`` [t_vocab] bool (derived when
    absent or sized for another vocabulary). The map must be injective into [0, t_vocab)."""
    d2t = state.get("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long)).long()
    if d2t.shape[0] != cfg.draft_vocab_size:
        raise Eagle3LoadError(f"{head_dir}: d2t has {d2t.shape[0]} entries, draft_vocab_size is {cfg.draft_vocab_size}")
    target_ids = torch.arange(cfg.draft_vocab_size) + d2t  # [draft_vocab]
    if int(target_ids.min()) < 0 or int(target_ids.max()) >= t_vocab:
        raise Eagle3LoadError(f"{head_dir}: d2t maps draft ids to target ids in [{int(target_ids.min())}, "
                              f"{int(target_ids.max())}], outside the target vocabulary [0, {t_vocab})")
    if torch.unique(target_ids).numel() != target_ids.numel():
        raise Eagle3LoadError(f"{head_dir}: d2t maps two draft ids to one target id")
    state["d2t"] = d2t
    if "t2d" not in state or state["t2d"].shape[0] != t_vocab:
        state["t2d"] = torch.zeros(t_vocab, dtype=torch.bool).index_fill_(0, target_ids, True)


def _follow_official_head_dim(head_dir: Path, cfg: Eagle3Config, state: dict) -> None:
    """Set cfg.head_dim to hidden / heads (official); refuse weights that need another size."""
    official = cfg.hidden_size // cfg.num_attention_heads
    q = state.get("midlayer.self_attn.q_proj.weight")
    weights_hd = None if q is None else q.shape[0] / cfg.num_attention_heads
    if weights_hd is not None and weights_hd != official:
        raise Eagle3LoadError(
            f"{head_dir}: q_proj.weight has {q.shape[0]} rows = {cfg.num_attention_heads} heads x {weights_hd:g}, "
            f"but the official EAGLE-3 code (which ignores head_dim) uses head size hidden / heads = "
            f"{cfg.hidden_size} / {cfg.num_attention_heads} = {official}: this checkpoint cannot be loaded "
            f"as EAGLE-3 (config.json head_dim={cfg.head_dim})")
    if cfg.head_dim != official:
        log.warning("%s: config.json head_dim=%s ignored; head size hidden / heads = %d, as in the official "
                    "EAGLE-3 code and the checkpoint", head_dir, cfg.head_dim, official)
        cfg.head_dim = official


def _embeddings(head_dir: Path, cfg: Eagle3Config, own: Optional[torch.Tensor], declared: Optional[int],
                target_hf_model, t_vocab: int) -> torch.Tensor:
    """[t_vocab, H] token embeddings the head reads: its own when the checkpoint has them, else the target's."""
    if own is not None:
        if tuple(own.shape) != (t_vocab, cfg.hidden_size):
            raise Eagle3LoadError(f"{head_dir}: embed_tokens.weight has shape {tuple(own.shape)}, expected "
                                  f"[target vocabulary {t_vocab}, head hidden {cfg.hidden_size}]")
        return own.detach()
    if declared is not None and int(declared) != cfg.hidden_size:
        raise Eagle3LoadError(
            f"{head_dir}: config.json sets target_hidden_size={declared} != hidden_size={cfg.hidden_size}, so "
            f"(as in the official EAGLE-3 code) the head needs its own embed_tokens.weight "
            f"[{t_vocab}, {cfg.hidden_size}], and the checkpoint has none")
    embed = target_hf_model.get_input_embeddings().weight
    if cfg.hidden_size != embed.shape[1]:
        raise Eagle3LoadError(f"{head_dir}: head hidden {cfg.hidden_size} != target embedding width {embed.shape[1]}")
    return embed.detach()
