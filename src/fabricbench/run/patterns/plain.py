"""The plain pattern (one pair, every pair at once, all ranks), and what every pattern declares.

The runner times every phase of every pattern through one protocol (``runner.time_phase``: watchdog, warm-up,
agreed count, barrier, run, validate, gather). A pattern, made for one size, says the rest:

- ``phases``: the phases, alike on every rank (Unsupported on every rank alike, before any traffic);
- ``case``: this rank's case in a phase (an idle one where it has no part);
- ``agree``: how the ranks agree on the warm-up's pace that sets --max-time's count;
- ``summary``: the vector every rank sends rank 0 after a phase;
- ``rows``: rank 0's rows from the phases, each carrying the pattern's ``columns`` (or, a pattern that ``streams``,
  ``phase_rows``: one phase's rows as columns, handed on as the phase ends).

And, as a class, without a rank: the transport capability it needs (``capability``, refused in ``lacks``'s
words), its options (``add_arguments``, ``plan_options``), its console header and lines, the rows it keeps for
its end-of-run step (``keeps``, ``finish``); which kernels' rows are its own is ``patterns.kernels_of``.

A kernel names its pattern (``Kernel.pattern``); ``fabricbench.run.patterns.pattern_of`` finds it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from fabricbench.errors import Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.congestion import Test
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import OSU_FORMAT, Plan, Step
from fabricbench.measure.rows import measured_row, rank_summary
from fabricbench.report import console
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.capabilities import missing

NAMES = ("one-pair", "concurrent-pairs", "all")  # the kernels' patterns this one runs
CONCURRENT_PAIRS = NAMES[1]  # rank r with r + N/2: N/2 pairs
METADATA = "_metadata"  # a row's private field: {key: value} the reporter adds to metadata.json, not to the table


@dataclass(frozen=True)
class Phase:
    """One phase of a pattern at one size, as this rank takes part in it."""

    what: str  # the watchdog's words for it
    send_to: int | None = None  # all-pairs: the rank this one sends to, its samples timing that pair
    recv_from: int | None = None  # all-pairs: the rank this one receives from
    route: tuple[int, int] | None = None  # GPU routes: the (source, destination) GPUs of its routes
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
    streams = False  # True: rank 0 hands on each phase's rows as it ends (``phase_rows``), not a size's (``rows``)
    capability: type | None = None  # what it asks of a transport beyond ``case`` (transports.capabilities)

    def __init__(self, ctrl, transport: Transport, kernel: Kernel, size: int, plan: Plan):
        self.ctrl, self.transport, self.kernel, self.size, self.plan = ctrl, transport, kernel, size, plan
        self.what = f"{transport.name} {kernel.name} at {size} B"

    # --- what it declares, read without a rank ---------------------------------------------------------------------

    @classmethod
    def lacks(cls, transport: type[Transport]) -> str | None:
        """Why a transport (its class) cannot run this pattern, in its rows' ``unsupported`` words; None when it can."""
        return missing(transport, cls.capability)

    @classmethod
    def add_arguments(cls, run: argparse.ArgumentParser) -> None:
        """Its option group on run's command line; none here."""

    @classmethod
    def plan_options(cls, args: argparse.Namespace, steps: list[Step], ranks: int) -> dict:
        """The Plan's fields its options set from run's ``args`` (``steps``: the run's steps of its kernels, maybe
        none; ``ranks``: those launched), checked (UsageError); none here."""
        return {}

    @staticmethod
    def refuse_osu_text(args: argparse.Namespace, kernels: str) -> None:
        """For a pattern whose rows OSU has no text layout for: ``--format osu`` is refused, naming ``kernels``."""
        if args.output_format == OSU_FORMAT:
            raise UsageError(f"{kernels} no OSU text layout: use --format table or none")

    @classmethod
    def header(cls, transport: str, kernel_name: str, ranks: int, title: str) -> str:
        """A step's console header."""
        return console.header(transport, kernel_name, ranks, title, cls.columns)

    @classmethod
    def line(cls, row: dict) -> str:
        """A row's console line."""
        return console.line(row)

    @classmethod
    def pairs(cls, kernel: Kernel, ranks: int) -> int:
        """The pairs timed at once on ``ranks`` ranks, for OSU's header: N/2 under ``concurrent-pairs``."""
        return ranks // 2 if kernel.pattern == CONCURRENT_PAIRS else 1

    @classmethod
    def keeps(cls, row: dict) -> bool:
        """Whether rank 0 keeps a row of its kernels for ``finish``; none here."""
        return False

    @classmethod
    def finish(cls, rows: list[dict], reporter) -> None:
        """Its end-of-run step on rank 0, from the rows ``keeps`` kept (at least one), after the table is written;
        ``reporter`` (run.reporter.Reporter) prints (``say``), knows the plan and the folder, and keeps a failure
        to write (``fail``)."""

    # --- on every rank, one size --------------------------------------------------------------------------------------

    @classmethod
    def probe(cls, plan: Plan, warmup: int) -> int:
        """Warm-up iterations timed before the run: with --max-time and no warm-up, one probe sets the count."""
        return warmup or (1 if plan.max_time else 0)

    @classmethod
    def serve_phases(cls, ranks: int) -> int:
        """Phases per size on ``ranks`` ranks, as serve's session budget counts them."""
        return 1

    def refuse_lacking(self) -> None:
        """Unsupported, on every rank alike, where the transport lacks the pattern's capability."""
        why = self.lacks(type(self.transport))
        if why:
            raise Unsupported(why)

    def phases(self) -> list[Phase]:
        return [Phase(self.what)]

    def case(self, phase: Phase) -> Case:
        return self.transport.case(self.kernel, self.size)

    def agree(self, phase: Phase, estimate_ns: float) -> float:
        """Every rank takes the slowest rank's estimate: all run the same count."""
        return self.ctrl.allreduce_max(estimate_ns)

    def summary(self, timed: Timed) -> np.ndarray:
        wrong = getattr(timed.case, "wrong", -1) if timed.valid != -1 else -1  # runner.validate counts them
        return rank_summary(timed.case.initiator, timed.iterations, timed.samples, timed.valid, wrong)

    def row(self, timed: Timed, warmup: int) -> dict:
        name, buffer = self.transport.name, self.transport.buffer
        return measured_row(
            self.plan, name, self.kernel, self.size, timed.case, warmup, timed.samples, timed.gathered, buffer
        )

    def rows(self, timed: list[Timed], warmup: int) -> list[dict]:
        """Rank 0's rows from every phase, in order."""
        return [self.row(each, warmup) for each in timed]
