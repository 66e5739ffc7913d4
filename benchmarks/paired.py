"""Paired, shuffled comparisons of fabricbench against a reference tool: what the reference benchmarks share.

Not run by itself; tcp_reference.py and mpi_overhead.py import it (both run from any directory, as
``python benchmarks/NAME.py``, which puts this folder on the import path).

The design both follow: on a small shared machine a tool's speed drifts by more than the differences
being measured, so no two tools are measured far apart in time. Every rep runs every contender once,
back to back, in an order shuffled anew per rep (no contender always runs first, or right after
another); a rep's ratio is a contender over the reference tool measured in that same rep. The ratios
are summarised by their median with a distribution-free 95 % confidence interval from order
statistics, and the reference run twice in every rep (the A/A control) shows the resolution the
machine allows. A target is "met, clearly" when the whole interval is on its good side.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

MIN_REPS = 6  # the fewest reps whose extreme order statistics still bound the median at 95 %
Result = TypeVar("Result")


def run_shuffled(
    order: random.Random, slot: dict[str, Callable[[], Result]], before: Callable[[], None] | None = None
) -> dict[str, Result]:
    """One rep: every contender of ``slot`` once, in an order drawn from ``order``, each after ``before`` (a moment
    for the last one to wind down); their results by name, in the order they ran."""
    results = {}
    for who in order.sample(list(slot), len(slot)):
        if before:
            before()
        results[who] = slot[who]()
    return results


def paired(reference: list[float], ours: list[float]) -> list[float]:
    """Each rep's ratio: ours over the reference measured in the same rep."""
    return [o / r for o, r in zip(ours, reference, strict=True)]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: order statistics k and n+1-k."""
    ordered, n = sorted(values), len(values)
    below = 0.0
    k = 0
    while k < n // 2:  # P(Binomial(n, 1/2) <= k) must stay within the tail (1 - confidence) / 2
        below += math.comb(n, k) / 2**n
        if below > (1 - confidence) / 2:
            break
        k += 1
    if k == 0:
        return float("-inf"), float("inf")  # too few reps for this confidence
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True)
class Ratio:
    """The median of the paired ratios and its 95 % confidence interval."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, reference: list[float], ours: list[float]) -> Ratio:
        ratios = paired(reference, ours)
        return cls(statistics.median(ratios), *median_interval(ratios))

    @property
    def interval(self) -> str:
        return f"{self.low:.2f}-{self.high:.2f}"

    def verdict(self, target: float, higher_is_better: bool) -> str:
        """Met or missed by the median; "clearly" when the whole 95 % interval is on that side."""
        good = (lambda r: r >= target) if higher_is_better else (lambda r: r <= target)
        if good(self.low) and good(self.high):
            return "met, clearly"
        if not good(self.low) and not good(self.high):
            return "MISSED, clearly"
        return "met (CI spans target)" if good(self.median) else "MISSED (CI spans target)"


def missed(judged: str) -> bool:
    """Whether a verdict misses its target by the median (the scripts then exit 1)."""
    return judged.startswith("MISSED")


def check_reps(parser, reps: int) -> None:
    """Refuse fewer reps than a 95 % interval on the median needs."""
    if reps < MIN_REPS:
        parser.error(f"--reps must be at least {MIN_REPS} for a 95% interval on the median")
