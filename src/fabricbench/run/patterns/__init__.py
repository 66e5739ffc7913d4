"""Patterns: which ranks take part in each phase of a kernel, what its rows carry, and what it declares before
any rank starts (the capability it needs of a transport, its options, console lines, end-of-run step, and which
rows are its own). One file per pattern (``plain`` says what every pattern declares), one line each here.

A kernel names its pattern (``Kernel.pattern``); ``pattern_of`` finds it here.
"""

from __future__ import annotations

from fabricbench.measure.kernels import KERNELS, Kernel, get_kernel
from fabricbench.run.patterns.all_pairs import AllPairs
from fabricbench.run.patterns.bisection import Bisection
from fabricbench.run.patterns.congestion import Congestion
from fabricbench.run.patterns.fan import Fan
from fabricbench.run.patterns.gpu_routes import GpuRoutes
from fabricbench.run.patterns.plain import METADATA, NAMES, Idle, Pattern, Phase, Timed

PATTERNS: dict[str, type[Pattern]] = {
    **dict.fromkeys(NAMES, Pattern),
    "all-pairs": AllPairs,
    "gpu-routes": GpuRoutes,
    "congestion": Congestion,
    "bisection": Bisection,
    "fan": Fan,
}

__all__ = [
    "METADATA",
    "PATTERNS",
    "AllPairs",
    "Bisection",
    "Congestion",
    "Fan",
    "GpuRoutes",
    "Idle",
    "Pattern",
    "Phase",
    "Timed",
    "every_pattern",
    "kernels_of",
    "pattern_of",
    "row_pattern",
]


def pattern_of(kernel: Kernel) -> type[Pattern]:
    """The pattern a kernel names."""
    return PATTERNS[kernel.pattern]


def row_pattern(row: dict) -> type[Pattern]:
    """The pattern of a row's kernel."""
    return pattern_of(get_kernel(row["kernel"]))


def kernels_of(pattern: type[Pattern]) -> tuple[str, ...]:
    """The kernels whose rows are the pattern's, in the kernel table's order: how analysis selects its rows."""
    return tuple(name for name, kernel in KERNELS.items() if pattern_of(kernel) is pattern)


def every_pattern() -> list[type[Pattern]]:
    """Each pattern once, in the registry's order: the order their options and end-of-run steps come in."""
    return list(dict.fromkeys(PATTERNS.values()))
