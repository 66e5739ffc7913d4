"""The all-pairs verdict with a topology: each pair within its tier, slow uplinks and global links named before
hosts and links, without a process."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from fabricbench.analysis.thresholds import judge, parse_thresholds
from fabricbench.errors import UsageError
from fabricbench.measure.topology import Topology, parse_slurm, parse_toml
from fabricbench.measure.verdict import summary_lines, verdict


def _leaf_spine(leaves: int, per_leaf: int) -> Topology:
    lines = [f"SwitchName=leaf{k} Nodes=h[{(k - 1) * per_leaf + 1}-{k * per_leaf}]" for k in range(1, leaves + 1)]
    lines.append(f"SwitchName=spine Switches=leaf[1-{leaves}]")
    return parse_slurm("\n".join(lines), "topology.conf")


def _rows(hosts: list[str], figure) -> list[dict]:
    """A full matrix of pairs-bw rows, one rank per host; ``figure(src_host, dst_host)`` gives each pair's MB/s."""
    return [
        {
            "transport": "tcp",
            "kernel": "pairs-bw",
            "schedule": "isolated",
            "size_B": 65536,
            "src_rank": s,
            "dst_rank": d,
            "src_host": hosts[s],
            "dst_host": hosts[d],
            "status": "ok",
            "validation": "off",
            "bw_MBps": figure(hosts[s], hosts[d]),
        }
        for s, d in itertools.permutations(range(len(hosts)), 2)
    ]


def _fabric(topology: Topology, slow=lambda a, b: False, slow_figure: float = 12.0):
    """Healthy figures by tier (same switch 2000 MB/s, across switches 1200, across groups 800, each a few percent
    apart), with the pairs ``slow`` says at ``slow_figure``."""
    base = {"same-switch": 2000.0, "cross-switch": 1200.0, "cross-group": 800.0}

    def figure(a: str, b: str) -> float:
        if slow(a, b):
            return slow_figure
        jitter = 1 + 0.03 * ((int(a[-1]) * 7 + int(b[-1]) * 3) % 5 - 2) / 2
        return base[topology.tier(a, b)] * jitter

    return figure


def _hosts(topology: Topology) -> list[str]:
    return sorted(topology.switch, key=lambda h: int(h.lstrip("h")))


def test_a_healthy_fabric_of_tiers_is_not_slow_for_its_slower_tiers():
    topology = _leaf_spine(3, 2)
    found = verdict(_rows(_hosts(topology), _fabric(topology)), topology=topology)
    assert found["ok"], found
    (group,) = found["groups"]
    assert list(group["tiers"]) == ["same-switch", "cross-switch"]
    assert group["tiers"]["same-switch"]["pairs"] == 6 and group["tiers"]["cross-switch"]["pairs"] == 24
    assert 1150 < group["tiers"]["cross-switch"]["median"] < 1250
    # Without the topology the cross-switch pairs are the whole matrix's majority: the same-switch ones look fast,
    # not slow; what the tiers add is the medians apart.
    assert summary_lines(found)[0].startswith(
        "# tiers, tcp pairs-bw 65536 B: same-switch 2015.0 MB/s (p10 2000.0 MB/s, p90"
    )


def test_a_slow_uplink_is_named_and_not_its_hosts_or_links():
    topology = _leaf_spine(3, 2)
    under = {"h3", "h4"}  # leaf2
    found = verdict(
        _rows(_hosts(topology), _fabric(topology, lambda a, b: len({a, b} & under) == 1)), topology=topology
    )
    assert not found["ok"]
    (uplink,) = found["slow_uplinks"]
    assert uplink["name"] == "leaf2's uplink" and uplink["switch"] == "leaf2"
    assert (uplink["slow_links"], uplink["links"], uplink["intra_links"], uplink["slow_intra_links"]) == (8, 8, 1, 0)
    assert uplink["alike_intra_links"] == 0
    assert uplink["ratio"] < 0.02 and 1150 < uplink["median"] < 1250
    assert found["slow_hosts"] == [] and found["slow_links"] == [], found
    lines = summary_lines(found)
    assert "#   slow leaf2's uplink: 8 of 8 cross-switch links slow, 12.0 MB/s against the cross-switch median" in (
        "\n".join(lines)
    )
    assert lines[-1].endswith("; 1 of its 1 intra-switch links normal")
    json.dumps(found, allow_nan=False)  # verdict.json holds no NaN


