"""The patterns and the one timing protocol, without processes: fabricbench.run.patterns and runner.measure.

A one-rank control plane and a case that writes the samples it is told to stand in for ranks and a transport;
the all-pairs rows are built from hand-made summary vectors, as rank 0 gathers them.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from fabricbench.errors import Unsupported
from fabricbench.measure.kernels import KERNELS, get_kernel
from fabricbench.measure.plan import AllPairsOptions, Plan, Step
from fabricbench.measure.results import COLUMNS
from fabricbench.measure.topology import parse_slurm
from fabricbench.run import runner
from fabricbench.run.patterns import PATTERNS, AllPairs, GpuRoutes, Pattern, Phase, Timed, pattern_of
from fabricbench.run.patterns.all_pairs import PAIR_SUMMARY
from fabricbench.transports import TRANSPORTS, transport_class
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import CongestionCases, PairCases, Routes, SelfTimed, missing


class OneRank:
    """The control plane of a run on one rank: every collective is this rank's own value."""

    rank, size = 0, 1

    def barrier(self) -> None:
        pass

    def allreduce_max(self, value: float) -> float:
        return value

    def gather(self, vector: np.ndarray) -> np.ndarray:
        return np.stack([vector])

    def abort(self, code: int) -> None:
        raise AssertionError(f"aborted with {code}")


