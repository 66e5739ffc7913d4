"""The plan: what to run, built once from the command line and shared by all ranks.

A plan is plain data so that it can travel between ranks, and to a ``serve``, as JSON. Its options carry their
defaults here; ``check`` is the one place their values are validated, for ``run`` (build_plan) and for what
arrives as JSON (``from_json``: another rank's broadcast, a ``--peer`` client's HELLO). How a plan is built
from run's options is ``fabricbench.run.planner``.
"""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import MISSING, asdict, dataclass, field, fields

from fabricbench.argtypes import MAX_COUNT, MAX_SECONDS, MIN_TIMEOUT, byte_range, byte_size, names, whole_number
from fabricbench.errors import UsageError
from fabricbench.measure import bisection, congestion
from fabricbench.measure.kernels import KERNELS, Kernel, get_kernel
from fabricbench.measure.stats import PERCENTILES
from fabricbench.measure.topology import Topology
from fabricbench.measure.verdict import DEFAULT_OUTLIER_Z, MIN_EFFECT, SCHEDULES

# The largest message any kernel takes: MPI counts are C ints, and 1 GiB is the largest power of two
# below 2^31. Memory bounds it further (fabricbench.measure.memory).
MAX_MESSAGE_SIZE = 1 << 30
MAX_WINDOW = 65536  # -W: messages in flight; what the peer protocol and the verbs queues can carry
MAX_REPEAT = 1000  # --repeat: more is a typo, and each repeat is the whole plan again
MAX_OUTLIER_Z = 100.0  # --outlier-z
MAX_OUTLIER_FLOOR = 10.0  # --outlier-floor, as a fraction of the median (1000 %)
OSU_FORMAT, NCCL_FORMAT = "osu", "nccl"  # the console layouts of OSU and of nccl-tests (--format)
NO_FORMAT = "none"  # no console table: the rows go to disk alone
OUTPUT_FORMATS = ("table", OSU_FORMAT, NCCL_FORMAT, NO_FORMAT)

parse_size = byte_size("message size")
_size_range = byte_range("size range", "message size", MAX_MESSAGE_SIZE, "a message is at most 1 GiB")


def parse_size_range(text: str) -> tuple[int, int]:
    """OSU's ``-m [min:]max``; a minimum left out is -1 (the kernel's own start, kernel_sizes)."""
    lo, hi = _size_range(text)
    return (lo if lo is not None else -1), hi


def parse_rank_counts(text: str) -> list[int]:
    """``--ranks 2,4,8``: rank counts, each once, smallest first."""
    count = whole_number("--ranks", 1, MAX_COUNT)
    return sorted({count(part) for part in names("rank count")(text)})


def sizes_between(lo: int, hi: int) -> list[int]:
    """OSU's sweep: start at lo, then double (0 is followed by 1)."""
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size = size * 2 if size else 1
    return sizes


@dataclass
class Step:
    """One (transport, kernel) sweep."""

    transport: str
    kernel: str
    sizes: list[int]
    datatype: str = ""  # OSU's -T (--osu-datatype) where it changes what the kernel moves: a reduction's element

    @property
    def kernel_def(self) -> Kernel:
        """The kernel this step measures (``kernel`` is its name), moving the datatype it was given."""
        return get_kernel(self.kernel).with_datatype(self.datatype)

    def check(self) -> None:
        """The kernel is known, takes the datatype and every size (as run's -m may give them); UsageError."""
        _require(
            isinstance(self.transport, str) and 0 < len(self.transport) <= 64, f"bad transport {_shown(self.transport)}"
        )
        _require(isinstance(self.kernel, str), f"bad kernel {_shown(self.kernel)}")
        kernel = get_kernel(self.kernel)
        _require(
            self.datatype == "" or self.datatype in kernel.osu_datatypes,
            f"bad datatype {_shown(self.datatype)} for {kernel.name}",
        )
        _require(isinstance(self.sizes, list), f"bad sizes {_shown(self.sizes)} for {kernel.name}")
        smallest, largest = size_limits(kernel)
        for size in self.sizes:
            _require(_is_int(size), f"{kernel.name} size {_shown(size)} is not a byte count")
            _require(smallest <= size <= largest, f"{kernel.name} size {size} B is outside {smallest}..{largest} B")


