"""`rheo plan` under engine=graphs: the same counts as eager (the engine changes the keys, not the rows a
sweep stores), an estimate from the graphs rows of the engine cycle-cost table, and what it assumes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from eval.plan import cost
from eval.plan.__main__ import main as plan_main, markdown_report
from eval.plan.expand import make_commands
from eval.plan.totals import totals

ROOT = Path(__file__).resolve().parents[1]
PAPER_MODELS = ("llama31_8b_instruct", "vicuna_13b_v13", "r1_distill_llama_8b")
#: the run refuses engine=graphs for transformers' own loop (hf_generate): both plans sweep the tree methods
GRAPHS_ARGS = "device=cuda dtype=bfloat16 engine=graphs"
_PLANS: dict = {}


def reproduce_full(args: str, model: str = PAPER_MODELS[0]):
    if (args, model) not in _PLANS:
        _PLANS[args, model] = make_commands("reproduce-full", f"{args} model={model}")
    return _PLANS[args, model]


@pytest.mark.slow
def test_a_graphs_plan_counts_the_same_rows_as_eager_and_estimates_fewer_hours():
    eager_commands = reproduce_full(GRAPHS_ARGS.replace(" engine=graphs", ""))
    graphs_commands = reproduce_full(GRAPHS_ARGS)
    eager, graphs = (totals(c)[PAPER_MODELS[0]] for c in (eager_commands, graphs_commands))
    folders = [{(j.output_dir, g.config_hash) for c in cs for j in c.jobs for g in j.configs}
               for cs in (eager_commands, graphs_commands)]
    # engine=graphs is in every key but those of transformers' own loop, which runs eagerly and is keyed so
    library = {g.config_hash for c in graphs_commands for j in c.jobs for g in j.configs if g.spec.method == "hf_generate"}
    assert library and {h for _, h in folders[0]} & {h for _, h in folders[1]} == library
    assert len(folders[0]) == len(folders[1]) == graphs.configurations  # each folder once, as the sweep expands it
    assert graphs.jobs == sum(len(c.jobs) for c in graphs_commands)
    assert (eager.engines, graphs.engines) == ({"eager"}, {"graphs", "eager"})  # eager: transformers' own loop
    for what in ("jobs", "configurations", "generations", "tokens", "calls", "disk_bytes", "by_method", "prompts"):
        assert getattr(graphs, what) == getattr(eager, what), what
    for gpu in cost.GPUS:
        assert 0 < graphs.hours[gpu] < eager.hours[gpu] / 2
        assert graphs.device_hours[gpu] > eager.device_hours[gpu]  # the gaps between a graph's kernels
    # launch-bound under eager (one estimate on every kind), device-bound under graphs (a faster kind is faster)
    assert len({round(h, 6) for h in eager.hours.values()}) == 1
    assert graphs.hours["A100"] > graphs.hours["H100"] > graphs.hours["H200"]


@pytest.mark.parametrize("label", ["AR", "Top-K", "Rheo m=1", "rheo_auto"])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_graphs_launches_split_the_measured_kernels_between_host_and_graphs(label, temperature):
    rows = pd.read_parquet(cost.CYCLE_COST_GRAPHS)
    read = 0.0 if temperature == 0 else 1.0  # T > 0 reads the T = 1 counts
    row = rows[(rows.engine == "graphs") & (rows.method == label) & (rows.temperature == read)].iloc[0]
    host, inside = cost.graphs_launches(label, temperature, 32)
    # every kernel is either launched from the host or replayed in a graph; a graph is one launch
    assert host - row.graphs + inside == pytest.approx(row.kernels)
    assert 0 < host < cost.ops_per_call(label, temperature, 32) / 20  # far fewer launches than eager's ops
    host40, inside40 = cost.graphs_launches(label, temperature, 40)
    assert host40 == host and inside40 == pytest.approx(inside + row.kernels_score * 8 / 32)  # the forward scales


def test_under_graphs_a_paper_call_is_bound_by_the_device_and_eager_is_unchanged():
    shape = cost.shape_of("llama31_8b_instruct")
    for gpu in cost.GPUS.values():
        eager = cost.ms_per_call("Top-K", 1.0, shape, gpu, 61, 8)
        assert cost.ms_per_call("Top-K", 1.0, shape, gpu, 61, 8, engine="eager") == eager
        host, device = cost.ms_per_call("Top-K", 1.0, shape, gpu, 61, 8, engine="graphs")
        assert device > host > 0 and eager[0] > eager[1]
        _, inside = cost.graphs_launches("Top-K", 1.0, 32)
        assert device == pytest.approx(eager[1] + inside * cost.US_PER_GRAPH_KERNEL / 1e3)
    with pytest.raises(ValueError, match="^the plan has no cycle-cost table for engine=static: it prices "
                                         "engine=eager and engine=graphs$"):
        cost.ms_per_call("AR", 0.0, shape, cost.GPUS["H100"], 1, 0, engine="static")


def test_a_graphs_plan_says_which_engine_and_table_it_priced(capsys):
    assert plan_main(["--command", "experiment=main_table", "model=llama31_8b_instruct", "device=cuda",
                      "engine=graphs", "limit=1", "dataset.suites=[gsm8k]"]) == 0
    out = capsys.readouterr().out
    assert "under engine=graphs" in out and "cycle_cost_tiny32_cpu_graphs.parquet" in out
    assert "measured with Inductor on a CPU" in out and f"{cost.US_PER_GRAPH_KERNEL:g} us per kernel inside" in out
    assert "results/tables/cycle_cost_tiny32_cpu.parquet" not in out  # eager's table priced nothing here


@pytest.mark.slow  # expands the paper protocol's sweeps (half a minute): make test-slow
def test_docs_gpu_holds_the_graphs_plan_table_of_the_paper_models():
    """docs/gpu.md's engine=graphs table is `rheo plan ... engine=graphs ... --markdown`'s output (one model's row)."""
    page = (ROOT / "docs" / "gpu.md").read_text()
    assert f"rheo plan reproduce-full {GRAPHS_ARGS} --models {','.join(PAPER_MODELS)} --markdown" in page
    table = markdown_report(list(totals(reproduce_full(GRAPHS_ARGS)).values()), cost.DEFAULT_TAU)
    assert table.splitlines()[2] in page.splitlines()
    assert all(line in page for line in table.splitlines()[4:] if line)  # the assumptions, word for word
