"""Patterns: which ranks take part in each phase of a kernel, and what its rows carry beyond the common columns.

The runner times every phase of every pattern through one protocol (``runner.time_phase``: watchdog, warm-up,
agreed count, barrier, run, validate, gather). A pattern, made for one size, says the rest:

- ``phases``: the phases, alike on every rank (Unsupported on every rank alike, before any traffic);
- ``case``: this rank's case in a phase (an idle one where it has no part);
- ``agree``: how the ranks agree on the warm-up's pace that sets --max-time's count;
- ``summary``: the vector every rank sends rank 0 after a phase;
- ``rows``: rank 0's rows from the phases, each carrying the pattern's ``columns``.

A kernel names its pattern (``Kernel.pattern``); ``pattern_of`` finds it here.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass

import numpy as np

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.measure import congestion
from fabricbench.measure.congestion import Placement, Role, Test
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import Plan
from fabricbench.measure.rows import Loop, Timing, base_row, measured_row, rank_summary, timed_row, unsupported_row
from fabricbench.measure.schema import MEASURED
from fabricbench.measure.stats import across_ranks, latency_stats
from fabricbench.measure.verdict import per_node, phases
from fabricbench.transports.base import Case, Transport

STATS = ("lat_min_us", "lat_p50_us", "lat_mean_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us")
STATS += ("lat_stdev_us",)
# What every rank sends rank 0 after an all-pairs phase: its destination (-1: none) and, as a source, its samples'.
PAIR_SUMMARY = ("dst", "iterations", "total_ns", "valid", "min_ns", *STATS)


@dataclass(frozen=True)
class Phase:
    """One phase of a pattern at one size, as this rank takes part in it."""

    what: str  # the watchdog's words for it
    send_to: int | None = None  # all-pairs: the rank this one sends to, its samples timing that pair
    recv_from: int | None = None  # all-pairs: the rank this one receives from
    route: tuple[int, int] | None = None  # GPU routes: the (source, destination) GPUs of Transport.routes
    canary: Test | None = None  # congestion: the canary test timed in this phase
    congestor: Test | None = None  # congestion: the congestor pattern running meanwhile (congestion.NONE: none)


@dataclass
class Timed:
    """One rank's phase after the protocol: its case (closed, still saying how it ran), the agreed iteration count,
    its samples where it speaks for the rows (empty elsewhere), its validation (1 pass, 0 fail, -1 off) and, on
    rank 0, every rank's summary."""

    phase: Phase
    case: Case
    iterations: int
    samples: np.ndarray
    valid: int
    gathered: np.ndarray | None = None


class Idle(Case):
    """A rank with no part in a phase (a bye, or a rank left out by --per-node): it only meets the barriers."""

    def run(self, iterations: int, times: memoryview) -> None:
        pass

    def poison(self) -> None:
        pass


class Pattern:
    """The ranks the kernel's own pattern names (``one-pair``: rank 0 and N/2; ``concurrent-pairs``: r and r + N/2;
    ``all``), in one phase, each rank's case from ``Transport.case``; one row per size from rank 0's samples and
    every rank's summary, the ranks agreeing on the slowest initiator's warm-up."""

    columns: tuple[str, ...] = ()  # the columns its rows carry beyond the common ones
    rearm_from_warmup = True  # the warm-up's pace sets the watchdog's allowance for the timed run

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        self.ctrl, self.transport, self.kernel, self.size, self.plan = ctrl, transport, kernel, size, plan
        self.what = f"{transport.name} {kernel.name} at {size} B"

    @classmethod
    def probe(cls, plan: Plan, warmup: int) -> int:
        """Warm-up iterations timed before the run: with --max-time and no warm-up, one probe sets the count."""
        return warmup or (1 if plan.max_time else 0)

    @classmethod
    def serve_phases(cls, ranks: int) -> int:
        """Phases per size on ``ranks`` ranks, as serve's session budget counts them."""
        return 1

    def phases(self) -> list[Phase]:
        return [Phase(self.what)]

    def case(self, phase: Phase) -> Case:
        return self.transport.case(self.kernel, self.size)

    def agree(self, phase: Phase, estimate_ns: float) -> float:
        """Every rank takes the slowest rank's estimate: all run the same count."""
        return self.ctrl.allreduce_max(estimate_ns)

    def summary(self, timed: Timed) -> np.ndarray:
        return rank_summary(timed.case.initiator, timed.iterations, timed.samples, timed.valid)

    def row(self, timed: Timed, warmup: int) -> dict:
        name, buffer = self.transport.name, self.transport.buffer
        return measured_row(
            self.plan, name, self.kernel, self.size, timed.case, warmup, timed.samples, timed.gathered, buffer
        )

    def rows(self, timed: list[Timed], warmup: int) -> list[dict]:
        """Rank 0's rows from every phase, in order."""
        return [self.row(each, warmup) for each in timed]


