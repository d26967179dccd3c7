"""A verifier from outside the checkout (rheo.methods.plugins): a package created here, outside the project,
registers a renamed copy of Top-K composed from the project's pieces, named by the entry-point group
``rheo.methods`` (a ``*.dist-info/entry_points.txt`` on the path, as ``pip install`` leaves it) or by
``RHEO_PLUGINS``. It is a ``method=`` choice of the harness, its rows carry its own code version, and the
readers (tables, export) show its rows by its name next to the built-in ones, with or without the plug-in.

The fast tests load the plug-in in this process; the slow ones run it where a user would: ``python -m
eval.run`` (tiny pair), a joblib multirun (fresh worker processes), ``rheo generate`` (embedded pair), then
``rheo tables`` and ``rheo export`` in a process that does not have it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import eval.store.code_version as cv
import rheo.methods.plugins as plugins
from eval.conf.compose import compose_config
from eval.conf.validate import validate
from eval.report.analysis import load
from eval.store import storage
from eval.store.keys import config_hash, method_key
from rheo.config import SpecConfig
from rheo.methods import find_method, get_method, unregister
from rheo.methods.registry import PLUGIN_ERRORS

ROOT = Path(__file__).resolve().parents[1]
NAME = "topk_copy"
PLUGIN = '''"""An outside verifier: Top-K's rule under another name, composed from rheo's pieces."""
from rheo.expected import dynamic_path_probs
from rheo.methods.registry import Method, register
from rheo.methods.topk import DYNAMIC_FIELDS, topk_candidates
from rheo.tree import build_dynamic_tree
from rheo.verify import verify_dynamic

TOPK_COPY = register(Method(name="topk_copy", display="Top-K copy", kind="dynamic", candidates=topk_candidates,
                            build=build_dynamic_tree, verify=verify_dynamic, fields=DYNAMIC_FIELDS,
                            path_probs=dynamic_path_probs))
'''


def make_plugin(where: Path, module: str = "my_verifiers", entry_point: bool = True) -> Path:
    """A folder to put on the Python path: the plug-in module, and (``entry_point``) the metadata that
    names it in the group rheo.methods, as an installed distribution's."""
    site = where / "site"
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(PLUGIN)
    if entry_point:
        info = site / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[rheo.methods]\n{NAME} = {module}\n")
    return site


@pytest.fixture
def loaded(tmp_path, monkeypatch):
    """The plug-in loaded in this process as a new process would load it (its entry point on the path)."""
    def load(entry_point: bool = True, env: str = "") -> None:
        site = make_plugin(tmp_path, entry_point=entry_point)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv(plugins.ENV, env)
        monkeypatch.setattr(plugins, "_loaded", False)
        plugins.load_plugins()
    yield load
    unregister(NAME)
    plugins._SOURCES.pop(NAME, None)
    sys.modules.pop("my_verifiers", None)


@pytest.mark.parametrize("entry_point, env", [(True, ""), (False, "my_verifiers")], ids=["entry_point", "env"])
def test_a_plugin_named_either_way_registers_its_method_with_its_files(loaded, entry_point, env):
    assert find_method(NAME) is None
    loaded(entry_point, env)
    method = get_method(NAME)
    assert method.display == "Top-K copy" and NAME in plugins.plugin_methods()
    assert [p.name for p in plugins.plugin_files(NAME)] == ["__init__.py"]
    assert plugins.plugin_files("topk") == ()
    # the harness takes it as a method= choice, keyed like any method reading the tree fields
    cfg = compose_config(["model=tiny_random", f"method={NAME}", "method.k=3"])
    spec = validate(cfg)
    assert spec.method == NAME and spec.k == 3
    key = method_key(spec, model="tiny_random", device="cpu", dtype="float32", seed=0, max_new_tokens=8)
    assert key["method"] == NAME and key["m"] is None