# A pairs-bw run of tests/test_pairs_tiers.py's testbed (leaf2's trunk shaped to 100 Mbit/s) under CPU load, as
# measured (MB/s): leaf2's intra-switch pair fell to 0.3-0.4x its tier's median beside its cross-switch pairs' 0.01x,
# and the verdict named nothing at all while that pair counted against the uplink.
LOADED_SHAPED_UPLINK = {
    ("h1", "h2"): 1125.4, ("h1", "h3"): 6.1, ("h1", "h4"): 9.2, ("h1", "h5"): 1079.2, ("h1", "h6"): 744.5,
    ("h2", "h1"): 1210.9, ("h2", "h3"): 9.0, ("h2", "h4"): 7.1, ("h2", "h5"): 267.4, ("h2", "h6"): 1205.3,
    ("h3", "h1"): 6.2, ("h3", "h2"): 9.3, ("h3", "h4"): 520.8, ("h3", "h5"): 11.1, ("h3", "h6"): 5.8,
    ("h4", "h1"): 9.3, ("h4", "h2"): 6.6, ("h4", "h3"): 395.8, ("h4", "h5"): 6.7, ("h4", "h6"): 10.1,
    ("h5", "h1"): 1059.6, ("h5", "h2"): 264.5, ("h5", "h3"): 10.5, ("h5", "h4"): 6.6, ("h5", "h6"): 1155.9,
    ("h6", "h1"): 728.4, ("h6", "h2"): 929.3, ("h6", "h3"): 7.9, ("h6", "h4"): 9.4, ("h6", "h5"): 1497.0,
}  # fmt: skip


def test_an_intra_switch_link_slowed_far_less_than_the_uplinks_links_does_not_hide_the_uplink():
    topology = _leaf_spine(3, 2)
    found = verdict(_rows(_hosts(topology), lambda a, b: LOADED_SHAPED_UPLINK[a, b]), topology=topology)
    (uplink,) = found["slow_uplinks"]
    assert uplink["name"] == "leaf2's uplink" and (uplink["slow_links"], uplink["links"]) == (8, 8)
    assert (uplink["intra_links"], uplink["slow_intra_links"], uplink["alike_intra_links"]) == (1, 1, 0)
    assert found["slow_hosts"] == [], found["slow_hosts"]
    assert summary_lines(found)[-1].endswith(
        "; 0 of its 1 intra-switch links normal, 1 slow but not half as far (in log) as these"
    )


def test_two_slow_hosts_under_one_switch_slow_its_intra_switch_link_alike_and_are_hosts_not_its_uplink():
    # Both hosts' NICs at 12 MB/s: the intra-switch link is as slow as the cross-switch ones (0.006x beside 0.01x).
    # Their 16 pairs are most of the 24 cross-switch ones, so the tier's median is theirs: the switch's verdict
    # hands them to the host rule as its first guess, or only their intra-switch link would be named.
    topology = _leaf_spine(3, 2)
    under = {"h3", "h4"}
    found = verdict(_rows(_hosts(topology), _fabric(topology, lambda a, b: bool({a, b} & under))), topology=topology)
    assert found["slow_uplinks"] == [] and found["slow_links"] == [], found
    assert [(h["host"], h["slow_links"], h["links"]) for h in found["slow_hosts"]] == [("h3", 5, 5), ("h4", 5, 5)]
    assert found["groups"][0]["tiers"]["cross-switch"]["pairs"] == 8  # the median without theirs


def test_a_slow_host_under_a_switch_is_a_host_not_its_uplink():
    topology = _leaf_spine(3, 2)
    found = verdict(_rows(_hosts(topology), _fabric(topology, lambda a, b: "h3" in (a, b))), topology=topology)
    assert found["slow_uplinks"] == []
    assert [(h["host"], h["slow_links"], h["links"]) for h in found["slow_hosts"]] == [("h3", 5, 5)]
    assert found["slow_links"] == [] and "alone_under" not in found["slow_hosts"][0]


def test_a_host_alone_under_its_switch_is_a_host_that_says_its_uplink_looks_the_same():
    text = "SwitchName=leaf1 Nodes=h[1-2]\nSwitchName=leaf2 Nodes=h[3-4]\nSwitchName=leaf3 Nodes=h5\n"
    topology = parse_slurm(text + "SwitchName=spine Switches=leaf[1-3]", "t")
    found = verdict(_rows(_hosts(topology), _fabric(topology, lambda a, b: "h5" in (a, b))), topology=topology)
    assert found["slow_uplinks"] == []
    (host,) = found["slow_hosts"]
    assert host["host"] == "h5" and host["alone_under"] == "leaf3"
    assert "alone under leaf3: a slow uplink of leaf3 would look the same" in summary_lines(found)[-1]