class GpuRoutes(Pattern):
    """Every ordered pair of the GPUs on rank 0's host (``Transport.routes``, cuda-copy ``peer``): a phase per route,
    timed as any copy, one row per route named by its GPUs."""

    columns = ("src_gpu", "dst_gpu", "src_host", "dst_host")

    def phases(self) -> list[Phase]:
        return [Phase(self.what, route=route) for route in self.transport.routes(self.kernel)]

    def case(self, phase: Phase) -> Case:
        self.transport.route = phase.route
        try:
            return self.transport.case(self.kernel, self.size)
        finally:
            self.transport.route = None

    def row(self, timed: Timed, warmup: int) -> dict:
        host = socket.gethostname()
        row = super().row(timed, warmup)
        row.update(zip(self.columns, (*timed.phase.route, host, host), strict=True))
        return row


class AllPairs(Pattern):
    """Every ordered pair of ranks (or of hosts, --per-node), phase by phase as --schedule says
    (fabricbench.measure.verdict): each rank's case from ``Transport.pair_case``, one row per (source,
    destination) from the source's summary.

    Under ``isolated`` each pair agrees on its own source's warm-up, so a slow pair in a phase does not cut the
    fast ones' samples to its few; under ``shift`` every rank's loop waits on its neighbours', so all take the
    slowest. The watchdog's allowance covers a whole phase from its bytes: a rank waits at the phase's barriers
    for the slowest pair, not for its own.
    """

    columns = ("src_rank", "dst_rank", "src_host", "dst_host", "schedule")
    rearm_from_warmup = False

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.schedule = plan.pairs.schedule
        self.hosts: list[str] = []
        self.ranks: list[int] = []

    @classmethod
    def probe(cls, plan: Plan, warmup: int) -> int:
        return warmup

    @classmethod
    def serve_phases(cls, ranks: int) -> int:
        return ranks  # one per direction: the isolated schedule on two ranks

    def phases(self) -> list[Phase]:
        """Collective: every rank's host, then the taking-part ranks' phases; Unsupported when one rank is left."""
        ctrl = self.ctrl
        hosts = [str(r.get("host", "")) for r in allgather_json(ctrl, {"host": socket.gethostname()}, "host list")]
        self.hosts = hosts
        self.ranks = per_node(hosts) if self.plan.pairs.per_node else list(range(ctrl.size))
        if len(self.ranks) < 2:
            raise Unsupported(f"--per-node leaves one rank: all {ctrl.size} ranks are on {hosts[0]}")
        found = []
        for number, pairs in enumerate(phases(self.schedule, self.ranks), 1):
            send_to = next((dst for src, dst in pairs if src == ctrl.rank), None)
            recv_from = next((src for src, dst in pairs if dst == ctrl.rank), None)
            found.append(Phase(f"{self.what}, {self.schedule} phase {number}", send_to, recv_from))
        return found

    def case(self, phase: Phase) -> Case:
        return self.transport.pair_case(self.kernel, self.size, phase.send_to, phase.recv_from) or Idle()

    def agree(self, phase: Phase, estimate_ns: float) -> float:
        if self.schedule == "shift":
            return self.ctrl.allreduce_max(estimate_ns)
        table = allgather_json(self.ctrl, {"ns": estimate_ns}, "warm-up estimates")
        source = self.ctrl.rank if phase.send_to is not None else phase.recv_from
        if source is None:
            return 0.0
        value = table[source].get("ns")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise PeerError(f"rank {source} sent a bad warm-up estimate {value!r}")
        return float(value)

    def summary(self, timed: Timed) -> np.ndarray:
        summary = np.full(len(PAIR_SUMMARY), math.nan)
        summary[0], summary[3] = -1.0, float(timed.valid)
        if timed.phase.send_to is not None:
            samples = timed.samples
            stats = latency_stats(samples, self.kernel.sample_divisor)
            summary[:5] = (timed.phase.send_to, timed.iterations, float(samples.sum()), timed.valid, samples.min())
            summary[5:] = [stats[name] for name in STATS]
        return summary

    def rows(self, timed: list[Timed], warmup: int) -> list[dict]:
        plan, transport, kernel = self.plan, self.transport, self.kernel
        method = next((each.case.method for each in timed if each.phase.send_to is not None), "")
        loop = Loop(method or transport.name, pairs=1, window=plan.window if kernel.windowed else 0)
        rows = []
        for table in (each.gathered for each in timed):
            for src, vector in enumerate(table):
                if vector[0] < 0:
                    continue
                dst = int(vector[0])
                fields = dict(zip(PAIR_SUMMARY, vector, strict=True))
                timing = Timing(
                    {name: float(fields[name]) for name in STATS},
                    vector[1:2],
                    vector[2:3],
                    float(fields["min_ns"]),
                    np.array([vector[3], table[dst][3]]),
                )
                ranks = len(self.ranks)
                row = timed_row(plan, transport.name, kernel, self.size, ranks, transport.buffer, loop, warmup, timing)
                row.update(zip(self.columns, (src, dst, self.hosts[src], self.hosts[dst], self.schedule), strict=True))
                rows.append(row)
        return sorted(rows, key=lambda row: (row["src_rank"], row["dst_rank"]))


