"""The all-pairs pattern (pairs-latency, pairs-bw): every ordered pair of ranks, phase by phase, and the verdict
on the slow links and hosts at the end of the run."""

from __future__ import annotations

import argparse
import json
import math

from fabricbench.argtypes import bounded_decimal
from fabricbench.control import rank_hosts
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.kernels import BANDWIDTH_COLUMNS, Kernel
from fabricbench.measure.plan import MAX_OUTLIER_FLOOR, MAX_OUTLIER_Z, NO_FORMAT, AllPairsOptions, Plan, Step
from fabricbench.measure.rows import Coded, RowBatch, base_row, refuse_impossible
from fabricbench.measure.schema import MEASURED
from fabricbench.measure.stats import latency_stats
from fabricbench.measure.topology import CROSS_GROUP, CROSS_SWITCH, SAME_HOST, SAME_SWITCH, TIERS, Topology
from fabricbench.measure.verdict import SCHEDULES, per_node, phases
from fabricbench.run.patterns.plain import Idle, Pattern, Phase, Timed
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import PairCases

STATS = ("lat_min_us", "lat_p50_us", "lat_mean_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us")
STATS += ("lat_stdev_us",)
# What every rank sends rank 0 after an all-pairs phase: its destination (-1: none) and, as a source, its samples'
# and the payload rate of the link to its destination (NaN: not known; Case.link_MBps).
PAIR_SUMMARY = ("dst", "iterations", "total_ns", "valid", "min_ns", *STATS, "link_MBps")
SHIFT = SCHEDULES[1]  # mpiGraph's rank+k steps: every rank's loop waits on its neighbours'