@dataclass
class OsuColumns:
    """--format osu's optional columns and lines (OSU's -f, -z, -T), each checked against the run's kernels
    when the plan is built (report.osu.check_columns)."""

    full: bool = False  # Min/Max latency and Iterations columns of a collective
    percentiles: tuple[float, ...] = ()  # tail latency columns, from PERCENTILES
    datatype: str = ""  # the datatype line, in OSU's capitals
    rate: bool = True  # osu_mbw_mr's Messages/s column (OSU's -R 1, its default; -R 0 leaves it out)

    def check(self) -> None:
        _require(isinstance(self.full, bool), f"bad --osu-full flag {_shown(self.full)}")
        _require(isinstance(self.rate, bool), f"bad --osu-no-rate flag {_shown(not self.rate)}")
        _require(
            isinstance(self.percentiles, tuple) and all(_is_number(p) and p in PERCENTILES for p in self.percentiles),
            f"bad --osu-percentiles {_shown(self.percentiles)}: choose from {', '.join(f'{p:g}' for p in PERCENTILES)}",
        )
        known = {name for kernel in KERNELS.values() for name in kernel.osu_datatypes}
        _require(self.datatype == "" or self.datatype in known, f"bad --osu-datatype {_shown(self.datatype)}")


@dataclass
class AllPairsOptions:
    """The all-pairs kernels' (pairs-latency, pairs-bw) settings: how the pairs are scheduled and judged."""

    schedule: str = SCHEDULES[0]  # isolated: rounds of disjoint pairs; shift: mpiGraph's rank+k steps
    per_node: bool = False  # one rank per host: the lowest rank of each
    outlier_z: float = DEFAULT_OUTLIER_Z  # a pair is slow beyond median -/+ Z x 1.4826 x MAD of its log figure
    outlier_floor: float = MIN_EFFECT  # nor unless it is this fraction worse than the median
    json: bool = False  # print the verdict as one JSON object on stdout

    def check(self) -> None:
        _require(self.schedule in SCHEDULES, f"bad --schedule {_shown(self.schedule)}: one of {', '.join(SCHEDULES)}")
        _require(isinstance(self.per_node, bool), f"bad --per-node flag {_shown(self.per_node)}")
        _require(
            _is_number(self.outlier_z) and 0 < self.outlier_z <= MAX_OUTLIER_Z,
            f"bad --outlier-z {_shown(self.outlier_z)}: above 0 and at most {MAX_OUTLIER_Z:g}",
        )
        _require(
            _is_number(self.outlier_floor) and 0 <= self.outlier_floor <= MAX_OUTLIER_FLOOR,
            f"bad --outlier-floor {_shown(self.outlier_floor)}: a fraction from 0 to {MAX_OUTLIER_FLOOR:g}",
        )
        _require(isinstance(self.json, bool), f"bad --json flag {_shown(self.json)}")


@dataclass
class CongestionOptions:
    """The congestion kernel's settings (GPCNeT's): the canary tests and congestor patterns as ``NAME[:SIZE]``
    lists, the share of ranks (hosts, --per-node) that are canaries, and the seed of the placement's shuffle."""

    canaries: str = ",".join(congestion.CANARIES)
    congestors: str = ",".join(congestion.CONGESTORS)
    canary_fraction: float = congestion.DEFAULT_FRACTION
    seed: int = congestion.DEFAULT_SEED
    placement: str = congestion.RANDOM  # --congestion-placement: congestion.PLACEMENTS
    per_node: bool = False  # --per-node: the hosts (each one's lowest rank) are placed, not the ranks

    def canary_tests(self) -> tuple[congestion.Test, ...]:
        return congestion.parse_tests(self.canaries, congestion.CANARIES, "canary")

    def congestor_tests(self) -> tuple[congestion.Test, ...]:
        return congestion.parse_tests(self.congestors, congestion.CONGESTORS, "congestor", (congestion.MIX,))

    def check(self) -> None:
        _require(isinstance(self.canaries, str), f"bad --canaries {_shown(self.canaries)}")
        _require(isinstance(self.congestors, str), f"bad --congestors {_shown(self.congestors)}")
        self.canary_tests()
        self.congestor_tests()
        _require(
            _is_number(self.canary_fraction) and 0 < self.canary_fraction < 1,
            f"bad --canary-fraction {_shown(self.canary_fraction)}: above 0 and below 1",
        )
        _require(_is_int(self.seed) and 0 <= self.seed <= MAX_COUNT, f"bad --congestion-seed {_shown(self.seed)}")
        _require(isinstance(self.per_node, bool), f"bad --per-node flag {_shown(self.per_node)}")
        _require(
            self.placement in congestion.PLACEMENTS,
            f"bad --congestion-placement {_shown(self.placement)}: one of {', '.join(congestion.PLACEMENTS)}",
        )