# What every rank sends rank 0 after a congestion phase, then (canaries) its samples: its role (ROLES), the agreed
# iterations, its validation, and (congestors) the bytes it moved while its group was confirmed running, and for
# how long.
CONGESTION_SUMMARY = ("role", "iterations", "valid", "moved_bytes", "active_ns")
IDLE, CANARY, CONGESTOR = 0.0, 1.0, 2.0
CANARY_SAMPLES = {"rr-latency": "rtt/2", "rr-bw": "window", "allreduce": "op"}  # the row's sample column
PLACEMENT_KEY = "_congestion_placement"  # a row's private field: the reporter moves it into the metadata


class Congestion(Pattern):
    """GPCNeT's test: the ranks split into canaries and congestors (measure.congestion.place), then for the
    isolated phase and each congestor pattern, each canary test timed on the canaries while the pattern runs on
    the congestors (``Transport.congestion_case``: the congestors confirm they run before the first sample and stop
    after the last). One row per (canary test, congestor) from the canaries' exact samples, with the congestors'
    throughput and the congestion impact factor against the isolated row."""

    columns = ("canary", "congestor", "canaries", "congestors", "bw_p50_MBps", "bw_p99_MBps", "rank_spread")
    columns += ("congestor_MBps", "cif_mean", "cif_p99")

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.canary_tests = plan.congestion.canary_tests()
        self.congestor_tests = plan.congestion.congestor_tests()
        self.placement: Placement | None = None
        self.hosts: list[str] = []
        self.methods: dict[str, tuple[str, str]] = {}  # rank 0: each phase's (canary method, congestor method)
        self.unsupported: list[tuple[Test, str]] = []  # congestor patterns the transport cannot run, and why

    def phases(self) -> list[Phase]:
        """Collective: every rank's host, the placement, then (isolated and each congestor) x each canary test;
        Unsupported on every rank alike when the ranks (hosts, --per-node) cannot hold them."""
        ctrl, options = self.ctrl, self.plan.congestion
        self.hosts = [str(r.get("host", "")) for r in allgather_json(ctrl, {"host": socket.gethostname()}, "hosts")]
        placement = congestion.place(self.hosts, self.plan.pairs.per_node, options.canary_fraction, options.seed)
        try:
            units = len(placement.canaries) + len(placement.congestors)
            congestion.check_units(units, options.canary_fraction, self.congestor_tests, placement.units)
        except UsageError as exc:
            raise Unsupported(str(exc)) from None
        self.placement = placement
        found = []
        for congestor in self.congestor_tests:
            why = self.transport.congestion_unsupported(congestor.name)
            if why:
                self.unsupported.append((congestor, why))
        skipped = {congestor for congestor, _ in self.unsupported}
        for congestor in (Test(congestion.NONE, 0), *(c for c in self.congestor_tests if c not in skipped)):
            for canary in self.canary_tests:
                what = f"{self.transport.name} congestion: {canary.name} with {congestor.name}"
                found.append(Phase(what, canary=canary, congestor=congestor))
        return found

    def role(self, phase: Phase, rank: int) -> Role:
        placement = self.placement
        return Role(rank, phase.canary, placement.canaries, congestion.groups(placement, phase.congestor))

    def case(self, phase: Phase) -> Case:
        role = self.role(phase, self.ctrl.rank)
        case = self.transport.congestion_case(role)
        said = {"canary": case.method if role.is_canary else "", "congestor": case.method if role.group else ""}
        table = self.ctrl.gather_json(said)
        if table is not None:  # rank 0: how the canaries and the congestors (each group under mix) ran, for the row
            canary = next((str(r.get("canary", "")) for r in table if r.get("canary")), "")
            groups = dict.fromkeys(str(r.get("congestor", "")) for r in table if r.get("congestor"))
            self.methods[phase.what] = (canary, " | ".join(groups))
        return case

    def summary(self, timed: Timed) -> np.ndarray:
        role = self.role(timed.phase, self.ctrl.rank)
        kind = CANARY if role.is_canary else CONGESTOR if role.group else IDLE
        vector = np.full(len(CONGESTION_SUMMARY) + timed.iterations, math.nan)
        # A congestor's throughput while the canaries were timed: the runner runs every case for its warm-up (even
        # of 0), the timed run, then validation's one iteration; the second run's figures are the timed run's.
        runs = getattr(timed.case, "runs", [])
        timed_run = runs[1] if len(runs) > 1 else None
        moved = timed_run.moved_bytes if timed_run else math.nan
        active = timed_run.active_ns if timed_run else math.nan
        vector[: len(CONGESTION_SUMMARY)] = (kind, timed.iterations, timed.valid, moved, active)
        if kind == CANARY:
            vector[len(CONGESTION_SUMMARY) : len(CONGESTION_SUMMARY) + len(timed.samples)] = timed.samples
        return vector

    def rows(self, timed: list[Timed], warmup: int) -> list[dict]:
        isolated: dict[str, dict] = {}
        rows = [self._row(each, warmup, isolated) for each in timed]
        for congestor, why in self.unsupported:
            for canary in self.canary_tests:
                row = unsupported_row(
                    self.plan, self.transport.name, self.kernel, canary.size, self.ctrl.size, why, self.transport.buffer
                )
                row.update(canary=canary.name, congestor=congestor.name, sample=CANARY_SAMPLES[canary.name])
                rows.append(row)
        if rows:
            rows[0][PLACEMENT_KEY] = self.placement.metadata(self.hosts)
        return rows

    def _row(self, timed: Timed, warmup: int, isolated: dict[str, dict]) -> dict:
        canary, congestor = timed.phase.canary, timed.phase.congestor
        table, head = timed.gathered, len(CONGESTION_SUMMARY)
        canaries, congestors = table[table[:, 0] == CANARY], table[table[:, 0] == CONGESTOR]
        per_rank = [vector[head : head + int(vector[1])] for vector in canaries]
        figures = congestion.canary_figures(canary.name, canary.size, per_rank)
        if congestor.name == congestion.NONE:
            isolated[canary.name] = figures
        alone = isolated.get(canary.name)
        row = base_row(self.plan, self.transport.name, self.kernel, canary.size, len(table), self.transport.buffer)
        pooled = np.concatenate(per_rank) if per_rank else np.zeros(0)
        divisor = 2 if canary.name == "rr-latency" else 1
        row.update(latency_stats(pooled, divisor))  # rr-bw: the time of a whole sample, barrier and windows
        row.update(across_ranks(np.array([p.mean() for p in per_rank]) / 1000.0 / divisor) if per_rank else {})
        method, congestor_method = self.methods.get(timed.phase.what, ("", ""))
        valid = table[:, 2]
        row.update(
            canary=canary.name,
            congestor=congestor.name,
            canaries=len(canaries),
            congestors=len(congestors),
            sample=CANARY_SAMPLES[canary.name],
            method=method,
            iterations=timed.iterations,
            warmup=warmup,
            window=congestion.RR_BW_WINDOW if canary.name == "rr-bw" else 0,
            rank_spread=figures["rank_spread"],
            validation="off" if (valid == -1).all() else ("fail" if (valid == 0).any() else "pass"),
            status=MEASURED,
            note=f"congestors: {congestor_method}" if congestor_method else "",
        )
        if canary.name == "rr-bw":
            row.update(bw_MBps=figures["mean"], bw_p50_MBps=figures["p50"], bw_p99_MBps=figures["p99"])
        if len(congestors):
            with np.errstate(divide="ignore", invalid="ignore"):
                rates = congestors[:, 3] / congestors[:, 4] * 1e3  # bytes per ns to MB/s (10^6 B/s)
            rates = rates[np.isfinite(rates)]
            row["congestor_MBps"] = float(rates.sum()) if len(rates) else math.nan
        if alone is not None and congestor.name != congestion.NONE:
            row["cif_mean"] = congestion.impact(canary.name, alone["mean"], figures["mean"])
            row["cif_p99"] = congestion.impact(canary.name, alone["p99"], figures["p99"])
        return row


PATTERNS: dict[str, type[Pattern]] = {
    "one-pair": Pattern,
    "concurrent-pairs": Pattern,
    "all": Pattern,
    "all-pairs": AllPairs,
    "gpu-routes": GpuRoutes,
    "congestion": Congestion,
}


def pattern_of(kernel: Kernel) -> type[Pattern]:
    """The pattern a kernel names."""
    return PATTERNS[kernel.pattern]
