"""Hostile file systems: symlinks and FIFOs in results and model folders, rows in the wrong place,
archives with paths in their values, GPU-bundle manifests, truncated feature caches."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.store import storage
from rheo.files import NotRegularFileError, read_bounded
from rheo.io import remove_stale_tmp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import export_results  # noqa: E402
import gpu_bundle  # noqa: E402

TINY = ["model=tiny_random", "dataset=gsm8k", "limit=2", "max_new_tokens=3", "num_threads=1", "progress=false",
        "warmup=false", "method=rheo", "method.k=4", "method.depth=2", "method.tree_size=6"]


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_the_stale_temp_sweep_follows_no_symlink(tmp_path):
    outside, root = tmp_path / "outside", tmp_path / "results"
    outside.mkdir(), root.mkdir()
    stale = f".tmp-x@{socket.gethostname()}@{_dead_pid()}"
    (outside / stale).write_text("not ours")
    (root / "alias").symlink_to(outside)
    (root / "loop").symlink_to(root)  # a link loop
    (root / "usr").symlink_to("/usr")
    (root / "m").mkdir()
    (root / "m" / stale).write_text("ours")
    removed = remove_stale_tmp(root)
    assert removed == [root / "m" / stale] and (outside / stale).exists()


def test_a_fifo_head_weights_file_is_refused_without_blocking(tmp_path):
    head = tmp_path / "head"
    shutil.copytree(ROOT / "rheo" / "assets" / "eagle3_smollm2_135m_small", head,
                    ignore=shutil.ignore_patterns("*.safetensors"))
    os.mkfifo(head / "model.safetensors")
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from rheo.models.weights import weights_problem\n"
            f"print(weights_problem({str(head)!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert f"{head / 'model.safetensors'} is not a regular file" in done.stdout, done.stderr[-1000:]
    from rheo.models.eagle3_checkpoint import _read_state

    with pytest.raises(NotRegularFileError, match="model.safetensors is a FIFO"):
        _read_state(head)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "out"
    entry.run(compose_config(TINY + [f"output_dir={out}"]))
    return out


def test_a_symlinked_model_folder_is_not_exported_twice(results, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(results, root)
    (root / "alias").symlink_to(root / "tiny_random")
    assert export_results.main(["--results", str(root), "--out", str(tmp_path / "a.parquet")]) == 0
    rows = storage.load_results(tmp_path / "a.parquet")
    assert len(rows) == 4 and not rows.duplicated(storage.ROW_KEY).any()


def test_a_model_folder_copied_under_another_name_is_not_read_as_data(results, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(results, root)
    shutil.copytree(root / "tiny_random", root / "other_model")
    rows = storage.load_results(root)
    assert len(rows) == 4 and len(rows.attrs["corrupt_shards"]) == 4
    assert all("/other_model/" in p for p in rows.attrs["corrupt_shards"])


def test_a_row_edited_in_place_to_another_method_is_refused(results, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(results, root)
    shard = next(p for p in storage.iter_shards(root) if storage.read_row(p)["method"] == "rheo")
    storage.write_row(shard, {**storage.read_row(shard), "method": "topk"})
    rows = storage.load_results(root)
    assert str(shard) in rows.attrs["corrupt_shards"] and "topk" not in set(rows["method"])


def test_an_archive_with_duplicated_rows_is_named(results, tmp_path):
    archive = tmp_path / "a.parquet"
    storage.export_results(results, archive)
    table = pq.read_table(archive)
    import pyarrow as pa

    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), archive)
    with pytest.raises(storage.OutputDirError, match=r"holds 2 rows that share their key .*export it again"):
        storage.load_results(archive)


def test_a_folder_named_like_a_shard_is_named_not_a_traceback(results, tmp_path):
    root = tmp_path / "r"
    shutil.copytree(results, root)
    shard = next(storage.iter_shards(root))
    shard.unlink()
    shard.mkdir()
    with pytest.raises(storage.OutputDirError, match=r"is not a shard file .*move it out"):
        entry.run(compose_config(TINY + [f"output_dir={root}"]))


def test_a_full_disk_names_the_shard_and_the_rows_stored(tmp_path, monkeypatch):
    writes = []

    def full(path, write):
        if writes:
            raise OSError(28, "No space left on device")
        writes.append(path)
        return real(path, write)

    real = storage.atomic_write
    monkeypatch.setattr(storage, "atomic_write", full)
    with pytest.raises(storage.ShardWriteError, match=r"cannot write the shard .*\.parquet \(No space left on device.*"
                                                      r"1 row\(s\) stored by this run .*rerun the same command"):
        entry.run(compose_config(TINY + [f"output_dir={tmp_path / 'o'}", "baseline=false"]))


def test_env_sh_is_quoted(tmp_path):
    env = {"RHEO_SMOLLM2_GGUF": str(tmp_path / "my bundle" / "x$(touch pwned).gguf"), "A": "it's"}
    script = tmp_path / "env.sh"
    script.write_text(gpu_bundle.env_script(env))
    done = subprocess.run(["bash", "-c", f'source "{script}"; printf "%s\\n%s" "$RHEO_SMOLLM2_GGUF" "$A"'],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.splitlines() == [env["RHEO_SMOLLM2_GGUF"], "it's"] and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["x$(touch pwned).gguf", "../x", "a/b", "x`id`", "..", "a b"])
def test_a_manifest_file_name_that_is_not_plain_is_refused(tmp_path, name):
    part = {"name": "part00", "group": "a", "bytes": 1, "sha256": "0" * 64}
    path = tmp_path / "MANIFEST.json"
    path.write_text(json.dumps({"file": name, "bytes": 1, "sha256": "0" * 64, "parts": [part]}))
    with pytest.raises(gpu_bundle.ManifestError, match="not a plain file name"):
        gpu_bundle.read_manifest(path)
    path.write_text(json.dumps({"file": "x.gguf", "bytes": 1, "sha256": "0" * 64, "parts": [{**part, "name": name}]}))
    with pytest.raises(gpu_bundle.ManifestError, match="not a plain file name"):
        gpu_bundle.read_manifest(path)


def test_a_manifest_pointing_at_dev_zero_is_not_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "MANIFEST.json").symlink_to("/dev/zero")
    with pytest.raises(NotRegularFileError, match="a character device"):
        gpu_bundle.read_manifest(tmp_path / "a" / "MANIFEST.json")
    big = tmp_path / "big"
    big.write_bytes(b" " * 100)
    with pytest.raises(NotRegularFileError, match="larger than 10 bytes"):
        read_bounded(big, 10, "x", "fix")


def _cache(folder):
    from rheo.training.corpus import pack_samples
    from rheo.training.features import FeatureCache

    samples = [dict(prompt=[1, 2, 3], response=[4, 5, 2], kind="math", temperature=0.7, split="train")] * 4
    return FeatureCache(folder, pack_samples(samples), 8, dict(test=True), create=True)


def test_a_truncated_feature_file_is_computed_again_not_zero_filled(tmp_path):
    cache = _cache(tmp_path)
    cache.feats[:], cache.final[:], cache.argmax[:] = 1.5, 2.5, 7
    cache.done[:] = True
    cache.save_done()
    del cache
    size = (tmp_path / "feats.f16").stat().st_size
    os.truncate(tmp_path / "feats.f16", size // 2)
    again = _cache(tmp_path)
    assert again.done.tolist() == [True, True, False, False]  # the lost half is computed again
    assert float(again.sequence(0)["features"].min()) == 1.5


def test_altered_feature_contents_are_refused_on_read(tmp_path):
    from rheo.training.features import CorruptFeaturesError

    cache = _cache(tmp_path)
    cache.feats[:] = 1.5
    cache.done[:] = True
    cache.save_done()
    cache.feats[0] = 0.0  # zero-filled behind the cache's back
    cache.feats.flush()
    with pytest.raises(CorruptFeaturesError, match=r"sequence 0 differs from the checksum .*--features-only"):
        _cache(tmp_path).sequence(0)
    assert _cache(tmp_path).sequence(1)["features"].min() == 1.5


def test_a_parallel_job_making_the_folder_meanwhile_is_not_refused(tmp_path, monkeypatch):
    """Another job writes the manifest, then its model folder, while this one looks at the folder."""
    root, real = tmp_path / "o", storage.foreign_entries

    def racing(folder):
        listed = real(folder)
        storage.atomic_write_bytes(folder / storage.MANIFEST, json.dumps(storage.FINGERPRINT, indent=1).encode())
        (folder / "tiny_random").mkdir()
        return listed + ["tiny_random"]  # seen as the other job made it

    monkeypatch.setattr(storage, "foreign_entries", racing)
    storage.prepare_output_dir(root)
    monkeypatch.setattr(storage, "foreign_entries", real)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x").write_text("")
    with pytest.raises(storage.OutputDirError, match="not empty and has no MANIFEST.json"):
        storage.prepare_output_dir(tmp_path / "foreign")
