"""Samples and per-rank summaries to one tidy row. Pure functions, no network."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fabricbench.lazy import np
from fabricbench.measure.kernels import SAMPLE_LABELS, Kernel
from fabricbench.measure.schema import MEASURED
from fabricbench.measure.stats import WINDOW_PERCENTILES, across_ranks, latency_stats, stability_note, window_bandwidths

WINDOW_COLUMNS = tuple(WINDOW_PERCENTILES.values())


def rank_summary(initiator: bool, iterations: int, samples_ns: np.ndarray, valid: int, wrong: int = -1) -> np.ndarray:
    """What every rank sends rank 0 after a size it timed alike (rows.measured_row): whether it speaks for the
    row, its iterations, its samples' total, its validation (1 pass, 0 fail, -1 off) and its wrong elements (-1:
    not checked)."""
    total = float(samples_ns.sum()) if initiator else 0.0
    return np.array([float(initiator), float(iterations), total, float(valid), float(wrong)])


def base_row(plan, transport: str, kernel: Kernel, size: int | None, ranks: int, buffer: str = "host") -> dict:
    return {
        "run_id": plan.run_id,
        "label": plan.label,
        "repeat": 0,
        "transport": transport,
        "kernel": kernel.name,
        "buffer": buffer,
        "size_B": size,
        "ranks": ranks,
        "sample": SAMPLE_LABELS[kernel.sample],
        **({"placement": kernel.collective_spec.placement} if kernel.collective else {}),
    }


def unsupported_row(
    plan, transport: str, kernel: Kernel, size: int | None, ranks: int, reason: str, buffer: str = "host"
) -> dict:
    row = base_row(plan, transport, kernel, size, ranks, buffer)
    row.update(status=f"unsupported: {reason}", validation="off")
    return row


@dataclass(frozen=True)
class Timing:
    """What a row is made of, whichever pattern timed it: the latency statistics of the samples that speak for it,
    each initiator's iterations and total time, the shortest sample (NaN: no peak), every taking-part rank's
    validation (1 pass, 0 fail, -1 off) and the note on its samples' stability."""

    stats: dict
    iterations: np.ndarray
    total_ns: np.ndarray
    shortest_ns: float
    valid: np.ndarray
    note: str = ""
    wrong: np.ndarray | None = None  # every rank's wrong elements (-1: not checked); None: a pattern that counts none


@dataclass(frozen=True)
class Loop:
    """How the timed loop was run, as the row records it: its method, pairs and window, what the transport adds
    to the row, and the link rate its figures are held against (rows.refuse_impossible)."""

    method: str
    pairs: int
    window: int
    row_fields: dict = field(default_factory=dict)
    link_MBps: float | None = None
    link_label: str = ""
    link_bound: bool = True  # a figure above link_MBps is impossible (a reported hardware rate), so refused

    @classmethod
    def of(cls, case) -> Loop:
        """The loop of a case rank 0 timed itself."""
        link = getattr(case, "link_MBps", None), getattr(case, "link_label", ""), getattr(case, "link_bound", True)
        return cls(case.method, case.pairs, case.window, getattr(case, "row_fields", {}), *link)


def bound_rate(case) -> float | None:
    """The link rate a case's figures are refused above: its link_MBps where that is a bound (Case.link_bound)."""
    return getattr(case, "link_MBps", None) if getattr(case, "link_bound", True) else None


def link_share(row: dict, directions: int, link_MBps: float | None, link_label: str) -> None:
    """Set, in place, a row's link columns: the payload rate of the link its bytes crossed (``link_MBps``, one
    direction), what reported it (``link``) and its bandwidth as a share of what that link carries in the
    row's ``directions`` (``link_pct``, in %). Left blank without a rate, and on a row of several pairs at once,
    whose links (one shared NIC, or one each) are not known here."""
    if link_MBps is None or not link_MBps > 0:
        return
    row.update(link_MBps=link_MBps, link=link_label)
    bw = row.get("bw_MBps", math.nan)
    if row.get("pairs", 1) == 1 and math.isfinite(bw):
        row["link_pct"] = 100 * bw / (directions * link_MBps)


def timed_row(
    plan, transport: str, kernel: Kernel, size: int, ranks: int, buffer: str, loop: Loop, warmup: int, timing: Timing
) -> dict:
    """The one row builder: a measured (transport, kernel, size) row, its bandwidth columns from the kernel, its
    validation from every rank's check, and any windowed figure that could not have happened refused."""
    row = base_row(plan, transport, kernel, size, ranks, buffer)
    row.update(timing.stats)
    row.update(
        method=loop.method,
        pairs=loop.pairs,
        window=loop.window,
        iterations=int(timing.iterations[0]) if len(timing.iterations) else 0,
        warmup=warmup,
        status=MEASURED,
        note=timing.note,
    )
    valid = timing.valid
    row["validation"] = "off" if (valid == -1).all() else ("fail" if (valid == 0).any() else "pass")
    checked = timing.wrong[timing.wrong >= 0] if timing.wrong is not None else ()
    if kernel.collective and len(checked):  # nccl-tests' #wrong: summed over the ranks
        row["wrong_elements"] = int(checked.sum())
    row.update(kernel.bandwidth(size, ranks, loop.window, timing.iterations, timing.total_ns, timing.shortest_ns))
    row.update(loop.row_fields)
    if kernel.windowed:
        pairs = max(1, len(timing.iterations))
        bound = bound_rate(loop)
        refuse_impossible(row, kernel.directions, pairs, bound, loop.link_label)
    link_share(row, kernel.directions, loop.link_MBps, loop.link_label)
    return row


