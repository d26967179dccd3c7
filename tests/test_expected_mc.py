"""eval.measure.expected_mc on the tiny pair: every checked state's Monte-Carlo mean lies within 5 standard
errors of the exact expectation (a correct expectation fails about one state in 1.7 million)."""

import pytest

from eval.measure.expected_mc import check_states, main, markdown
from eval.measure.pairs import load_pair
from rheo.config import SpecConfig


@pytest.mark.parametrize("method", ["rheo", "topk"])
def test_monte_carlo_agrees_on_the_tiny_pair(method):
    pair = load_pair("tiny_random", "cpu", None)
    cfg = SpecConfig.for_method(method=method, k=3, depth=2, tree_size=5, temperature=1.0, **({"m": 1} if method == "rheo" else {}))
    rows = check_states(pair, cfg, runs=400, every=1, max_new=8)
    assert rows and all(abs(r["z"]) < 5 for r in rows)
    assert "| **mean** |" in markdown(rows, cfg, "tiny_random", 400)


def test_bad_argument_is_refused():
    with pytest.raises(SystemExit):
        main(["--runs", "0"])
