"""Netgauge's effective bisection bandwidth: random perfect matchings of the ranks (or hosts), every pair
exchanging both ways at once, and the per-pair rate distribution by tier. Pure functions, no network.

Hoefler, Schneider and Lumsdaine (2008): on a tree with static routing, what a random bisection achieves is
below the nominal full bisection; the effective bisection bandwidth is the mean per-pair rate over many random
bisections, read beside one pair's rate alone.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fabricbench.lazy import np
from fabricbench.measure.stats import nearest_rank

DEFAULT_ROUNDS = 8  # --bisection-rounds: random matchings (phases) per size
DEFAULT_SEED = 1  # --bisection-seed
MAX_ROUNDS = 1000
ALL = "all"  # the tier of the row over every pair
LOW_TAIL = 1.0  # bw_p1_MBps: the rate 99 % of the pairs reach (the 1st percentile; the slow side is the tail)


@dataclass(frozen=True)
class Matching:
    """One random bisection: its pairs (each pair's ends from the two halves of the shuffle) and the unit an odd
    count leaves out (None when even)."""

    pairs: tuple[tuple[int, int], ...]
    left_out: int | None = None

    def partner(self, unit: int) -> int | None:
        """``unit``'s partner in this matching, None when it has none (left out, or not taking part)."""
        for a, b in self.pairs:
            if unit in (a, b):
                return b if unit == a else a
        return None


def matchings(units: Sequence[int], rounds: int, seed: int) -> list[Matching]:
    """``rounds`` random perfect matchings of ``units``, reproducible from ``seed``: each round shuffles the units
    (one generator for the whole sequence), splits them into two halves and pairs the i-th of the first half with
    the i-th of the second. With an odd count the shuffle's last unit sits the round out."""
    shuffler = random.Random(seed)
    found = []
    for _ in range(rounds):
        order = list(units)
        shuffler.shuffle(order)
        left_out = order.pop() if len(order) % 2 else None
        half = len(order) // 2
        found.append(Matching(tuple(zip(order[:half], order[half:], strict=True)), left_out))
    return found


@dataclass(frozen=True)
class PairRate:
    """One pair of one matching, measured: its matching's index, its tier, and each direction's rate in MB/s
    (bytes one end sent over its own timed run)."""

    matching: int
    tier: str
    one_way_MBps: tuple[float, float]

    @property
    def rate_MBps(self) -> float:
        """The pair's rate: one direction's, the mean of the two (what a link carries each way, and what a single
        pair's bw reads)."""
        return (self.one_way_MBps[0] + self.one_way_MBps[1]) / 2


def tier_figures(rates: Sequence[PairRate], matchings_count: int, tiers: Sequence[str] = ()) -> dict[str, dict]:
    """The per-pair rate distribution over every pair of every matching, for ``all`` and then each tier of
    ``tiers`` (in that order) that some pair fell in: mean, the 1st percentile (the rate 99 % of the pairs reach),
    the median (nearest rank), the aggregate (the sum over a matching's pairs of both directions, averaged over all
    ``matchings_count`` matchings, so the tiers' aggregates add up to ``all``'s) and the pairs counted."""
    groups = {ALL: list(rates)}
    for tier in tiers:
        members = [rate for rate in rates if rate.tier == tier]
        if members:
            groups[tier] = members
    return {tier: _figures(members, matchings_count) for tier, members in groups.items() if members}


def _figures(members: list[PairRate], matchings_count: int) -> dict:
    values = np.sort(np.array([member.rate_MBps for member in members], dtype=np.float64))
    both_ways = sum(sum(member.one_way_MBps) for member in members)
    return {
        "bw_MBps": float(values.mean()),
        "bw_p1_MBps": nearest_rank(values, LOW_TAIL),
        "bw_p50_MBps": nearest_rank(values, 50),
        "aggregate_MBps": both_ways / matchings_count if matchings_count else math.nan,
        "tier_pairs": len(members),
    }


def effective_lines(rows: Sequence[dict], single_pair: Callable[[dict], float | None]) -> list[str]:
    """The end-of-run summary: per transport and repeat, the effective bisection bandwidth (the mean per-pair rate of
    the ``all`` row) at the largest size measured, with its ratio to ``single_pair(row)`` (one pair's rate alone at
    that transport and size) where there is one."""
    largest: dict[tuple, dict] = {}
    for row in rows:
        key = (row.get("transport"), row.get("repeat", 0))
        if row.get("tier") == ALL and _finite(row.get("bw_MBps")) and row["size_B"] >= largest.get(key, row)["size_B"]:
            largest[key] = row
    out = []
    for row in largest.values():
        text = (
            f"# Effective bisection bandwidth on {row['transport']}, {int(row['size_B'])} B: "
            f"{row['bw_MBps']:.1f} MB/s per pair ({row['pairs']} pairs at once, "
            f"{row['bw_p1_MBps']:.1f} MB/s reached by 99 % of them)"
        )
        alone = single_pair(row)
        if _finite(alone) and alone > 0:
            text += f", {row['bw_MBps'] / alone:.2f}x one pair alone ({alone:.1f} MB/s)"
        out.append(text)
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
