"""The congestion pattern (GPCNeT's test): canaries timed beside congestors, each congestor pattern in turn; its
console lines, and GPCNeT's key-results table at the end of the run.

GPCNeT ends with its "key results": the congestion impact factor of each canary test, mean and 99th percentile.
Here a column pair per congestor pattern, so each pattern's effect reads on its own; ``mix`` (the four at once,
a quarter of the congestors each) is GPCNeT's own congested phase.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable

from fabricbench import transports
from fabricbench.argtypes import bounded_decimal, whole_number
from fabricbench.control import rank_hosts
from fabricbench.errors import Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure import congestion
from fabricbench.measure.congestion import CANARY_TITLES, CANARY_UNITS, NONE, Placement, Role, Test
from fabricbench.measure.formatting import given
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import CongestionOptions, Plan, Step
from fabricbench.measure.rows import base_row, unsupported_row
from fabricbench.measure.schema import MEASURED, is_measured
from fabricbench.measure.stats import across_ranks, latency_stats
from fabricbench.run.patterns.plain import METADATA, Pattern, Phase, Timed
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import CongestionCases

KERNEL = "congestion"  # the one kernel of this pattern

# What every rank sends rank 0 after a congestion phase, then (canaries) its samples: its role (ROLES), the agreed
# iterations, its validation, and (congestors) the bytes it moved while its group was confirmed running, and for
# how long.
CONGESTION_SUMMARY = ("role", "iterations", "valid", "moved_bytes", "active_ns")
IDLE, CANARY, CONGESTOR = 0.0, 1.0, 2.0
CANARY_SAMPLES = {"rr-latency": "rtt/2", "rr-bw": "window", "allreduce": "op"}  # the row's sample column

# (header, width) of a congestion line; the figures are µs for a time test, MB/s for rr-bw (the unit column).
LAYOUT = (
    ("canary", 12),
    ("congestor", 12),
    ("iters", 7),
    ("mean", 11),
    ("p50", 11),
    ("p99", 11),
    ("unit", 6),
    ("rank spread", 12),
    ("cong. MB/s", 12),
    ("CIF avg", 9),
    ("CIF 99%", 9),
    ("valid", 6),
)


def _cell(value, width: int, digits: int = 2) -> str:
    if not given(value):
        return f"{'-':>{width}}"
    return f"{value:>{width}.{digits}f}"


def _factor(value, width: int) -> str:
    """An impact factor: three figures where it is small, so 0.004x does not read 0.00x."""
    if not given(value):
        return f"{'-':>{width}}"
    text = f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"
    return f"{text + 'x':>{width}}"


def header() -> str:
    """The line naming a congestion line's columns."""
    names = "".join(f"{name:>{width}}" for name, width in LAYOUT)
    return f"#{names[1:]}"


