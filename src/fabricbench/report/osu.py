"""OSU Micro-Benchmarks' text layout, for scripts that already scrape it.

Headers and columns follow OSU 7.4 as its own configure builds it: size
``%-10d``, values ``%*.*f`` with FIELD_WIDTH 18 and FLOAT_PRECISION 2, text
columns ``%*s`` 18 wide (``configure.ac``'s ``AC_DEFINE([FIELD_WIDTH], [18])``;
the 20 in OSU's header is only the fallback of a build without it).
One comment line before OSU's title says that fabricbench made the table;
every other line is as OSU prints it. A transport that is not MPI keeps the
layout but names itself in the title.

The optional columns are OSU's, in OSU's order after the value(s): Min/Max
latency and Iterations for a collective with ``-f`` (``Columns.full``), the
Pass/Fail validation column with ``-c`` (``Columns.validate``), then tail
latencies with ``-z`` (``Columns.percentiles``), as OSU's print_stats_validate
and its point-to-point tests print them; a bandwidth test's tails are its
windows' bandwidths (``bw_win_p*_MBps``, as rows.tail_window_bytes counts them). ``-T`` names the datatype line
(``Columns.datatype``); the kernel's own type otherwise. A reduction run with
``-T`` sums that type (``Kernel.with_datatype``), on mpi only; the other kernels
move its bytes, on any transport. A kernel with no sizes (barrier) prints no
size column (``shows_size``): OSU's ``# Avg Latency(us)`` header, then its
average 17 wide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from fabricbench import __version__
from fabricbench.argtypes import decimal
from fabricbench.collectives import neighbor
from fabricbench.collectives import nonblocking as nonblocking_figures
from fabricbench.errors import UsageError
from fabricbench.measure.kernels import (
    ATOMIC_CHECK_WORDS,
    ATOMIC_OSU_TYPES,
    ATOMIC_TYPES_WHY,
    Kernel,
    Pairing,
    get_kernel,
)
from fabricbench.measure.schema import is_measured
from fabricbench.measure.stats import PERCENTILES, WINDOW_PERCENTILES
from fabricbench.transports import TRANSPORTS, transport_class

OSU_VERSION = "v7.4"
FIELD = 18  # OSU's FIELD_WIDTH, as OSU's configure.ac defines it
SIZE_FIELD = 10  # OSU's "%-*d" (and "%-*s" for "# Size") width of the size column
ITERATIONS_FIELD = 12  # OSU prints the Iterations column narrower
NO_SIZE_FIELD = 17  # OSU's "%*.*f" width of the average where it prints no size column (osu_barrier)
PERCENTILE_COLUMNS = dict(zip(PERCENTILES, ("lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us"), strict=True))


@dataclass(frozen=True)
class Columns:
    """Which of OSU's optional columns and lines to print (OSU's -c, -f, -z, -T)."""

    validate: bool = False
    full: bool = False
    percentiles: tuple[float, ...] = ()
    datatype: str = ""
    rate: bool = True  # a message-rate kernel's Messages/s column (osu_mbw_mr's -R 1; -R 0 leaves it out)
    # The run's Plan.transport_options: each transport's declared buffer place in them gives OSU's -d title
    # ("MPI-CUDA") and buffer lines.
    transport_options: dict = field(default_factory=dict)

    @cached_property
    def nonblocking(self) -> bool:
        """Whether the run times the collectives' non-blocking forms, as a transport declares its options make it
        (Transport.osu_nonblocking): OSU's osu_i* layout."""
        return any(transport_class(name).osu_nonblocking(self.transport_options) for name in TRANSPORTS)

    @classmethod
    def from_plan(cls, plan) -> Columns:
        return cls(
            validate=plan.validate,
            full=plan.osu.full,
            percentiles=plan.osu.percentiles,
            datatype=plan.osu.datatype,
            rate=plan.osu.rate,
            transport_options=plan.transport_options,
        )


