"""The bisection pattern (Netgauge's effective bisection bandwidth): random perfect matchings of the ranks (or
hosts, --per-node), every pair exchanging a window each way at once, one phase per matching; one row per tier
with the per-pair rate distribution, and the effective bisection bandwidth at the end of the run."""

from __future__ import annotations

import argparse
import math

from fabricbench.argtypes import whole_number
from fabricbench.control import rank_hosts
from fabricbench.errors import Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure import bisection
from fabricbench.measure.bisection import ALL, Matching, PairRate
from fabricbench.measure.formatting import given
from fabricbench.measure.kernels import Kernel, get_kernel
from fabricbench.measure.plan import BisectionOptions, Plan, Step
from fabricbench.measure.rows import base_row, bound_rate, refuse_impossible
from fabricbench.measure.schema import MEASURED, is_measured
from fabricbench.measure.topology import TIERS
from fabricbench.measure.verdict import per_node
from fabricbench.run.patterns.all_pairs import AllPairs
from fabricbench.run.patterns.plain import METADATA, Idle, Pattern, Phase, Timed
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import PairCases

# What every rank sends rank 0 after a matching: its partner (-1: none), the agreed iterations, its samples' total,
# its validation, its shortest window (NaN: a window that may not hold its bytes' transit) and its link's rate.
SUMMARY = ("partner", "iterations", "total_ns", "valid", "min_ns", "link_MBps")
# The figures a refused per-pair mean takes with it: the same bytes over the same times.
FIGURES = ("bw_p1_MBps", "bw_p50_MBps", "aggregate_MBps")
# (header, column, width) of a bisection line.
LAYOUT = (
    ("size", "size_B", 10),
    ("tier", "tier", 14),
    ("pairs", "pairs", 7),
    ("of tier", "tier_pairs", 9),
    ("iters", "iterations", 7),
    ("MB/s mean", "bw_MBps", 12),
    ("p1", "bw_p1_MBps", 11),
    ("p50", "bw_p50_MBps", 11),
    ("aggregate", "aggregate_MBps", 12),
    ("valid", "validation", 7),
)


