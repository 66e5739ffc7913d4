"""nccl-tests' text layout for the collectives (``--format nccl``), for scripts that already scrape it.

The lines follow nccl-tests 2.13's ``common.cu`` printf formats: its parameter line, the devices of a GPU run,
the two-block column header, one line a size (``%12li  %12li  %8s  %6s  %6s``, then per placement
``  %7s  %6.2f  %6.2f  %5g``, the time ``%7.2f``, ``%7.1f`` from 100 us or ``%7.0f`` from 10 ms), and the
footer: out-of-bounds blocks and ``# Avg bus bandwidth    : %g``, the mean busbw of the step's blocks. One
comment line before them says that fabricbench made the table; a status nccl-tests has no line for (a placement
that is unsupported, a size not measured) is one comment line, once a step.

Each collective is a step, as each nccl-tests program is a run of one collective; a line holds a size's
out-of-place row then its in-place row (``--placement``; ``--format nccl`` measures both by default). A placement
not measured leaves its block blank, 32 spaces, as nccl-tests' trace replay prints a block it has none for.
``#wrong`` is the row's wrong elements over every rank, N/A where nothing was checked (without ``-c``). The
columns are nccl-tests': size is the bytes its algbw divides by the time (S·n where each rank has a block per
rank), count the elements one call takes, time the mean over ranks of each rank's mean (nccl-tests' ``-a 1``).
A host-memory run has no devices to list: its parameter line is followed by the header directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fabricbench import __version__
from fabricbench.collectives.spec import IN_PLACE
from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.measure.formatting import given
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.schema import is_measured
from fabricbench.terminal import printable

NCCL_TESTS_VERSION = "2.13"
BLANK_BLOCK = " " * 32  # a placement with no figures: as wide as "  %7s  %6.2f  %6.2f  %5g"
# nccl-tests' names of the nccl transport's --dtype (theirs, where they differ from numpy's)
NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "float64": "double"}


def check_kernels(kernels: list[Kernel]) -> None:
    """Refuse, in one line, a run whose kernels are not collectives: nccl-tests' layout has no lines for them."""
    others = sorted({kernel.name for kernel in kernels if not kernel.collective})
    if others:
        raise UsageError(
            f"--format nccl prints the collectives, in nccl-tests' layout: {', '.join(others)} "
            f"{'is not one' if len(others) == 1 else 'are not'} (use --format table or osu)"
        )


def time_text(us: float) -> str:
    """nccl-tests' time column: ``%7.2f`` us, ``%7.1f`` from 100 us, ``%7.0f`` from 10,000 us."""
    digits = 0 if us >= 10000.0 else 1 if us >= 100.0 else 2
    return f"{us:7.{digits}f}"


@dataclass(frozen=True)
class Element:
    """What the type and count columns say: nccl-tests' type name and the element's bytes."""

    name: str
    size: int


def element_of(kernel: Kernel, transport_meta: dict) -> Element:
    """The element a step's rows move: nccl's --dtype (its transport's metadata) or the collective's own."""
    if transport_meta.get("dtype"):  # a transport with an element type of its own (nccl --dtype)
        dtype = transport_meta["dtype"]
        return Element(NCCL_TYPE_NAMES.get(dtype, dtype), np.dtype(dtype).itemsize)
    spec = kernel.collective_spec
    return Element(spec.element.nccl_type, spec.element.size) if spec.element else Element("none", 1)


def parameters(kernel: Kernel, row: dict, element: Element, redop: str) -> str:
    """A line's first columns: ``%12li  %12li  %8s  %6s  %6s`` of size, count, type, redop and root."""
    spec, size, ranks = kernel.collective_spec, row["size_B"], row["ranks"]
    count = spec.count(size, ranks) if element.size == spec.elem_bytes else size // element.size
    root = spec.root if spec.root is not None else -1
    return f"{spec.algbw_bytes(size, ranks):12d}  {count:12d}  {element.name:>8}  {redop:>6}  {root:6d}"


def block(row: dict | None) -> str:
    """One placement's ``  %7s  %6.2f  %6.2f  %5g``: time, algbw, busbw and #wrong (``%5s`` N/A unchecked)."""
    if row is None or not is_measured(row.get("status", "")):
        return BLANK_BLOCK
    wrong = row.get("wrong_elements")
    figures = (time_text(row["lat_rank_avg_us"]), row["algbw_GBps"], row["busbw_GBps"])
    wrong_text = f"{float(wrong):5g}" if given(wrong) else f"{'N/A':>5}"
    return f"  {figures[0]:>7}  {figures[1]:6.2f}  {figures[2]:6.2f}  {wrong_text}"


def header_lines() -> list[str]:
    """nccl-tests' three header lines: the two blocks' titles, the columns, their units."""
    lead = f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
    names = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
    units = f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
    return [
        f"{lead}           out-of-place                       in-place          ",
        names + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" * 2,
        units + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" * 2,
    ]


