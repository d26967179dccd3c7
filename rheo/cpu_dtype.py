"""The dtype a CPU runs fastest: bfloat16 where the CPU has bf16 instructions, float32 where bf16 is emulated.

On a CPU without bf16 instructions, torch computes a bf16 matmul by widening to float32 and
narrowing back, so bf16 is slower than float32 there (AMD EPYC without AVX-512 measured Top-K on
its tuned tree at 0.53x plain decoding in bf16 and 0.84x in float32). ``dtype="auto"`` (the
default of ``rheo generate`` and of the harness) asks :func:`resolve_dtype`, which reads the CPU's
feature flags (``/proc/cpuinfo``; :func:`read_cpuinfo` is the one reader, for tests to replace):

- x86: ``avx512_bf16`` or ``amx_bf16`` -> bfloat16, else float32;
- Arm: ``bf16`` among the Features -> bfloat16, else float32;
- flags unreadable (macOS, a container without /proc) -> float32, the choice that is never slow.

On a GPU "auto" keeps the pair's own dtype (None: the model's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

AUTO = "auto"
CPUINFO = Path("/proc/cpuinfo")
#: flags that mean the CPU computes bf16 natively (x86: AVX-512 BF16, AMX; Arm: FEAT_BF16)
NATIVE_BF16 = ("avx512_bf16", "amx_bf16", "bf16")


def read_cpuinfo(path: Path = CPUINFO) -> str:
    """The text of /proc/cpuinfo ("" where it cannot be read)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class CpuKind:
    """What the CPU is called and the feature flags of its first core."""

    name: str
    flags: frozenset

    @property
    def bf16_flags(self) -> tuple[str, ...]:
        return tuple(f for f in NATIVE_BF16 if f in self.flags)

    def describe(self) -> str:
        """'AMD EPYC (avx512_bf16)' or 'AMD EPYC (no bf16 instructions)'."""
        return f"{self.name} ({', '.join(self.bf16_flags) or 'no bf16 instructions'})"


def cpu_kind(text: Optional[str] = None) -> CpuKind:
    """The :class:`CpuKind` of a cpuinfo text (default: :func:`read_cpuinfo`)."""
    text = read_cpuinfo() if text is None else text
    name, flags = "", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return CpuKind(name or "unknown CPU", flags)


@dataclass(frozen=True)
class DtypeChoice:
    """A dtype name (None: the pair's own) and why it was chosen, in words."""

    dtype: Optional[str]
    reason: str


def choose_cpu_dtype(kind: Optional[CpuKind] = None) -> DtypeChoice:
    """bfloat16 where the CPU has bf16 instructions, float32 otherwise (module docstring)."""
    kind = cpu_kind() if kind is None else kind
    if not kind.flags:
        return DtypeChoice("float32", f"{kind.name}: CPU flags unreadable, float32 (never emulated)")
    if kind.bf16_flags:
        return DtypeChoice("bfloat16", f"{kind.name} has {', '.join(kind.bf16_flags)}: bfloat16 runs natively")
    return DtypeChoice("float32", f"{kind.name} has no avx512_bf16/amx_bf16: bfloat16 would be emulated, "
                                  f"float32 is faster")


def resolve_dtype(requested: Optional[str], device: str, kind: Optional[CpuKind] = None) -> DtypeChoice:
    """``requested`` as given, unless it is "auto": then :func:`choose_cpu_dtype` on a CPU and the pair's
    own dtype (None) on any other device."""
    if requested != AUTO:
        return DtypeChoice(requested, "given" if requested else "the model's default")
    if str(device).split(":")[0] != "cpu":
        return DtypeChoice(None, f"{device}: the model's default")
    return choose_cpu_dtype(kind)