def test_a_plugin_that_does_not_load_is_a_warning_and_the_unknown_name_error_says_why(monkeypatch):
    monkeypatch.setenv(plugins.ENV, "no_such_plugin_module")
    monkeypatch.setattr(plugins, "_loaded", False)
    saved = list(PLUGIN_ERRORS)
    try:
        with pytest.warns(RuntimeWarning, match="no_such_plugin_module"):
            plugins.load_plugins()
        with pytest.raises(ValueError, match=r"got 'nope' \(plug-in 'no_such_plugin_module' \(RHEO_PLUGINS\) "
                                             r"did not load: ModuleNotFoundError"):
            get_method("nope")
    finally:
        PLUGIN_ERRORS[:] = saved


def test_a_plugins_rows_record_its_files_in_their_code_version(loaded, tmp_path):
    loaded()
    base = cv.code_version()
    own = cv.method_code_version(NAME)
    assert own != base and len(own) == 12 and cv.method_code_version("topk") == base == cv.method_code_version()
    source = plugins.plugin_files(NAME)[0]
    source.write_text(source.read_text() + "\n# a comment changes no row\n")
    assert cv.method_code_version(NAME) == own
    source.write_text(source.read_text() + "EXTRA = 1\n")
    edited = cv.method_code_version(NAME)
    assert edited != own
    check = cv.VersionCheck()
    assert check.reusable(edited, tmp_path / "a", NAME) and not check.reusable(own, tmp_path / "b", NAME)
    assert check.reusable(base, tmp_path / "c", "topk") and not check.reusable(edited, tmp_path / "d", "topk")


def _row(key: dict, chash: str, item: int, accept: list[int]) -> dict:
    row = storage.key_row(key)
    new = sum(accept)
    row.update(device="cpu", dtype="float32", dataset="gsm8k", item_id=item, turn=0, category="synthetic", gen_seed=0,
               prompt_tokens=5, new_tokens=new, target_calls=len(accept), tau=new / len(accept),
               accept_lengths=accept, wall_s=0.1, tokens_per_s=new / 0.1, output_tokens=list(range(new)),
               torch_version="synthetic", transformers_version="synthetic", rheo_version="synthetic",
               git_sha="synthetic", config_hash=chash, status="ok", error=None, finished_at="synthetic")
    return row


def write_mixed_rows(root: Path) -> Path:
    """Rows of topk_copy (registered for the writing only), topk and AR on the same two prompts."""
    storage.prepare_output_dir(root)
    for method, accept in ((NAME, [3, 2, 1]), ("topk", [2, 2, 2]), ("ar", [1] * 6)):
        spec = SpecConfig.for_method(method=method, k=3, depth=2, tree_size=4, temperature=1.0)
        key = method_key(spec, model="synthetic", device="cpu", dtype="float32", seed=0, max_new_tokens=6)
        chash = config_hash(key)
        cdir = storage.prepare_config_dir(root, "synthetic", chash, key)
        for item in range(2):
            storage.write_row(storage.shard_path(cdir, "gsm8k", item, 0), _row(key, chash, item, accept))
    return root


def test_readers_show_an_unknown_methods_rows_by_its_name(loaded, tmp_path):
    loaded()
    root = write_mixed_rows(tmp_path / "runs")
    unregister(NAME)  # read by a process that does not have the plug-in
    df = load(root)
    assert set(df["variant"]) == {"ar", NAME, "topk"}
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_tables
        from eval.report import export_rows
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written = make_tables.make_tables(root, tmp_path / "tables", theory=False)
    assert NAME in written["runs"].read_text() and NAME in written["speed"].read_text()
    assert export_rows.main(["--results", str(root), "--out", str(tmp_path / "rows.csv")]) == 0
    assert (tmp_path / "rows.csv").read_text().count(NAME) >= 2