def parse_percentiles(text: str) -> tuple[float, ...]:
    """OSU's ``-z`` list (``50,90,99``) as the percentiles the rows keep; UsageError otherwise."""
    values = []
    for part in text.split(","):
        value = decimal(part)  # ASCII digits only: float() also reads '5_0' and other scripts' digits
        if value is None:
            raise UsageError(f"bad percentile list {text!r}: {part!r} is not a number")
        if value not in PERCENTILES:
            kept = ", ".join(f"{p:g}" for p in PERCENTILES)
            raise UsageError(f"percentile {part} is not kept in fabricbench's rows: choose from {kept}")
        values.append(value)
    return tuple(dict.fromkeys(values))


def check_columns(kernel: Kernel, columns: Columns, transport: str) -> None:
    """Refuse, in one line, a column this kernel's rows cannot fill on ``transport`` (never print something else
    under its name). ``kernel`` is the one the run moves: ``with_datatype`` of -T's type where it can move it."""
    untabled = [p for p in columns.percentiles if kernel.windowed and p not in WINDOW_PERCENTILES]
    if untabled:
        kept = ", ".join(f"P{p:g}" for p in WINDOW_PERCENTILES)
        raise UsageError(f"tail bandwidth P{untabled[0]:g} (-z) for {kernel.name}: the table keeps {kept} of windows")
    if not columns.rate and not _message_rate(kernel):
        raise UsageError(f"--osu-no-rate (-R 0) for {kernel.name}: it prints no message rate column")
    if columns.datatype:
        own = kernel.osu_datatype
        if not own:
            raise UsageError(f"datatype {columns.datatype} (-T) for {kernel.name}: it moves no data")
        reduction = bool(kernel.collective_spec and kernel.collective_spec.elements)
        if columns.datatype.upper() != own:
            if len(kernel.osu_datatypes) > 1:
                why = f" ({ATOMIC_TYPES_WHY[kernel.name]})" if kernel.name in ATOMIC_TYPES_WHY else ""
                raise UsageError(
                    f"datatype {columns.datatype} (-T) for {kernel.name}: fabricbench's {kernel.name} "
                    f"{'sums' if reduction else 'moves'} {_either(kernel.osu_datatypes)}{why}"
                )
            raise UsageError(
                f"datatype {columns.datatype} (-T) for {kernel.name}: fabricbench's {kernel.name} moves {own} only"
            )
        default = get_kernel(kernel.name).osu_datatype
        if own != default and kernel.name in ATOMIC_OSU_TYPES and not transport_class(transport).osu_atomic_types:
            taking = [name for name in TRANSPORTS if transport_class(name).osu_atomic_types]
            raise UsageError(
                f"datatype {columns.datatype} (-T) for {kernel.name} on {transport}: its atomics take {default} "
                f"only ({', '.join(taking)} takes {_either(kernel.osu_datatypes)})"
            )
        # Bytes are bytes on every transport; a sum of another type is the transport's to do.
        if reduction and own != default and not transport_class(transport).osu_sums_any_type:
            classes = {name: transport_class(name) for name in TRANSPORTS}
            summing = [name for name, cls in classes.items() if cls.osu_sums_any_type and kernel.name in cls.kernels]
            raise UsageError(
                f"datatype {columns.datatype} (-T) for {kernel.name} on {transport}: {transport} sums {default} "
                f"only ({', '.join(summing)} sums {_either(kernel.osu_datatypes)})"
            )


def _either(types: tuple[str, ...]) -> str:
    return f"{', '.join(types[:-1])} or {types[-1]}"


