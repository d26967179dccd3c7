"""Draft-head training on hostile input and faults: crafted or missing checkpoints, corrupt corpus
files and shards, a full disk, a killed checkpoint; every input is checked before any long work."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rheo.training import loop
from rheo.training.corpus import load_corpus, pack_samples, read_shard, save_corpus
from rheo.training.run_state import load_state, save_state

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # as the other script tests
import train_draft as td  # noqa: E402

SAMPLES = [dict(prompt=[1, 2, 3], response=[4, 5, 2], kind="math", temperature=0.7, split="train"),
           dict(prompt=[7], response=[8, 9], kind="followup", temperature=0.0, split="heldout")]


class Loaded(Exception):
    """Raised by the stand-ins of the corpus / model loaders: the script got past its input checks."""


@pytest.fixture
def no_loading(monkeypatch):
    def loaded(*a, **k):
        raise Loaded

    monkeypatch.setattr(loop, "load_corpora", loaded)
    monkeypatch.setattr(loop, "load_smollm2", loaded)


@pytest.fixture
def corpus(tmp_path):
    save_corpus(pack_samples(SAMPLES), tmp_path / "corpus", {})
    return tmp_path / "corpus"


def _real_state(path: Path, step: int) -> dict:
    """A checkpoint as train_draft writes it (optimizer, LambdaLR, RNG state, draft ids, plan)."""
    w = torch.nn.Parameter(torch.randn(4, 3))
    opt = torch.optim.AdamW([w], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    w.sum().backward()
    opt.step()
    sched.step()
    state = dict(head={"w": w.detach().clone()}, opt=opt.state_dict(), sched=sched.state_dict(), step=step, epoch=0,
                 pos=step, tokens_seen=10 * step, torch_rng=torch.get_rng_state(), draft_ids=torch.arange(5),
                 plan=dict(total=40, fitted=True), cuda_rng=None)
    save_state(path, **state)
    return state


class _Payload:
    """Unpickling it calls open(marker, "w"): what a crafted checkpoint could run instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_real_checkpoint_loads_weights_only_and_a_crafted_one_runs_nothing(tmp_path):
    state = _real_state(tmp_path / "state.pt", step=7)
    back = load_state(tmp_path / "state.pt", "cpu")
    assert back["step"] == 7 and back["plan"] == state["plan"] and torch.equal(back["torch_rng"], state["torch_rng"])
    assert back["opt"]["param_groups"][0]["lr"] == state["opt"]["param_groups"][0]["lr"]

    marker = tmp_path / "PWNED"
    torch.save(dict(step=1, payload=_Payload(marker)), tmp_path / "crafted.pt")
    with pytest.raises(SystemExit, match="not a checkpoint of this script"):
        load_state(tmp_path / "crafted.pt", "cpu")
    assert not marker.exists()
    torch.load(tmp_path / "crafted.pt", weights_only=False)  # the payload is live: the old load ran it
    assert marker.exists()

    (tmp_path / "cut.pt").write_bytes((tmp_path / "state.pt").read_bytes()[:300])
    with pytest.raises(SystemExit, match="cut.pt is unreadable"):
        load_state(tmp_path / "cut.pt", "cpu")


def test_resume_without_a_checkpoint_is_refused_before_anything_loads(tmp_path, corpus, no_loading):
    run = tmp_path / "run"
    (run / "head").mkdir(parents=True)
    (run / "head" / "model.safetensors").write_bytes(b"exported head")
    (run / "metrics.jsonl").write_text('{"step": 40}\n')
    with pytest.raises(SystemExit, match=r"--resume: no checkpoint .*state.pt"):
        td.main(["--resume", "--run-dir", str(run), "--out", str(run / "head"), "--corpus", str(corpus)])
    assert (run / "head" / "model.safetensors").read_bytes() == b"exported head"
    assert (run / "metrics.jsonl").read_text() == '{"step": 40}\n'
    with pytest.raises(SystemExit, match="holds an earlier run.*pass --resume"):  # nor a fresh start over it
        td.main(["--run-dir", str(run), "--out", str(run / "head"), "--corpus", str(corpus)])


@pytest.mark.parametrize("flag", ["--eval-only", "--warm-start"])
def test_a_missing_head_is_refused_before_the_corpus_the_model_or_the_features(tmp_path, no_loading, flag):
    with pytest.raises(SystemExit, match=rf"{flag} /nonexistent: no EAGLE-3 head there"):
        td.main([flag, "/nonexistent", "--run-dir", str(tmp_path / "run"), "--features", str(tmp_path / "f")])
    assert not (tmp_path / "f").exists()