class AllPairs(Pattern):
    """Every ordered pair of ranks (or of hosts, --per-node), phase by phase as --schedule says
    (fabricbench.measure.verdict): each rank's case from its transport's ``pair_case`` (capabilities.PairCases),
    one row per (source, destination) from the source's summary.

    Under ``isolated`` each pair agrees on its own source's warm-up, so a slow pair in a phase does not cut the
    fast ones' samples to its few; under ``shift`` every rank's loop waits on its neighbours', so all take the
    slowest. The watchdog's allowance covers a whole phase from its bytes: a rank waits at the phase's barriers
    for the slowest pair, not for its own.
    """

    columns = ("src_rank", "dst_rank", "src_host", "dst_host", "schedule", "tier", "hops")
    rearm_from_warmup = False
    capability = PairCases

    @classmethod
    def add_arguments(cls, run: argparse.ArgumentParser) -> None:
        defaults = AllPairsOptions()
        floor_percent = defaults.outlier_floor * 100
        group = run.add_argument_group("all-pairs kernels (pairs-latency, pairs-bw)")
        group.add_argument(
            "--schedule",
            choices=SCHEDULES,
            default=defaults.schedule,
            help=f"{SCHEDULES[0]}: rounds of disjoint pairs, one pair per link at a time (default); "
            "shift: mpiGraph's steps, every rank sending to rank+k while receiving from rank-k",
        )
        group.add_argument("--per-node", action="store_true", help="one rank per host: the lowest rank of each")
        group.add_argument(
            "--outlier-z",
            type=bounded_decimal("--outlier-z", 0, MAX_OUTLIER_Z, above=True),
            default=defaults.outlier_z,
            metavar="Z",
            help="a pair is slow beyond median -/+ Z x 1.4826 x MAD of its log figure "
            f"(default {defaults.outlier_z:g})",
        )
        group.add_argument(
            "--outlier-floor",
            type=bounded_decimal("--outlier-floor", 0, MAX_OUTLIER_FLOOR * 100, what="a percentage"),
            default=floor_percent,
            metavar="PCT",
            help=f"nor is a pair slow unless it is PCT %% worse than the median (default {floor_percent:g}); "
            "raise it where healthy pairs scatter widely, e.g. many ranks sharing few cores",
        )
        group.add_argument(
            "--json", action="store_true", help="print the slow links and hosts as one JSON object (also verdict.json)"
        )

    @classmethod
    def plan_options(cls, args: argparse.Namespace, steps: list[Step], ranks: int) -> dict:
        """The all-pairs settings (the defaults without an all-pairs kernel); --json leaves stdout to the
        verdict alone. UsageError where they cannot apply."""
        if not steps:
            if args.json:
                raise UsageError("--json prints the all-pairs verdict: add -k pairs-bw or pairs-latency")
            return {"pairs": AllPairsOptions()}
        cls.refuse_osu_text(args, "the all-pairs kernels have")
        if args.peer and (args.schedule != AllPairsOptions.schedule or args.per_node):
            raise UsageError("--peer runs two ranks, one pair: --schedule shift and --per-node need a launcher")
        options = AllPairsOptions(args.schedule, args.per_node, args.outlier_z, args.outlier_floor / 100, args.json)
        return {"pairs": options, **({"output_format": NO_FORMAT} if options.json else {})}

    @classmethod
    def finish(cls, rows: list[dict], reporter) -> None:
        """The verdict, on this run's pair rows read back from the table a group at a time (never all of them at
        once): verdict.json beside the table, the closing list on the console, or (--json) the verdict itself on
        stdout."""
        from fabricbench.measure.pair_table import PairTable, run_sources
        from fabricbench.measure.results import ResultsError, write_json
        from fabricbench.measure.verdict import VERDICT_NAME, summary_lines, verdict
        from fabricbench.transports import TRANSPORTS

        plan, pairs = reporter.plan, reporter.plan.pairs
        table = PairTable(run_sources(reporter.out_dir), TRANSPORTS, run_id=plan.run_id)
        found = verdict(table.groups(), pairs.outlier_z, plan.run_id, pairs.outlier_floor, plan.fabric())
        try:
            write_json(reporter.out_dir / VERDICT_NAME, found)
        except ResultsError as exc:
            reporter.fail(exc)
            return
        if pairs.json:
            print(json.dumps(found, indent=2), file=reporter.stream, flush=True)
        else:
            for line in summary_lines(found, plan.fabric()):
                reporter.say(line)

    streams = True  # a size's rows are handed on phase by phase: 100 million of them at 10,000 ranks

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.schedule = plan.pairs.schedule
        self.hosts: list[str] = []
        self.ranks: list[int] = []
        self._method = ""  # rank 0's loop, from the first phase in which it sends: every row's method
        self._places: _Places | None = None

    @classmethod
    def probe(cls, plan: Plan, warmup: int) -> int:
        return warmup

    @classmethod
    def serve_phases(cls, ranks: int) -> int:
        return ranks  # one per direction: the isolated schedule on two ranks

    def phases(self) -> list[Phase]:
        """Collective: every rank's host, then the taking-part ranks' phases; Unsupported when one rank is left."""
        self.refuse_lacking()
        ctrl = self.ctrl
        hosts = self.hosts = rank_hosts(ctrl)
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
        if self.schedule == SHIFT:
            return self.ctrl.allreduce_max(estimate_ns)
        # Each pair agrees on its source's estimate: the source passes it to its destination, one message a rank.
        theirs = self.ctrl.pass_on(estimate_ns, phase.send_to, phase.recv_from)
        if phase.send_to is not None:
            return estimate_ns
        if phase.recv_from is None:
            return 0.0
        if not math.isfinite(theirs) or theirs < 0:
            raise PeerError(f"rank {phase.recv_from} sent a bad warm-up estimate {theirs!r}")
        return theirs

    def summary(self, timed: Timed) -> np.ndarray:
        summary = np.full(len(PAIR_SUMMARY), math.nan)
        summary[0], summary[3] = -1.0, float(timed.valid)
        if timed.phase.send_to is not None:
            samples = timed.samples
            stats = latency_stats(samples, self.kernel.sample_divisor)
            summary[:5] = (timed.phase.send_to, timed.iterations, float(samples.sum()), timed.valid, samples.min())
            summary[5 : 5 + len(STATS)] = [stats[name] for name in STATS]
            summary[-1] = getattr(timed.case, "link_MBps", None) or math.nan
        return summary

    def phase_rows(self, timed: Timed, warmup: int, last: bool = False) -> RowBatch:
        """Rank 0's rows of one phase, as columns: one a (source, destination), in source order, from the source's
        summary (its figures as timed_row makes them), its validation from both ends' checks."""
        plan, transport, kernel = self.plan, self.transport, self.kernel
        table = timed.gathered
        sources = np.flatnonzero(table[:, 0] >= 0)
        vectors = table[sources]
        destinations = vectors[:, 0].astype(np.int64)
        if timed.phase.send_to is not None and not self._method:
            self._method = timed.case.method
        ranks, window = len(self.ranks), plan.window if kernel.windowed else 0
        columns = base_row(plan, transport.name, kernel, self.size, ranks, transport.buffer)
        columns.update(method=self._method or transport.name, pairs=1, window=window, warmup=warmup)
        columns.update(status=MEASURED, note="", schedule=self.schedule)
        columns.update({name: vectors[:, PAIR_SUMMARY.index(name)] for name in STATS})
        columns["iterations"] = vectors[:, 1].astype(np.int64)
        ends = np.stack([vectors[:, 3], table[destinations, 3]], axis=1)  # -1 off, 0 fail, 1 pass at each end
        checks = np.where((ends == -1).all(axis=1), 0, np.where((ends == 0).any(axis=1), 1, 2))
        columns["validation"] = Coded(checks, ["off", "fail", "pass"])
        columns.update(dict.fromkeys(BANDWIDTH_COLUMNS, math.nan))
        if kernel.windowed:
            rates = kernel.window_rates(self.size, ranks, window, vectors[:, 1], vectors[:, 2], vectors[:, 4])
            columns.update(rates)
            _refuse_impossible(columns, kernel.directions, len(sources))
            # Each pair's share of its source's link (rows.link_share, a row at a time): what a threshold limited to
            # a tier of the topology holds each tier's pairs to (min_link_pct with tier = "cross-switch").
            link = vectors[:, -1]
            if not np.isnan(link).all():
                with np.errstate(invalid="ignore"):
                    columns.update(link_MBps=link, link_pct=100 * columns["bw_MBps"] / (kernel.directions * link))
        self._places = self._places or _Places(plan.fabric(), self.hosts)
        places = self._places
        columns.update(src_rank=sources, dst_rank=destinations)
        columns.update(src_host=places.hosts(sources), dst_host=places.hosts(destinations))
        if places.fabric is None:
            columns.update(tier="", hops="")
        else:
            columns["tier"], columns["hops"] = places.of(sources, destinations)
        return RowBatch(len(sources), columns, ranks * (ranks - 1), last)


