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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from fabricbench.measure.schema import is_measured

SCHEDULES = ("isolated", "shift")
DEFAULT_OUTLIER_Z = 4.0
MAD_TO_SIGMA = 1.4826  # MAD times this estimates a normal distribution's standard deviation
MIN_EFFECT = 0.20  # by default (--outlier-floor) a pair is never slow for being less than 20 % off the median
LEAVE_ONE_OUT_UP_TO = 64  # ranks up to which each host is judged against the pairs without it (_slow_hosts_alone)
MIN_PAIRS = 3  # fewer directed pairs in a group give no median worth judging against
VERDICT_NAME = "verdict.json"
VERDICT_FORMAT = "fabricbench-pairs-verdict"
VERDICT_VERSION = 1
# The figure judged for each pairs kernel, and whether a low value (bandwidth) or a high one (latency) is slow.
METRICS = {"pairs-bw": ("bw_MBps", "low"), "pairs-latency": ("lat_p50_us", "high")}


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


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _ratio(value: float, median: float) -> float:
    return value / median if median else math.nan


def judge_group(
    values: dict, worse: str, z: float, reference: Iterable | None = None, floor: float = MIN_EFFECT
) -> tuple[float, float, float, set]:
    """(median, MAD of the logs, threshold, the slow keys) for one group's {key: figure}; the median and MAD are
    taken over the ``reference`` keys (all keys when None or fewer than MIN_PAIRS).

    The log makes the rule scale-free: half the median's bandwidth is as far
    out as twice its latency, and a few very fast pairs cannot stretch the
    spread enough to hide a slow one. Figures that are not positive (no
    measurement) take no part.
    """
    logs = {key: math.log(v) for key, v in values.items() if v > 0 and math.isfinite(v)}
    if len(logs) < MIN_PAIRS:
        return math.nan, math.nan, math.nan, set()
    kept = [logs[key] for key in reference or () if key in logs]
    base = kept if len(kept) >= MIN_PAIRS else list(logs.values())
    centre = _median(base)
    mad = _median([abs(v - centre) for v in base])
    reach = max(z * MAD_TO_SIGMA * mad, math.log1p(floor))
    sign = -1 if worse == "low" else 1
    threshold = math.exp(centre + sign * reach)
    slow = {key for key, v in logs.items() if sign * (v - centre) > reach}
    return math.exp(centre), mad, threshold, slow


def _beyond(figures: list[float], threshold: float, worse: str) -> bool:
    """Whether the median of a host's figures (both directions of its links) lies beyond ``threshold``."""
    figure = _median(figures) if figures else math.nan
    return figure < threshold if worse == "low" else figure > threshold


def slow_host(slow_links: int, links: int) -> bool:
    """The slow-host rule, here and in ``fabricbench check``: a host (or rank) is slow when more than half of its
    links are; with half or fewer, its slow links are the links' own."""
    return slow_links * 2 > links


def _slow_hosts_alone(values: dict[tuple[int, int], float], worse: str, z: float, floor: float) -> set[int]:
    """The ranks more than half of whose links are slow against the pairs between the other ranks.

    Each rank is held against a reference without its own pairs: in a small
    matrix a slow host holds too many pairs (half of them with four hosts) for
    the median of all pairs to stand. Above LEAVE_ONE_OUT_UP_TO ranks a host
    holds at most 2/N of the pairs, and the pairs' own median serves them all.
    """
    ranks = sorted({rank for pair in values for rank in pair})
    leave_out = len(ranks) <= LEAVE_ONE_OUT_UP_TO
    overall = None if leave_out else judge_group(values, worse, z, floor=floor)
    judged: dict[int, tuple] = {}
    for rank in ranks:
        reference = [p for p in values if rank not in p]
        judged[rank] = judge_group(values, worse, z, reference, floor) if leave_out else overall

    def slow(rank: int, besides: set) -> bool:
        """More than half of its links slow, and its own median figure (both directions of those links) beyond
        the threshold too: one slow pair and one dip on a loaded host are two slow links of three, not a slow
        host."""
        threshold, slow_pairs = judged[rank][2:]
        if not slow_host(*_link_counts(rank, values, slow_pairs, besides)):
            return False
        own = [v for pair, v in values.items() if rank in pair and not set(pair) & besides and v > 0]
        return _beyond(own, threshold, worse)

    found = {rank for rank in ranks if slow(rank, frozenset())}
    # Then each again without its links to the others found: a link to a slow host is that host's.
    return {rank for rank in found if slow(rank, found - {rank})}