class Congestion(Pattern):
    """GPCNeT's test: the ranks split into canaries and congestors (measure.congestion.place), then for the
    isolated phase and each congestor pattern, each canary test timed on the canaries while the pattern runs on
    the congestors (its transport's ``congestion_case``, capabilities.CongestionCases: the congestors confirm
    they run before the first sample and stop after the last). One row per (canary test, congestor) from the
    canaries' exact samples, with the congestors' throughput and the congestion impact factor against the
    isolated row."""

    columns = ("canary", "congestor", "canaries", "congestors", "bw_p50_MBps", "bw_p99_MBps", "rank_spread")
    columns += ("congestor_MBps", "cif_mean", "cif_p99")
    capability = CongestionCases

    @classmethod
    def add_arguments(cls, run: argparse.ArgumentParser) -> None:
        defaults = CongestionOptions()
        group = run.add_argument_group(
            "congestion kernel (GPCNeT's canaries and congestors; --per-node places by host)"
        )
        canaries = ", ".join(f"{name}:{size}" for name, size in congestion.CANARIES.items())
        congestors = ", ".join(f"{name}:{size}" for name, size in congestion.CONGESTORS.items())
        group.add_argument(
            "--canaries",
            default=defaults.canaries,
            metavar="LIST",
            help=f"canary tests as NAME[:SIZE], comma-separated (default all: {canaries})",
        )
        group.add_argument(
            "--congestors",
            default=defaults.congestors,
            metavar="LIST",
            help=f"congestor patterns as NAME[:SIZE], each run alone beside the canaries (default all: {congestors}); "
            f"{congestion.MIX}: the four at once, a quarter of the congestors each, as GPCNeT runs them",
        )
        group.add_argument(
            "--canary-fraction",
            type=bounded_decimal("--canary-fraction", 0, 1, above=True),
            default=defaults.canary_fraction,
            metavar="F",
            help="share of the ranks (hosts with --per-node) that are canaries, at least 2 "
            f"(default {defaults.canary_fraction:g})",
        )
        group.add_argument(
            "--congestion-seed",
            type=whole_number("--congestion-seed", 0),
            default=defaults.seed,
            metavar="N",
            help="seed of the shuffle that places canaries and congestors, recorded in the metadata "
            f"(default {defaults.seed})",
        )
        group.add_argument(
            "--congestion-placement",
            choices=congestion.PLACEMENTS,
            default=defaults.placement,
            help=f"{congestion.RANDOM}: GPCNeT's shuffle (default); {congestion.CROSS_SWITCH}: each canary's ring "
            "neighbour under another switch and the incast crossing the same uplinks; "
            f"{congestion.WITHIN_SWITCH}: the canaries under one switch, the congestors under others (the "
            "control); both need --topology",
        )

    @classmethod
    def plan_options(cls, args: argparse.Namespace, steps: list[Step], ranks: int) -> dict:
        """The congestion kernel's settings, checked, with the launched ranks enough for its canaries and every
        congestor pattern (hosts are counted at run time under --per-node); the defaults when it is not run."""
        options = CongestionOptions(
            args.canaries,
            args.congestors,
            args.canary_fraction,
            args.congestion_seed,
            args.congestion_placement,
            args.per_node,
        )
        if not steps:
            return {"congestion": CongestionOptions()}
        options.check()
        cls.refuse_osu_text(args, "the congestion kernel has")
        if not args.per_node and any(s.kernel in transports.supported_kernels(s.transport) for s in steps):
            congestion.check_units(ranks, options.canary_fraction, options.congestor_tests())
        return {"congestion": options}

    @classmethod
    def header(cls, transport: str, kernel_name: str, ranks: int, title: str) -> str:
        title = f" - {title}" if title else ""  # no MPI vendor to name in a peer run
        return f"# {transport} {kernel_name} on {ranks} ranks{title}\n{header()}"

    @classmethod
    def line(cls, row: dict) -> str:
        return line(row)

    @classmethod
    def keeps(cls, row: dict) -> bool:
        return True

    @classmethod
    def finish(cls, rows: list[dict], reporter) -> None:
        """GPCNeT's key results."""
        for text in key_results(rows):
            reporter.say(text)

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.canary_tests = plan.congestion.canary_tests()
        self.congestor_tests = plan.congestion.congestor_tests()
        self.placement: Placement | None = None
        self.hosts: list[str] = []
        self.switches: list[str] | None = None  # each rank's switch, where the plan carries a topology
        self.methods: dict[str, tuple[str, str]] = {}  # rank 0: each phase's (canary method, congestor method)
        self.unsupported: list[tuple[Test, str]] = []  # congestor patterns the transport cannot run, and why

    def phases(self) -> list[Phase]:
        """Collective: every rank's host, the placement, then (isolated and each congestor) x each canary test;
        Unsupported on every rank alike when the ranks (hosts, --per-node) cannot hold them."""
        self.refuse_lacking()
        ctrl, options = self.ctrl, self.plan.congestion
        self.hosts = rank_hosts(ctrl)
        fabric = self.plan.fabric()
        try:
            self.switches = [fabric.switch_of(host) for host in self.hosts] if fabric else None
            placement = congestion.place(
                self.hosts,
                self.plan.congestion.per_node,
                options.canary_fraction,
                options.seed,
                options.placement,
                self.switches,
            )
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
            rows[0][METADATA] = {"congestion": self.placement.metadata(self.hosts, self.switches)}
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


