"""The all-pairs matrix: who meets whom in each phase, and which links and hosts are slow. Pure functions.

``pairs-latency`` and ``pairs-bw`` measure every ordered pair of ranks (or of
hosts, with ``--per-node``). A schedule is a list of phases; a phase is a list
of (source, destination) pairs measured at once, between barriers:

- ``isolated``: a round-robin tournament by the circle method. N-1 rounds
  (N rounds for odd N, one rank sitting out each) of disjoint pairs, so no two
  pairs of a round share a rank; each round runs twice, once in each
  direction, so every ordered pair gets its own row.
- ``shift``: mpiGraph's pattern. In step k (1 .. N-1) every rank sends to the
  rank k places after it while receiving from the one k places before it,
  all at once, loading the whole fabric.

The verdict (``verdict``) works on the rows those kernels write, within each
group of rows (transport, kernel, schedule, size), on the log of each figure
(bandwidth low, latency high): a value is an outlier beyond median -/+ z *
1.4826 * MAD and at least MIN_EFFECT worse than the median. A host is slow
when more than half of its links (unordered pairs, slow when either
direction is) are and its own median figure is beyond the threshold, each
host judged against the pairs between the other
hosts; then each pair against the pairs between the hosts that passed. A
slow host is reported, its links are not, and they count against no other
host: a host is not slow for its links to a slow one.

With a topology (``run --topology``) each pair is in a tier
(measure.topology.TIERS) and is judged against its own tier's median: a
cross-switch pair is not slow for being slower than a same-switch one. Before
hosts and links, the links out of the fabric's parts are judged, each
against the pairs of its tier that do not cross it:

- a dragonfly's global link between groups G1 and G2 is slow when at least
  UPLINK_SHARE of the links (unordered pairs) between the two groups are;
- a switch's uplink is slow when at least UPLINK_SHARE of its cross-switch
  links (one end under it, the other elsewhere) are slow while at most
  1 - UPLINK_SHARE of its intra-switch links are slow at least half as far
  (in log) as those: a slow host slows its intra-switch pairs as much as
  its others, a slow uplink does not, which is what tells them apart (load
  on the hosts can slow an intra-switch pair a little, never as far). A
  switch with one measured host has no intra-switch pair: there a slow host
  and a slow uplink look alike, and the host's entry says so.

The pairs a slow uplink or global link explains are reported there and not
judged again: its hosts are not slow hosts, its links not slow links. A
switch whose cross-switch and intra-switch links are slow alike has slow
hosts, and those hosts are the host rule's first guess: their pairs can be
most of a tier, whose median is then theirs. Where every pair of a tier
crosses the same part (two leaves: every cross-switch pair crosses both
uplinks) there is nothing to hold it against, and no uplink is named; the
tiers' medians, printed with the verdict, still show it.

Every rule is array work on a group's N x N matrix of figures (numpy), so time and memory grow with the pairs,
N^2: each part is held against the pairs of its tier without its own through measure.ordered, which sorts a
tier once rather than once per part, and the hosts' and links' counts are sums over the matrix's rows.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fabricbench.lazy import np
from fabricbench.measure import ordered
from fabricbench.measure.schema import is_measured
from fabricbench.measure.topology import CROSS_GROUP, CROSS_SWITCH, SAME_HOST, SAME_SWITCH, TIERS, Topology

SCHEDULES = ("isolated", "shift")
DEFAULT_OUTLIER_Z = 4.0
MAD_TO_SIGMA = 1.4826  # MAD times this estimates a normal distribution's standard deviation
MIN_EFFECT = 0.20  # by default (--outlier-floor) a pair is never slow for being less than 20 % off the median
LEAVE_ONE_OUT_UP_TO = 64  # ranks up to which each host is judged against the pairs without it (_slow_hosts_alone)
MIN_PAIRS = 3  # fewer directed pairs in a group give no median worth judging against
Z_HOLDS_UP_TO = 9_900  # pairs (100 hosts) up to which --outlier-z is used as given; past them it is raised
VERDICT_NAME = "verdict.json"
VERDICT_FORMAT = "fabricbench-pairs-verdict"
VERDICT_VERSION = 1
UPLINK_SHARE = 0.75  # the share of the links across an uplink or a global link that must be slow to name it
TIER_PASSES = 3  # the most times the tiers' medians are taken again without the slow hosts found so far
SPREAD = (0.10, 0.90)  # a tier's spread: these quantiles of its pairs' figures
# The figure judged for each pairs kernel, and whether a low value (bandwidth) or a high one (latency) is slow.
METRICS = {"pairs-bw": ("bw_MBps", "low"), "pairs-latency": ("lat_p50_us", "high")}
LISTED = 10  # the most slow uplinks, hosts (or switches of them) and links a console list names; the rest counted
HOSTS_WIDTH = 60  # the most characters of a folded host list on one line
# The table's columns a group of pair rows is made of: all that analysis reads of the all-pairs rows.
PAIR_COLUMNS = ("transport", "kernel", "schedule", "size_B", "src_rank", "dst_rank", "src_host", "dst_host")
PAIR_COLUMNS += ("status", "validation", *(metric for metric, _ in METRICS.values()))


def round_robin(participants: Sequence[int]) -> list[list[tuple[int, int]]]:
    """The circle method's rounds of disjoint unordered pairs; an odd count adds a bye (that rank sits out)."""
    players: list[int | None] = list(participants)
    if len(players) % 2:
        players.append(None)
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = []
        for i in range(count // 2):
            a, b = players[i], players[count - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if a < b else (b, a))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # the first stays, the others rotate
    return rounds


def phases(schedule: str, participants: Sequence[int]) -> list[list[tuple[int, int]]]:
    """The schedule's phases of (source, destination) pairs, covering every ordered pair once."""
    if schedule == "isolated":
        out = []
        for pairs in round_robin(participants):
            out.append(list(pairs))
            out.append([(b, a) for a, b in pairs])
        return out
    if schedule == "shift":
        count = len(participants)
        return [[(participants[i], participants[(i + k) % count]) for i in range(count)] for k in range(1, count)]
    raise ValueError(f"unknown schedule {schedule!r}")


def per_node(hosts: Sequence[str]) -> list[int]:
    """One rank per host: the lowest rank of each, in rank order (``hosts[r]`` is rank r's host)."""
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        first.setdefault(host, rank)
    return sorted(first.values())


def _ratio(value: float, median: float) -> float:
    return value / median if median else math.nan


def _beyond(figure: float, threshold: float, worse: str) -> bool:
    """Whether a host's figure (the median of both directions of its links) lies beyond ``threshold``."""
    return figure < threshold if worse == "low" else figure > threshold


def slow_host(slow_links, links):
    """The slow-host rule, here and in ``fabricbench check``: a host (or rank) is slow when more than half of its
    links are; with half or fewer, its slow links are the links' own. Counts or arrays of counts."""
    return slow_links * 2 > links


@dataclass
class PairGroup:
    """One run's group of pair rows (a transport, kernel, schedule and size, ``key``) as a matrix: its ranks
    (sorted), each rank's host, and an N x N float64 matrix of each ordered pair's figure (NaN where none; the
    diagonal is none)."""

    key: tuple
    ranks: np.ndarray
    hosts: list[str]
    values: np.ndarray
    run_id: str = ""  # the run whose rows these are (an --append folder holds several)


def fill_matrix(ranks: np.ndarray, src: np.ndarray, dst: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The N x N matrix of ``ranks`` (sorted) from one group's rows; repeated rows of a pair (run --repeat) count
    once, at their median, and a rank's row with itself is no pair."""
    count = len(ranks)
    chosen = src != dst
    code = np.searchsorted(ranks, src[chosen]) * count + np.searchsorted(ranks, dst[chosen])
    value = value[chosen]
    values = np.full(count * count, math.nan)
    values[code] = value
    if np.count_nonzero(~np.isnan(values)) < len(code):  # repeats: each pair's median
        order = np.lexsort((value, code))
        code, value = code[order], value[order]
        starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
        ends = np.r_[starts[1:], len(code)]
        low, high = value[starts + (ends - starts - 1) // 2], value[starts + (ends - starts) // 2]
        values[code[starts]] = np.where(low == high, low, (low + high) / 2)
    return values.reshape(count, count)


def is_pair_row(row: dict) -> bool:
    """A measured row of one (source, destination) pair of an all-pairs kernel (one refused has no ranks)."""
    ranks = row.get("src_rank")
    given = ranks is not None and ranks != "" and not (isinstance(ranks, float) and math.isnan(ranks))
    return row.get("kernel") in METRICS and is_measured(row.get("status", "")) and given


class RowPairs:
    """The all-pairs rows among dict rows with the table's columns, offered as measure.pair_table.PairTable
    offers a table file's: groups keyed (run_id, transport, kernel, schedule, size), ``counts`` (each group's
    measured rows with a figure, in key order), ``failed`` and ``failed_pairs`` (each failed check's ranks and
    hosts), ``buffers`` and ``groups()``."""

    def __init__(self, rows: Iterable[dict]):
        self.rows: list[dict] = []
        self.counts: dict[tuple, int] = {}
        self.failed: dict[tuple, int] = {}
        self.failed_pairs: dict[tuple, list[tuple]] = {}
        self.buffers: dict[tuple, set[str]] = {}
        for row in rows:
            if not is_pair_row(row):
                continue
            key = _row_key(row)
            self.buffers.setdefault(key, set()).add(row.get("buffer") or "host")
            if row.get("validation") == "fail":
                ends = (int(row["src_rank"]), int(row["dst_rank"]), str(row.get("src_host", "")))
                self.failed[key] = self.failed.get(key, 0) + 1
                self.failed_pairs.setdefault(key, []).append((*ends, str(row.get("dst_host", ""))))
            elif _given(row.get(METRICS[row["kernel"]][0])):
                self.rows.append(row)
                self.counts[key] = self.counts.get(key, 0) + 1
        self.counts = dict(sorted(self.counts.items()))

    def groups(self, keys: Iterable[tuple] | None = None, column: str | None = None) -> list[PairGroup]:
        """Each group's PairGroup (of the ``keys`` given, else of all), in key order: its matrix of the kernel's
        figure, or of ``column`` (NaN where a row has none); a rank's host is what the group's rows last say."""
        wanted = set(self.counts if keys is None else keys)
        groups: dict[tuple, tuple[list, list, list, dict]] = {}
        for row in self.rows:
            key = _row_key(row)
            if key not in wanted:
                continue
            src, dst, value, hosts = groups.setdefault(key, ([], [], [], {}))
            src.append(int(row["src_rank"]))
            dst.append(int(row["dst_rank"]))
            figure = row.get(METRICS[row["kernel"]][0] if column is None else column)
            value.append(float(figure) if _given(figure) else math.nan)
            hosts[src[-1]], hosts[dst[-1]] = str(row.get("src_host", "")), str(row.get("dst_host", ""))
        found = []
        for key, (src, dst, value, hosts) in sorted(groups.items()):
            src, dst, value = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(value)
            ranks = np.unique(np.concatenate([src, dst]))
            measured = ~np.isnan(value)
            matrix = fill_matrix(ranks, src[measured], dst[measured], value[measured])
            found.append(PairGroup(key[1:], ranks, [hosts[rank] for rank in ranks.tolist()], matrix, key[0]))
        return found


def _row_key(row: dict) -> tuple:
    """A pair row's group: (run_id, transport, kernel, schedule, size)."""
    return (
        str(row.get("run_id") or ""),
        row["transport"],
        row["kernel"],
        row.get("schedule") or "",
        int(row["size_B"]),
    )


def _given(value) -> bool:
    return value is not None and value != "" and not (isinstance(value, float) and math.isnan(value))


class _Judged:
    """The outlier rule on logs (module docstring): the reference's median and MAD, the reach beyond which a pair
    is slow."""

    def __init__(self, centre: float, spread: float, worse: str, z: float, floor: float):
        self.centre, self.mad, self.worse = centre, spread, worse
        self.sign = -1 if worse == "low" else 1
        self.reach = max(z * MAD_TO_SIGMA * spread, math.log1p(floor)) if not math.isnan(centre) else math.nan
        self.threshold = math.exp(centre + self.sign * self.reach) if not math.isnan(centre) else math.nan

    @classmethod
    def of(cls, logs: np.ndarray, reference: np.ndarray | None, worse: str, z: float, floor: float) -> _Judged:
        """The rule over the figures' ``logs`` (NaN where none; no rule with fewer than MIN_PAIRS), its median and
        MAD taken over the ``reference`` pairs among them (a mask; all of them where None or fewer than
        MIN_PAIRS): one copy of those logs, reordered in place for both."""
        valid = ~np.isnan(logs)
        if np.count_nonzero(valid) < MIN_PAIRS:
            return cls(math.nan, math.nan, worse, z, floor)
        base = logs[valid & reference] if reference is not None else None
        if base is None or base.size < MIN_PAIRS:
            base = logs[valid]
        centre = ordered.median(base, in_place=True)  # reordering the copy leaves its MAD alone
        return cls(centre, ordered.mad(base, centre, in_place=True), worse, z, floor)

    @property
    def median(self) -> float:
        """The reference's median figure (not its log)."""
        return math.exp(self.centre) if not math.isnan(self.centre) else math.nan

    def slow(self, logs: np.ndarray, in_place: bool = False) -> np.ndarray:
        """Which logs lie beyond the reach (NaN: none); ``in_place``: worked out in ``logs``, which the caller is
        done with."""
        off = np.subtract(logs, self.centre, out=logs if in_place else None)
        off *= self.sign
        with np.errstate(invalid="ignore"):
            return off > self.reach


def _logs(values: np.ndarray, in_place: bool = False) -> np.ndarray:
    """The log of each positive, finite figure; NaN for the rest (no measurement, 0, inf). ``in_place``: into
    ``values`` itself (a copy the caller owns)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(values, out=values if in_place else None)
    logs[~np.isfinite(logs)] = math.nan
    return logs


def _touching(chosen: np.ndarray) -> np.ndarray:
    """The pairs with an end among the ``chosen`` ranks (a bool per rank)."""
    return chosen[:, None] | chosen[None, :]


def _own(values: np.ndarray, rank: int, others: np.ndarray) -> np.ndarray:
    """Both directions of ``rank``'s pairs with the ``others`` (a bool per rank), where measured."""
    both = np.concatenate([values[rank, others], values[others, rank]])
    return both[~np.isnan(both)]


def _slow_hosts_alone(values: np.ndarray, worse: str, z: float, floor: float) -> np.ndarray:
    """The ranks more than half of whose links are slow against the pairs between the other ranks (a bool each).

    Each rank is held against a reference without its own pairs: in a small
    matrix a slow host holds too many pairs (half of them with four hosts) for
    the median of all pairs to stand. Above LEAVE_ONE_OUT_UP_TO ranks a host
    holds at most 2/N of the pairs, and the pairs' own median serves them all.
    """
    count = len(values)
    logs = _logs(values)
    linked = ~np.isnan(values)
    linked |= linked.T
    judged = np.flatnonzero(linked.any(axis=1))  # the ranks with a pair to judge
    if judged.size <= LEAVE_ONE_OUT_UP_TO:
        # A rank without pairs takes nothing out of the reference: the rule of all pairs is its own, built once
        # (a tier's matrix may hold 10,000 ranks of which a few have pairs).
        everyone = _Judged.of(logs, None, worse, z, floor)
        rules = [everyone] * count
        for rank in judged:
            alone = np.zeros(count, dtype=bool)
            alone[rank] = True
            rules[rank] = _Judged.of(logs, ~_touching(alone), worse, z, floor)
        shared = everyone.slow(logs)
        slows = [rule.slow(logs) if rule is not everyone else shared for rule in rules]
        one = False
    else:
        rule = _Judged.of(logs, None, worse, z, floor)
        rules, slows = [rule] * count, [rule.slow(logs, in_place=True)] * count
        one = True
    del logs

    def slow(besides: np.ndarray) -> np.ndarray:
        """More than half of its links slow, and its own median figure (both directions of those links) beyond
        the threshold too: one slow pair and one dip on a loaded host are two slow links of three, not a slow
        host. ``besides``: the ranks whose links count neither for nor against it."""
        allowed = ~besides
        if one:  # one rule for every rank
            either = slows[0] | slows[0].T
            bad = (either & allowed).sum(axis=1)
        else:
            bad = np.array([((s[rank] | s[:, rank]) & allowed).sum() for rank, s in enumerate(slows)])
        found = np.zeros(count, dtype=bool)
        for rank in np.flatnonzero(slow_host(bad, (linked & allowed).sum(axis=1))):
            own = _own(values, rank, allowed)
            found[rank] = _beyond(ordered.median(own[own > 0]), rules[rank].threshold, worse)
        return found

    found = slow(np.zeros(count, dtype=bool))
    # Then each again without its links to the others found: a link to a slow host is that host's.
    return found & slow(found)


def verdict(
    rows: Iterable[dict] | Iterable[PairGroup],
    z: float = DEFAULT_OUTLIER_Z,
    run_id: str = "",
    floor: float = MIN_EFFECT,
    topology: Topology | None = None,
) -> dict:
    """The slow links and slow hosts among measured pair rows (dicts with the table's columns, or the groups as
    matrices, ``PairGroup``s in key order, one at a time), and with a ``topology`` the slow uplinks and global
    links, each pair judged within its tier.

    Rows of another kernel, or not ``ok``, are left out. Repeated rows of one
    ordered pair (``run --repeat``) count once, at their median. A link is an
    unordered pair of ranks: it is slow when either direction is. A host is
    slow when more than half of its links in the group are (_slow_hosts_alone);
    its links are then not listed on their own. Without a topology the
    verdict holds no tier or uplink key. Every rule works on the group's N x N
    matrix: time and memory grow with the pairs, N^2.
    """
    items = iter(rows)
    first = next(items, None)
    every = itertools.chain([first], items) if first is not None else iter(())
    groups = every if isinstance(first, PairGroup) else RowPairs(every).groups()
    judged = []
    for group in groups:
        transport, kernel, schedule, size = group.key
        metric, worse = METRICS[kernel]
        ranks, hosts, values = group.ranks, group.hosts, group.values
        where = (transport, kernel, schedule, size, metric, worse)
        raised = outlier_z(z, int(np.count_nonzero(~np.isnan(values))))
        if topology is not None:
            judged.append(_tiered_group(where, ranks, hosts, values, topology, raised, floor))
            judged[-1]["outlier_z_used"] = raised
            continue
        slow_ranks = _slow_hosts_alone(values, worse, raised, floor)
        logs = _logs(values)
        rule = _Judged.of(logs, ~_touching(slow_ranks), worse, raised, floor)
        group = _group_verdict(where, ranks, hosts, values, rule.slow(logs, in_place=True), slow_ranks, rule.threshold)
        del logs
        centre = rule.median
        if not math.isnan(centre):  # the figure slow ones are held against: the healthy pairs' median
            group["median"] = centre
            for entry in group["slow_links"] + group["slow_hosts"]:
                entry["ratio"] = _ratio(entry["value"], centre)
        group.update(mad_log=_number(rule.mad), threshold=_number(rule.threshold), outlier_z_used=raised)
        judged.append(group)
    slow_links = [_placed(link, g) for g in judged for link in g["slow_links"]]
    slow_hosts = [_placed(host, g) for g in judged for host in g["slow_hosts"]]
    if topology is not None:
        slow_uplinks = [_placed(uplink, g) for g in judged for uplink in g["slow_uplinks"]]
        return {
            **_verdict_head(run_id, z, floor),
            "rule": _rule(z, floor) + f"; each pair against its own tier's median; an uplink (or a global link) "
            f"when at least {UPLINK_SHARE:.0%} of the links across it are slow and (an uplink) at most "
            f"{1 - UPLINK_SHARE:.0%} of its switch's intra-switch links slowed at least half as far (in log)",
            "topology": topology.source,
            "ok": not slow_links and not slow_hosts and not slow_uplinks,
            "slow_uplinks": slow_uplinks,
            "slow_links": slow_links,
            "slow_hosts": slow_hosts,
            "groups": judged,
        }
    return {
        **_verdict_head(run_id, z, floor),
        "rule": _rule(z, floor),
        "ok": not slow_links and not slow_hosts,
        "slow_links": slow_links,
        "slow_hosts": slow_hosts,
        "groups": judged,
    }


def outlier_z(z: float, pairs: int) -> float:
    """The z a group of ``pairs`` is judged with: ``z`` up to Z_HOLDS_UP_TO pairs, and past that raised so that a
    normal spread raises as many false alarms (pairs beyond it on the slow side) in the group as in one of
    Z_HOLDS_UP_TO: about 0.3 at z 4, whatever the matrix's size (5.0 at 1,024 hosts, 5.8 at 10,000)."""
    if pairs <= Z_HOLDS_UP_TO:
        return z
    normal = statistics.NormalDist()
    return max(z, normal.inv_cdf(1 - Z_HOLDS_UP_TO * normal.cdf(-z) / pairs))


def _number(value: float) -> float | None:
    """JSON has no NaN: a figure that could not be computed is null."""
    return None if math.isnan(value) else value


def _verdict_head(run_id: str, z: float, floor: float) -> dict:
    return {
        "format": VERDICT_FORMAT,
        "version": VERDICT_VERSION,
        "run_id": run_id,
        "outlier_z": z,
        "outlier_floor": floor,
    }


def _rule(z: float, floor: float) -> str:
    return (
        f"log figure beyond median -/+ {z:g} x {MAD_TO_SIGMA} x MAD and at least {floor:.0%} off; "
        "a host when more than half of its links are slow and its median figure is beyond the threshold"
    )


def _where(group: dict) -> dict:
    return {k: group[k] for k in ("transport", "kernel", "schedule", "size_B", "metric", "median")}


def _placed(entry: dict, group: dict) -> dict:
    """An entry with its group's transport, kernel, size, ...; an entry judged within its tiers keeps the median
    it was held against."""
    placed = dict(entry, **_where(group))
    if "median" in entry:
        placed["median"] = entry["median"]
    return placed


def _spread(values: np.ndarray) -> dict:
    """The median and SPREAD's quantiles (linear between the two nearest values, numpy's default method in its
    plain form) of ``values``, a copy the caller owns: one partition, in place, for all of them."""
    last = len(values) - 1
    at = {q: q * last for q in SPREAD}
    sides = {q: (math.floor(a), min(math.floor(a) + 1, last)) for q, a in at.items()}
    values.partition(sorted({*(k for pair in sides.values() for k in pair), last // 2, len(values) // 2}))
    figures = {q: float(values[low] + (values[high] - values[low]) * (at[q] - low)) for q, (low, high) in sides.items()}
    half = len(values) // 2
    middle = values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2
    return {"median": float(middle), "p10": figures[SPREAD[0]], "p90": figures[SPREAD[1]]}


def _links(chosen: np.ndarray) -> int:
    """How many links (unordered pairs) a square block of ordered pairs holds."""
    either = chosen | chosen.T
    return int(np.triu(either, 1).sum())


def _block(values: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    return values[np.ix_(rows, columns)]


class _Tier:
    """One tier's pairs not yet explained, for holding a part against those of them that do not touch it: their
    logs sorted (ordered.Remaining), how many pairs are left and how many of them have a log."""

    def __init__(self, logs: np.ndarray, pairs: int):
        self.remaining = ordered.Remaining(logs[~np.isnan(logs)])
        self.pairs = pairs

    def take_out(self, values: np.ndarray, logs: np.ndarray) -> None:
        self.remaining.take_out(logs[~np.isnan(logs)])
        self.pairs -= values.size

    def judge(self, values: np.ndarray, logs: np.ndarray, worse: str, z: float, floor: float):
        """Which of a part's own pairs of this tier (``values``, ``logs``: all of them still left) are slow against
        the tier's others, and their figures over those others' median; None where fewer than MIN_PAIRS others are
        left to hold them against."""
        if self.pairs - values.size < MIN_PAIRS:
            return None
        own = np.sort(logs[~np.isnan(logs)])
        if self.remaining.count < MIN_PAIRS:
            rule = _Judged(math.nan, math.nan, worse, z, floor)
        elif self.remaining.count - own.size >= MIN_PAIRS:
            rule = _Judged(*self.remaining.stats(own)[1:], worse, z, floor)
        else:
            rule = _Judged(*self.remaining.stats(own[:0])[1:], worse, z, floor)
        return rule.slow(logs), values / rule.median


def tier_matrix(hosts: list[str], topology: Topology) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray, list]:
    """Each pair's tier (an index into TIERS), each rank's switch and group (indices into the sorted names)."""
    host_names, host_code = np.unique(np.array(hosts, dtype=object), return_inverse=True)
    switch_names, switch_code = np.unique(
        np.array([topology.switch_of(h) for h in hosts], dtype=object), return_inverse=True
    )
    group_names, group_code = np.unique(
        np.array([topology.group_of(h) for h in hosts], dtype=object), return_inverse=True
    )
    tiers = np.full((len(hosts), len(hosts)), TIERS.index(CROSS_GROUP), dtype=np.int8)
    for row in range(len(hosts)):  # a row at a time: N^2 bytes in all, no N^2 temporaries
        line = tiers[row]
        line[group_code == group_code[row]] = TIERS.index(CROSS_SWITCH)
        line[switch_code == switch_code[row]] = TIERS.index(SAME_SWITCH)
        line[host_code == host_code[row]] = TIERS.index(SAME_HOST)
    return tiers, switch_code, list(switch_names), group_code, list(group_names)


class _Out:
    """A switch's pairs out of it not yet explained (cross-switch or cross-group, one end under it), read once from
    the N x N matrices as two blocks: ``there`` (its hosts to the others) and ``back`` (the others to its hosts);
    the pairs' values, logs and tiers in that order, there's first."""

    def __init__(self, mine, others, present, explained, tiers, values):
        self.mine, self.others = mine, others
        cross = TIERS.index(CROSS_SWITCH)
        there_tiers, back_tiers = _block(tiers, mine, others), _block(tiers, others, mine)
        self.there = _block(present, mine, others) & ~_block(explained, mine, others) & (there_tiers >= cross)
        self.back = _block(present, others, mine) & ~_block(explained, others, mine) & (back_tiers >= cross)
        self.pairs = np.concatenate([self.there.ravel(), self.back.ravel()])
        self.tiers = np.concatenate([there_tiers[self.there], back_tiers[self.back]])
        self.values = np.concatenate(
            [_block(values, mine, others)[self.there], _block(values, others, mine)[self.back]]
        )
        self.logs = _logs(self.values)
        self.links = self.there | self.back.T

    def as_links(self, chosen: np.ndarray) -> np.ndarray:
        """The links (its host i, other host j) with a direction among ``chosen`` (a bool per pair, in order)."""
        split = int(self.there.sum())
        there, back = np.zeros_like(self.there), np.zeros_like(self.back)
        there[self.there], back[self.back] = chosen[:split], chosen[split:]
        return there | back.T

    def explain(self, explained: np.ndarray) -> None:
        explained[np.ix_(self.mine, self.others)] |= self.there
        explained[np.ix_(self.others, self.mine)] |= self.back


def _slow_parts(values: np.ndarray, tiers: np.ndarray, switches, groups, worse: str, z: float, floor: float):
    """The slow global links and uplinks (module docstring), the pairs they explain (a mask), and the suspects
    (a bool per rank): the hosts under a switch whose cross-switch and intra-switch links are slow alike, which
    the host rule takes as its first guess (their pairs can be most of a tier, and its median then theirs)."""
    switch_code, switch_names = switches
    group_code, group_names = groups
    count = len(values)
    present = ~np.isnan(values)
    explained = np.zeros_like(present)
    suspects = np.zeros(count, dtype=bool)
    found: list[dict] = []
    cross, ss, cg = TIERS.index(CROSS_SWITCH), TIERS.index(SAME_SWITCH), TIERS.index(CROSS_GROUP)

    def name(entry: dict, ratio: float) -> None:
        entry.update(ratio=ratio, median=_ratio(entry["value"], ratio))
        found.append(entry)

    across = present & (tiers == cg)
    if across.any():
        every = _Tier(_logs(values[across], in_place=True), int(across.sum()))
        members = [np.flatnonzero(group_code == g) for g in range(len(group_names))]
        for g1, g2 in itertools.combinations(range(len(group_names)), 2):
            a, b = members[g1], members[g2]
            there, back = _block(present, a, b), _block(present, b, a)  # g1 -> g2, and g2 -> g1
            if not (there.any() or back.any()):
                continue
            pair_values = np.concatenate([_block(values, a, b)[there], _block(values, b, a)[back]])
            pair_logs = _logs(pair_values)
            judged = every.judge(pair_values, pair_logs, worse, z, floor)
            if judged is None:
                continue
            slow, ratios = judged
            slow_there, slow_back = np.zeros_like(there), np.zeros_like(back)
            slow_there[there], slow_back[back] = slow[: there.sum()], slow[there.sum() :]
            links, bad = int((there | back.T).sum()), int((slow_there | slow_back.T).sum())
            if bad and bad >= UPLINK_SHARE * links:
                entry = {"name": f"global link {group_names[g1]}-{group_names[g2]}", "tier": CROSS_GROUP}
                entry.update(slow_links=bad, links=links, value=ordered.median(pair_values))
                name(dict(entry, groups=[group_names[g1], group_names[g2]]), ordered.median(ratios))
                explained[np.ix_(a, b)] |= there
                explained[np.ix_(b, a)] |= back
    live = present & ~explained
    left = {
        tier: _Tier(_logs(values[live & (tiers == tier)]), int((live & (tiers == tier)).sum())) for tier in (cross, cg)
    }
    same = present & (tiers == ss)
    inside_tier = _Tier(_logs(values[same], in_place=True), int(same.sum()))
    for switch in range(len(switch_names)):
        under = switch_code == switch
        mine, others = np.flatnonzero(under), np.flatnonzero(~under)
        # Its pairs out, as links: row i of a block is its host mine[i], column j the host others[j] ("back" is
        # the other direction, transposed to the same shape).
        out = _Out(mine, others, present, explained, tiers, values)
        inside = _block(same, mine, mine)
        if not out.pairs.any() or not inside.any():
            continue  # one host under it: a slow uplink looks like a slow host (the host's entry)
        slow_out = np.zeros(out.values.size, dtype=bool)
        ratios = np.full(out.values.size, math.nan)
        rated = np.zeros(out.values.size, dtype=bool)
        for tier in (cross, cg):
            of = out.tiers == tier
            if of.any():
                judged = left[tier].judge(out.values[of], out.logs[of], worse, z, floor)
                if judged is not None:
                    slow_out[of], ratios[of], rated[of] = judged[0], judged[1], True
        slow_links = out.as_links(slow_out)
        links, bad = int(out.links.sum()), int(slow_links.sum())
        if not (bad and bad >= UPLINK_SHARE * links):
            continue
        inside_values = _block(values, mine, mine)[inside]
        inside_logs = _logs(inside_values)
        judged = inside_tier.judge(inside_values, inside_logs, worse, z, floor)
        slow_in = np.zeros_like(inside)
        alike = np.zeros_like(inside)
        if judged is not None:
            slow_in[inside] = judged[0]
            across_ratios = ratios[slow_out]
            if across_ratios.size:
                half = abs(math.log(ordered.median(across_ratios))) / 2
                with np.errstate(divide="ignore", invalid="ignore"):
                    far = (judged[1] > 0) & (np.abs(np.log(judged[1])) >= half)
                alike[inside] = judged[0] & far
            else:
                alike = slow_in
        links_in, bad_in, alike_in = _links(inside), _links(slow_in), _links(alike)
        if alike_in <= (1 - UPLINK_SHARE) * links_in:
            tier = CROSS_SWITCH if (out.tiers == cross).any() else CROSS_GROUP
            entry = {"name": f"{switch_names[switch]}'s uplink", "switch": switch_names[switch], "tier": tier}
            entry.update(slow_links=bad, links=links, value=ordered.median(out.values))
            entry.update(intra_links=links_in, slow_intra_links=bad_in, alike_intra_links=alike_in)
            name(entry, ordered.median(ratios[rated]))
            out.explain(explained)
            for tier in (cross, cg):
                of = out.tiers == tier
                left[tier].take_out(out.values[of], out.logs[of])
        else:  # its hosts slow their own pairs alike: slow hosts, not the uplink
            bad_links = slow_links.sum(axis=1) + (alike | alike.T).sum(axis=1)
            all_links = out.links.sum(axis=1) + (inside | inside.T).sum(axis=1)
            suspects[mine[slow_host(bad_links, all_links)]] = True
    return found, explained, suspects


def _tier_stats(values: np.ndarray, tiers: np.ndarray, chosen: np.ndarray) -> dict:
    """Each tier's median, spread (SPREAD's quantiles) and directed pair count over the ``chosen`` pairs with a
    positive figure, nearest tier first."""
    stats = {}
    for index, tier in enumerate(TIERS):
        mine = values[chosen & (tiers == index) & (values > 0)]
        if mine.size:
            stats[tier] = {**_spread(mine), "pairs": int(mine.size)}
    return stats


def _tiered_group(where: tuple, ranks, hosts, values, topology: Topology, z, floor) -> dict:
    """One group judged within its tiers: the slow global links and uplinks first, then the hosts and links on
    the rest, each pair's figure taken over its tier's median so every tier is held to the same rule."""
    worse = where[5]
    tiers, switch_code, switch_names, group_code, group_names = tier_matrix(hosts, topology)
    present = ~np.isnan(values)
    uplinks, explained, suspects = _slow_parts(
        values, tiers, (switch_code, switch_names), (group_code, group_names), worse, z, floor
    )
    rest = present & ~explained
    slow_ranks = suspects  # a first guess only: the passes below keep the hosts that are slow
    for _ in range(TIER_PASSES):  # a slow host can hold half a small tier: its median, then without its pairs
        kept = rest & ~_touching(slow_ranks)
        medians = np.full(len(TIERS), math.nan)
        for tier, stats in _tier_stats(values, tiers, kept).items():
            medians[TIERS.index(tier)] = stats["median"]
        with np.errstate(invalid="ignore"):
            scaled = np.where(rest & (values > 0), values / medians[tiers], math.nan)
        found = _slow_hosts_alone(scaled, worse, z, floor)
        if np.array_equal(found, slow_ranks):
            break
        slow_ranks = found
    logs = _logs(scaled)
    healthy = ~np.isnan(scaled) & ~_touching(slow_ranks)
    rule = _Judged.of(logs, healthy, worse, z, floor)
    centre = rule.median
    slow = rule.slow(logs, in_place=True)
    del logs
    group = _group_verdict(where, ranks, hosts, scaled, slow, slow_ranks, rule.threshold)
    same_switch = present & (tiers == TIERS.index(SAME_SWITCH))
    alone = ~(same_switch.any(axis=0) | same_switch.any(axis=1))
    place = {rank: index for index, rank in enumerate(ranks.tolist())}
    for host in group["slow_hosts"]:  # its figure in the metric's unit; its ratio over its tiers' medians
        index = place[host["rank"]]
        host["ratio"] = _ratio(host["value"], centre)
        own = np.concatenate([values[index, rest[index]], values[rest[:, index], index]])
        host["value"] = ordered.median(own, in_place=True)
        host["median"] = _ratio(host["value"], host["ratio"])
        if alone[index]:
            host["alone_under"] = switch_names[switch_code[index]]
    pick = min if worse == "low" else max
    for link in group["slow_links"]:
        a, b = place[link["src_rank"]], place[link["dst_rank"]]
        link["value"] = pick(float(values[place[s], place[d]]) for s, d in link["directions"])
        link["tier"] = TIERS[tiers[a, b]]
        link["median"] = float(medians[tiers[a, b]]) * centre
        link["ratio"] = _ratio(link["value"], link["median"])
    every, kept_stats = _tier_stats(values, tiers, present), _tier_stats(values, tiers, kept)
    group.update(
        median=ordered.median(values[healthy] if healthy.any() else values[present], in_place=True),
        mad_log=_number(rule.mad),
        threshold=None,
        threshold_ratio=_number(_ratio(rule.threshold, centre)),
        tiers={tier: kept_stats.get(tier, stats) for tier, stats in every.items()},
        slow_uplinks=uplinks,
    )
    return group


def _group_verdict(where: tuple, ranks, hosts, values, slow, slow_ranks, threshold) -> dict:
    """One group's links and hosts: slow hosts first (those judged slow themselves, and those with more than half
    their links slow), then the slow links between hosts that are not."""
    transport, kernel, schedule, size, metric, worse = where
    count = len(ranks)
    present = ~np.isnan(values)
    median = ordered.median(values[present], in_place=True)
    linked = present | present.T
    either = slow | slow.T
    # Each rank's links and slow links: all of a slow rank's; another's without its links to the slow ranks.
    allowed = ~slow_ranks
    links = np.where(slow_ranks, linked.sum(axis=1), (linked & allowed).sum(axis=1))
    bad = np.where(slow_ranks, either.sum(axis=1), (either & allowed).sum(axis=1))
    flagged = slow_ranks.copy()
    for rank in np.flatnonzero(~slow_ranks & slow_host(bad, links)):
        own = _own(values, rank, linked[rank] & allowed)
        flagged[rank] = _beyond(ordered.median(own[own > 0]), threshold, worse)
    on_host: dict[str, int] = {}
    for host in hosts:
        on_host[host] = on_host.get(host, 0) + 1
    everyone = np.ones(count, dtype=bool)
    slow_hosts = []
    for rank in np.flatnonzero(flagged).tolist():
        figure = ordered.median(_own(values, rank, everyone))
        slow_hosts.append(
            {
                "rank": int(ranks[rank]),
                "host": hosts[rank],
                "shared": on_host[hosts[rank]] > 1,  # other measured ranks share its host
                "slow_links": int(bad[rank]),
                "links": int(links[rank]),
                "value": figure,
                "ratio": _ratio(figure, median),
            }
        )
    pick = min if worse == "low" else max
    slow_links = []
    for a, b in zip(*np.nonzero(np.triu(either & ~_touching(flagged), 1)), strict=True):
        directions = [(a, b)] if slow[a, b] else []
        directions += [(b, a)] if slow[b, a] else []
        worst = pick(float(values[d]) for d in directions)
        slow_links.append(
            {
                "src_rank": int(ranks[a]),
                "dst_rank": int(ranks[b]),
                "src_host": hosts[a],
                "dst_host": hosts[b],
                "directions": [[int(ranks[s]), int(ranks[d])] for s, d in directions],
                "value": worst,
                "ratio": _ratio(worst, median),
            }
        )
    return {
        "transport": transport,
        "kernel": kernel,
        "schedule": schedule,
        "size_B": size,
        "metric": metric,
        "worse": worse,
        "pairs": int(present.sum()),
        "median": median,
        "slow_links": slow_links,
        "slow_hosts": slow_hosts,
    }


def _name(rank: int, host: str) -> str:
    return f"{host} (rank {rank})" if host else f"rank {rank}"


def _figure(value: float, metric: str) -> str:
    return f"{value:.1f} MB/s" if metric.endswith("_MBps") else f"{value:.2f} us"


def _what(entry: dict) -> str:
    return f"{entry['transport']} {entry['kernel']} {entry['size_B']} B"


def tier_lines(found: dict) -> list[str]:
    """One line per tier of each judged group of a verdict with a topology: its median and p10-p90 spread."""
    lines = []
    for group in found["groups"]:
        metric = group["metric"]
        for tier, s in group.get("tiers", {}).items():
            lines.append(
                f"# tiers, {_what(group)}: {tier} {_figure(s['median'], metric)} (p10 {_figure(s['p10'], metric)}, "
                f"p90 {_figure(s['p90'], metric)}, {s['pairs']:,} pairs)"
            )
    return lines


def host_list(hosts: Iterable[str], width: int = HOSTS_WIDTH) -> str:
    """Host names folded as Slurm writes them (``node[01-16,20]``, by ClusterShell's NodeSet), the first of them in
    its order to fit about ``width`` characters, with the count of those left out."""
    from ClusterShell.NodeSet import NodeSet

    def fold(names: list[str]) -> str:
        try:
            return str(NodeSet.fromlist(names))
        except Exception:  # noqa: BLE001 - a name NodeSet cannot parse: listed as it is
            return ",".join(names)

    names = sorted(set(hosts))
    with contextlib.suppress(Exception):  # noqa: BLE001 - as fold: a name NodeSet cannot parse stays in plain order
        names = list(NodeSet.fromlist(names))  # node2 before node10
    shown = len(names)
    folded = fold(names)
    while len(folded) > width and shown > 1:
        shown //= 2
        folded = fold(names[:shown])
    return folded + (f" and {len(names) - shown:,} more" if shown < len(names) else "")


def _more(count: int, what: str) -> list[str]:
    """The line that counts what a capped list left out (none where nothing was)."""
    return [f"#   and {count:,} more {what} (verdict.json lists every one)"] if count > 0 else []


def _tier_of(link: dict) -> str:
    """``cross-switch `` for a link judged within its tier, else nothing."""
    return f"{link['tier']} " if link.get("tier") else ""


def _uplink_line(uplink: dict) -> str:
    """``leaf2's uplink: 8 of 8 cross-switch links slow, ...``: a slow uplink or global link."""
    metric = uplink["metric"]
    line = (
        f"#   slow {uplink['name']}: {uplink['slow_links']:,} of {uplink['links']:,} {uplink['tier']} links slow, "
        f"{_figure(uplink['value'], metric)} against the {uplink['tier']} median {_figure(uplink['median'], metric)} "
        f"({uplink['ratio']:.2f}x; {_what(uplink)})"
    )
    if "switch" in uplink:
        normal = uplink["intra_links"] - uplink["slow_intra_links"]
        line += f"; {normal:,} of its {uplink['intra_links']:,} intra-switch links normal"
        milder = uplink["slow_intra_links"] - uplink["alike_intra_links"]
        line += f", {milder:,} slow but not half as far (in log) as these" if milder else ""
    return line


def _host_line(host: dict) -> str:
    # A rank that shares its host with other measured ranks is a slow rank, not (yet) a slow host.
    who = f"rank {host['rank']} (on {host['host']})" if host["shared"] else f"host {_name(host['rank'], host['host'])}"
    alone = host.get("alone_under")
    metric = host["metric"]
    return (
        f"#   slow {who}: {host['slow_links']:,} of {host['links']:,} links slow, {_figure(host['value'], metric)}"
        f" against the median {_figure(host['median'], metric)} ({host['ratio']:.2f}x; {_what(host)})"
        + (f"; alone under {alone}: a slow uplink of {alone} would look the same" if alone else "")
    )


def _switch_line(switch: str, hosts: list[dict]) -> str:
    """Slow hosts under one switch, named once: how many, which, and their links and figures taken together."""
    first = hosts[0]
    metric = first["metric"]
    value = float(np.median([host["value"] for host in hosts]))
    median = float(np.median([host["median"] for host in hosts]))
    slow, links = sum(host["slow_links"] for host in hosts), sum(host["links"] for host in hosts)
    return (
        f"#   slow hosts under {switch}: {len(hosts):,} ({host_list(host['host'] for host in hosts)}), {slow:,} of "
        f"{links:,} links slow, {_figure(value, metric)} against the median {_figure(median, metric)} "
        f"({_ratio(value, median):.2f}x; {_what(first)})"
    )


def _link_line(link: dict) -> str:
    ways = "both ways" if len(link["directions"]) == 2 else "{}->{}".format(*link["directions"][0])
    return (
        f"#   slow link {_name(link['src_rank'], link['src_host'])} <-> {_name(link['dst_rank'], link['dst_host'])}"
        f" ({ways}): {_figure(link['value'], link['metric'])} against the {_tier_of(link)}median "
        f"{_figure(link['median'], link['metric'])} ({link['ratio']:.2f}x; {_what(link)})"
    )


def judged_text(found: dict) -> str:
    """How many pairs the verdict judged: "12 pairs judged", and the pairs of groups too small to judge (fewer
    than MIN_PAIRS, no median to judge them against) said apart, never counted as judged."""
    counts = [group["pairs"] for group in found["groups"]]
    judged = sum(count for count in counts if count >= MIN_PAIRS)
    few = sum(count for count in counts if count < MIN_PAIRS)
    return f"{judged:,} pairs judged" + (f"; {few:,} not, in groups of fewer than {MIN_PAIRS} pairs" if few else "")


def summary_lines(found: dict, topology: Topology | None = None, listed: int = LISTED) -> list[str]:
    """The console's closing list, each line short whatever the fabric's size: each tier's median (with a
    topology), then each slow uplink, each slow host, and each slow link, with its figure against the median.
    With a ``topology`` the slow hosts under one switch are one line; each kind names at most ``listed`` and
    counts the rest (verdict.json keeps every one)."""
    if not found["groups"]:
        return []
    tiered = "slow_uplinks" in found
    if found["ok"]:
        z = found["outlier_z"]
        what = "uplink, link or host" if tiered else "link or host"
        return [*tier_lines(found), f"# all-pairs verdict: no slow {what} ({judged_text(found)}, --outlier-z {z:g})"]
    raised = sorted({g["outlier_z_used"] for g in found["groups"] if g.get("outlier_z_used", 0) > found["outlier_z"]})
    also = f"; raised to {', '.join(f'{z:.2f}' for z in raised)} for the pairs' count" if raised else ""
    lines = [*tier_lines(found), f"# all-pairs verdict (--outlier-z {found['outlier_z']:g}{also}):"]
    uplinks = found.get("slow_uplinks", [])
    lines += [_uplink_line(uplink) for uplink in uplinks[:listed]] + _more(len(uplinks) - listed, "slow uplinks")
    entries: list[tuple[str, object]] = []  # ("host", entry) or ("switch", (name, its slow hosts)), in order
    under: dict[tuple, list[dict]] = {}
    for host in found["slow_hosts"]:
        if topology is not None and not host["shared"] and host["host"] in topology.switch:
            key = (_what(host), host.get("schedule"), topology.switch_of(host["host"]))
            if key not in under:
                entries.append(("switch", key))
            under.setdefault(key, []).append(host)
        else:
            entries.append(("host", host))
    shown = [
        _host_line(entry)
        if kind == "host"
        else (_host_line(under[entry][0]) if len(under[entry]) == 1 else _switch_line(entry[2], under[entry]))
        for kind, entry in entries
    ]
    hidden = sum(1 if kind == "host" else len(under[entry]) for kind, entry in entries[listed:])
    lines += shown[:listed] + _more(hidden, "slow hosts")
    links = found["slow_links"]
    lines += [_link_line(link) for link in links[:listed]] + _more(len(links) - listed, "slow links")
    return lines