@dataclass
class BisectionOptions:
    """The bisection kernel's settings (Netgauge's ebb): how many random matchings per size, the seed of their
    shuffles, and whether the units are hosts (one rank each, --per-node) or ranks."""

    rounds: int = bisection.DEFAULT_ROUNDS
    seed: int = bisection.DEFAULT_SEED
    per_node: bool = False

    def check(self) -> None:
        _require(
            _is_int(self.rounds) and 1 <= self.rounds <= bisection.MAX_ROUNDS,
            f"bad --bisection-rounds {_shown(self.rounds)}: 1 to {bisection.MAX_ROUNDS}",
        )
        _require(_is_int(self.seed) and 0 <= self.seed <= MAX_COUNT, f"bad --bisection-seed {_shown(self.seed)}")
        _require(isinstance(self.per_node, bool), f"bad --per-node flag {_shown(self.per_node)}")


# The plan's fields that hold a pattern's options (each pattern's ``plan_options`` fills its own from run's
# command line): {field: (its dataclass, its name in a refusal)}. The dataclasses live here, below the patterns,
# so that a plan is plain data whose every value ``check`` validates, however it arrived.
PATTERN_OPTIONS = {
    "pairs": (AllPairsOptions, "all-pairs options"),
    "congestion": (CongestionOptions, "congestion options"),
    "bisection": (BisectionOptions, "bisection options"),
}


@dataclass(frozen=True)
class Entry:
    """One turn of the run: a step in one repeat, on ``ranks`` of the launched ranks (None: all of them)."""

    repeat: int
    step: Step
    ranks: int | None = None


@dataclass
class Plan:
    """What to run, and how: built once on rank 0 (run.planner.build_plan), broadcast to the ranks as JSON."""

    steps: list[Step]
    iterations: int | None = None  # None: OSU's default for the kernel and size
    warmup: int | None = None
    window: int = 64
    max_time: float | None = None  # seconds per size; lowers the iteration count
    validate: bool = False
    timeout: float = 120.0  # seconds without progress before a rank gives up
    out_dir: str = ""
    run_id: str = ""
    label: str = ""
    output_format: str = "table"
    osu: OsuColumns = field(default_factory=OsuColumns)
    pairs: AllPairsOptions = field(default_factory=AllPairsOptions)
    congestion: CongestionOptions = field(default_factory=CongestionOptions)
    bisection: BisectionOptions = field(default_factory=BisectionOptions)
    progress: bool = False
    transport_options: dict = field(default_factory=dict)  # {option group name: its settings}
    repeat: int = 1  # run --repeat: how many times the whole plan runs, interleaved (schedule)
    ranks: list[int] = field(default_factory=list)  # run --ranks: collectives on the first N ranks; []: all
    # Where each host hangs in the fabric (measure.topology.Topology.to_dict), from --topology or Slurm; None: flat
    topology: dict | None = None

    def schedule(self) -> list[Entry]:
        """Every (repeat, step, ranks) in the order the ranks run them.

        Repeat r runs every step once, so no transport or kernel runs its
        repeats to the end while another waits: drift over the run lands on
        every step alike. Odd repeats run the steps in reverse (A B, B A, A B,
        ...), so a steady drift also favours no step by its place in a repeat.
        A collective runs once per ``ranks`` count, smallest first; any other
        kernel runs on all launched ranks.
        """
        entries = []
        for repeat in range(self.repeat):
            for step in self.steps if repeat % 2 == 0 else reversed(self.steps):
                counts = self.ranks if self.ranks and step.kernel_def.collective else [None]
                entries += [Entry(repeat, step, count) for count in counts]
        return entries

    def check(self) -> None:
        """Every value within what run's options allow: the one check of a plan, however it was made (UsageError,
        naming the field). Transport names and their options are the registry's to check (planner, serve)."""
        _require(isinstance(self.steps, list), f"bad steps {_shown(self.steps)}")
        for step in self.steps:
            step.check()
        _require(
            self.iterations is None or _is_int(self.iterations) and 1 <= self.iterations <= MAX_COUNT,
            f"iterations {_shown(self.iterations)} out of range 1..{MAX_COUNT}",
        )
        _require(
            self.warmup is None or _is_int(self.warmup) and 0 <= self.warmup <= MAX_COUNT,
            f"warm-up {_shown(self.warmup)} out of range 0..{MAX_COUNT}",
        )
        _require(
            _is_int(self.window) and 1 <= self.window <= MAX_WINDOW,
            f"window {_shown(self.window)} out of range 1..{MAX_WINDOW}",
        )
        _require(
            self.max_time is None or _is_number(self.max_time) and 0 < self.max_time <= MAX_SECONDS,
            f"bad --max-time {_shown(self.max_time)}: above 0 and at most {MAX_SECONDS:.0f} seconds",
        )
        _require(isinstance(self.validate, bool), f"bad validate flag {_shown(self.validate)}")
        _require(
            _is_number(self.timeout) and MIN_TIMEOUT <= self.timeout <= MAX_SECONDS,
            f"bad --timeout {_shown(self.timeout)}: from {MIN_TIMEOUT:g} to {MAX_SECONDS:.0f} seconds",
        )
        for name in ("out_dir", "run_id", "label"):
            _require(isinstance(getattr(self, name), str), f"bad {name} {_shown(getattr(self, name))}")
        _require(self.output_format in OUTPUT_FORMATS, f"bad output format {_shown(self.output_format)}")
        self.osu.check()
        for name, (options, what) in PATTERN_OPTIONS.items():
            _require(isinstance(getattr(self, name), options), f"bad {what}")
            getattr(self, name).check()
        _require(isinstance(self.progress, bool), f"bad progress flag {_shown(self.progress)}")
        _require(
            isinstance(self.transport_options, dict)
            and all(isinstance(key, str) and isinstance(value, dict) for key, value in self.transport_options.items()),
            "bad transport options: an object of objects",
        )
        _require(
            _is_int(self.repeat) and 1 <= self.repeat <= MAX_REPEAT,
            f"repeat {_shown(self.repeat)} out of range 1..{MAX_REPEAT}",
        )
        _require(
            isinstance(self.ranks, list)
            and all(_is_int(count) and 1 <= count <= MAX_COUNT for count in self.ranks)
            and self.ranks == sorted(set(self.ranks)),
            f"bad --ranks {_shown(self.ranks)}: rank counts, each once, smallest first",
        )
        if self.topology is not None:
            Topology.from_dict(self.topology)
        _require(
            self.topology is not None or self.congestion.placement == congestion.RANDOM,
            f"--congestion-placement {self.congestion.placement} needs a topology: --topology FILE, or a Slurm job "
            "whose cluster runs topology/tree",
        )

    def fabric(self) -> Topology | None:
        """The topology the plan carries, or None for a flat fabric."""
        return None if self.topology is None else Topology.from_dict(self.topology)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        """The plan in ``data``, checked (``check``); anything else is a UsageError in one line. A field left out
        takes its default (a plan of an earlier version); a field this version does not know is refused."""
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise UsageError(f"the plan is not JSON: {exc}") from None
        values = _fields_of(cls, raw, "plan")
        _require(isinstance(values.get("steps"), list), "the plan has no list of steps")
        values["steps"] = [Step(**_fields_of(Step, step, "step")) for step in values["steps"]]
        if "osu" in values:
            osu = _fields_of(OsuColumns, values["osu"], "osu columns")
            if isinstance(osu.get("percentiles"), list):
                osu["percentiles"] = tuple(osu["percentiles"])
            values["osu"] = OsuColumns(**osu)
        for name, (options, what) in PATTERN_OPTIONS.items():
            if name in values:
                values[name] = options(**_fields_of(options, values[name], what))
        plan = cls(**values)
        plan.check()
        return plan

    def counts(self, kernel: Kernel, size: int) -> tuple[int, int]:
        """(iterations, warm-up) before any time budget is applied."""
        iterations, warmup = kernel.defaults(size)
        return (
            iterations if self.iterations is None else self.iterations,
            warmup if self.warmup is None else self.warmup,
        )


