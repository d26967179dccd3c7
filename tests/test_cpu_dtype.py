"""The CPU dtype by capability (rheo.cpu_dtype): bf16 only where the CPU has bf16 instructions, the
choice said with its reason; the flag reader is the one place tests replace. The speedup of
``rheo generate --compare-ar`` (rheo.compare_ar) carries a 95% interval and a within-noise flag."""

from __future__ import annotations

import pytest

from rheo import compare_ar, cpu_dtype
from rheo.cpu_dtype import choose_cpu_dtype, cpu_kind, resolve_dtype

EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx2 fma\n"
SAPPHIRE = "processor\t: 0\nmodel name\t: Intel Xeon Platinum 8481C\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n"
GRAVITON = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd4f\n"


@pytest.mark.parametrize("text, dtype, words", [
    (EPYC, "float32", "AMD EPYC 7B13 has no avx512_bf16/amx_bf16: bfloat16 would be emulated"),
    (SAPPHIRE, "bfloat16", "Intel Xeon Platinum 8481C has avx512_bf16, amx_bf16: bfloat16 runs natively"),
    (GRAVITON, "bfloat16", "has bf16: bfloat16 runs natively"),
    ("", "float32", "CPU flags unreadable, float32"),
])
def test_the_cpu_dtype_follows_the_bf16_instructions(monkeypatch, text, dtype, words):
    monkeypatch.setattr(cpu_dtype, "read_cpuinfo", lambda path=cpu_dtype.CPUINFO: text)
    choice = resolve_dtype("auto", "cpu")
    assert choice.dtype == dtype and words in choice.reason
    assert choose_cpu_dtype(cpu_kind(text)) == choice


def test_a_given_dtype_and_a_gpu_keep_theirs(monkeypatch):
    monkeypatch.setattr(cpu_dtype, "read_cpuinfo", lambda path=cpu_dtype.CPUINFO: EPYC)
    assert resolve_dtype("bfloat16", "cpu").dtype == "bfloat16"
    assert resolve_dtype("auto", "cuda:0").dtype is None  # the model's default
    assert cpu_kind().describe() == "AMD EPYC 7B13 (no bf16 instructions)"


def test_the_harness_key_holds_the_resolved_dtype(monkeypatch):
    """dtype=auto (the run config's default) is resolved before the key is made, so one config hash
    never stands for two precisions; a study that pins its dtype keeps its key."""
    from eval.conf.compose import compose_config
    from eval.conf.schema import run_plan

    for text, dtype in ((EPYC, "float32"), (SAPPHIRE, "bfloat16")):
        monkeypatch.setattr(cpu_dtype, "read_cpuinfo", lambda path=cpu_dtype.CPUINFO, t=text: t)
        assert run_plan(compose_config(["method=rheo"])).key["dtype"] == dtype
        assert run_plan(compose_config(["method=rheo", "dtype=bfloat16"])).key["dtype"] == "bfloat16"


def test_the_speedup_has_an_interval_and_says_when_it_is_within_noise():
    clear = compare_ar.speedup([1.5, 1.6, 1.4, 1.55], [15, 16, 14, 15.5], [10] * 4)
    assert 1 < clear.low < clear.ratio < clear.high and not clear.within_noise
    assert clear.describe().startswith("speedup 1.51x [") and "within noise" not in clear.describe()
    noisy = compare_ar.speedup([0.14, 0.65, 0.78], [1.4, 6.5, 7.8], [10] * 3)
    assert noisy.within_noise and noisy.describe().endswith("over 3 runs (within noise)")


def test_the_timing_alternates_the_order_and_pairs_each_repetition():
    order, now = [], iter(range(100))
    spec = lambda i: order.append(("spec", i)) or 10  # noqa: E731
    plain = lambda i: order.append(("plain", i)) or 10  # noqa: E731
    result = compare_ar.time_pair(spec, plain, 3, clock=lambda: float(next(now)))
    assert order == [("spec", 0), ("plain", 0), ("plain", 1), ("spec", 1), ("spec", 2), ("plain", 2)]
    assert result.runs == 3 and result.ratio == pytest.approx(1.0)