def test_a_slow_pair_across_switches_is_a_link_against_the_cross_switch_median():
    topology = _leaf_spine(3, 2)
    found = verdict(
        _rows(_hosts(topology), _fabric(topology, lambda a, b: {a, b} == {"h1", "h5"}, 500.0)), topology=topology
    )
    assert found["slow_uplinks"] == [] and found["slow_hosts"] == []
    (link,) = found["slow_links"]
    assert {link["src_host"], link["dst_host"]} == {"h1", "h5"} and link["tier"] == "cross-switch"
    assert 0.38 < link["ratio"] < 0.45 and 1150 < link["median"] < 1250  # 500 against ~1200, not against ~2000
    assert "against the cross-switch median" in summary_lines(found)[-1]


def test_two_leaves_cannot_tell_whose_uplink_and_name_none():
    """Every cross-switch pair crosses both uplinks: nothing to hold them against; the tiers show it."""
    topology = _leaf_spine(2, 3)
    found = verdict(
        _rows(_hosts(topology), _fabric(topology, lambda a, b: len({a, b} & {"h4", "h5", "h6"}) == 1)),
        topology=topology,
    )
    assert found["ok"] and found["slow_uplinks"] == []
    assert found["groups"][0]["tiers"]["cross-switch"]["median"] == 12.0


def test_without_a_topology_the_verdict_is_unchanged():
    topology = _leaf_spine(3, 2)
    rows = _rows(_hosts(topology), _fabric(topology, lambda a, b: "h3" in (a, b)))
    plain = verdict(rows)
    assert set(plain) == {"format", "version", "run_id", "outlier_z", "outlier_floor", "rule", "ok"} | {
        "slow_links",
        "slow_hosts",
        "groups",
    }
    assert "tiers" not in plain["groups"][0] and "tier" not in plain["slow_hosts"][0]
    # Rows that carry blank tier and hops columns (a run without --topology) judge the same.
    assert verdict([dict(row, tier="", hops="") for row in rows]) == plain
    assert not any("tiers" in line or "uplink" in line for line in summary_lines(plain))


DRAGONFLY = """
[switches.g1s1]
hosts = "h[1-2]"
group = "g1"
[switches.g1s2]
hosts = "h[3-4]"
group = "g1"
[switches.g2s1]
hosts = "h5"
group = "g2"
[switches.g2s2]
hosts = "h6"
group = "g2"
[switches.g3s1]
hosts = "h7"
group = "g3"
[switches.g3s2]
hosts = "h8"
group = "g3"
"""


def test_a_slow_global_link_is_named_by_its_groups_and_not_as_an_uplink_or_hosts():
    topology = parse_toml(DRAGONFLY, "df.toml")
    groups = {h: topology.group_of(h) for h in topology.switch}
    slow = lambda a, b: {groups[a], groups[b]} == {"g1", "g2"}  # noqa: E731
    found = verdict(_rows(_hosts(topology), _fabric(topology, slow)), topology=topology)
    assert [u["name"] for u in found["slow_uplinks"]] == ["global link g1-g2"], found["slow_uplinks"]
    (link,) = found["slow_uplinks"]
    assert (link["slow_links"], link["links"], link["tier"]) == (8, 8, "cross-group") and link["groups"] == ["g1", "g2"]
    assert found["slow_hosts"] == [] and found["slow_links"] == []
    assert list(found["groups"][0]["tiers"]) == ["same-switch", "cross-switch", "cross-group"]


CHECK = """
[[threshold]]
transport = "tcp"
kernel = "pairs-bw"
max_slow_uplinks = 0

[[threshold]]
transport = "tcp"
kernel = "pairs-bw"
tier = "same-switch"
min_bw_MBps = 1000
"""


def test_check_fails_a_slow_uplink_by_name_and_selects_pairs_by_tier():
    thresholds = parse_thresholds(CHECK, "t.toml", ["tcp"], ["pairs-bw"])
    assert thresholds[1].tiers == ("same-switch",) and thresholds[0].limits[0].name == "max_slow_uplinks"
    topology = _leaf_spine(3, 2)
    hosts = _hosts(topology)
    tiered = [
        dict(row, tier=topology.tier(row["src_host"], row["dst_host"])) for row in _rows(hosts, _fabric(topology))
    ]
    assert judge(thresholds, tiered, topology).failures == 0
    slow = _fabric(topology, lambda a, b: len({a, b} & {"h3", "h4"}) == 1)
    tiered = [dict(row, tier=topology.tier(row["src_host"], row["dst_host"])) for row in _rows(hosts, slow)]
    found = judge(thresholds, tiered, topology)
    assert found.failures == 1, found.lines
    assert found.lines[0].startswith("FAIL threshold 1, line 2: tcp pairs-bw every size, max_slow_uplinks 0: 1 slow")
    assert found.lines[1].startswith("  FAIL leaf2's uplink: 8 of 8 cross-switch links slow")
    assert found.lines[2].startswith("ok   threshold 2, line 7: tcp pairs-bw every size same-switch pairs") and (
        "6 rows pass" in found.lines[2]
    )
    # Without a topology there is nothing to judge an uplink by: the limit fails, saying why.
    assert "the run has no topology (run --topology): no uplink was judged" in judge(thresholds, tiered).lines[0]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ('tier = "rack"', "field 'tier': unknown tier 'rack'; known: same-host, same-switch, cross-switch"),
        ("min_slow_uplinks = 1", "field 'min_slow_uplinks': unknown field (did you mean 'max_slow_uplinks'?)"),
    ],
)
def test_check_refuses_a_bad_tier_or_uplink_limit(field, message):
    text = f'[[threshold]]\ntransport = "tcp"\nkernel = "pairs-bw"\nmax_slow_uplinks = 0\n{field}\n'
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_thresholds(text, "t.toml", ["tcp"], ["pairs-bw"])


