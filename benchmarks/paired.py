"""Paired, shuffled comparisons of fabricbench against a reference tool: what the reference benchmarks share.

Not run by itself; the reference benchmarks import it (each runs from any directory, as
``python benchmarks/NAME.py``, which puts this folder on the import path). Launching a contender and reading
fabricbench's table is harness.py's.

The design both follow: on a small shared machine a tool's speed drifts by more than the differences
being measured, so no two tools are measured far apart in time. Every rep runs every contender once,
back to back, in an order shuffled anew per rep (no contender always runs first, or right after
another); a rep's ratio is a contender over the reference tool measured in that same rep. The ratios
are summarised by their median with a distribution-free 95 % confidence interval from order
statistics, and the reference run twice in every rep (the A/A control) shows the resolution the
machine allows. A target is "met, clearly" when the whole interval is on its good side.

Bracketed pairs (``run_bracketed``, ``judge_bracketed``), for machines that switch between speed modes
from one launch to the next (a VM whose same binary reads 270 us in some launches and 900 us in others):
there an A/A control per rep is not enough, since the reference and a contender can each land in a
different mode. So every contender's launch is bracketed by two launches of the reference, one right
before and one right after (R X1 R X2 R ...: a rep of k contenders makes k+1 reference launches). A pair
counts only when its two reference launches agree within ``AGREE``: the machine did not switch modes
around it, as far as launches a few seconds apart can tell. Its ratio is the contender over the geometric
mean of its two references. The kept pairs are then split into modes where the references themselves
fall into two groups apart by more than ``MODE_GAP`` (the widest gap between sorted references), and each
mode is judged on its own median.
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


def run_bracketed(
    order: random.Random, reference: Callable[[], Result], contenders: dict[str, Callable[[], Result]]
) -> dict[str, tuple[Result, Result, Result]]:
    """One rep of the bracketed design: the reference, then every contender in an order drawn from ``order``, each
    followed by the reference once more. {contender: (reference before, contender, reference after)}."""
    results, before = {}, reference()
    for who in order.sample(list(contenders), len(contenders)):
        value = contenders[who]()
        after = reference()
        results[who] = (before, value, after)
        before = after
    return results


AGREE = 1.10  # a pair counts when its two references are within 10 % of each other
MODE_GAP = 1.5  # references that sort into two groups more than 1.5x apart are two speed modes
MIN_MODE = 3  # a mode is judged only with at least this many kept pairs


@dataclass(frozen=True)
class Pair:
    """A contender's figure with the reference's figures from the launches right before and right after it."""

    before: float
    value: float
    after: float

    @property
    def agreement(self) -> float:
        """How far the two references are apart: the larger over the smaller, 1 when they agree exactly."""
        low, high = sorted((self.before, self.after))
        return high / low if low > 0 else math.inf

    @property
    def reference(self) -> float:
        return math.sqrt(self.before * self.after)

    @property
    def ratio(self) -> float:
        return self.value / self.reference


def split_at_widest_step(ordered: list[float], gap: float = MODE_GAP) -> int | None:
    """Where sorted figures fall into two speed modes: the index after which the widest step between neighbours
    comes, when that step is more than ``gap`` times; None for one mode."""
    if len(ordered) < 2:
        return None
    steps = [ordered[i + 1] / ordered[i] for i in range(len(ordered) - 1)]
    widest = max(range(len(steps)), key=steps.__getitem__)
    return widest if steps[widest] > gap else None


def split_modes(pairs: list[Pair], gap: float = MODE_GAP) -> list[list[Pair]]:
    """The pairs in one group, or in two where their references sort into two groups more than ``gap`` times apart
    at the widest step between neighbours; the group of lower references first."""
    ordered = sorted(pairs, key=lambda p: p.reference)
    split = split_at_widest_step([p.reference for p in ordered], gap)
    if split is None:
        return [ordered] if ordered else []
    return [ordered[: split + 1], ordered[split + 1 :]]


@dataclass(frozen=True)
class Mode:
    """One speed mode's kept pairs: its reference's median figure and the median of the ratios, with its interval."""

    reference: float
    ratio: Ratio
    count: int

    @property
    def judged(self) -> bool:
        return self.count >= MIN_MODE


@dataclass(frozen=True)
class Bracketed:
    """A contender at one size under the bracketed design: the pairs kept of all, their modes, and the verdict."""

    kept: int
    total: int
    modes: tuple[Mode, ...]
    verdict: str

    @property
    def worst(self) -> Mode | None:
        """The judged mode furthest on the bad side; None when no mode has enough pairs."""
        judged = [m for m in self.modes if m.judged]
        return judged[0] if judged else None


def judge_bracketed(
    pairs: list[Pair], target: float, higher_is_better: bool, agree: float = AGREE, gap: float = MODE_GAP
) -> Bracketed:
    """Keep the pairs whose references agree within ``agree``, split them into speed modes, judge each mode with
    enough pairs by its median ratio. Missed when any judged mode misses; unresolved when none has enough pairs."""
    kept = [p for p in pairs if p.agreement <= agree]
    sign = -1 if higher_is_better else 1
    modes = []
    for group in split_modes(kept, gap):
        ratios = [p.ratio for p in group]
        ratio = Ratio(statistics.median(ratios), *median_interval(ratios))
        modes.append(Mode(statistics.median(p.reference for p in group), ratio, len(group)))
    modes.sort(key=lambda m: (not m.judged, -sign * m.ratio.median))  # judged first, the worst of them first
    judged = [m for m in modes if m.judged]
    if not judged:
        verdict = f"unresolved: {len(kept)} of {len(pairs)} pairs kept"
    else:  # the worst mode's verdict: missed by its median when any mode is
        verdict = judged[0].ratio.verdict(target, higher_is_better)
    return Bracketed(len(kept), len(pairs), tuple(modes), verdict)


@dataclass(frozen=True)
class ModeRatio:
    """One speed mode of a figure's launches, both tools' launches in it: their medians and the ratio of those."""

    low: float  # the mode's range of figures, both tools' launches pooled
    high: float
    reference: list[float]
    ours: list[float]
    ratio: Ratio  # median(ours) / median(reference), with a bootstrap 95 % interval

    @property
    def judged(self) -> bool:
        return min(len(self.reference), len(self.ours)) >= MIN_MODE


def bootstrap_interval(reference: list[float], ours: list[float], draws: int = 2000) -> tuple[float, float]:
    """A percentile bootstrap 95 % interval of median(ours) / median(reference), each resampled on its own; a fixed
    seed, so that the same launches always print the same interval."""
    rng = random.Random(0)
    ratios = sorted(
        statistics.median(rng.choices(ours, k=len(ours))) / statistics.median(rng.choices(reference, k=len(reference)))
        for _ in range(draws)
    )
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def launch_modes(reference: list[float], ours: list[float], gap: float = MODE_GAP) -> list[ModeRatio]:
    """Every launch's figure of both tools, pooled and sorted, split where the widest step between neighbours is more
    than ``gap`` times: one mode, or two. Within each mode, our median over the reference's. A machine whose launches
    switch speeds puts both tools' launches in both modes; a tool whose launches all sit in another mode than the
    other's is a difference of the tools, and the modes say so by holding one tool only."""
    pooled = sorted(reference + ours)
    split = split_at_widest_step(pooled, gap)
    bounds = [(pooled[0], pooled[-1])]
    if split is not None:
        bounds = [(pooled[0], pooled[split]), (pooled[split + 1], pooled[-1])]
    modes = []
    for low, high in bounds:
        ref = [v for v in reference if low <= v <= high]
        our = [v for v in ours if low <= v <= high]
        if ref and our:
            median = statistics.median(our) / statistics.median(ref)
            ratio = Ratio(median, *bootstrap_interval(ref, our))
        else:
            ratio = Ratio(math.nan, math.nan, math.nan)
        modes.append(ModeRatio(low, high, ref, our, ratio))
    return modes


def judge_modes(
    reference: list[float], ours: list[float], target: float, higher_is_better: bool, gap: float = MODE_GAP
) -> tuple[list[ModeRatio], ModeRatio | None, str]:
    """The modes, the worst of those both tools have at least MIN_MODE launches in, and its verdict; "unresolved"
    when no mode has that many of each."""
    modes = launch_modes(reference, ours, gap)
    judged = [m for m in modes if m.judged]
    if not judged:
        return modes, None, "unresolved: " + ", ".join(f"{len(m.reference)} vs {len(m.ours)} launches" for m in modes)
    sign = -1 if higher_is_better else 1
    worst = max(judged, key=lambda m: sign * m.ratio.median)
    return modes, worst, worst.ratio.verdict(target, higher_is_better)


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