def header(transport: str, kernel_name: str, window: int, pairs: int, columns: Columns = Columns()) -> str:
    kernel = get_kernel(kernel_name)
    cls = transport_class(transport)
    place = cls.buffer_place(columns.transport_options)
    made = f"# fabricbench {__version__} made this table, in the text layout of OSU Micro-Benchmarks {OSU_VERSION}"
    named = title(transport, kernel_name, place.osu_device, columns.transport_options)
    if kernel.osu_layout in ("threads", "processes"):  # osu_latency_mt/_mp: counts, title, columns, datatype
        extra = cls.osu_header_lines(kernel, columns.transport_options)
        datatype = f"# Datatype: {(columns.datatype or kernel.osu_datatype).upper()}."
        # OSU's print_preamble starts with an empty line: after the counts, it stands between them and the title.
        return "\n".join([made, *extra, "", named, column_header(kernel_name, columns), datatype])
    if kernel.osu_layout != "table":  # osu_init and osu_hello print their title, then their one line
        return f"{made}\n{named}"
    nonblocking = columns.nonblocking and kernel.collective  # osu_i*: "# Overall = ..." under the title
    lines = [
        made,
        named,
        *([nonblocking_figures.OVERALL_LINE, ""] if nonblocking else []),
        *cls.osu_header_lines(kernel, columns.transport_options),
        *place.osu_buffer_lines(point_to_point=kernel.pairing in (Pairing.ONE, Pairing.HALVES)),
    ]
    if _message_rate(kernel):
        lines.append(f"# [ pairs: {pairs} ] [ window size: {window} ]")
    if kernel.osu_datatype:
        lines.append(f"# Datatype: {(columns.datatype or kernel.osu_datatype).upper()}.")
    lines.append(column_header(kernel_name, columns))
    return "\n".join(lines)


def prints_topology(kernel_name: str) -> bool:
    """Whether OSU prints its neighbourhood's lines (topology_lines) before this kernel's title."""
    return kernel_name in neighbor.NAMES


def with_topology(header_text: str, row: dict) -> str:
    """A neighbourhood collective's header as OSU prints it once its graph exists: the Cartesian grid's dimensions
    (MPI_Dims_create over the ranks in OSU's one dimension, each followed by a space) and the mean time the ranks took
    to create the graph communicator, before the title; fabricbench's own first line stays first. A row that made
    no graph (too few ranks: unsupported) leaves the header as it is. OSU's print_preamble starts with an empty
    line, which falls between the graph's lines and the title."""
    made, _, rest = header_text.partition("\n")
    took = row.get("topology_us")
    if took is None or (isinstance(took, float) and math.isnan(took)):
        return header_text
    lines = [f"Dimensions size = {row['ranks']} ", f"Time took to create topology graph:{took:.2f} us.", ""]
    return "\n".join([made, *lines, rest])


RULE = "-" * 43  # OSU's rule around each rank's atomic validation summary


def validation_summary(kernel_name: str, columns: Columns, validations: list[str], ranks: int) -> str:
    """What OSU's atomic programs (osu_acc_latency, osu_fop_latency, osu_cas_latency) print after their table with
    -c: each of the 2 ranks' summary of its validations between rules, one combination of op and datatype per run.
    ``validations``: the step's rows' validation column; '' where nothing follows the table."""
    kernel = get_kernel(kernel_name)
    if not columns.validate or kernel.osu_validation != ATOMIC_CHECK_WORDS or not validations:
        return ""
    if "fail" in validations:
        said = "FAILED: 1 of the 1 combinations of ops and datatypes tested failed."
    else:
        said = "PASSED: All 1 combinations of ops and datatypes tested passed."
    blocks = [f"{RULE}\nAtomic Data Validation results for Rank={rank}:\n{said}\n{RULE}" for rank in range(ranks)]
    return "\n".join(blocks)


def title(transport: str, kernel_name: str, device: str = "", transport_options: dict | None = None) -> str:
    """OSU's title line, e.g. ``# OSU MPI Latency Test v7.4``, or with a device ``# OSU MPI-CUDA Latency Test``; the
    transport words it for a run with ``transport_options`` (osu_latency_persistent's ``Latency Persistent Test``,
    osu_iallreduce's ``Non-blocking Allreduce Latency Test``)."""
    cls = transport_class(transport)
    library = cls.osu_name or f"fabricbench {transport}"
    if device:
        library = f"{library}-{device}"
    words = cls.osu_title(get_kernel(kernel_name), transport_options or {})
    return f"# OSU {words.format(lib=library)} {OSU_VERSION}"


def _message_rate(kernel) -> bool:
    """osu_mbw_mr's layout: windows on every pair at once, reported as MB/s and messages/s."""
    return kernel.windowed and kernel.pairing is Pairing.HALVES