def size_limits(kernel: Kernel) -> tuple[int, int]:
    """The sizes -m may give a kernel, alike in ``run`` and under ``serve``; one a transport cannot take
    (0 B on a byte stream, 2 B of float32) still gets its ``unsupported`` row."""
    return 0, MAX_MESSAGE_SIZE if kernel.moves_data else 0


def kernel_sizes(kernel: Kernel, size_range: tuple[int, int] | None) -> list[int]:
    """The sizes a kernel sweeps: its OSU default, or -m's (from the default's start when -m gives no minimum)."""
    if not kernel.moves_data:
        return [0]
    if kernel.min_size == kernel.max_size:  # one operand size (RDMA atomics): -m does not apply
        return [kernel.min_size]
    if size_range is None:
        return sizes_between(kernel.min_size, kernel.max_size)
    lo, hi = size_range
    sizes = sizes_between(kernel.min_size if lo < 0 else lo, hi)
    if not sizes:
        raise UsageError(
            f"-m {hi} leaves {kernel.name} no size: without a minimum it starts at {kernel.min_size} B (give -m 0:{hi})"
        )
    return sizes


_shown = reprlib.repr  # a value in a refusal: what came as JSON may be long


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite int or float (JSON's numbers; Infinity and NaN are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fields_of(cls, raw: object, what: str) -> dict:
    """A JSON object's members as ``cls``'s fields: each known, and the ones without a default present."""
    _require(isinstance(raw, dict), f"the {what} is not a JSON object")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    _require(not unknown, f"unknown {what} field {_shown(unknown[0])}" if unknown else "")
    needed = [
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING and f.name not in raw
    ]
    _require(not needed, f"the {what} has no {needed[0]!r}" if needed else "")
    return dict(raw)
