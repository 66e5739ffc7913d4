"""The plan: what to run, built once from the command line and shared by all ranks.

A plan is plain data so that it can travel between ranks as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from fabricbench.argtypes import MAX_COUNT, byte_size, names, whole_number
from fabricbench.errors import UsageError
from fabricbench.measure.kernels import Kernel, get_kernel

# The largest message any kernel takes: MPI counts are C ints, and 1 GiB is the largest power of two
# below 2^31. Memory bounds it further (fabricbench.measure.memory).
MAX_MESSAGE_SIZE = 1 << 30

parse_size = byte_size("message size")


def parse_size_range(text: str) -> tuple[int, int]:
    """OSU's ``-m [min:]max``."""
    lo_text, sep, hi_text = text.partition(":")
    if not sep:
        lo_text, hi_text = "", lo_text
    lo = parse_size(lo_text) if lo_text.strip() else None
    hi = parse_size(hi_text)
    if lo is not None and lo > hi:
        raise UsageError(f"bad size range {text!r}: minimum {lo} is above maximum {hi}")
    if hi > MAX_MESSAGE_SIZE:
        raise UsageError(f"bad size range {text!r}: a message is at most 1 GiB ({MAX_MESSAGE_SIZE} B)")
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
    def spec(self) -> Kernel:
        return get_kernel(self.kernel).with_datatype(self.datatype)


@dataclass(frozen=True)
class Entry:
    """One turn of the run: a step in one repeat, on ``ranks`` of the launched ranks (None: all of them)."""

    repeat: int
    step: Step
    ranks: int | None = None


@dataclass
class Plan:
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
    osu: dict = field(default_factory=dict)  # --format osu's optional columns: full, percentiles, datatype
    pairs: dict = field(default_factory=dict)  # the all-pairs kernels: schedule, per_node, outlier_z, json
    progress: bool = False
    transport_options: dict = field(default_factory=dict)
    repeat: int = 1  # run --repeat: how many times the whole plan runs, interleaved (schedule)
    ranks: list[int] = field(default_factory=list)  # run --ranks: collectives on the first N ranks; []: all

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
                counts = self.ranks if self.ranks and step.spec.collective else [None]
                entries += [Entry(repeat, step, count) for count in counts]
        return entries

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        raw = json.loads(data)
        raw["steps"] = [Step(**s) for s in raw["steps"]]
        return cls(**raw)

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