# ------------------------------------------------------------------ where a user runs it (subprocesses)
def _run(args: list[str], site: Path, tmp_path: Path, env_plugins: str = "", timeout: int = 600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "OMP_NUM_THREADS": "1",
           "RHEO_OUT": str(tmp_path / "out"), plugins.ENV: env_plugins}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_an_outside_plugin_runs_in_the_harness_a_joblib_multirun_and_rheo_generate(tmp_path):
    site = make_plugin(tmp_path)
    tiny = ["model=tiny_random", "dataset=gsm8k", "limit=2", "max_new_tokens=6", "method.depth=2", "progress=false",
            "warmup=false", "temperature=1.0"]
    _run(["-m", "eval.run", f"method={NAME}", *tiny], site, tmp_path)  # by its entry point
    bare = make_plugin(tmp_path / "bare", "env_verifiers", entry_point=False)  # by RHEO_PLUGINS, in joblib workers
    (bare / "env_verifiers" / "__init__.py").write_text(PLUGIN.replace('"topk_copy"', '"topk_env"'))
    _run(["-m", "eval.run", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "method=topk_env,topk", *tiny],
         bare, tmp_path, env_plugins="env_verifiers")
    runs = tmp_path / "out" / "runs"
    df = load(runs)
    assert {NAME, "topk_env", "topk", "ar"} == set(df["method"]) and len(df) == 8
    stamped = df.drop_duplicates("method").set_index("method")["code_version"]
    assert stamped["topk"] == stamped["ar"] == cv.code_version() != stamped[NAME]
    again = _run(["-m", "eval.run", f"method={NAME}", *tiny], site, tmp_path)  # its rows are reused
    assert "computed 0, skipped 4" in again.stdout + again.stderr
    # read where neither plug-in is loaded
    tables = _run(["-m", "rheo.commands", "tables", "--results", str(runs), "--out", str(tmp_path / "tables"),
                   "--no-theory"], tmp_path, tmp_path)
    assert "error" not in tables.stderr and NAME in (tmp_path / "tables" / "runs.md").read_text()
    _run(["-m", "rheo.commands", "export", "--results", str(runs), "--out", str(tmp_path / "rows.csv")],
         tmp_path, tmp_path)
    assert "topk_env" in (tmp_path / "rows.csv").read_text()
    done = _run(["-m", "rheo.commands", "generate", "Hi", "--method", NAME, "--max-new-tokens", "4", "--k", "3",
                 "--depth", "2", "--tree-size", "4"], site, tmp_path)
    assert done.stderr.splitlines()[-1].startswith("tau ") or "tau " in done.stdout + done.stderr


HSD_PLUGIN = '''"""An outside verifier built on rheo's HSD: the capped sequence-level rule on a drafted chain, renamed."""
from rheo.hsd import hsd_path_probs, verify_hsd
from rheo.methods.registry import Method, register
from rheo.methods.static import CHAIN_SHAPE, _validate_chain

register(Method(name="hsd_outside", display="HSD (outside)", kind="static", candidates=CHAIN_SHAPE.candidates,
                build=CHAIN_SHAPE.build, verify=verify_hsd, fields=("depth", "sparse_top"), validate=_validate_chain,
                max_children=lambda cfg: 1, label=lambda row: f"hsd_outside d={int(row.depth)}",
                path_probs=hsd_path_probs))
'''


def test_a_new_verifier_as_an_outside_plugin_decodes_as_the_built_in_one(tmp_path, monkeypatch):
    """HSD, registered under another name by a package outside the checkout (its entry point on the path):
    a method= choice of the harness, and the same tokens, seed for seed, as the built-in hsd_chain."""
    import torch
    from toys import toy_pair

    from rheo.decode import speculative_generate

    site = tmp_path / "site"
    (site / "outside_hsd").mkdir(parents=True)
    (site / "outside_hsd" / "__init__.py").write_text(HSD_PLUGIN)
    info = site / "outside_hsd-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside_hsd\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rheo.methods]\nhsd_outside = outside_hsd\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv(plugins.ENV, "")
    monkeypatch.setattr(plugins, "_loaded", False)
    try:
        plugins.load_plugins()
        assert get_method("hsd_outside").verify is get_method("hsd_chain").verify
        assert validate(compose_config(["model=tiny_random", "method=hsd_outside", "method.depth=3"])).depth == 3
        target, drafter, _ = toy_pair(6, salt=21)
        for seed in range(5):
            out = {name: speculative_generate(target, drafter, [0, 1], 12,
                                              SpecConfig(method=name, depth=3, temperature=0.8),
                                              torch.Generator().manual_seed(seed)).tokens
                   for name in ("hsd_outside", "hsd_chain")}
            assert out["hsd_outside"] == out["hsd_chain"]
    finally:
        unregister("hsd_outside")
        plugins._SOURCES.pop("hsd_outside", None)
        sys.modules.pop("outside_hsd", None)
