"""The congestion kernel's pure parts (GPCNeT's question): which ranks are canaries and which congest, what each
rank does in a phase, and the congestion impact factor.

GPCNeT (Global Performance and Congestion Network Tests, Cray/HPE and NERSC) splits the nodes into canaries
(about 20 %) and congestors, times the canaries alone, then while the congestors flood the network, and reports
the congestion impact factor: congested / isolated for a time, isolated / congested for a bandwidth, for the mean
and for the 99th percentile. This module holds no MPI: the pattern (run.patterns.Congestion) lays out the phases,
a transport's ``congestion_case`` runs a rank's part of one.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from fabricbench.argtypes import byte_size
from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.measure.stats import nearest_rank

KiB = 1024

# The canary tests, with GPCNeT's sizes and names. Each sample is one iteration of the test on one canary rank.
# rr-latency: each canary exchanges with its two neighbours in a random ring of the canaries (Irecv and Isend to
#   both, then Waitall); the row reports half an exchange, as GPCNeT.
# rr-bw: a barrier among the canaries, then RR_BW_WINDOW messages to each neighbour in flight; the barrier is
#   timed with them (GPCNeT's "BW+Sync").
# allreduce: one MPI_Allreduce of int64 sums among the canaries per sample, back to back.
CANARIES = {"rr-latency": 8, "rr-bw": 128 * KiB, "allreduce": 8}
CANARY_TITLES = {
    "rr-latency": "RR Two-sided Lat",
    "rr-bw": "RR Two-sided BW+Sync",
    "allreduce": "Multiple Allreduce",
}
CANARY_UNITS = {"rr-latency": "us", "rr-bw": "MB/s", "allreduce": "us"}
RR_BW_WINDOW = 8  # rr-bw's messages in flight to each neighbour
# The congestor patterns, with GPCNeT's sizes; the first rank of a group is its incast target or Get root.
# all-to-all: MPI_Alltoall among the group's ranks.
# incast: every other rank of the group sends to the first (two-sided).
# put-incast: every other rank puts into the first's window and flushes (one-sided).
# get-bcast: every other rank gets from the first's window and flushes (one-sided broadcast).
CONGESTORS = {"all-to-all": 4 * KiB, "incast": 4 * KiB, "put-incast": 4 * KiB, "get-bcast": 4 * KiB}
MIX = "mix"  # GPCNeT's own congested phase: the four patterns at once, each on a quarter of the congestors
NONE = "none"  # the isolated phase: the congestors idle
MIN_CANARIES = 2
MIN_GROUP = 2  # a congestor pattern needs a first rank and one other
DEFAULT_FRACTION = 0.2
DEFAULT_SEED = 1
INT64 = 8  # allreduce's elements
# Where the canaries and the congestors go (--congestion-placement). random: GPCNeT's seeded shuffle, blind to
# the fabric. The other two need a topology: cross-switch puts each canary's ring neighbour under another switch
# and the congestors' first rank (the incast target, the Get root) under the first canary's switch with the other
# congestors under the other switches, so the canaries' messages and the incast cross the same uplinks;
# within-switch, the control, puts every canary under one switch and the congestors under the others, sharing no
# link with the canaries.
RANDOM, CROSS_SWITCH, WITHIN_SWITCH = "random", "cross-switch", "within-switch"
PLACEMENTS = (RANDOM, CROSS_SWITCH, WITHIN_SWITCH)


@dataclass(frozen=True)
class Test:
    """A canary test or congestor pattern as asked for: its name and message size in bytes."""

    name: str
    size: int


def parse_tests(text: str, known: dict[str, int], what: str, extra: Sequence[str] = ()) -> tuple[Test, ...]:
    """``NAME[:SIZE],...`` into Tests; SIZE takes K/M suffixes (1024s); a name's default size where none is given.
    UsageError naming the problem for an unknown name, a bad size or a repeat."""
    parse_size = byte_size("message size", 1)
    found: list[Test] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, size_text = item.partition(":")
        if name not in known and name not in extra:
            raise UsageError(f"unknown {what} {name!r}; known: {', '.join([*known, *extra])}")
        if any(test.name == name for test in found):
            raise UsageError(f"{what} {name!r} is named twice")
        size = parse_size(size_text) if size_text else known.get(name, max(known.values()))
        if name == "allreduce" and size % INT64:
            raise UsageError(f"bad size {size_text!r} for canary allreduce: a multiple of its {INT64}-byte int64s")
        found.append(Test(name, size))
    if not found:
        raise UsageError(f"no {what} named")
    return tuple(found)


@dataclass(frozen=True)
class Placement:
    """Which ranks do what: ``canaries`` in ring order (the seeded permutation; the first leads), ``congestors`` in
    their shuffled order, and the ``idle`` ranks (--per-node leaves all but one rank of each host out)."""

    canaries: tuple[int, ...]
    congestors: tuple[int, ...]
    idle: tuple[int, ...]
    units: str  # "ranks", or "hosts" under --per-node
    seed: int
    placement: str = RANDOM  # how they were placed (PLACEMENTS)

    def role_of(self, rank: int) -> str:
        return "canary" if rank in self.canaries else "congestor" if rank in self.congestors else "idle"

    def metadata(self, hosts: Sequence[str], switches: Sequence[str] | None = None) -> dict:
        """What metadata.json keeps: the roles, and each rank's role, host and switch ("" without a topology)."""
        switch = list(switches) if switches is not None else [""] * len(hosts)
        return {
            "seed": self.seed,
            "placement": self.placement,
            "placed_by": self.units,
            "canaries": list(self.canaries),
            "congestors": list(self.congestors),
            "idle": list(self.idle),
            "canary_hosts": sorted({hosts[r] for r in self.canaries}),
            "congestor_hosts": sorted({hosts[r] for r in self.congestors}),
            "canary_switches": sorted({switch[r] for r in self.canaries} - {""}),
            "congestor_switches": sorted({switch[r] for r in self.congestors} - {""}),
            "ranks": [
                {"rank": r, "role": self.role_of(r), "host": hosts[r], "switch": switch[r]} for r in range(len(hosts))
            ],
        }