def _link_counts(rank: int, pairs: Iterable, slow: Iterable, besides: set = frozenset()) -> tuple[int, int]:
    """(slow links, links) of ``rank``: its links (unordered pairs) among ``pairs``, slow when a direction is in
    ``slow``, leaving out its links to the ranks in ``besides`` (hosts found slow: those links are theirs, and
    count neither for nor against this one)."""
    links = {frozenset(pair) for pair in pairs if rank in pair and not set(pair) & besides}
    bad = {frozenset(pair) for pair in slow if frozenset(pair) in links}
    return len(bad), len(links)


def _key(row: dict) -> tuple:
    return (row["transport"], row["kernel"], row.get("schedule") or "", int(row["size_B"]))


def verdict(rows: Iterable[dict], z: float = DEFAULT_OUTLIER_Z, run_id: str = "", floor: float = MIN_EFFECT) -> dict:
    """The slow links and slow hosts among measured pair rows (dicts with the table's columns).

    Rows of another kernel, or not ``ok``, are left out. Repeated rows of one
    ordered pair (``run --repeat``) count once, at their median. A link is an
    unordered pair of ranks: it is slow when either direction is. A host is
    slow when more than half of its links in the group are (_slow_hosts_alone);
    its links are then not listed on their own.
    """
    groups: dict[tuple, dict[tuple[int, int], list[float]]] = {}
    hosts: dict[int, str] = {}
    for row in rows:
        if row.get("kernel") not in METRICS or not is_measured(row.get("status", "")):
            continue
        if row.get("validation") == "fail":
            continue
        metric, _ = METRICS[row["kernel"]]
        value = row.get(metric)
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            continue
        src, dst = int(row["src_rank"]), int(row["dst_rank"])
        hosts[src], hosts[dst] = str(row.get("src_host", "")), str(row.get("dst_host", ""))
        groups.setdefault(_key(row), {}).setdefault((src, dst), []).append(float(value))
    judged = []
    for (transport, kernel, schedule, size), by_pair in sorted(groups.items()):
        metric, worse = METRICS[kernel]
        values = {pair: _median(v) for pair, v in by_pair.items()}
        slow_ranks = _slow_hosts_alone(values, worse, z, floor)
        healthy = [pair for pair in values if not set(pair) & slow_ranks]
        centre, mad, threshold, slow = judge_group(values, worse, z, healthy, floor)
        group = _group_verdict(
            transport, kernel, schedule, size, metric, worse, values, hosts, slow, slow_ranks, threshold
        )
        if not math.isnan(centre):  # the figure slow ones are held against: the healthy pairs' median
            group["median"] = centre
            for entry in group["slow_links"] + group["slow_hosts"]:
                entry["ratio"] = _ratio(entry["value"], centre)
        group.update(mad_log=_number(mad), threshold=_number(threshold))
        judged.append(group)
    slow_links = [dict(link, **_where(g)) for g in judged for link in g["slow_links"]]
    slow_hosts = [dict(host, **_where(g)) for g in judged for host in g["slow_hosts"]]
    return {
        "format": VERDICT_FORMAT,
        "version": VERDICT_VERSION,
        "run_id": run_id,
        "outlier_z": z,
        "outlier_floor": floor,
        "rule": f"log figure beyond median -/+ {z:g} x {MAD_TO_SIGMA} x MAD and at least {floor:.0%} off; "
        "a host when more than half of its links are slow and its median figure is beyond the threshold",
        "ok": not slow_links and not slow_hosts,
        "slow_links": slow_links,
        "slow_hosts": slow_hosts,
        "groups": judged,
    }


def _number(value: float) -> float | None:
    """JSON has no NaN: a figure that could not be computed is null."""
    return None if math.isnan(value) else value


def _where(group: dict) -> dict:
    return {k: group[k] for k in ("transport", "kernel", "schedule", "size_B", "metric", "median")}


