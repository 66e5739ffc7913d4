"""The congestion kernel's pure parts: placement, roles, refusals, the figures and impact factors, the key-results
table, the thresholds that select its rows, and the model's alpha and beta per phase. No process."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricbench.analysis.model import congested_parameters
from fabricbench.analysis.thresholds import parse_thresholds
from fabricbench.errors import UsageError
from fabricbench.measure import congestion
from fabricbench.measure.congestion import CANARIES, CONGESTORS, MIX, Role
from fabricbench.measure.kernels import KERNELS
from fabricbench.measure.plan import CongestionOptions
from fabricbench.run.patterns.congestion import key_results, line

Named = congestion.Test  # a canary test or congestor pattern; a name starting Test would be collected by pytest


def test_placement_is_the_seeds_shuffle_every_rank_takes_part_and_the_canaries_are_a_fifth_at_least_two():
    hosts = [f"h{r // 2}" for r in range(12)]  # two ranks a host
    placement = congestion.place(hosts, False, 0.2, seed=7)
    assert placement == congestion.place(hosts, False, 0.2, seed=7)  # the same on every rank
    assert placement != congestion.place(hosts, False, 0.2, seed=8)
    assert len(placement.canaries) == 2 and len(placement.congestors) == 10 and placement.idle == ()
    assert sorted(placement.canaries + placement.congestors) == list(range(12))
    assert len(congestion.place(hosts * 5, False, 0.2, 1).canaries) == 12  # a fifth of 60
    meta = placement.metadata(hosts)
    assert meta["seed"] == 7 and meta["placed_by"] == "ranks"
    assert set(meta["canary_hosts"]) == {hosts[r] for r in placement.canaries}


def test_per_node_places_hosts_and_leaves_every_other_rank_idle():
    hosts = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    placement = congestion.place(hosts, True, 0.2, seed=1)
    assert sorted(placement.canaries + placement.congestors) == [0, 2, 4, 6, 8]
    assert placement.idle == (1, 3, 5, 7, 9) and placement.units == "hosts"


@pytest.mark.parametrize(
    ("hosts", "per_node", "fraction", "seed", "canaries", "congestors", "idle"),
    [
        ([f"h{r % 4}" for r in range(12)], False, 0.2, 1, (7, 11), (0, 8, 5, 6, 3, 10, 4, 1, 9, 2), ()),
        (["a", "a", "b", "c", "d", "e", "f"], False, 0.2, 9, (1, 6), (0, 5, 2, 4, 3), ()),
        ([f"h{r // 2}" for r in range(16)], True, 0.25, 5, (12, 6), (2, 0, 14, 4, 10, 8), tuple(range(1, 16, 2))),
    ],
)
def test_the_random_placement_is_the_one_before_placement_by_switch(
    hosts, per_node, fraction, seed, canaries, congestors, idle
):
    """A snapshot of place() from before --congestion-placement: the default places every rank as it did."""
    for placement in (
        congestion.place(hosts, per_node, fraction, seed),
        congestion.place(hosts, per_node, fraction, seed, congestion.RANDOM, [f"s{i % 2}" for i in range(16)]),
    ):
        assert (placement.canaries, placement.congestors, placement.idle) == (canaries, congestors, idle)
        assert placement.placement == congestion.RANDOM


# Leaf-spine: leaf1 holds h1-h3, leaf2 h4-h6, leaf3 h7-h9; one rank a host, rank r on h(r+1).
LEAVES = {f"h{h}": f"leaf{(h - 1) // 3 + 1}" for h in range(1, 10)}


def _placed(hosts: list[str], how: str, seed: int = 1, fraction: float = 0.2, per_node: bool = False):
    switches = [LEAVES[host] for host in hosts]
    return congestion.place(hosts, per_node, fraction, seed, how, switches), switches


@pytest.mark.parametrize("seed", range(6))
def test_cross_switch_rings_the_canaries_across_switches_and_the_incast_crosses_the_first_canarys_uplink(seed):
    hosts = [f"h{h}" for h in range(1, 7)]  # leaf-spine 2 x 3
    placement, switch = _placed(hosts, congestion.CROSS_SWITCH, seed)
    ring = placement.canaries
    assert len(ring) == 2 and switch[ring[0]] != switch[ring[1]]
    target, *senders = placement.congestors
    assert switch[target] == switch[ring[0]]  # the incast lands under the first canary's switch
    assert switch[senders[0]] != switch[target]  # from under the other
    crossing = [switch[r] != switch[target] for r in senders]
    assert crossing == sorted(crossing, reverse=True)  # the senders under other switches first
    assert sorted(ring + placement.congestors) == list(range(6)) and placement.idle == ()
    assert placement == _placed(hosts, congestion.CROSS_SWITCH, seed)[0]  # the same on every rank


def test_cross_switch_keeps_every_ring_neighbour_under_another_switch_with_more_canaries():
    hosts = [f"h{h}" for h in range(1, 10)] * 2  # three leaves, two ranks a host, 18 ranks: 4 canaries
    placement, switch = _placed(hosts, congestion.CROSS_SWITCH, 3)
    ring = placement.canaries
    assert len(ring) == 4
    assert all(switch[ring[i]] != switch[ring[i - 1]] for i in range(len(ring)))
    odd, switch = _placed([f"h{h}" for h in range(1, 10)] * 3, congestion.CROSS_SWITCH, 3, 0.19)  # 5 canaries
    assert len(odd.canaries) == 5
    assert all(switch[odd.canaries[i]] != switch[odd.canaries[i - 1]] for i in range(5))


def test_within_switch_puts_the_canaries_under_one_switch_and_the_incast_under_rank_0s():
    hosts = [f"h{h}" for h in range(1, 7)]
    placement, switch = _placed(hosts, congestion.WITHIN_SWITCH, 2)
    assert {switch[r] for r in placement.canaries} == {"leaf2"}
    assert switch[placement.congestors[0]] == "leaf1"
    assert sorted(placement.canaries + placement.congestors) == list(range(6))
    meta = placement.metadata(hosts, switch)
    assert meta["placement"] == "within-switch" and meta["canary_switches"] == ["leaf2"]
    assert meta["congestor_switches"] == ["leaf1", "leaf2"]
    assert meta["ranks"][0] == {"rank": 0, "role": placement.role_of(0), "host": "h1", "switch": "leaf1"}
    assert {entry["role"] for entry in meta["ranks"]} == {"canary", "congestor"}


def test_per_node_placement_by_switch_places_hosts_and_leaves_the_other_ranks_idle():
    hosts = [h for h in (f"h{h}" for h in range(1, 7)) for _ in range(2)]  # two ranks a host
    placement, switch = _placed(hosts, congestion.CROSS_SWITCH, per_node=True)
    assert placement.idle == tuple(range(1, 12, 2)) and placement.units == "hosts"
    assert switch[placement.canaries[0]] != switch[placement.canaries[1]]


@pytest.mark.parametrize(
    ("hosts", "how", "fraction", "message"),
    [
        (
            ["h1", "h2", "h3", "h1"],
            congestion.CROSS_SWITCH,
            0.2,
            "needs units under at least 2 switches; all are under leaf1",
        ),
        (
            ["h1", "h2", "h3", "h4"],
            congestion.WITHIN_SWITCH,
            0.5,
            "needs 2 canaries under one switch other than leaf1 .* the most under one is 1",
        ),
        (
            ["h1", "h4", "h5", "h6"],
            congestion.CROSS_SWITCH,
            0.2,
            "needs congestors under leaf2 .* and under another switch",
        ),
        ([f"h{h}" for h in range(1, 7)], congestion.CROSS_SWITCH, 0.5, "cannot ring 3 canaries .* leaf1 3, leaf2 3"),
    ],
)
def test_switches_that_cannot_hold_a_placement_are_refused_in_one_line_naming_why(hosts, how, fraction, message):
    with pytest.raises(UsageError, match=message) as refused:
        _placed(hosts, how, fraction=fraction)
    assert "\n" not in str(refused.value)
    with pytest.raises(UsageError, match="needs a topology"):
        congestion.place(hosts, False, fraction, 1, how)


def test_too_few_ranks_for_the_canaries_and_a_pattern_is_refused_in_one_line():
    congestion.check_units(4, 0.2, [Named("incast", 4096)])
    with pytest.raises(UsageError) as refused:
        congestion.check_units(3, 0.2, [Named("incast", 4096)])
    assert str(refused.value) == (
        "congestion needs at least 4 ranks: 2 canaries at --canary-fraction 0.2 and 2 congestors; got 3"
    )
    with pytest.raises(UsageError, match="needs at least 10 ranks: .* 8 congestors \\(mix runs the four"):
        congestion.check_units(9, 0.2, [Named("incast", 4096), Named(MIX, 4096)])
    congestion.check_units(10, 0.2, [Named(MIX, 4096)])
    with pytest.raises(UsageError, match="needs at least 8 hosts: 6 canaries at --canary-fraction 0.8 and 2"):
        congestion.check_units(6, 0.8, [Named("incast", 4096)], "hosts")


def test_mix_splits_the_congestors_in_quarters_and_a_pattern_alone_takes_them_all():
    placement = congestion.place(["h"] * 12, False, 0.2, seed=3)
    (alone,) = congestion.groups(placement, Named("incast", 4096))
    assert alone.ranks == placement.congestors and alone.pattern == "incast"
    mixed = congestion.groups(placement, Named(MIX, 1024))
    assert [g.pattern for g in mixed] == list(CONGESTORS)
    assert [len(g.ranks) for g in mixed] == [3, 3, 2, 2] and all(g.size == 1024 for g in mixed)
    assert sum((g.ranks for g in mixed), ()) == placement.congestors
    assert congestion.groups(placement, Named(congestion.NONE, 0)) == ()


def test_a_role_knows_its_ring_neighbours_and_its_group():
    groups = congestion.groups(congestion.Placement((5, 1, 3), (0, 2, 4), (), "ranks", 1), Named("incast", 8))
    role = Role(1, Named("rr-latency", 8), (5, 1, 3), groups)
    assert role.is_canary and role.neighbours() == (5, 3) and role.group is None
    assert Role(5, Named("rr-latency", 8), (5, 1, 3), groups).neighbours() == (3, 1)
    assert Role(2, Named("rr-latency", 8), (5, 1, 3), groups).group.ranks == (0, 2, 4)
    assert Role(4, Named("rr-bw", 8), (4, 6), ()).neighbours() == (6, 6)  # two canaries: both sides the other


def test_tests_are_named_with_sizes_and_bad_ones_are_refused():
    assert congestion.parse_tests("rr-latency, rr-bw:64K", CANARIES, "canary") == (
        Named("rr-latency", 8),
        Named("rr-bw", 65536),
    )
    assert congestion.parse_tests("mix:1K", CONGESTORS, "congestor", (MIX,)) == (Named(MIX, 1024),)
    for text, message in (
        ("rr-lat", "unknown canary 'rr-lat'; known: rr-latency, rr-bw, allreduce"),
        ("rr-bw,rr-bw", "canary 'rr-bw' is named twice"),
        ("rr-bw:0", "message size must be at least 1 B"),
        ("allreduce:12", "for canary allreduce: a multiple of its 8-byte int64s"),
        ("", "no canary named"),
    ):
        with pytest.raises(UsageError, match=message):
            congestion.parse_tests(text, CANARIES, "canary")
    with pytest.raises(UsageError, match="bad --canary-fraction 1.0: above 0 and below 1"):
        CongestionOptions(canary_fraction=1.0).check()


def test_the_figures_pool_every_canarys_samples_exactly_and_the_impact_factor_is_worse_above_one():
    fast, slow = np.full(100, 2000.0), np.full(100, 6000.0)  # ns per exchange
    figures = congestion.canary_figures("rr-latency", 8, [fast, slow])
    assert figures["mean"] == pytest.approx(2.0) and figures["samples"] == 200  # µs, half an exchange
    assert figures["p99"] == pytest.approx(3.0) and figures["rank_spread"] == pytest.approx(3.0)
    # rr-bw: 2 neighbours x 8 messages x 128 KiB a sample; the 99 % figure is the slow tail: the 1st percentile
    sample = np.array([1e6] * 99 + [4e6])  # ns
    bw = congestion.canary_figures("rr-bw", 131072, [sample])
    assert bw["p50"] == pytest.approx(2 * 8 * 131072 / 1e-3 / 1e6)
    assert bw["p99"] == pytest.approx(bw["p50"] / 4)
    assert congestion.impact("rr-latency", 2.0, 5.0) == pytest.approx(2.5)
    assert congestion.impact("rr-bw", 1000.0, 250.0) == pytest.approx(4.0)
    # GPCNeT rounds both sides to one decimal first; exact samples do not: 1.04 -> 1.26 is 1.2115..., not 1.3/1.0
    assert congestion.impact("allreduce", 1.04, 1.26) == pytest.approx(1.26 / 1.04)
    assert math.isnan(congestion.impact("rr-latency", math.nan, 2.0))
    assert math.isnan(congestion.canary_figures("allreduce", 8, [])["mean"])


def _rows() -> list[dict]:
    rows = []
    for congestor, factor in (("none", 1.0), ("incast", 3.0), ("all-to-all", 1.5)):
        rows.append(
            {"kernel": "congestion", "transport": "mpi", "status": "ok", "canary": "rr-latency", "size_B": 8,
             "congestor": congestor, "lat_mean_us": 2.0 * factor, "lat_p50_us": 2.0 * factor,
             "lat_p99_us": 4.0 * factor, "iterations": 100, "validation": "pass",
             "cif_mean": math.nan if congestor == "none" else factor,
             "cif_p99": math.nan if congestor == "none" else factor * 2}
        )  # fmt: skip
        rows.append(
            {"kernel": "congestion", "transport": "mpi", "status": "ok", "canary": "rr-bw", "size_B": 131072,
             "congestor": congestor, "bw_MBps": 1000.0 / factor, "bw_p50_MBps": 1000.0 / factor,
             "bw_p99_MBps": 500.0 / factor, "iterations": 100, "validation": "pass",
             "cif_mean": math.nan if congestor == "none" else factor, "cif_p99": math.nan}
        )  # fmt: skip
    return rows


def test_the_key_results_table_has_a_column_pair_per_congestor_and_a_line_per_canary():
    lines = key_results(_rows())
    assert lines[0].startswith("# Congestion impact factor on mpi (GPCNeT's key results)")
    assert lines[2].split() == ["#", "incast", "all-to-all"]
    assert lines[3].split() == ["#", "canary", "test", "avg", "99%", "avg", "99%"]
    assert lines[4].split()[-4:] == ["3.00x", "6.00x", "1.50x", "3.00x"]
    assert lines[4].strip().startswith("RR Two-sided Lat (8 B)")
    assert lines[5].strip().startswith("RR Two-sided BW+Sync (131072 B)") and lines[5].split()[-3] == "-"
    assert key_results([r for r in _rows() if r["congestor"] == "none"]) == []  # nothing congested: no table
    shown = line(_rows()[3])
    assert "rr-bw" in shown and "333.33" in shown and "MB/s" in shown and "3.00x" in shown


def test_check_selects_congestion_rows_by_canary_and_congestor():
    text = '[[threshold]]\ntransport = "mpi"\nkernel = "congestion"\ncanary = "rr-latency"\ncongestor = "incast"\n'
    (threshold,) = parse_thresholds(text + "max_cif_p99 = 5\n", "t.toml", ["mpi"], KERNELS)
    covered = [row for row in _rows() if threshold.covers(row)]
    assert [(r["canary"], r["congestor"]) for r in covered] == [("rr-latency", "incast")]
    assert threshold.scope == "mpi congestion every size canary rr-latency with incast"
    with pytest.raises(UsageError, match="field 'canary': unknown canary test 'rr-lat'"):
        parse_thresholds(text.replace('"rr-latency"', '"rr-lat"') + "max_cif_p99 = 5\n", "t.toml", ["mpi"], KERNELS)


def test_the_model_takes_alpha_and_beta_from_each_phase_of_a_congestion_run():
    found = congested_parameters(_rows())
    assert [p["congestor"] for p in found] == ["none", "incast", "all-to-all"]
    assert found[0]["alpha_us"] == 2.0 and found[0]["beta_GBps"] == pytest.approx(1.0)
    assert found[1]["alpha_us"] == 6.0 and found[1]["beta_GBps"] == pytest.approx(1 / 3)
    assert congested_parameters([r for r in _rows() if r["canary"] == "rr-bw"]) == []


def test_a_transport_alone_runs_every_kernel_but_congestion_which_runs_when_named():
    from fabricbench.cli import build_parser
    from fabricbench.run.planner import _steps

    alone = _steps(build_parser().parse_args(["run", "-t", "mpi"]))
    assert "congestion" not in {step.kernel for step in alone} and "pairs-bw" in {step.kernel for step in alone}
    named = _steps(build_parser().parse_args(["run", "-t", "mpi", "-k", "congestion"]))
    assert [(step.kernel, step.sizes) for step in named] == [("congestion", [0])]  # its sizes are its tests' own
