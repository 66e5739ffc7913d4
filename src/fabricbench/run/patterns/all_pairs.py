"""The all-pairs pattern (pairs-latency, pairs-bw): every ordered pair of ranks, phase by phase, and the verdict
on the slow links and hosts at the end of the run."""

from __future__ import annotations

import argparse
import json
import math
import socket

from fabricbench.argtypes import bounded_decimal
from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import MAX_OUTLIER_FLOOR, MAX_OUTLIER_Z, AllPairsOptions, Plan, Step
from fabricbench.measure.rows import Loop, Timing, timed_row
from fabricbench.measure.stats import latency_stats
from fabricbench.measure.topology import Topology
from fabricbench.measure.verdict import SCHEDULES, per_node, phases
from fabricbench.run.patterns.plain import Idle, Pattern, Phase, Timed
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import PairCases

STATS = ("lat_min_us", "lat_p50_us", "lat_mean_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us")
STATS += ("lat_stdev_us",)
# What every rank sends rank 0 after an all-pairs phase: its destination (-1: none) and, as a source, its samples'.
PAIR_SUMMARY = ("dst", "iterations", "total_ns", "valid", "min_ns", *STATS)
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
        return {"pairs": options, **({"output_format": "none"} if options.json else {})}

    @classmethod
    def keeps(cls, row: dict) -> bool:
        """A measured pair's row (one refused has no ranks) goes to the verdict."""
        return row.get("src_rank") not in (None, "")

    @classmethod
    def finish(cls, rows: list[dict], reporter) -> None:
        """The verdict: verdict.json beside the table, the closing list on the console, or (--json) the verdict
        itself on stdout."""
        from fabricbench.measure.results import ResultsError, write_json
        from fabricbench.measure.verdict import VERDICT_NAME, summary_lines, verdict

        pairs = reporter.plan.pairs
        found = verdict(rows, pairs.outlier_z, reporter.plan.run_id, pairs.outlier_floor, reporter.plan.fabric())
        try:
            write_json(reporter.out_dir / VERDICT_NAME, found)
        except ResultsError as exc:
            reporter.fail(exc)
            return
        if pairs.json:
            print(json.dumps(found, indent=2), file=reporter.stream, flush=True)
        else:
            for line in summary_lines(found):
                reporter.say(line)

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
        self.refuse_lacking()
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
        if self.schedule == SHIFT:
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
        fabric = plan.fabric()
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
                ends = (
                    src,
                    dst,
                    self.hosts[src],
                    self.hosts[dst],
                    self.schedule,
                    *place(fabric, self.hosts[src], self.hosts[dst]),
                )
                row.update(zip(self.columns, ends, strict=True))
                rows.append(row)
        return sorted(rows, key=lambda row: (row["src_rank"], row["dst_rank"]))


def place(fabric: Topology | None, src: str, dst: str) -> tuple[str, int | str]:
    """A pair's (tier, hops) in the fabric; blank without a topology, and hops blank where no route joins them."""
    if fabric is None:
        return "", ""
    hops = fabric.hops(src, dst)
    return fabric.tier(src, dst), "" if hops is None else hops