def test_keeping_the_draft_vocabulary_needs_a_warm_start(tmp_path, no_loading):
    with pytest.raises(SystemExit, match="--keep-draft-vocab keeps the --warm-start head's draft vocabulary"):
        td.main(["--keep-draft-vocab", "--run-dir", str(tmp_path / "run"), "--features", str(tmp_path / "f")])
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize("args, needle", [(["--minutes", "-5"], "argument --minutes: must be a finite number >= 0"),
                                          (["--epochs", "0"], "argument --epochs: must be a finite number > 0"),
                                          (["--warmup", "0"], "argument --warmup: must be an integer >= 1"),
                                          (["--threads", "1000000"], "--threads 1000000: this machine has")])
def test_bad_numbers_are_one_line_errors(tmp_path, no_loading, capsys, args, needle):
    with pytest.raises(SystemExit) as stop:
        td.main(args + ["--run-dir", str(tmp_path / "run")])
    said = capsys.readouterr().err.strip() or str(stop.value.code)
    assert needle in said and len(said.splitlines()) == 1 and stop.value.code != 0


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_checkpoint_killed_midway_leaves_no_temp_file_and_no_step_twice(tmp_path, corpus, no_loading):
    run = tmp_path / "run"
    run.mkdir()
    _real_state(run / "state.pt", step=5)  # the last checkpoint that completed
    stale = run / f".tmp-state.pt@{socket.gethostname()}@{_dead_pid()}"  # the one kill -9 cut short
    stale.write_bytes(b"\0" * 1000)
    # its log line was written before the kill: step 10 has no checkpoint and will run (and log) again
    (run / "metrics.jsonl").write_text("".join(json.dumps(dict(step=s)) + "\n" for s in (0, 5, 10)))
    with pytest.raises(Loaded):
        td.main(["--resume", "--run-dir", str(run), "--out", str(run / "head"), "--corpus", str(corpus)])
    assert not stale.exists()
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 5]


def test_corrupt_corpus_files_are_named_with_the_fix(corpus):
    data = (corpus / "corpus.npz").read_bytes()
    (corpus / "manifest.json").write_text('{"sha256": ')
    with pytest.raises(ValueError, match=r"manifest.json is not a JSON object.*git checkout"):
        load_corpus(corpus)
    (corpus / "manifest.json").unlink()
    (corpus / "corpus.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"corpus.npz is not a readable corpus.*truncated.*make corpus"):
        load_corpus(corpus)


def test_a_truncated_generation_shard_is_named(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a_0.json").write_text(json.dumps(dict(samples=[dict(SAMPLES[0], key="k")]))[:25])
    with pytest.raises(ValueError, match=r"generation shard .*a_0.json is unreadable.*gen_corpus"):
        read_shard(shards / "a_0.json")
    done = subprocess.run([sys.executable, "scripts/pack_corpus.py", "--shards", str(shards), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "a_0.json is unreadable" in done.stderr and "Traceback" not in done.stderr


def test_a_full_disk_while_building_the_feature_cache_names_the_folder(tmp_path):
    """RLIMIT_FSIZE stands in for a full file system (a small tmpfs): no bus error, one message."""
    code = f"""
import resource, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from rheo.training.corpus import pack_samples
from rheo.training.features import FeatureCache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
corpus = pack_samples({SAMPLES!r} * 40)
try:
    FeatureCache({str(tmp_path / 'features')!r}, corpus, 576, dict(test=True), create=True)
except OSError as e:
    print(e)
    sys.exit(3)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert f"feature cache {tmp_path / 'features'}: cannot reserve" in done.stdout and "--features" in done.stdout
    assert not (tmp_path / "features" / "feats.f16").exists()  # nothing half-made is left to resume from


def test_feature_files_are_reserved_whole(tmp_path):
    from rheo.training.features import FeatureCache

    corpus = pack_samples(SAMPLES)
    cache = FeatureCache(tmp_path, corpus, 8, dict(test=True), create=True)
    st = (tmp_path / "feats.f16").stat()
    assert st.st_size == int(corpus.offsets[-1]) * 24 * 2 and st.st_blocks * 512 >= st.st_size
    cache.feats[:] = 1.5
    cache.save_done()
    again = FeatureCache(tmp_path, corpus, 8, dict(test=True), create=True)  # reopening keeps the data
    assert np.all(np.asarray(again.feats) == 1.5)


def test_no_file_a_user_can_supply_is_unpickled():
    """The loaders of user files: torch.load with weights_only=True only, no pickle, no allow_pickle."""
    import re

    sources = [p for d in ("rheo", "eval", "scripts", "baselines") for p in (ROOT / d).rglob("*.py")]
    for path in sources:
        text = path.read_text()
        assert not re.search(r"weights_only\s*=\s*False|pickle\.loads?\(|allow_pickle\s*=\s*True", text), path
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, (path, call)