def test_slow_hosts_under_one_switch_are_one_line_and_every_list_is_capped():
    topology = _leaf_spine(3, 2)
    under = {"h3", "h4"}
    found = verdict(_rows(_hosts(topology), _fabric(topology, lambda a, b: bool({a, b} & under))), topology=topology)
    lines = summary_lines(found, topology)
    assert lines[-1].startswith("#   slow hosts under leaf2: 2 (h[3-4]), 10 of 10 links slow, 12.0 MB/s against the")
    assert len(summary_lines(found)) == len(lines) + 1  # without the topology: a line a host
    # Twelve slow hosts and twelve slow links on a flat fabric of 100: ten of each named, the rest counted.
    hosts = [f"n{i}" for i in range(100)]
    slow = set(hosts[:12])

    def figure(a: str, b: str) -> float:
        pair = {int(a[1:]), int(b[1:])}
        if {a, b} & slow:
            return 12.0
        return 300.0 if pair in [{20 + 2 * k, 21 + 2 * k} for k in range(12)] else 1000.0

    found = verdict(_rows(hosts, figure))
    lines = summary_lines(found)
    assert len(found["slow_hosts"]) == 12 and len(found["slow_links"]) == 12
    assert "#   and 2 more slow hosts (verdict.json lists every one)" in lines
    assert lines[-1] == "#   and 2 more slow links (verdict.json lists every one)"
    assert len(lines) == 1 + 11 + 11 and max(map(len, lines)) < 200


COUNTS = """
[[threshold]]
transport = "tcp"
kernel = "pairs-bw"
max_slow_uplinks = 0
max_slow_hosts = 0
max_slow_links = 0
min_bw_MBps = 600
"""


def test_check_fails_each_part_of_the_verdict_on_one_screen_whatever_the_fabric():
    """Eight leaves of eight hosts: leaf3's uplink slow, h20 slow, one slow link. check names the uplink, the host
    and the link once each; the min_bw_MBps limit names leaf3's hosts as one switch line, not eight host lines."""
    topology = _leaf_spine(8, 8)
    hosts = _hosts(topology)
    leaf3 = {h for h in hosts if topology.switch_of(h) == "leaf3"}

    def slow(a: str, b: str) -> bool:
        return len({a, b} & leaf3) == 1 or "h60" in (a, b) or {a, b} == {"h2", "h40"}

    found = judge(
        parse_thresholds(COUNTS, "t.toml", ["tcp"], ["pairs-bw"]), _rows(hosts, _fabric(topology, slow)), topology
    )
    text = "\n".join(found.lines)
    assert "max_slow_uplinks 0: 1 slow uplinks, expected <= 0" in text and "  FAIL leaf3's uplink: 448 of 448" in text
    assert "max_slow_hosts 0: 1 slow hosts, expected <= 0" in text and "  FAIL host h60 (rank 59): 55 of 55" in text
    assert (
        "max_slow_links 0: 1 slow links, expected <= 0" in text and "  FAIL link h2 (rank 1) <-> h40 (rank 39)" in text
    )
    assert "  FAIL hosts under leaf3: 8 (h[17-24]): tcp pairs-bw 64 KiB (isolated): pairs with" in text
    assert "  FAIL host h60: tcp pairs-bw 64 KiB (isolated): pairs with 63 of its 63 peers fail" in text
    assert found.failures == 3 + 4 and len(found.lines) == 11 and max(map(len, found.lines)) < 200
    # Flat, without the topology: hosts and links are judged, the uplink cannot be.
    flat = judge(parse_thresholds(COUNTS, "t.toml", ["tcp"], ["pairs-bw"]), _rows(hosts, _fabric(topology, slow)))
    assert "the run has no topology (run --topology): no uplink was judged" in flat.lines[0]