class Bisection(Pattern):
    """Netgauge's ebb: for each of --bisection-rounds seeded matchings (measure.bisection.matchings), every pair
    exchanges at once, each end's case from its transport's ``pair_case`` (capabilities.PairCases) with the
    partner as both destination and source; a rank left out (an odd count, or not its host's lowest under
    --per-node) only meets the barriers. Every rank runs the slowest's count, so the pairs overlap for the whole
    phase. Rank 0's rows: per size, ``all`` and then each tier the pairs fell in (plan.fabric()), from each end's
    rate one way."""

    columns = ("tier", "tier_pairs", "bw_p1_MBps", "bw_p50_MBps", "aggregate_MBps")
    capability = PairCases

    @classmethod
    def add_arguments(cls, run: argparse.ArgumentParser) -> None:
        defaults = BisectionOptions()
        group = run.add_argument_group(
            "bisection kernel (Netgauge's effective bisection bandwidth; --per-node pairs hosts, one rank each)"
        )
        group.add_argument(
            "--bisection-rounds",
            type=whole_number("--bisection-rounds", 1, bisection.MAX_ROUNDS),
            default=defaults.rounds,
            metavar="K",
            help=f"random perfect matchings per size, each a phase of every pair at once (default {defaults.rounds})",
        )
        group.add_argument(
            "--bisection-seed",
            type=whole_number("--bisection-seed", 0),
            default=defaults.seed,
            metavar="N",
            help=f"seed of the matchings' shuffles, recorded in the metadata with them (default {defaults.seed})",
        )

    @classmethod
    def plan_options(cls, args: argparse.Namespace, steps: list[Step], ranks: int) -> dict:
        """The bisection settings (the defaults without a bisection kernel); UsageError where they cannot apply."""
        if not steps:
            return {"bisection": BisectionOptions()}
        cls.refuse_osu_text(args, "the bisection kernel has")
        if args.peer:
            raise UsageError("--peer runs two ranks, one pair: the bisection kernel needs a launcher")
        return {"bisection": BisectionOptions(args.bisection_rounds, args.bisection_seed, args.per_node)}

    @classmethod
    def header(cls, transport: str, kernel_name: str, ranks: int, title: str) -> str:
        title = f" - {title}" if title else ""
        names = "".join(f"{name:>{width}}" for name, _, width in LAYOUT)
        return f"# {transport} {kernel_name} on {ranks} ranks{title}\n#{names[1:]}"

    @classmethod
    def line(cls, row: dict) -> str:
        if not is_measured(row.get("status", "")):
            size = row.get("size_B")
            return f"# {f'{size} B: ' if size is not None else ''}{row['status']}"
        cells = []
        for _, column, width in LAYOUT:
            value = row.get(column)
            if column in ("tier", "validation"):
                cells.append(f"{value:>{width}}")
            elif column.endswith("_MBps"):
                cells.append(f"{value:>{width}.2f}" if given(value) else f"{'-':>{width}}")
            else:
                cells.append(f"{int(value):>{width}d}")
        return "".join(cells) + (f"  ({row['note']})" if row.get("note") else "")

    @classmethod
    def keeps(cls, row: dict) -> bool:
        return row.get("tier") == ALL and is_measured(row.get("status", ""))

    @classmethod
    def finish(cls, rows: list[dict], reporter) -> None:
        """The effective bisection bandwidth of each size, beside one pair's rate where the run measured one
        (a windowed all-pairs kernel on the same transport and size: the mean over its pairs)."""
        single = [row for row in reporter.kept.get(AllPairs, []) if get_kernel(row["kernel"]).windowed]

        def single_pair(row: dict) -> float | None:
            rates = [
                each["bw_MBps"]
                for each in single
                if (each["transport"], each["size_B"]) == (row["transport"], row["size_B"]) and given(each["bw_MBps"])
            ]
            return sum(rates) / len(rates) if rates else None

        for text in bisection.effective_lines(rows, single_pair):
            reporter.say(text)

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.hosts: list[str] = []
        self.units: list[int] = []
        self.matchings: list[Matching] = []

    def phases(self) -> list[Phase]:
        """Collective: every rank's host, the units (ranks, or each host's lowest rank) and their matchings, one
        phase each; Unsupported on every rank alike when fewer than two units take part."""
        self.refuse_lacking()
        ctrl, options = self.ctrl, self.plan.bisection
        self.hosts = rank_hosts(ctrl)
        self.units = per_node(self.hosts) if options.per_node else list(range(ctrl.size))
        if len(self.units) < 2:
            raise Unsupported(f"--per-node leaves one rank: all {ctrl.size} ranks are on {self.hosts[0]}")
        self.matchings = bisection.matchings(self.units, options.rounds, options.seed)
        found = []
        for number, matching in enumerate(self.matchings, 1):
            partner = matching.partner(ctrl.rank)
            found.append(Phase(f"{self.what}, matching {number}", partner, partner))
        return found

    def case(self, phase: Phase) -> Case:
        return self.transport.pair_case(self.kernel, self.size, phase.send_to, phase.recv_from) or Idle()

    def summary(self, timed: Timed) -> np.ndarray:
        vector = np.full(len(SUMMARY), math.nan)
        vector[0], vector[1], vector[3] = -1.0, timed.iterations, timed.valid
        link = bound_rate(timed.case)
        vector[5] = link if link else math.nan
        if timed.phase.send_to is not None and len(timed.samples):
            vector[0], vector[2] = timed.phase.send_to, float(timed.samples.sum())
            if getattr(timed.case, "window_holds_transit", True):
                vector[4] = float(timed.samples.min())
        return vector

    def rows(self, timed: list[Timed], warmup: int) -> list[dict]:
        """Rank 0: per tier, the pairs' rates one way (each end's bytes over its own timed run, MB/s), their
        distribution and aggregate, the shortest window as its peak, and any figure no link could carry refused."""
        plan, kernel, fabric = self.plan, self.kernel, self.plan.fabric()
        per_iteration = kernel.iteration_bytes(self.size, len(self.units), plan.window)
        rates: list[PairRate] = []
        ends: dict[str, list[np.ndarray]] = {}  # each tier's pairs' ends' summaries
        for index, (matching, each) in enumerate(zip(self.matchings, timed, strict=True)):
            table = each.gathered
            for a, b in matching.pairs:
                tier = fabric.tier(self.hosts[a], self.hosts[b]) if fabric else ALL
                one_way = tuple(per_iteration * table[r][1] / table[r][2] * 1e3 for r in (a, b))  # B/ns to MB/s
                rates.append(PairRate(index, tier, one_way))
                for name in {ALL, tier}:
                    ends.setdefault(name, []).extend((table[a], table[b]))
        figures = bisection.tier_figures(rates, len(self.matchings), TIERS if fabric else ())
        methods = [each.case.method for each in timed if each.phase.send_to is not None]
        label = next((each.case.link_label for each in timed if getattr(each.case, "link_label", "")), "")
        rows = []
        for tier, found in figures.items():
            summaries = np.vstack(ends[tier])
            row = base_row(plan, self.transport.name, kernel, self.size, len(self.units), self.transport.buffer)
            valid = summaries[:, 3]
            row.update(found)
            row.update(
                tier=tier,
                method=methods[0] if methods else self.transport.name,
                pairs=len(self.matchings[0].pairs),
                window=plan.window,
                iterations=min(each.iterations for each in timed),
                warmup=warmup,
                validation="off" if (valid == -1).all() else ("fail" if (valid == 0).any() else "pass"),
                status=MEASURED,
                note="",
            )
            shortest = np.nanmin(summaries[:, 4]) if not np.isnan(summaries[:, 4]).all() else math.nan
            row["bw_peak_MBps"] = per_iteration / shortest * 1e3 if shortest > 0 else math.nan
            links = summaries[:, 5][np.isfinite(summaries[:, 5])]
            refuse_impossible(row, 1, 1, float(links.max()) if len(links) else None, label)
            if math.isnan(row["bw_MBps"]):  # refused: the pairs' other figures are the same bytes over the same times
                row.update(dict.fromkeys(FIGURES, math.nan))
            rows.append(row)
        if rows:
            rows[0][METADATA] = {"bisection": self.metadata()}
        return rows

    def metadata(self) -> dict:
        """The matchings, for metadata.json: the seed, the units and each matching's pairs and hosts."""
        options, hosts = self.plan.bisection, self.hosts
        return {
            "rounds": options.rounds,
            "seed": options.seed,
            "units": "hosts, each one's lowest rank" if options.per_node else "ranks",
            "ranks": self.units,
            "matchings": [
                {
                    "pairs": [list(pair) for pair in matching.pairs],
                    "hosts": [[hosts[a], hosts[b]] for a, b in matching.pairs],
                    "left_out": matching.left_out,
                }
                for matching in self.matchings
            ],
        }