def column_header(kernel_name: str, columns: Columns = Columns()) -> str:
    """OSU's column header: ``"%-*s%*s"`` of "# Size" (10) and the value's name (FIELD), then the optional columns."""
    kernel = get_kernel(kernel_name)
    if columns.nonblocking and kernel.collective:
        return _nonblocking_header(kernel, columns)
    if not shows_size(kernel):  # print_only_header without show_size: "# Avg Latency(us)", then the options'
        text = "# Avg Latency(us)"
        if columns.full:
            text += f"{'Min Latency(us)':>{FIELD}}{'Max Latency(us)':>{FIELD}}{'Iterations':>{ITERATIONS_FIELD}}"
        return text + _tail_header(columns)
    text = f"{'# Size':<{SIZE_FIELD}}"
    if _message_rate(kernel):
        text += f"{'MB/s':>{FIELD}}" + (f"{'Messages/s':>{FIELD}}" if columns.rate else "")
    elif kernel.windowed:
        text += f"{'Bandwidth (MB/s)':>{FIELD}}"
    elif kernel.osu_layout in ("threads", "processes") or (kernel.sample == "op" and not kernel.collective):
        # one one-sided operation (osu_put_latency's header), or osu_latency_mt's and osu_latency_mp's
        text += f"{'Latency (us)':>{FIELD}}"
    else:
        text += f"{'Avg Latency(us)':>{FIELD}}"
        if kernel.collective and columns.full:
            text += f"{'Min Latency(us)':>{FIELD}}{'Max Latency(us)':>{FIELD}}{'Iterations':>{ITERATIONS_FIELD}}"
    if columns.validate:
        text += f"{'Validation':>{FIELD}}"
    return text + _tail_header(columns, kernel.windowed)


def _tail_header(columns: Columns, bandwidth: bool = False) -> str:
    """OSU's "%*sP%d Tail Lat(us)" (a bandwidth test's "Tail BW(MB/s)") per -z percentile, padded to FIELD for a
    two-digit percentile."""
    unit = "Tail BW(MB/s)" if bandwidth else "Tail Lat(us)"
    return "".join(f"{f'P{percent:g} {unit}':>{FIELD}}" for percent in columns.percentiles)


def shows_size(kernel: Kernel) -> bool:
    """Whether OSU prints a size column for it: not for a kernel with no sizes (osu_barrier's show_size 0)."""
    return kernel.moves_data