def parameter_line(sizes: list[int], iterations: int, warmup: int, validate: bool, graph: bool) -> str:
    """nccl-tests' first line: one thread of one GPU a rank, the sweep (a factor where each size is a whole
    multiple of the last, else a step in bytes; 0 bytes for one size), the counts, -c and CUDA graph launches."""
    ratios = {b // a if a and b % a == 0 else 0 for a, b in zip(sizes, sizes[1:], strict=False)}
    steps = {b - a for a, b in zip(sizes, sizes[1:], strict=False)}
    if len(ratios) == 1 and min(ratios) > 1:
        step = f"{min(ratios)}(factor)"
    else:
        step = f"{min(steps) if len(steps) == 1 else 0}(bytes)"
    return (
        f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: {step} warmup iters: {warmup} "
        f"iters: {iterations} agg iters: 1 validation: {int(validate)} graph: {int(graph)}"
    )


def device_lines(ranks: list[dict], gpus: list[dict]) -> list[str]:
    """``# Using devices`` and ``#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s`` for each rank of a
    GPU run (its bus number from the PCI bus id); none for a run on host memory. The hosts, names and numbers
    came from the ranks: each is shown through the sanitiser, and one that is not a number prints as -1."""
    if not gpus:
        return []
    lines = ["# Using devices"]
    for rank, (process, gpu) in enumerate(zip(ranks, gpus, strict=False)):
        bus = _number(str(gpu.get("bus_id", "")).split(":")[-2:][0], 16)
        lines.append(
            f"#  Rank {rank:2d} Group {0:2d} Pid {_number(process.get('pid')):6d} on "
            f"{printable(process.get('host', ''), 64):>10} device {_number(gpu.get('index')):2d} [0x{bus:02x}] "
            f"{printable(gpu.get('name', ''), 64)}"
        )
    return lines


def _number(value: object, base: int = 10) -> int:
    """A whole number a rank reported (a pid, a device index, a bus number in hex), or -1 where it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value), base) if str(value).isascii() else -1
    except ValueError:
        return -1


def footer_lines(errors: int, busbws: list[float]) -> list[str]:
    """nccl-tests' footer: the blocks with a wrong element, the mean busbw of every block (``%g``, then the
    verdict of a bandwidth floor, which fabricbench's ``check`` gives instead: none), and its closing lines."""
    mean = sum(busbws) / len(busbws) if busbws else math.nan
    return [
        f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
        f"# Avg bus bandwidth    : {mean:g} ",  # then nccl-tests' verdict on NCCL_TESTS_MIN_BW: none asked
        "#",
        "",
    ]


@dataclass
class Step:
    """One collective's table as its rows arrive: a size's line once its placements are in, the footer at the end."""

    kernel: Kernel
    placements: int  # rows a size has: 1 or 2
    element: Element
    redop: str
    pending: list[dict] = field(default_factory=list)
    said: set[str] = field(default_factory=set)
    errors: int = 0
    busbws: list[float] = field(default_factory=list)

    def row(self, row: dict) -> list[str]:
        """The lines a row completes: none until a size's placements are in, then its line (and, once a step, a
        status nccl-tests has no line for)."""
        if row.get("size_B") is None:  # the kernel is not run at all
            return self._say(f"# {row['status']}")
        self.pending.append(row)
        if len(self.pending) < self.placements:
            return []
        rows, self.pending = self.pending, []
        return self._line(rows)

    def finish(self) -> list[str]:
        """What is left (a size cut short) and the footer."""
        lines = self._line(self.pending) if self.pending else []
        self.pending = []
        return lines + footer_lines(self.errors, self.busbws)

    def _say(self, text: str) -> list[str]:
        if text in self.said:
            return []
        self.said.add(text)
        return [text]

    def _line(self, rows: list[dict]) -> list[str]:
        placed = {row.get("placement") == IN_PLACE: row for row in rows}
        lines = []
        for row in rows:
            if is_measured(row.get("status", "")):
                self.errors += bool(row.get("wrong_elements"))
                self.busbws.append(row["busbw_GBps"])
            else:
                lines += self._say(f"# {row.get('placement') or self.kernel.name}: {row['status']}")
        if not any(is_measured(row.get("status", "")) for row in rows):
            return lines
        first = rows[0]
        text = parameters(self.kernel, first, self.element, self.redop)
        return [text + block(placed.get(False)) + block(placed.get(True)), *lines]


def start(kernel: Kernel, transport: str, metadata: dict, plan, sizes: list[int], ranks: int, placements: int):
    """A step's header lines and its Step, which prints its lines as rows arrive (None for a collective that moves
    no data: nccl-tests has no line for it). ``metadata``: the run's (its ranks and transports)."""
    meta = metadata.get("transports", {}).get(transport, {})
    made = (
        f"# fabricbench {__version__} made this table of {transport} {kernel.name} on {ranks} ranks, "
        f"in the text layout of nccl-tests {NCCL_TESTS_VERSION}"
    )
    if not kernel.moves_data:
        return [made, f"# {kernel.name} moves no data: nccl-tests' layout has no line for it"], None
    spec = kernel.collective_spec
    reduces = bool(spec.elements)  # the reductions: fabricbench sums, nccl's --op says otherwise
    redop = (meta.get("op") or spec.redop) if reduces else spec.redop
    iterations, warmup = plan.counts(kernel, sizes[0])
    devices = device_lines(metadata.get("ranks", []), meta.get("gpus_by_rank", []))
    nccl_sizes = [spec.algbw_bytes(size, ranks) for size in sizes]
    lines = [
        made,
        parameter_line(nccl_sizes, iterations, warmup, plan.validate, bool(meta.get("cuda_graph"))),
        "#",
        *([*devices, "#"] if devices else []),
        *header_lines(),
    ]
    return lines, Step(kernel, placements, element_of(kernel, meta), redop)