def measured_row(
    plan,
    transport: str,
    kernel: Kernel,
    size: int,
    case,
    warmup: int,
    samples_ns: np.ndarray,
    gathered: np.ndarray,
    buffer: str = "host",
) -> dict:
    """The row of a size rank 0 timed itself: its own samples plus every rank's summary (rank_summary)."""
    initiators = gathered[gathered[:, 0] == 1]
    divisor = kernel.sample_divisor
    stats = latency_stats(samples_ns, divisor)
    stats.update(across_ranks(initiators[:, 2] / initiators[:, 1] / 1000.0 / divisor))
    holds_transit = len(samples_ns) > 0 and getattr(case, "window_holds_transit", True)
    if kernel.windowed and (holds_transit or kernel.directions > 1):  # OSU's -z tail bandwidths
        window_bytes = tail_window_bytes(kernel, size, len(gathered), case.window, len(initiators))
        stats.update(window_bandwidths(samples_ns, window_bytes))
    timing = Timing(
        stats,
        initiators[:, 1],
        initiators[:, 2],
        float(samples_ns.min()) if holds_transit else math.nan,
        gathered[:, 3],
        stability_note(samples_ns),
        gathered[:, 4] if gathered.shape[1] > 4 else None,
    )
    return timed_row(plan, transport, kernel, size, len(gathered), buffer, Loop.of(case), warmup, timing)


def tail_window_bytes(kernel: Kernel, size: int, ranks: int, window: int, initiators: int) -> int:
    """The bytes OSU 7.4's -z tail bandwidths (bw_win_p*_MBps) divide each of rank 0's window times by: rank 0's
    window's bytes (both directions' on a bi-directional test: osu_bibw, osu_put_bibw; every child host's on a
    fan) times the initiators timing windows at once (osu_mbw_mr's pairs, osu_bw_fan_in's parents), as OSU
    scales rank 0's window as if every initiator's were as fast. Rank 0's windows are taken where they hold their
    bytes' transit, or where the peer's window overlaps rank 0's without beginning with it (both ways)."""
    return kernel.message_bytes(size, ranks, window) * initiators


def _mbps(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


def refuse_impossible(row: dict, directions: int, pairs: int, link_MBps: float | None, link_label: str = "") -> None:
    """Refuse, in place, each bandwidth figure of a windowed row that could not have happened: NaN in its cell,
    and the figure and why in the row's note.

    A rate from a window timed at 0 ns (or less) is impossible on any link. With a rate the hardware reports
    (``link_MBps``, one direction of the link), so is rank 0's peak above ``directions`` times it, and the sum
    over ``pairs`` initiators above ``pairs`` times that (each pair at most on a link of its own). A refused
    bw_MBps takes msgrate_per_s with it: the same bytes over the same time. NaN cells are left alone.
    """
    link = link_MBps if link_MBps is not None and link_MBps > 0 else None
    clauses = []
    # A tail bandwidth scales rank 0's window by the initiators (tail_window_bytes), each at most on a link of its own.
    short = "a window sample shorter than its bytes allow"
    for column, factor, why in (
        ("bw_peak_MBps", directions, short),
        *((column, directions * pairs, short) for column in WINDOW_COLUMNS),
        ("bw_MBps", directions * pairs, "windows timed shorter than their bytes allow"),
    ):
        value = row.get(column, math.nan)
        if math.isnan(value):
            continue
        if not math.isfinite(value) or value < 0:  # 0 MB/s is a zero-byte message's
            reason = "not a possible rate (a window timed at 0 ns or less)"
        elif link is not None and value > link * factor:
            parts = [f"{directions} directions"] if directions > 1 else []
            parts += [f"{pairs} pairs"] if factor > directions else []
            scope = f" of {' × '.join(parts)} at the {_mbps(link)} MB/s" if parts else ""
            where = f" ({link_label})" if link_label else ""
            reason = f"above the {_mbps(link * factor)} MB/s{scope} the link reports{where}; {why}"
        else:
            continue
        row[column] = math.nan
        also = ""
        if column == "bw_MBps" and not math.isnan(row.get("msgrate_per_s", math.nan)):
            row["msgrate_per_s"], also = math.nan, " (msgrate_per_s with it)"
        clauses.append(f"{column} {_mbps(value)}{also} refused: {reason}")
    if clauses:
        row["note"] = "; ".join(filter(None, [row.get("note", ""), *clauses]))


@dataclass(frozen=True)
class Coded:
    """A text column as codes into its few distinct values (a phase's hosts, tiers and validations): what Arrow
    takes as a dictionary, without a Python string a row."""

    codes: np.ndarray
    names: list[str]

    def tolist(self) -> list[str]:
        return np.array(self.names, dtype=object)[self.codes].tolist()


@dataclass
class RowBatch:
    """Some of a size's rows as columns: {column: a value every row shares, an array of one value a row, or Coded
    text}, of the table's columns (schema.COLUMNS; a column not given is empty; an integer column with blanks as
    floats, NaN for blank). ``size_rows``: how many rows its size has in all, which decides where they are written
    (run.reporter); ``last``: whether it holds the size's last rows."""

    count: int
    columns: dict
    size_rows: int
    last: bool = False

    def column(self, name: str) -> list:
        """One column as a list of ``count`` plain values ("" where not given)."""
        value = self.columns.get(name, "")
        return value.tolist() if isinstance(value, (np.ndarray, Coded)) else [value] * self.count

    def rows(self) -> list[dict]:
        """The rows as dicts, as the CSV writer and the console take them."""
        names = list(self.columns)
        return [dict(zip(names, values, strict=True)) for values in zip(*map(self.column, names), strict=True)]