def _refuse_impossible(columns: dict, directions: int, count: int) -> None:
    """rows.refuse_impossible on the rows of a phase whose rates could not have happened (a window timed at 0 ns
    or less): those rows' figures NaN and their notes saying why; the others, nearly always all, untouched."""
    figures = ("bw_peak_MBps", "bw_MBps", "msgrate_per_s")
    with np.errstate(invalid="ignore"):
        odd = np.flatnonzero(
            np.any([~np.isfinite(columns[c]) & ~np.isnan(columns[c]) | (columns[c] < 0) for c in figures[:2]], axis=0)
        )
    if not len(odd):
        return
    notes = np.full(count, "", dtype=object)
    for at in odd.tolist():
        row = {c: float(columns[c][at]) for c in figures} | {"note": ""}
        refuse_impossible(row, directions, 1, None)
        for c in figures:
            columns[c][at] = row[c]
        notes[at] = row["note"]
    columns["note"] = notes


class _Places:
    """Each rank's host (and with a topology its switch and group) as numbers, so a phase's hosts, tiers and hops
    are arrays: the hops between two switches are asked of the topology once and kept."""

    def __init__(self, fabric: Topology | None, hosts: list[str]):
        self.fabric = fabric
        self.names = sorted(set(hosts))
        at = {host: i for i, host in enumerate(self.names)}
        self.host = np.array([at[host] for host in hosts])
        if fabric is not None:
            switch = {name: fabric.switch_of(name) for name in self.names}
            self.switches = sorted(set(switch.values()))
            number = {name: i for i, name in enumerate(self.switches)}
            self.switch = np.array([number[switch[host]] for host in hosts])
            self.group = np.array([fabric.group_of(host) for host in hosts], dtype=object)
            self.hop: dict[tuple[int, int], float] = {}
            self.sample = {number[switch[host]]: host for host in hosts}  # a host under each switch

    def hosts(self, ranks: np.ndarray) -> Coded:
        return Coded(self.host[ranks], self.names)

    def of(self, src: np.ndarray, dst: np.ndarray) -> tuple[Coded, np.ndarray]:
        """The (tier, hops) of each pair: hops NaN (blank) where no route joins its hosts."""
        tier = np.where(
            self.host[src] == self.host[dst],
            TIERS.index(SAME_HOST),
            np.where(
                self.switch[src] == self.switch[dst],
                TIERS.index(SAME_SWITCH),
                np.where(self.group[src] == self.group[dst], TIERS.index(CROSS_SWITCH), TIERS.index(CROSS_GROUP)),
            ),
        )
        ends = self.switch[src] * len(self.switches) + self.switch[dst]
        distinct, back = np.unique(ends, return_inverse=True)
        for end in distinct.tolist():
            if end not in self.hop:
                a, b = divmod(end, len(self.switches))
                found = self.fabric.hops(self.sample[a], self.sample[b])
                self.hop[end] = math.nan if found is None else float(found)
        return Coded(tier, list(TIERS)), np.array([self.hop[end] for end in distinct.tolist()])[back.reshape(-1)]
