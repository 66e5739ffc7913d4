"""Order statistics of a sorted multiset less others: the median and MAD of a tier's pairs without one part's own.

The all-pairs verdict holds each part of a fabric (a switch's uplink, a dragonfly's global link) against the
pairs of its tier that do not touch it. Taking each such reference out and sorting it again costs a sort of the
whole tier per part: at 10,000 hosts, a hundred million pairs times a few hundred switches. Here the tier is
sorted once (``Remaining``); what is taken out for good (the pairs an uplink already named explains) and what
one query leaves out (the part's own pairs) are sorted multisets beside it, and an order statistic of what is
left is found by counting with binary searches, a few of them per order statistic. The figures are exactly
those of sorting what is left and taking its middle, as ``median`` and ``mad`` take them.
"""

from __future__ import annotations

import math

from fabricbench.lazy import np


def median(values: np.ndarray, in_place: bool = False) -> float:
    """The middle value, or the mean of the two middle ones (NaN for none); ``in_place``: reorder ``values`` (a
    copy the caller owns) rather than partition a copy of it."""
    count = values.size
    if not count:
        return math.nan
    half = count // 2
    kth = half if count % 2 else (half - 1, half)
    if in_place:
        values.partition(kth)
        part = values
    else:
        part = np.partition(values, kth)
    return float(part[half]) if count % 2 else float((part[half - 1] + part[half]) / 2)


def mad(values: np.ndarray, centre: float, in_place: bool = False) -> float:
    """The median absolute deviation of ``values`` from ``centre``; ``in_place``: worked out in ``values`` (a copy
    the caller owns and is done with)."""
    off = np.subtract(values, centre, out=values if in_place else None)
    return median(np.abs(off, out=off), in_place=True)


class Remaining:
    """A sorted multiset (``base``, sorted in place: a float64 array the caller hands over) less what ``take_out``
    removed for good; ``stats(without)`` gives the count, median and MAD of what is left less ``without`` as well
    (a sorted multiset within what is left)."""

    def __init__(self, values: np.ndarray):
        values.sort()
        self.base = values
        self.removed: list[np.ndarray] = []  # sorted runs, each under half the one before: log2(taken out) of them

    def take_out(self, values: np.ndarray) -> None:
        """Remove ``values`` (each one held by what is left) from every later query. A run is merged with the one
        before it only while it is at least half that one's size, so each value is sorted again a logarithmic
        number of times, not once for every later take_out."""
        if not values.size:
            return
        self.removed.append(np.sort(values))
        while len(self.removed) > 1 and 2 * self.removed[-1].size >= self.removed[-2].size:
            last = self.removed.pop()
            self.removed[-1] = np.sort(np.concatenate([self.removed[-1], last]))

    @property
    def count(self) -> int:
        return self.base.size - sum(run.size for run in self.removed)

    def stats(self, without: np.ndarray) -> tuple[int, float, float]:
        """(count, median, MAD) of what is left less the sorted multiset ``without``; NaN for an empty set."""
        left = _Left(self.base, [*self.removed, without])
        count = left.count
        if count <= 0:
            return 0, math.nan, math.nan
        half = count // 2
        centre = left.select(half) if count % 2 else float((left.select(half - 1) + left.select(half)) / 2)
        below = left.at_most(centre)  # what lies at or below the centre: the side whose distances are c - x
        if count % 2:
            spread = left.distance(half, centre, below)
        else:
            spread = float((left.distance(half - 1, centre, below) + left.distance(half, centre, below)) / 2)
        return count, centre, spread


class _Left:
    """One query's multiset: ``base`` less each of the sorted multisets ``taken`` (all within it)."""

    def __init__(self, base: np.ndarray, taken: list[np.ndarray]):
        self.base, self.taken = base, taken
        self.count = base.size - sum(run.size for run in taken)

    def at_most(self, value: float) -> int:
        """How many left are at most ``value``."""
        found = int(np.searchsorted(self.base, value, "right"))
        return found - sum(int(np.searchsorted(run, value, "right")) for run in self.taken)

    def select(self, rank: int) -> float:
        """The ``rank``-th smallest left (from 0).

        The answer sits at a position of ``base`` no lower than ``rank`` plus the values taken out below it, and
        each position past a value adds at most one to the count: so jump by what is still missing until the
        count at a value reaches rank + 1 (a few jumps where what is taken out is a small part of the base).
        """
        base = self.base
        position = rank
        while True:
            value = base[position]
            missing = rank + 1 - self.at_most(value)
            if missing <= 0:
                return float(value)
            position = int(np.searchsorted(base, value, "right")) - 1 + missing

    def distance(self, rank: int, centre: float, below: int) -> float:
        """The ``rank``-th smallest |x - centre| over what is left (from 0), ``below`` of which lie at or below it.

        Two sorted runs: centre - x for the values at or below it, nearest first, and x - centre above it; the
        rank-th of the two is found by a binary search on how many come from the first run.
        """
        above = self.count - below

        def near(i: int) -> float:  # the i-th nearest at or below the centre
            return centre - self.select(below - 1 - i)

        def far(i: int) -> float:  # the i-th nearest above it
            return self.select(below + i) - centre

        want = rank + 1
        low, high = max(0, want - above), min(want, below)
        while True:
            taken = (low + high) // 2
            rest = want - taken
            if taken < below and rest > 0 and far(rest - 1) > near(taken):
                low = taken + 1
            elif taken > 0 and rest < above and near(taken - 1) > far(rest):
                high = taken - 1
            else:
                last = [near(taken - 1)] if taken else []
                last += [far(rest - 1)] if rest else []
                return float(max(last))