def figures(row: dict) -> tuple[float, float, float]:
    """A row's (mean, p50, p99) in its canary's unit: µs, or MB/s for rr-bw (p99: the rate 99 % of samples reach)."""
    if row.get("canary") == "rr-bw":
        return row.get("bw_MBps"), row.get("bw_p50_MBps"), row.get("bw_p99_MBps")
    return row.get("lat_mean_us"), row.get("lat_p50_us"), row.get("lat_p99_us")


def line(row: dict) -> str:
    if not is_measured(row.get("status", "")):
        which = f"{row['canary']} with {row.get('congestor', '')}: " if row.get("canary") else ""
        return f"# {which}{row['status']}"
    mean, p50, p99 = figures(row)
    cells = [
        f"{row.get('canary', ''):>12}",
        f"{row.get('congestor', ''):>12}",
        f"{row.get('iterations', 0):>7d}",
        _cell(mean, 11),
        _cell(p50, 11),
        _cell(p99, 11),
        f"{CANARY_UNITS.get(row.get('canary', ''), ''):>6}",
        _cell(row.get("rank_spread"), 12),
        _cell(row.get("congestor_MBps"), 12, 1),
        _factor(row.get("cif_mean"), 9),
        _factor(row.get("cif_p99"), 9),
        f"{row.get('validation', ''):>6}",
    ]
    # The note names the congestors' calls, the same on every row of a congestor: the table has it, not the line.
    note = str(row.get("note") or "")
    note = "" if note.startswith("congestors:") else note
    return "".join(cells) + (f"  ({note})" if note else "")


def key_results(rows: Iterable[dict]) -> list[str]:
    """GPCNeT's key-results table from a run's congestion rows: per canary test, the impact factor of each
    congestor pattern (mean and 99 %); [] when no congested row was measured. Rows of several transports or
    repeats each get their own table, in the order they came."""
    tables: dict[tuple, dict[tuple[str, str], dict]] = {}
    for row in rows:
        if row.get("kernel") != KERNEL or not is_measured(row.get("status", "")):
            continue
        key = (row.get("transport", ""), row.get("repeat", 0))
        tables.setdefault(key, {})[(row.get("canary", ""), row.get("congestor", ""))] = row
    out: list[str] = []
    for (transport, _), found in tables.items():
        canaries = list(dict.fromkeys(canary for canary, _ in found))
        congestors = [c for c in dict.fromkeys(congestor for _, congestor in found) if c != NONE]
        if not congestors:
            continue
        first = max(len(f"{CANARY_TITLES.get(c, c)} ({_size(found, c)})") for c in canaries) + 2
        out.append(f"# Congestion impact factor on {transport} (GPCNeT's key results): congested / isolated time,")
        out.append("# isolated / congested bandwidth; 1.00x is no effect, above is worse; avg and 99th percentile")
        out.append("# " + " " * (first - 2) + "".join(f"{name:>20}" for name in congestors))
        out.append("# " + f"{'canary test':<{first - 2}}" + "".join(f"{'avg':>10}{'99%':>10}" for _ in congestors))
        for canary in canaries:
            title = f"{CANARY_TITLES.get(canary, canary)} ({_size(found, canary)})"
            cells = []
            for congestor in congestors:
                row = found.get((canary, congestor), {})
                cells += [_factor(row.get("cif_mean"), 10), _factor(row.get("cif_p99"), 10)]
            out.append(f"  {title:<{first - 2}}" + "".join(cells))
    return out


def _size(found: dict, canary: str) -> str:
    size = next((row.get("size_B") for (name, _), row in found.items() if name == canary), None)
    return f"{int(size)} B" if given(size) else "?"