def canary_count(units: int, fraction: float) -> int:
    """Canaries among ``units``: the fraction, rounded, and at least MIN_CANARIES."""
    return max(MIN_CANARIES, round(fraction * units))


def needed_congestors(congestors: Sequence[Test]) -> int:
    """Congestor units the patterns need: MIN_GROUP for one alone, a quarter of at least MIN_GROUP each for mix."""
    return max((4 * MIN_GROUP if test.name == MIX else MIN_GROUP) for test in congestors)


def check_units(units: int, fraction: float, congestors: Sequence[Test], what: str = "ranks") -> None:
    """UsageError, in one line, where ``units`` ranks (or hosts) cannot hold the canaries and the congestors; it
    names the fewest that can."""
    need = needed_congestors(congestors)
    if units - canary_count(units, fraction) >= need:
        return
    least = next(u for u in itertools.count(MIN_CANARIES + need) if u - canary_count(u, fraction) >= need)
    mix = " (mix runs the four patterns at once, a quarter of the congestors each)" if need > MIN_GROUP else ""
    raise UsageError(
        f"congestion needs at least {least} {what}: {canary_count(least, fraction)} canaries at --canary-fraction "
        f"{fraction:g} and {need} congestors{mix}; got {units}"
    )


def place(
    hosts: Sequence[str],
    per_node: bool,
    fraction: float,
    seed: int,
    placement: str = RANDOM,
    switches: Sequence[str] | None = None,
) -> Placement:
    """The roles of the ranks on ``hosts`` (``hosts[r]`` is rank r's host, ``switches[r]`` its switch).

    Every rank takes part, or under ``per_node`` the lowest rank of each host. The units are shuffled with
    ``seed`` (random.Random: the same on every rank and every Python). ``random``: canaries and congestors
    interleave across hosts as GPCNeT places them; the first ``canary_count`` become the canaries, in that order
    the ring. ``cross-switch`` and ``within-switch`` (``switches`` needed) place by switch, as ``by_switch`` says;
    UsageError, one line, where the switches cannot hold that placement.
    """
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        first.setdefault(host, rank)
    units = sorted(first.values()) if per_node else list(range(len(hosts)))
    order = list(units)
    random.Random(seed).shuffle(order)
    count = canary_count(len(order), fraction)
    idle = tuple(sorted(set(range(len(hosts))) - set(units)))
    unit_name = "hosts" if per_node else "ranks"
    if placement == RANDOM:
        return Placement(tuple(order[:count]), tuple(order[count:]), idle, unit_name, seed)
    if switches is None:
        raise UsageError(f"--congestion-placement {placement} needs a topology (--topology FILE)")
    canaries, congestors = by_switch(order, [switches[u] for u in order], count, placement)
    return Placement(canaries, congestors, idle, unit_name, seed, placement)