def line(row: dict, columns: Columns = Columns()) -> str:
    """One size as OSU prints it: ``"%-*d"`` (10), then ``"%*.*f"`` (FIELD, 2) per value, ``"%*d"`` (12) for
    the iterations, ``"%*s"`` (FIELD) for Pass/Fail, then the tail latencies."""
    if not is_measured(row.get("status", "")):
        return f"# {row['status']}"
    kernel = get_kernel(row["kernel"])
    if kernel.osu_layout == "nprocs":  # osu_init: "%ld ms" of the ranks' MPI_Init, truncated as OSU's longs are
        low, high, mean = (int(row[f"lat_rank_{k}_us"] // 1000) for k in ("min", "max", "avg"))
        return f"nprocs: {row['ranks']}, min: {low} ms, max: {high} ms, avg: {mean} ms"
    if kernel.osu_layout == "count":
        return f"This is a test with {row['ranks']} processes"
    if columns.nonblocking and kernel.collective:
        return _nonblocking_line(kernel, row, columns)
    if not shows_size(kernel):  # print_stats without show_size: "%*.*f" 17 wide, no size
        text = f"{row['lat_rank_avg_us']:{NO_SIZE_FIELD}.2f}"
        if columns.full:
            text += (
                f"{row['lat_rank_min_us']:{FIELD}.2f}{row['lat_rank_max_us']:{FIELD}.2f}"
                f"{row['iterations']:{ITERATIONS_FIELD}d}"
            )
        return text + "".join(f"{row[PERCENTILE_COLUMNS[p]]:{FIELD}.2f}" for p in columns.percentiles)
    text = f"{row['size_B']:<{SIZE_FIELD}d}"
    if _message_rate(kernel):
        text += f"{row['bw_MBps']:{FIELD}.2f}" + (f"{row['msgrate_per_s']:{FIELD}.2f}" if columns.rate else "")
    elif kernel.windowed:
        text += f"{row['bw_MBps']:{FIELD}.2f}"
    elif kernel.collective:
        text += f"{row['lat_rank_avg_us']:{FIELD}.2f}"
        if columns.full:
            text += (
                f"{row['lat_rank_min_us']:{FIELD}.2f}{row['lat_rank_max_us']:{FIELD}.2f}"
                f"{row['iterations']:{ITERATIONS_FIELD}d}"
            )
    elif kernel.osu_layout == "processes" and not columns.validate:
        text += f"{row['lat_mean_us']:10.2f}"  # osu_latency_mp prints "%*.*f" 10 wide without -c
    else:
        text += f"{row['lat_mean_us']:{FIELD}.2f}"
    if columns.validate:
        passed, failed = kernel.osu_validation
        words = {"pass": passed, "fail": failed}
        text += f"{words.get(row.get('validation'), ''):>{FIELD}}"
    tails = WINDOW_PERCENTILES if kernel.windowed else PERCENTILE_COLUMNS
    for percent in columns.percentiles:  # NaN where a loop's windows do not hold their transit, or one was refused
        text += f"{row.get(tails[percent], math.nan):{FIELD}.2f}"
    return text


# The non-blocking collectives' columns after the overall time (OSU's print_only_header_nbc and print_stats_nbc):
# (header, the row's column), the short set and -f's full set.
NONBLOCKING_SHORT = (("Compute(us)", "compute_us"), ("Pure Comm.(us)", "pure_comm_us"), ("Overlap(%)", "overlap_pct"))
NONBLOCKING_FULL = (
    ("Compute(us)", "compute_us"),
    ("Coll. Init(us)", "init_us"),
    ("MPI_Test(us)", "test_us"),
    ("MPI_Wait(us)", "wait_us"),
    ("Pure Comm.(us)", "pure_comm_us"),
    ("Min Comm.(us)", "pure_comm_min_us"),
    ("Max Comm.(us)", "pure_comm_max_us"),
    ("Overlap(%)", "overlap_pct"),
)
NO_SIZE_OVERALL = 13  # osu_ibarrier's overall time, "%*.*f" 13 wide where there is no size column


def _nonblocking_header(kernel: Kernel, columns: Columns) -> str:
    """osu_i*'s column header: "# Size" (10) and "Overall(us)" (FIELD), or "# Overall(us)" alone where there is no
    size (osu_ibarrier); the figures (-f: all eight); then Validation and the tail latencies, as OSU orders them."""
    text = f"{'# Size':<{SIZE_FIELD}}{'Overall(us)':>{FIELD}}" if kernel.moves_data else "# Overall(us)"
    for name, _ in NONBLOCKING_FULL if columns.full else NONBLOCKING_SHORT:
        text += f"{name:>{FIELD}}"
    if columns.validate:
        text += f"{'Validation':>{FIELD}}"
    for percent in columns.percentiles:
        text += f"{f'P{percent:g} Tail Lat(us)':>{FIELD}}"
    return text


def _nonblocking_line(kernel: Kernel, row: dict, columns: Columns) -> str:
    """One size of osu_i*: the size (10) and the overall time (FIELD), or the overall time alone (13) for
    osu_ibarrier; then each figure (FIELD, 2 decimals), Pass/Fail and the tail latencies of the overall time."""
    overall = row["lat_rank_avg_us"]
    text = (
        f"{row['size_B']:<{SIZE_FIELD}d}{overall:{FIELD}.2f}"
        if kernel.moves_data
        else f"{overall:{NO_SIZE_OVERALL}.2f}"
    )
    for _, column in NONBLOCKING_FULL if columns.full else NONBLOCKING_SHORT:
        text += f"{row[column]:{FIELD}.2f}"
    if columns.validate:
        passed, failed = kernel.osu_validation
        text += f"{ {'pass': passed, 'fail': failed}.get(row.get('validation'), ''):>{FIELD}}"
    for percent in columns.percentiles:
        text += f"{row[PERCENTILE_COLUMNS[percent]]:{FIELD}.2f}"
    return text
