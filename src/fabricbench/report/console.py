"""A readable table per kernel, printed line by line as sizes finish; a pattern with lines of its own
(fabricbench.run.patterns) prints those instead."""

from __future__ import annotations

from collections.abc import Iterable

from fabricbench.collectives.spec import IN_PLACE
from fabricbench.measure.formatting import given
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.schema import ROW_ENDS, is_measured
from fabricbench.terminal import printable


def _num(value, width: int, digits: int = 2) -> str:
    if not given(value):
        return " " * (width - 1) + "-"
    return f"{value:>{width}.{digits}f}"


def _layout(kernel_name: str, columns: Iterable[str] = ()) -> list[tuple[str, str, int]]:
    """(header, column, width) for a kernel's console table; ``columns``: those its pattern adds to its rows, of
    which the ones naming a row's two ends (ROW_ENDS) come first."""
    kernel = get_kernel(kernel_name)
    lead = [(ROW_ENDS[column][0], column, ROW_ENDS[column][1]) for column in ROW_ENDS if column in columns]
    lead += [("size(B)", "size_B", 10), ("iters", "iterations", 7)]
    tail = [("valid", "validation", 6)]
    if kernel.windowed:
        body = [
            ("MB/s", "bw_MBps", 12),
            ("peak MB/s", "bw_peak_MBps", 12),
            ("msg/s", "msgrate_per_s", 13),
            ("p50 win us", "lat_p50_us", 11),
        ]
    elif kernel.collective:
        tail.append(("#wrong", "wrong_elements", 7))  # nccl-tests' #wrong: elements wrong over every rank
        body = [
            ("avg us", "lat_rank_avg_us", 10),
            ("min us", "lat_rank_min_us", 10),
            ("max us", "lat_rank_max_us", 10),
            ("p50 us", "lat_p50_us", 10),
            ("p99 us", "lat_p99_us", 10),
            ("algbw GB/s", "algbw_GBps", 11),
            ("busbw GB/s", "busbw_GBps", 11),
        ]
    else:
        body = [
            ("min us", "lat_min_us", 10),
            ("p50 us", "lat_p50_us", 10),
            ("mean us", "lat_mean_us", 10),
            ("p99 us", "lat_p99_us", 10),
            ("max us", "lat_max_us", 10),
            ("stdev us", "lat_stdev_us", 10),
        ]
    return lead + body + tail


# A collective's avg, min and max are over the ranks (each rank's mean time per call, as OSU's collectives), its p50
# and p99 over rank 0's own iterations: p50 may lie below min when rank 0 is not the slowest rank.
OVER_RANKS = " (avg/min/max: over the ranks' means; p50/p99: over rank 0's iterations)"


def header(transport: str, kernel_name: str, ranks: int, title: str, row_columns: Iterable[str] = ()) -> str:
    """A step's header; ``row_columns``: the columns its pattern adds to its rows."""
    title = f" - {title}" if title else ""  # no MPI vendor to name in a peer run
    columns = _layout(kernel_name, row_columns)
    names = "".join(f"{h:>{w}}" for h, _, w in columns)
    about = OVER_RANKS if get_kernel(kernel_name).collective else ""
    return f"# {transport} {kernel_name} on {ranks} ranks{title}{about}\n#{names[1:]}"


def line(row: dict) -> str:
    if not is_measured(row.get("status", "")):
        size, placement = row.get("size_B"), row.get("placement", "")
        where = f"{size} B{f' {placement}' if placement else ''}: " if size is not None else ""
        return f"# {where}{row['status']}"
    out = []
    ends = [column for column in ROW_ENDS if given(row.get(column))]
    for _, column, width in _layout(row["kernel"], ends):
        value = row.get(column)
        if column in ("size_B", "iterations", *ROW_ENDS):
            out.append(f"{value:>{width}d}")
        elif column == "validation":
            out.append(f"{value:>{width}}")
        elif column == "wrong_elements":
            out.append(f"{int(value):>{width}d}" if given(value) else " " * (width - 1) + "-")
        elif column == "msgrate_per_s":
            out.append(_num(value, width, 0))
        else:
            out.append(_num(value, width))
    # An in-place row says so after its figures (run --placement): out of place, the default, goes unsaid.
    notes = [text for text in ("in place" if row.get("placement") == IN_PLACE else "", row.get("note")) if text]
    return "".join(out) + link_share(row) + (f"  ({'; '.join(notes)})" if notes else "")


def link_share(row: dict) -> str:
    """``  95 % of eth0 10 Gb/s``: a row's bandwidth as a share of what its link carries, where that is known."""
    share = row.get("link_pct")
    if not given(share):
        return ""
    return f"  {share:.0f} % of {printable(row.get('link') or 'the link')}"  # sysfs, fi_info or UCX named it