def by_switch(units: Sequence[int], switches: Sequence[str], count: int, placement: str) -> tuple[tuple, tuple]:
    """(canaries in ring order, congestors) of ``units`` (shuffled; ``switches[i]`` is ``units[i]``'s switch).

    The switches keep the order of their lowest unit, so the first is rank 0's. cross-switch: the canaries go
    round the switches, each one's ring neighbours under other switches (at each step the switch with the most
    units left that differs from the last canary's, and for the last canary from the first's too); the hot
    switch is the first canary's. within-switch: the canaries are ``count`` units under the first switch after
    rank 0's that holds enough; the hot switch is rank 0's. Either way the congestors' first (the incast target,
    the Get root) is under the hot switch, then come the units under the other switches (the senders, whose
    incast crosses the hot switch's uplink), then the hot switch's others (their incast stays inside it).
    """
    pools: dict[str, list[int]] = {}
    for unit, switch in zip(units, switches, strict=True):
        pools.setdefault(switch, []).append(unit)
    names = sorted(pools, key=lambda name: min(pools[name]))
    if len(names) < 2:
        raise UsageError(
            f"--congestion-placement {placement} needs units under at least 2 switches; all are under {names[0]}"
        )
    if placement == CROSS_SWITCH:
        ring = _ring(pools, names, count)
        hot = next(name for name in names if ring[0] in pools[name])
    elif placement == WITHIN_SWITCH:
        hot = names[0]
        home = next((name for name in names[1:] if len(pools[name]) >= count), None)
        if home is None:
            raise UsageError(
                f"--congestion-placement within-switch needs {count} canaries under one switch other than {hot} "
                f"(the congestors' first's); the most under one is {max(len(pools[n]) for n in names[1:])}"
            )
        ring = pools[home][:count]
    else:
        raise UsageError(f"unknown congestion placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    left = {name: [unit for unit in pool if unit not in ring] for name, pool in pools.items()}
    if not left[hot] or not any(left[name] for name in names if name != hot):
        raise UsageError(
            f"--congestion-placement {placement} needs congestors under {hot} (the incast target's switch) and "
            "under another switch, beside the canaries"
        )
    target, *rest = left[hot]
    senders = [unit for name in names if name != hot for unit in left[name]]
    return tuple(ring), (target, *senders, *rest)


def _ring(pools: dict[str, list[int]], names: list[str], count: int) -> list[int]:
    """``count`` canaries round the switches, no two neighbours in the ring under one switch; UsageError where the
    switches cannot (two switches and an odd count above 2, or one switch holding most of the units)."""
    left = {name: list(pool) for name, pool in pools.items()}
    ring: list[tuple[int, str]] = []
    for index in range(count):
        avoid = {ring[-1][1]} if ring else set()
        if index == count - 1 and count > 2:
            avoid.add(ring[0][1])
        free = [name for name in names if left[name] and name not in avoid]
        if not free:
            held = ", ".join(f"{name} {len(pools[name])}" for name in names)
            raise UsageError(
                f"--congestion-placement cross-switch cannot ring {count} canaries with each neighbour under another "
                f"switch (units per switch: {held})"
            )
        name = max(free, key=lambda n: len(left[n]))  # max keeps the first of the fullest
        ring.append((left[name].pop(0), name))
    return [unit for unit, _ in ring]


@dataclass(frozen=True)
class Group:
    """One congestor pattern's ranks in a phase; ``ranks[0]`` is its incast target or Get root."""

    pattern: str
    size: int
    ranks: tuple[int, ...]


def groups(placement: Placement, congestor: Test) -> tuple[Group, ...]:
    """The congestor groups of a phase: none when isolated, one on every congestor for a pattern alone, and for
    mix one per pattern on a quarter of the congestors each (the first quarters take the remainder)."""
    if congestor.name == NONE:
        return ()
    ranks = placement.congestors
    if congestor.name != MIX:
        return (Group(congestor.name, congestor.size, ranks),)
    names = list(CONGESTORS)
    base, extra = divmod(len(ranks), len(names))
    out, start = [], 0
    for index, name in enumerate(names):
        count = base + (index < extra)
        out.append(Group(name, congestor.size, ranks[start : start + count]))
        start += count
    return tuple(out)


@dataclass(frozen=True)
class Role:
    """What one rank does in one phase: the canary test, the canaries in ring order (the first leads: it waits for
    every group's first rank to say its pattern runs before the samples, and tells them to stop after), and the
    congestor groups running meanwhile (none in the isolated phase). ``rank`` is this rank."""

    rank: int
    canary: Test
    canaries: tuple[int, ...]
    groups: tuple[Group, ...]
    window: int = RR_BW_WINDOW

    @property
    def is_canary(self) -> bool:
        return self.rank in self.canaries

    @property
    def group(self) -> Group | None:
        """This rank's congestor group in the phase, None when it is a canary or idle."""
        return next((g for g in self.groups if self.rank in g.ranks), None)

    def neighbours(self) -> tuple[int, int]:
        """(left, right) in the ring of canaries: equal with two canaries."""
        ring = self.canaries
        at = ring.index(self.rank)
        return ring[at - 1], ring[(at + 1) % len(ring)]


@dataclass(frozen=True)
class Flood:
    """What one congestor rank did in one run() while its group was confirmed running: its iterations, the bytes
    it moved and for how long (a transport's Congestor says how it counts them). The pattern reads the timed
    run's."""

    iterations: int
    moved_bytes: int
    active_ns: int


# --- figures ------------------------------------------------------------------------------------------------------

TAIL = 99.0  # the percentile of the key results (GPCNeT's "99%")


def canary_figures(test: str, size: int, per_rank: Sequence[np.ndarray], window: int = RR_BW_WINDOW) -> dict:
    """A canary test's figures from every canary rank's samples (ns), pooled exactly (no rounding before a ratio).

    A time test (rr-latency halved, allreduce): mean, p50 and p99 of the times in µs. rr-bw: each sample's
    bandwidth (what the rank sent to both neighbours over the sample) in MB/s, its mean and p50, and as its 99 %
    figure the bandwidth that 99 % of the samples reach (the 1st percentile: the tail is the slow side).
    Percentiles are nearest-rank, as every figure of the table. The per-rank spread is the slowest rank's mean
    over the fastest's (1 when they agree).
    """
    arrays = [np.asarray(samples, dtype=np.float64) for samples in per_rank if len(samples)]
    if not arrays:
        return {"mean": math.nan, "p50": math.nan, "p99": math.nan, "rank_spread": math.nan, "samples": 0}
    bandwidth = test == "rr-bw"
    if bandwidth:
        sent = 2 * window * size
        values = [sent / (a / 1e9) / 1e6 for a in arrays]  # MB/s, MB = 10^6 B
    else:
        divisor = 2.0 if test == "rr-latency" else 1.0
        values = [a / divisor / 1e3 for a in arrays]  # µs
    pooled = np.sort(np.concatenate(values))
    means = np.array([v.mean() for v in values])
    slowest, fastest = (means.min(), means.max()) if bandwidth else (means.max(), means.min())
    return {
        "mean": float(pooled.mean()),
        "p50": nearest_rank(pooled, 50),
        "p99": nearest_rank(pooled, 100 - TAIL if bandwidth else TAIL),
        "rank_spread": float(fastest / slowest if bandwidth else slowest / fastest) if min(means) > 0 else math.nan,
        "samples": int(pooled.size),
    }


def impact(test: str, isolated: float, congested: float) -> float:
    """The congestion impact factor of one figure: congested / isolated for a time, isolated / congested for a
    bandwidth, so that above 1 is always worse. NaN where either side is missing or not positive."""
    if not (isolated > 0 and congested > 0) or not (math.isfinite(isolated) and math.isfinite(congested)):
        return math.nan
    return isolated / congested if test == "rr-bw" else congested / isolated