class Steady(Case):
    """Every iteration takes ``ns``; it receives what it expects."""

    initiator, method, window = True, "steady", 4

    def __init__(self, ns: int):
        super().__init__()
        self.ns, self.runs, self.closed = ns, [], False

    def run(self, iterations: int, times: memoryview) -> None:
        self.runs.append(iterations)
        for i in range(iterations):
            times[i] = self.ns

    def poison(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Steadies(Transport):
    name = "steady"
    route: tuple[int, int] | None = None

    def __init__(self, ns: int = 1000, routes: list[tuple[int, int]] | None = None):
        self.ns, self.made, self.gpu_routes, self.seen_routes = ns, [], routes or [], []

    def case(self, kernel, size) -> Case:
        self.seen_routes.append(self.route)
        self.made.append(Steady(self.ns))
        return self.made[-1]

    def routes(self, kernel) -> list[tuple[int, int]]:
        return self.gpu_routes


def measure(transport: Transport, kernel: str, **plan) -> list[dict]:
    watchdog = runner.Watchdog(0, abort=lambda code: None)
    fields = {"iterations": 100, "warmup": 2} | plan
    return runner.measure(OneRank(), transport, get_kernel(kernel), 1024, Plan(steps=[], **fields), watchdog)


def test_every_kernel_names_a_pattern_whose_columns_the_table_has():
    assert {kernel.pattern for kernel in KERNELS.values()} == set(PATTERNS)
    for pattern in PATTERNS.values():
        assert set(pattern.columns) <= set(COLUMNS), pattern
    assert pattern_of(get_kernel("pairs-bw")) is AllPairs and pattern_of(get_kernel("peer")) is GpuRoutes
    assert pattern_of(get_kernel("latency")) is Pattern is pattern_of(get_kernel("allreduce"))


def test_the_protocol_warms_up_times_and_builds_the_row():
    transport = Steadies(ns=2000)
    [row] = measure(transport, "bw", window=4)
    [case] = transport.made
    assert case.runs == [2, 100] and case.closed
    assert (row["method"], row["iterations"], row["warmup"], row["validation"]) == ("steady", 100, 2, "off")
    assert row["bw_MBps"] == pytest.approx(4 * 1024 / 2000e-9 / 1e6)
    assert row["lat_p50_us"] == pytest.approx(2.0)


def test_max_time_sets_the_count_from_the_warm_up_and_a_probe_stands_in_for_none():
    transport = Steadies(ns=1_000_000)  # 1 ms an iteration: 0.01 s allows 10
    [row] = measure(transport, "latency", max_time=0.01)
    assert transport.made[0].runs == [2, 10] and row["iterations"] == 10
    transport = Steadies(ns=1_000_000)
    measure(transport, "latency", warmup=0, max_time=0.01)
    assert transport.made[0].runs == [1, 10]  # one probe iteration, counted as no warm-up
    assert (
        Pattern.probe(Plan(steps=[], max_time=0.01), 0) == 1 and AllPairs.probe(Plan(steps=[], max_time=0.01), 0) == 0
    )


def test_validation_is_one_more_iteration_after_the_timed_ones():
    transport = Steadies()
    [row] = measure(transport, "latency", validate=True)
    assert transport.made[0].runs == [2, 100, 1] and row["validation"] == "pass"


def test_gpu_routes_time_each_route_with_the_route_set_and_name_the_row_by_it():
    transport = Steadies(routes=[(0, 1), (1, 0)])
    rows = measure(transport, "peer")
    assert transport.seen_routes == [(0, 1), (1, 0)] and transport.route is None
    assert [(row["src_gpu"], row["dst_gpu"]) for row in rows] == [(0, 1), (1, 0)]
    assert rows[0]["src_host"] == rows[0]["dst_host"]


class Plain(Transport):
    """Cases for one pair, concurrent pairs and all ranks, and no capability beyond them."""

    name = "plain"

    def case(self, kernel, size) -> Case:
        return Steady(1000)


@pytest.mark.parametrize(
    ("kernel", "words"),
    [
        ("pairs-bw", "plain has no all-pairs loop"),
        ("peer", "plain has no GPU routes"),
        ("congestion", "plain has no congestion loops"),
    ],
)
def test_a_pattern_refuses_a_transport_without_its_capability_before_any_traffic(kernel, words):
    assert pattern_of(get_kernel(kernel)).lacks(Plain) == words
    with pytest.raises(Unsupported, match=f"^{words}$"):
        measure(Plain(), kernel)
    assert pattern_of(get_kernel("latency")).lacks(Plain) is None


def test_the_capabilities_are_checked_on_the_class():
    classes = {name: transport_class(name) for name in TRANSPORTS}
    assert {name for name, cls in classes.items() if issubclass(cls, PairCases)} == {"mpi", "tcp"}
    assert {name for name, cls in classes.items() if issubclass(cls, CongestionCases)} == {"mpi", "tcp"}
    assert {name for name, cls in classes.items() if issubclass(cls, Routes)} == {"cuda-copy"}
    assert {name for name, cls in classes.items() if issubclass(cls, SelfTimed)} == {
        "perftest",
        "perftest-send",
        "fi-pingpong",
        "ucx-perftest",
    }
    assert not any(issubclass(Transport, c) for c in (PairCases, Routes, CongestionCases, SelfTimed))
    assert missing(Plain, None) is None and missing(classes["tcp"], PairCases) is None


def test_the_plan_runs_only_what_a_transport_has_the_capability_for(monkeypatch):
    from fabricbench.run import planner

    monkeypatch.setattr(planner.transports, "transport_class", lambda name: Plain if name == "plain" else TCPish)
    assert not planner._runs(Step("plain", "pairs-bw", [8]))  # its pattern needs PairCases
    assert planner._runs(Step("tcpish", "pairs-bw", [8]))


class TCPish(Plain):
    name = "tcpish"
    kernels = frozenset({"pairs-bw"})

    def pair_case(self, kernel, size, send_to, recv_from) -> Case | None:
        return None


def _summary(dst: int, iterations: int, total_ns: float, valid: int, min_ns: float, p50_us: float) -> np.ndarray:
    vector = np.full(len(PAIR_SUMMARY), math.nan)
    vector[:5] = (dst, iterations, total_ns, valid, min_ns)
    vector[PAIR_SUMMARY.index("lat_p50_us")] = p50_us
    return vector


def _all_pairs(kernel: str, table: list[np.ndarray]) -> list[dict]:
    plan = Plan(steps=[], window=8, pairs=AllPairsOptions(schedule="shift"))
    pattern = AllPairs(OneRank(), Steadies(), get_kernel(kernel), 1 << 20, plan)
    pattern.ranks, pattern.hosts = [0, 1, 2], ["h0", "h1", "h2"]
    case = Steady(1)
    phase = Phase("phase 1", send_to=1, recv_from=2)
    return pattern.phase_rows(Timed(phase, case, 5, np.zeros(0), 1, np.stack(table)), 1).rows()


def test_an_all_pairs_row_is_its_sources_figures_and_both_ends_validation():
    idle = np.full(len(PAIR_SUMMARY), math.nan)
    idle[0], idle[3] = -1.0, 0.0  # rank 2 received from rank 1 and found it wrong
    rows = _all_pairs("pairs-bw", [_summary(2, 5, 5e6, 1, 0.5e6, 1000.0), _summary(2, 10, 2e6, 1, 0.1e6, 200.0), idle])
    assert [(row["src_rank"], row["dst_rank"], row["dst_host"]) for row in rows] == [(0, 2, "h2"), (1, 2, "h2")]
    first = rows[0]
    assert (first["method"], first["pairs"], first["window"], first["schedule"]) == ("steady", 1, 8, "shift")
    assert (first["iterations"], first["warmup"], first["ranks"], first["note"]) == (5, 1, 3, "")
    assert first["bw_MBps"] == pytest.approx((1 << 20) * 8 * 5 / 5e-3 / 1e6)
    assert first["bw_peak_MBps"] == pytest.approx((1 << 20) * 8 / 0.5e-3 / 1e6)
    assert first["msgrate_per_s"] == pytest.approx(8 * 5 / 5e-3)
    assert first["lat_p50_us"] == 1000.0 and "lat_rank_avg_us" not in first
    assert {row["validation"] for row in rows} == {"fail"}


def test_an_all_pairs_rate_from_a_window_timed_at_0_ns_is_refused_in_its_own_row_alone():
    rows = _all_pairs("pairs-bw", [_summary(1, 5, 0.0, 1, 0.0, 1.0), _summary(0, 5, 5e6, 1, 0.5e6, 1.0)])
    assert (
        math.isnan(rows[0]["bw_MBps"]) and math.isnan(rows[0]["bw_peak_MBps"]) and math.isnan(rows[0]["msgrate_per_s"])
    )
    assert "bw_MBps inf (msgrate_per_s with it) refused: not a possible rate" in rows[0]["note"]
    assert rows[1]["note"] == "" and rows[1]["bw_MBps"] > 0


def test_all_pairs_rows_carry_each_pairs_tier_and_hops_from_the_topology():
    text = "SwitchName=leaf1 Nodes=h[0-1]\nSwitchName=leaf2 Nodes=h2\nSwitchName=spine Switches=leaf[1-2]"
    fabric = parse_slurm(text, "t.conf")
    plan = Plan(steps=[], window=8, pairs=AllPairsOptions(schedule="shift"), topology=fabric.to_dict())
    pattern = AllPairs(OneRank(), Steadies(), get_kernel("pairs-bw"), 1 << 20, plan)
    pattern.ranks, pattern.hosts = [0, 1, 2, 3], ["h0", "h1", "h2", "h2"]
    table = [_summary(d, 5, 5e6, 1, 0.5e6, 1.0) for d in (1, 2, 3, 0)]
    batch = pattern.phase_rows(
        Timed(Phase("p", send_to=1, recv_from=3), Steady(1), 5, np.zeros(0), 1, np.stack(table)), 1
    )
    rows = batch.rows()
    assert batch.size_rows == 12 and [(r["src_rank"], r["dst_rank"]) for r in rows] == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert [(r["tier"], r["hops"]) for r in rows] == [
        ("same-switch", 0),
        ("cross-switch", 2),
        ("same-host", 0),
        ("cross-switch", 2),
    ]


def test_an_all_pairs_latency_row_has_no_bandwidth():
    rows = _all_pairs("pairs-latency", [_summary(1, 5, 5e6, -1, 0.5e6, 1.0), _summary(0, 5, 5e6, -1, 0.5e6, 1.0)])
    assert all(math.isnan(row["bw_MBps"]) and row["validation"] == "off" and row["window"] == 0 for row in rows)


def test_serve_counts_one_phase_per_direction_for_all_pairs():
    assert AllPairs.serve_phases(2) == 2 and Pattern.serve_phases(2) == 1 and GpuRoutes.serve_phases(2) == 1


def test_execute_runs_in_a_thread_when_no_watch_for_ctrl_c_is_given():
    """Signal handlers can only be set from the main thread: a rank run as a thread passes no watch."""
    failures = []

    def rank() -> None:
        try:
            runner.execute(Plan(steps=[]), OneRank(), None)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            failures.append(exc)

    thread = threading.Thread(target=rank)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and failures == []
