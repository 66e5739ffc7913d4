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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from fabricbench.measure.schema import is_measured
from fabricbench.measure.topology import CROSS_GROUP, CROSS_SWITCH, SAME_SWITCH, TIERS, Topology

SCHEDULES = ("isolated", "shift")
DEFAULT_OUTLIER_Z = 4.0
MAD_TO_SIGMA = 1.4826  # MAD times this estimates a normal distribution's standard deviation
MIN_EFFECT = 0.20  # by default (--outlier-floor) a pair is never slow for being less than 20 % off the median
LEAVE_ONE_OUT_UP_TO = 64  # ranks up to which each host is judged against the pairs without it (_slow_hosts_alone)
MIN_PAIRS = 3  # fewer directed pairs in a group give no median worth judging against
VERDICT_NAME = "verdict.json"
VERDICT_FORMAT = "fabricbench-pairs-verdict"
VERDICT_VERSION = 1
UPLINK_SHARE = 0.75  # the share of the links across an uplink or a global link that must be slow to name it
TIER_PASSES = 3  # the most times the tiers' medians are taken again without the slow hosts found so far
SPREAD = (0.10, 0.90)  # a tier's spread: these quantiles of its pairs' figures
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


def verdict(
    rows: Iterable[dict],
    z: float = DEFAULT_OUTLIER_Z,
    run_id: str = "",
    floor: float = MIN_EFFECT,
    topology: Topology | None = None,
) -> dict:
    """The slow links and slow hosts among measured pair rows (dicts with the table's columns), and with a
    ``topology`` the slow uplinks and global links, each pair judged within its tier.

    Rows of another kernel, or not ``ok``, are left out. Repeated rows of one
    ordered pair (``run --repeat``) count once, at their median. A link is an
    unordered pair of ranks: it is slow when either direction is. A host is
    slow when more than half of its links in the group are (_slow_hosts_alone);
    its links are then not listed on their own. Without a topology the
    verdict holds no tier or uplink key.
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
        if topology is not None:
            judged.append(_tiered_group(transport, kernel, schedule, size, values, hosts, topology, z, floor))
            continue
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


def _quantile(values: Sequence[float], q: float) -> float:
    """The q quantile, linear between the two nearest values (numpy's default)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _link(pair: tuple[int, int]) -> tuple[int, int]:
    return (min(pair), max(pair))


def _slow_in_tier(values: dict, tiers: dict, judged: Iterable, reference: Iterable, worse: str, z: float, floor: float):
    """Which of the ``judged`` pairs are slow, each against the ``reference`` pairs of its own tier, and their
    figures over those medians; a tier with fewer than MIN_PAIRS reference pairs has nothing to hold its pairs
    against, and they pass."""
    judged, reference = list(judged), list(reference)
    slow: set = set()
    ratios: dict = {}
    for tier in {tiers[pair] for pair in judged}:
        held = [pair for pair in reference if tiers[pair] == tier]
        if len(held) < MIN_PAIRS:
            continue
        mine = [pair for pair in judged if tiers[pair] == tier]
        centre, _, _, found = judge_group({p: values[p] for p in held + mine}, worse, z, held, floor)
        slow |= found & set(mine)
        ratios.update({pair: _ratio(values[pair], centre) for pair in mine})
    return slow, ratios


def _share_slow(pairs: Iterable, slow: set) -> tuple[int, int]:
    """(slow links, links) among ``pairs``: a link (unordered pair) is slow when either direction is."""
    links = {_link(pair) for pair in pairs}
    return len({_link(pair) for pair in slow} & links), len(links)


def _slowed_alike(slow: set, ratios: dict, across: list[float]) -> set:
    """The intra-switch pairs in ``slow`` slowed as a slow host would slow them: at least half as far from their
    median, in log, as the median of the slow cross-switch pairs' ``across`` ratios. A slow host slows both kinds
    alike; a slow uplink leaves the intra-switch pairs alone, though load on a shared host can still slow one a
    little where the uplink's are slowed many times over."""
    if not across:
        return set(slow)
    half = abs(math.log(_median(across))) / 2
    return {pair for pair in slow if ratios.get(pair, 0) > 0 and abs(math.log(ratios[pair])) >= half}


def _uplink_entry(name: str, tier: str, pairs: list, slow: set, ratios: dict, values: dict, **where) -> dict:
    bad, links = _share_slow(pairs, slow)
    figure = _median([values[pair] for pair in pairs])
    ratio = _median([ratios[pair] for pair in pairs if pair in ratios])
    return {"name": name, **where, "tier": tier, "slow_links": bad, "links": links, "value": figure}, ratio


def _slow_parts(values: dict, tiers: dict, places: dict, worse: str, z: float, floor: float):
    """The slow global links and uplinks (module docstring), the pairs they explain, and the suspects: the
    hosts under a switch whose cross-switch and intra-switch links are slow alike, which the host rule takes as
    its first guess (their pairs can be most of a tier, and its median then theirs)."""
    found: list[dict] = []
    explained: set = set()
    suspects: set = set()  # the hosts of a switch whose own links are slow, out of it and within it alike

    def name(entry: dict, ratio: float) -> None:
        entry.update(ratio=ratio, median=_ratio(entry["value"], ratio))
        found.append(entry)

    across_groups = [pair for pair in values if tiers[pair] == CROSS_GROUP]
    group_pairs = sorted({tuple(sorted({places[a][1], places[b][1]})) for a, b in across_groups})
    for pair_of_groups in group_pairs:
        between = [p for p in across_groups if {places[p[0]][1], places[p[1]][1]} == set(pair_of_groups)]
        others = [p for p in across_groups if p not in between]
        slow, ratios = _slow_in_tier(values, tiers, between, others, worse, z, floor)
        bad, links = _share_slow(between, slow)
        if bad and bad >= UPLINK_SHARE * links:
            g1, g2 = pair_of_groups
            entry, ratio = _uplink_entry(f"global link {g1}-{g2}", CROSS_GROUP, between, slow, ratios, values)
            name(dict(entry, groups=[g1, g2]), ratio)
            explained |= set(between)
    for switch in sorted({place[0] for place in places.values()}):
        under = {rank for rank, place in places.items() if place[0] == switch}
        out = [p for p in values if len(set(p) & under) == 1 and tiers[p] in (CROSS_SWITCH, CROSS_GROUP)]
        out = [p for p in out if p not in explained]
        inside = [p for p in values if set(p) <= under and tiers[p] == SAME_SWITCH]
        if not out or not inside:  # one host under it: a slow uplink looks like a slow host (the host's entry)
            continue
        elsewhere = [p for p in values if not set(p) & under and p not in explained]
        slow_out, ratios = _slow_in_tier(values, tiers, out, elsewhere, worse, z, floor)
        bad, links = _share_slow(out, slow_out)
        if not (bad and bad >= UPLINK_SHARE * links):
            continue
        slow_in, ratios_in = _slow_in_tier(values, tiers, inside, elsewhere, worse, z, floor)
        alike = _slowed_alike(slow_in, ratios_in, [ratios[p] for p in slow_out if p in ratios])
        bad_in, links_in = _share_slow(inside, slow_in)
        alike_in, _ = _share_slow(inside, alike)
        if alike_in <= (1 - UPLINK_SHARE) * links_in:
            tier = CROSS_SWITCH if any(tiers[p] == CROSS_SWITCH for p in out) else CROSS_GROUP
            entry, ratio = _uplink_entry(f"{switch}'s uplink", tier, out, slow_out, ratios, values, switch=switch)
            name(dict(entry, intra_links=links_in, slow_intra_links=bad_in, alike_intra_links=alike_in), ratio)
            explained |= set(out)
        else:  # its hosts slow their own pairs alike: slow hosts, not the uplink
            slow = slow_out | alike
            suspects |= {rank for rank in under if slow_host(*_link_counts(rank, out + inside, slow))}
    return found, explained, suspects


def _tier_stats(values: dict, tiers: dict) -> dict:
    """Each tier's median, spread (SPREAD's quantiles) and directed pair count, nearest tier first."""
    stats = {}
    for tier in TIERS:
        mine = [v for pair, v in values.items() if tiers[pair] == tier and v > 0]
        if mine:
            low, high = (_quantile(mine, q) for q in SPREAD)
            stats[tier] = {"median": _median(mine), "p10": low, "p90": high, "pairs": len(mine)}
    return stats


def _kept_tier_stats(values: dict, kept: dict, tiers: dict) -> dict:
    """Each tier's figures over the pairs no slow uplink or host explains (the medians pairs are held against);
    a tier all of whose pairs are explained, over all of them."""
    every, healthy = _tier_stats(values, tiers), _tier_stats(kept, tiers)
    return {tier: healthy.get(tier, stats) for tier, stats in every.items()}


def _tiered_group(transport, kernel, schedule, size, values, hosts, topology: Topology, z, floor) -> dict:
    """One group judged within its tiers: the slow global links and uplinks first, then the hosts and links on
    the rest, each pair's figure taken over its tier's median so every tier is held to the same rule."""
    metric, worse = METRICS[kernel]
    ranks = {rank for pair in values for rank in pair}
    places = {rank: (topology.switch_of(hosts[rank]), topology.group_of(hosts[rank])) for rank in ranks}
    tiers = {pair: topology.tier(hosts[pair[0]], hosts[pair[1]]) for pair in values}
    uplinks, explained, suspects = _slow_parts(values, tiers, places, worse, z, floor)
    rest = {pair: v for pair, v in values.items() if pair not in explained}
    slow_ranks: set[int] = set(suspects)  # a first guess only: the passes below keep the hosts that are slow
    for _ in range(TIER_PASSES):  # a slow host can hold half a small tier: its median, then without its pairs
        kept = {pair: v for pair, v in rest.items() if not set(pair) & slow_ranks}
        medians = {tier: stats["median"] for tier, stats in _tier_stats(kept, tiers).items()}
        scaled = {pair: _ratio(v, medians[tiers[pair]]) for pair, v in rest.items() if v > 0 and tiers[pair] in medians}
        found = _slow_hosts_alone(scaled, worse, z, floor)
        if found == slow_ranks:
            break
        slow_ranks = found
    healthy = [pair for pair in scaled if not set(pair) & slow_ranks]
    centre, mad, threshold, slow = judge_group(scaled, worse, z, healthy, floor)
    group = _group_verdict(transport, kernel, schedule, size, metric, worse, scaled, hosts, slow, slow_ranks, threshold)
    alone = {rank for rank in ranks if not any(tiers[p] == SAME_SWITCH for p in values if rank in p)}
    for host in group["slow_hosts"]:  # its figure in the metric's unit; its ratio over its tiers' medians
        rank = host["rank"]
        host["ratio"] = _ratio(host["value"], centre)
        host["value"] = _median([v for p, v in rest.items() if rank in p])
        host["median"] = _ratio(host["value"], host["ratio"])
        if rank in alone:
            host["alone_under"] = places[rank][0]
    for link in group["slow_links"]:
        pair = (link["src_rank"], link["dst_rank"])
        pick = min if worse == "low" else max
        link["value"] = pick(values[tuple(d)] for d in link["directions"])
        tier = tiers[pair if pair in tiers else pair[::-1]]  # a link of one measured direction: that one's
        link["tier"] = tier
        link["median"] = medians[tier] * centre
        link["ratio"] = _ratio(link["value"], link["median"])
    group.update(
        median=_median([values[pair] for pair in healthy] or list(values.values())),
        mad_log=_number(mad),
        threshold=None,
        threshold_ratio=_number(_ratio(threshold, centre)),
        tiers=_kept_tier_stats(values, kept, tiers),
        slow_uplinks=uplinks,
    )
    return group


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


def _what(entry: dict) -> str:
    return f"{entry['transport']} {entry['kernel']} {entry['size_B']} B"


def tier_lines(found: dict) -> list[str]:
    """One line per judged group of a verdict with a topology: each tier's median and p10-p90 spread."""
    lines = []
    for group in found["groups"]:
        tiers = [
            f"{tier} {_figure(s['median'], group['metric'])} (p10 {_figure(s['p10'], group['metric'])}, "
            f"p90 {_figure(s['p90'], group['metric'])}, {s['pairs']} pairs)"
            for tier, s in group.get("tiers", {}).items()
        ]
        if tiers:
            lines.append(f"# tiers, {_what(group)}: {'; '.join(tiers)}")
    return lines


def _tier_of(link: dict) -> str:
    """``cross-switch `` for a link judged within its tier, else nothing."""
    return f"{link['tier']} " if link.get("tier") else ""


def _uplink_line(uplink: dict) -> str:
    """``leaf2's uplink: 8 of 8 cross-switch links slow, ...``: a slow uplink or global link."""
    metric = uplink["metric"]
    line = (
        f"#   slow {uplink['name']}: {uplink['slow_links']} of {uplink['links']} {uplink['tier']} links slow, "
        f"{_figure(uplink['value'], metric)} against the {uplink['tier']} median {_figure(uplink['median'], metric)} "
        f"({uplink['ratio']:.2f}x; {_what(uplink)})"
    )
    if "switch" in uplink:
        normal = uplink["intra_links"] - uplink["slow_intra_links"]
        line += f"; {normal} of its {uplink['intra_links']} intra-switch links normal"
        milder = uplink["slow_intra_links"] - uplink["alike_intra_links"]
        line += f", {milder} slow but not half as far (in log) as these" if milder else ""
    return line


def summary_lines(found: dict) -> list[str]:
    """The console's closing list: one line per slow link and per slow host (and with a topology, per slow uplink
    after each tier's median), with its figure against the median."""
    if not found["groups"]:
        return []
    tiered = "slow_uplinks" in found
    if found["ok"]:
        judged = sum(g["pairs"] for g in found["groups"])
        z = found["outlier_z"]
        what = "uplink, link or host" if tiered else "link or host"
        return [*tier_lines(found), f"# all-pairs verdict: no slow {what} ({judged} pairs judged, --outlier-z {z:g})"]
    lines = [*tier_lines(found), f"# all-pairs verdict (--outlier-z {found['outlier_z']:g}):"]
    lines += [_uplink_line(uplink) for uplink in found.get("slow_uplinks", [])]
    for host in found["slow_hosts"]:
        # A rank that shares its host with other measured ranks is a slow rank, not (yet) a slow host.
        who = f"host {_name(host['rank'], host['host'])}"
        if host["shared"]:
            who = f"rank {host['rank']} (on {host['host']})"
        lines.append(
            f"#   slow {who}: {host['slow_links']} of {host['links']} links slow, "
            f"{_figure(host['value'], host['metric'])} against the median {_figure(host['median'], host['metric'])} "
            f"({host['ratio']:.2f}x; {host['transport']} {host['kernel']} {host['size_B']} B)"
            + (
                f"; alone under {host['alone_under']}: a slow uplink of {host['alone_under']} would look the same"
                if "alone_under" in host
                else ""
            )
        )
    for link in found["slow_links"]:
        ways = "both ways" if len(link["directions"]) == 2 else "{}->{}".format(*link["directions"][0])
        lines.append(
            f"#   slow link {_name(link['src_rank'], link['src_host'])} <-> {_name(link['dst_rank'], link['dst_host'])}"
            f" ({ways}): {_figure(link['value'], link['metric'])} against the {_tier_of(link)}median "
            f"{_figure(link['median'], link['metric'])} ({link['ratio']:.2f}x; "
            f"{link['transport']} {link['kernel']} {link['size_B']} B)"
        )
    return lines