def _group_verdict(
    transport, kernel, schedule, size, metric, worse, values, hosts, slow, slow_ranks, threshold
) -> dict:
    """One group's links and hosts: slow hosts first (those judged slow themselves, and those with more than half
    their links slow), then the slow links between hosts that are not."""
    median = _median(list(values.values()))
    links: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for src, dst in values:
        links.setdefault((min(src, dst), max(src, dst)), [])
    for src, dst in slow:
        links[(min(src, dst), max(src, dst))].append((src, dst))
    slow_hosts = []
    flagged: set[int] = set()

    def linked(mine: list) -> list[float]:
        """The figures of both directions of the links in ``mine``."""
        return [v for (s, d), v in values.items() if (min(s, d), max(s, d)) in mine and v > 0]

    ranks_on: dict[str, int] = {}
    for rank in {r for link in links for r in link}:
        ranks_on[hosts.get(rank, "")] = ranks_on.get(hosts.get(rank, ""), 0) + 1
    for rank in sorted({r for link in links for r in link}):
        mine = [link for link in links if rank in link]
        bad = [link for link in mine if links[link]]
        if rank not in slow_ranks:  # its links to the slow hosts are theirs: judged on its other links alone
            mine = [link for link in mine if not set(link) & slow_ranks]
            bad = [link for link in bad if link in mine]
        if rank in slow_ranks or (slow_host(len(bad), len(mine)) and _beyond(linked(mine), threshold, worse)):
            flagged.add(rank)
            own = [v for (s, d), v in values.items() if rank in (s, d)]
            figure = _median(own)
            slow_hosts.append(
                {
                    "rank": rank,
                    "host": hosts.get(rank, ""),
                    "shared": ranks_on[hosts.get(rank, "")] > 1,  # other measured ranks share its host
                    "slow_links": len(bad),
                    "links": len(mine),
                    "value": figure,
                    "ratio": _ratio(figure, median),
                }
            )
    slow_links = []
    for (a, b), directions in sorted(links.items()):
        if not directions or a in flagged or b in flagged:
            continue
        pick = min if worse == "low" else max
        worst = pick(values[d] for d in directions)
        slow_links.append(
            {
                "src_rank": a,
                "dst_rank": b,
                "src_host": hosts.get(a, ""),
                "dst_host": hosts.get(b, ""),
                "directions": [[s, d] for s, d in sorted(directions)],
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
        "pairs": len(values),
        "median": median,
        "slow_links": slow_links,
        "slow_hosts": slow_hosts,
    }


def _name(rank: int, host: str) -> str:
    return f"{host} (rank {rank})" if host else f"rank {rank}"


def _figure(value: float, metric: str) -> str:
    return f"{value:.1f} MB/s" if metric.endswith("_MBps") else f"{value:.2f} us"


def summary_lines(found: dict) -> list[str]:
    """The console's closing list: one line per slow link and per slow host, with its figure against the median."""
    if not found["groups"]:
        return []
    if found["ok"]:
        judged = sum(g["pairs"] for g in found["groups"])
        z = found["outlier_z"]
        return [f"# all-pairs verdict: no slow link or host ({judged} pairs judged, --outlier-z {z:g})"]
    lines = [f"# all-pairs verdict (--outlier-z {found['outlier_z']:g}):"]
    for host in found["slow_hosts"]:
        # A rank that shares its host with other measured ranks is a slow rank, not (yet) a slow host.
        who = f"host {_name(host['rank'], host['host'])}"
        if host["shared"]:
            who = f"rank {host['rank']} (on {host['host']})"
        lines.append(
            f"#   slow {who}: {host['slow_links']} of {host['links']} links slow, "
            f"{_figure(host['value'], host['metric'])} against the median {_figure(host['median'], host['metric'])} "
            f"({host['ratio']:.2f}x; {host['transport']} {host['kernel']} {host['size_B']} B)"
        )
    for link in found["slow_links"]:
        ways = "both ways" if len(link["directions"]) == 2 else "{}->{}".format(*link["directions"][0])
        lines.append(
            f"#   slow link {_name(link['src_rank'], link['src_host'])} <-> {_name(link['dst_rank'], link['dst_host'])}"
            f" ({ways}): {_figure(link['value'], link['metric'])} against the median "
            f"{_figure(link['median'], link['metric'])} ({link['ratio']:.2f}x; "
            f"{link['transport']} {link['kernel']} {link['size_B']} B)"
        )
    return lines
