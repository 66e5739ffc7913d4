"""``fabricbench compare``: finished runs side by side, ratios against a baseline, plots.

It reads tables that are already on disk, so it is rank-free: pandas and
matplotlib are imported here (this module is imported only by the subcommand)
and MPI never is. A series is one (run, transport, buffer) of one input, so a
run that measured both mpi and tcp gives two lines. Series A is the baseline;
every other series is divided by it at the same (kernel, size). Sizes or
kernels that not every series holds are listed, never dropped silently.
"""

from __future__ import annotations

import math
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fabricbench.errors import UsageError
from fabricbench.results import CSV_NAME, NUMERIC, PARQUET_NAME, prepare_out_dir, read_table

DEFAULT_METRICS = ["lat_p50_us", "bw_MBps", "busbw_GBps"]
REQUIRED = ["transport", "kernel", "size_B", "status"]
OPTIONAL = {"run_id": "", "label": "", "buffer": "host", "method": "", "validation": "", "sample": ""}
UNIT_SUFFIXES = ("_us", "_MBps", "_GBps", "_per_s")
CONSOLE_UNITS = {"_us": " us", "_MBps": " MB/s", "_GBps": " GB/s", "_per_s": "/s"}
SAMPLE_MEANING = {
    "rtt/2": "latency is half a round trip",
    "window": "latency is the time of one window of messages",
    "op": "latency is the time of one operation",
}
# Plot axis labels; latency columns are built from the row's sample kind.
AXIS_LABELS = {
    "bw_MBps": "bandwidth (MB/s, MB = 10⁶ B)",
    "bw_peak_MBps": "peak bandwidth (MB/s, MB = 10⁶ B)",
    "msgrate_per_s": "message rate (messages/s)",
    "algbw_GBps": "algorithm bandwidth (GB/s, GB = 10⁹ B)",
    "busbw_GBps": "bus bandwidth (GB/s, GB = 10⁹ B)",
}
LATENCY_AXIS = {"rtt/2": "one-way latency", "window": "time per window", "op": "time per operation"}
KEY = ["kernel", "size_B"]
MARKERS = "osD^vP*X"


@dataclass
class Series:
    """One line in the tables and plots."""

    letter: str
    name: str
    source: str
    run_id: str
    transport: str
    buffer: str
    metadata: dict


def short_name(column: str) -> str:
    """``lat_p50_us`` -> ``p50``, ``busbw_GBps`` -> ``busbw``: what ``--metric`` also accepts."""
    name = column.removeprefix("lat_")
    for suffix in UNIT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def parse_metrics(names: list[str] | None) -> list[str]:
    """Column names from ``--metric`` (full column names or short ones such as p99, bw, busbw)."""
    if not names:
        return DEFAULT_METRICS
    known = {c: c for c in NUMERIC} | {short_name(c): c for c in NUMERIC}
    metrics = []
    for name in names:
        if name not in known:
            choices = ", ".join(sorted(short_name(c) for c in NUMERIC))
            raise UsageError(f"unknown metric {name!r}; known: {choices} (or their column names)")
        if known[name] not in metrics:
            metrics.append(known[name])
    return metrics


def format_size(size: float) -> str:
    """Bytes as people read message sizes: 512 B, 1 KiB, 4 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size:.4g} B"


def format_sizes(sizes: list[float]) -> str:
    """A sorted size list, with runs of doublings shortened to ``1 B-32 B (6 sizes)``."""
    if not sizes or any(math.isnan(s) for s in sizes):
        return "all sizes"
    runs: list[list[float]] = []
    for size in sorted(sizes):
        if runs and size == (runs[-1][-1] * 2 or 1):
            runs[-1].append(size)
        else:
            runs.append([size])
    parts = []
    for run in runs:
        if len(run) == 1:
            parts.append(format_size(run[0]))
        else:
            parts.append(f"{format_size(run[0])}-{format_size(run[-1])} ({len(run)} sizes)")
    return ", ".join(parts)


def _load(path: str) -> tuple[pd.DataFrame, dict]:
    """One input as a checked DataFrame, or a one-line UsageError."""
    import pyarrow

    source = Path(path)
    if not source.exists():
        raise UsageError(f"no such file or directory: {path!r}")
    if source.is_dir() and not any((source / name).exists() for name in (CSV_NAME, PARQUET_NAME)):
        raise UsageError(f"no {CSV_NAME} or {PARQUET_NAME} in {path!r}")
    if source.is_file() and source.stat().st_size == 0:
        raise UsageError(f"{path!r} is empty")
    try:
        frame, metadata = read_table(path)
    except UsageError:
        raise
    except (ValueError, OSError, pyarrow.ArrowException) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read results from {path!r}: {first_line}") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise UsageError(f"{path!r} is not a fabricbench table: no column {', '.join(missing)}")
    if frame.empty:
        raise UsageError(f"{path!r} holds no result rows")
    if not isinstance(metadata, dict):
        raise UsageError(f"{path!r} has metadata that is not a JSON object")
    frame = frame.copy()
    for column, default in OPTIONAL.items():
        if column not in frame.columns:
            frame[column] = default
        frame[column] = frame[column].fillna(default).astype(str)
    frame["transport"] = frame["transport"].astype(str)
    frame["kernel"] = frame["kernel"].astype(str)
    frame["status"] = frame["status"].fillna("").astype(str)
    try:
        frame["size_B"] = pd.to_numeric(frame["size_B"].replace("", math.nan))
        for column in NUMERIC & set(frame.columns):
            frame[column] = pd.to_numeric(frame[column].replace("", math.nan)).astype(float)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path!r} has a non-numeric value: {exc}") from None
    return frame, metadata


def _path_name(path: str) -> str:
    source = Path(path).resolve()
    if source.name in (CSV_NAME, PARQUET_NAME):
        return source.parent.name
    return source.stem if source.is_file() else source.name


def _run_label(path: str, metadata: dict, run_id: str, rows: pd.DataFrame) -> str:
    """The metadata's label, else the rows' label, else the run id, else the path's name."""
    if metadata.get("label") and metadata.get("run_id", run_id) == run_id:
        return str(metadata["label"])
    labels = [label for label in rows["label"].unique() if label]
    return labels[0] if labels else run_id or _path_name(path)


def split_series(paths: list[str]) -> tuple[list[Series], pd.DataFrame, list[str]]:
    """Every input cut into series; the tidy rows of all of them; notes about repeated rows."""
    found: list[tuple[str, dict, str, str, str, str, pd.DataFrame]] = []
    for path in paths:
        frame, metadata = _load(path)
        for (run_id, transport, buffer), rows in frame.groupby(["run_id", "transport", "buffer"], sort=False):
            label = _run_label(path, metadata, run_id, rows)
            found.append((path, metadata, run_id, transport, buffer, label, rows))
    if len(found) > len(string.ascii_uppercase):
        raise UsageError(f"compare takes at most {len(string.ascii_uppercase)} series, these inputs hold {len(found)}")
    vary_transport = len({f[3] for f in found}) > 1
    vary_buffer = len({f[4] for f in found}) > 1
    series, frames, notes, taken = [], [], [], set()
    for letter, (path, metadata, run_id, transport, buffer, label, rows) in zip(
        string.ascii_uppercase, found, strict=False
    ):
        detail = [part for part, varies in ((transport, vary_transport), (buffer, vary_buffer)) if varies]
        name = f"{label} ({', '.join(detail)})" if detail else label
        unique, copy = name, 2
        while unique in taken:
            unique, copy = f"{name} #{copy}", copy + 1
        taken.add(unique)
        series.append(Series(letter, unique, path, run_id, transport, buffer, metadata))
        measured = rows[_compared(rows)]
        repeated = measured.duplicated(KEY, keep="last").reindex(rows.index, fill_value=False)
        if repeated.any():
            notes.append(f"{letter} holds {int(repeated.sum())} repeated (kernel, size) rows; the last of each is used")
        rows = rows[~repeated].copy()
        rows.insert(0, "letter", letter)
        rows.insert(0, "series", unique)
        rows["source"] = path
        frames.append(rows)
    return series, pd.concat(frames, ignore_index=True), notes


def _compared(rows: pd.DataFrame) -> pd.Series:
    """Rows whose numbers stand: measured, and not failed validation."""
    return rows["status"].str.startswith("ok") & (rows["validation"] != "fail")


def kernel_metrics(tidy: pd.DataFrame, metrics: list[str]) -> dict[str, list[str]]:
    """For each kernel, in order of first appearance, the wanted metrics that hold values."""
    measured = tidy[_compared(tidy)]
    chosen = {}
    for kernel, rows in measured.groupby("kernel", sort=False):
        chosen[kernel] = [m for m in metrics if m in rows.columns and rows[m].notna().any()]
    return {k: v for k, v in chosen.items() if v}


def comparison_table(tidy: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The tidy comparison: one row per (kernel, size, series), values and ratios to the baseline.

    The baseline is A; for a kernel A did not measure it is the first series
    that did, so runs are still compared where they overlap. The ``baseline``
    column says which series each ratio divides by.
    """
    compared = _compared(tidy)
    columns = [
        "kernel", "size_B", "series", "letter", "transport", "buffer", "method", "run_id", "source",
        "status", "validation", "sample",
    ]  # fmt: skip
    table = tidy[columns].copy()
    baselines = tidy[compared].groupby("kernel")["letter"].min()
    table.insert(4, "baseline", table["kernel"].map(baselines).fillna(""))
    for metric in metrics:
        values = tidy[metric] if metric in tidy.columns else pd.Series(math.nan, index=tidy.index)
        table[metric] = values.where(compared)
    base = table[compared & (table["letter"] == table["baseline"])][KEY + metrics]
    table = table.merge(base, on=KEY, how="left", suffixes=("", "_base"))
    for metric in metrics:
        table[f"{metric}_ratio"] = table[metric] / table.pop(f"{metric}_base")
    table["size_B"] = table["size_B"].astype("Int64")
    return table


def _cell(value: float) -> str:
    if pd.isna(value):
        return "-"
    return f"{value:.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def _ratio(value: float) -> str:
    if pd.isna(value) or math.isinf(value):
        return "-"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}" if value >= 0.1 else f"{value:.3g}"


def _header_unit(metric: str) -> str:
    for suffix, unit in CONSOLE_UNITS.items():
        if metric.endswith(suffix):
            return short_name(metric) + unit
    return metric


def _series_line(s: Series) -> str:
    meta = s.metadata
    facts = [f"run {s.run_id}" if s.run_id and s.run_id != s.name else "", meta.get("mpi_vendor", "")]
    if meta.get("hosts"):
        facts.append("hosts " + ",".join(map(str, meta["hosts"])))
    about = ", ".join(f for f in facts if f)
    return f"#   {s.letter} = {s.name}: {s.transport} from {s.source}" + (f" ({about})" if about else "")


def report(series: list[Series], table: pd.DataFrame, chosen: dict[str, list[str]], notes: list[str]) -> str:
    """The console comparison: a legend, one block per kernel, then everything not compared."""
    if len(series) == 1:
        lines = ["# fabricbench compare: 1 series, nothing to divide by; values only"]
    else:
        others = ", ".join(s.letter for s in series[1:])
        lines = [f"# fabricbench compare: {len(series)} series; A is the baseline, ratios are X/A for X in {others}"]
    lines += [_series_line(s) for s in series]
    lines.append("# a ratio below 1 means faster than A for times (us), above 1 means faster for rates (MB/s, GB/s)")
    compared = table[_compared(table)]
    needed = min(2, len(series))
    for kernel, metrics in chosen.items():
        rows = compared[compared["kernel"] == kernel]
        letters = sorted(rows["letter"].unique())
        holders = rows.groupby("size_B")["letter"].nunique()
        sizes = sorted(holders[holders >= needed].index)
        if not sizes:
            continue
        base, others = letters[0], letters[1:]
        samples = [s for s in rows["sample"].unique() if s in SAMPLE_MEANING]
        about = [SAMPLE_MEANING[samples[0]]] if len(samples) == 1 else []
        if base != series[0].letter:
            about.append(f"baseline here is {base}: {series[0].letter} has no {kernel}")
        lines += ["", f"# {kernel}" + (f" ({'; '.join(about)})" if about else "")]
        columns = [("size", 10)]
        for metric in metrics:
            unit = _header_unit(metric)
            width = max(11, len(unit) + 3)
            columns += [(f"{letter} {unit}", width) for letter in letters]
            ratio_width = max(9, len(short_name(metric)) + 6)
            columns += [(f"{letter}/{base} {short_name(metric)}", ratio_width) for letter in others]
        head = "".join(f"{title:>{width}}" for title, width in columns)
        lines.append("#" + head[1:])
        by_size = rows.set_index(["size_B", "letter"])
        for size in sizes:
            cells = [f"{format_size(size):>10}"]
            for metric in metrics:
                cells += [_cell(by_size[metric].get((size, letter), math.nan)) for letter in letters]
                cells += [_ratio(by_size[f"{metric}_ratio"].get((size, letter), math.nan)) for letter in others]
            lines.append("".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns, strict=True)))
    lines += _not_compared(series, table)
    lines += [f"# note: {note}" for note in notes]
    return "\n".join(lines)


def _not_compared(series: list[Series], table: pd.DataFrame) -> list[str]:
    """Kernels and sizes not every series holds, and rows that were not measured or failed."""
    names = {s.letter: s.name for s in series}
    everyone = frozenset(names)
    compared = table[_compared(table)]
    lines = []
    missing: dict[frozenset, list[str]] = {}
    for kernel, rows in compared.groupby("kernel", sort=False):
        holders = rows.groupby("size_B")["letter"].agg(frozenset)
        for held_by, sizes in holders.groupby(holders, sort=False):
            if held_by != everyone:
                missing.setdefault(held_by, []).append(f"{kernel} {format_sizes(list(sizes.index))}")
    if missing:
        lines.append("")
    for held_by, parts in sorted(missing.items(), key=lambda item: sorted(item[0])):
        lacking = sorted(everyone - held_by)
        if len(held_by) == 1:
            (letter,) = held_by
            who = f"only in {letter} ({names[letter]})"
        elif len(lacking) == 1:
            who = f"missing from {lacking[0]} ({names[lacking[0]]})"
        else:
            who = f"only in {', '.join(sorted(held_by))}"
        lines.append(f"# {who}: {'; '.join(parts)}")
    failed = table[~_compared(table)]
    for (letter, kernel, status), rows in failed.groupby(["letter", "kernel", "status"], sort=False):
        why = "failed validation" if status.startswith("ok") else status
        sizes = [float(s) for s in rows["size_B"]] if rows["size_B"].notna().all() else []
        lines.append(f"# not compared, {letter} ({names[letter]}): {kernel} {format_sizes(sizes)}: {why}")
    return lines


def write_plots(series: list[Series], table: pd.DataFrame, chosen: dict[str, list[str]], out: Path) -> list[Path]:
    """One PNG per metric, one panel per kernel, one line per series."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    compared = table[_compared(table) & table["size_B"].notna()]
    metrics = list(dict.fromkeys(m for ms in chosen.values() for m in ms))
    written = []
    for metric in metrics:
        kernels = [k for k, ms in chosen.items() if metric in ms]
        cols = min(2, len(kernels))
        rows = math.ceil(len(kernels) / cols)
        fig = Figure(figsize=(6.4 * cols, 4.6 * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax in axes[len(kernels) :]:
            ax.set_visible(False)
        for ax, kernel in zip(axes, kernels, strict=False):
            _panel(ax, series, compared[compared["kernel"] == kernel], kernel, metric)
        fig.suptitle(f"fabricbench compare: {_axis_label(metric, table)} vs message size", fontsize="large")
        path = out / f"{('latency_' if metric.startswith('lat_') else '') + short_name(metric)}.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


def _axis_label(metric: str, rows: pd.DataFrame) -> str:
    if metric in AXIS_LABELS:
        return AXIS_LABELS[metric]
    stat = short_name(metric)
    samples = set(rows["sample"].unique())
    what = LATENCY_AXIS[samples.pop()] if len(samples) == 1 and samples <= LATENCY_AXIS.keys() else "latency"
    return f"{what} {stat} (µs)"


def _panel(ax, series: list[Series], rows: pd.DataFrame, kernel: str, metric: str) -> None:
    from matplotlib import ticker

    drawn = rows.dropna(subset=[metric])
    positive = drawn.loc[drawn[metric] > 0, metric]
    log_y = metric.startswith("lat_") or (len(positive) > 0 and positive.max() / positive.min() >= 100)
    if log_y:
        drawn = drawn[drawn[metric] > 0]  # a log axis cannot show 0, e.g. the bandwidth of a 0-byte message
    for index, s in enumerate(series):
        mine = drawn[drawn["letter"] == s.letter].sort_values("size_B")
        if len(mine):
            ax.plot(
                mine["size_B"],
                mine[metric],
                color=f"C{index % 10}",  # a series keeps its colour and marker in every panel
                marker=MARKERS[index % len(MARKERS)],
                markersize=4,
                linewidth=2.2 if index == 0 else 1.6,
                label=f"{s.letter}: {s.name}" + (" (baseline)" if index == 0 else ""),
            )
    sizes = sorted(drawn["size_B"].unique())
    if sizes and sizes[0] == 0:
        ax.set_xscale("symlog", base=2, linthresh=1, linscale=1)
    else:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.FixedLocator(_size_ticks(sizes)))
    ax.xaxis.set_minor_locator(ticker.FixedLocator([2.0**e for e in _exponents(sizes)]))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda size, _: format_size(size)))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if log_y:
        ax.set_yscale("log")
        decades = math.log10(positive.max() / positive.min()) if len(positive) else 0
        subs = range(1, 10) if decades < 1.2 else (1, 2, 5) if decades < 3 else (1,)
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=[float(s) for s in subs]))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("message size")
    ax.set_ylabel(_axis_label(metric, rows))
    ax.set_title(kernel)
    ax.grid(True, which="major", alpha=0.5)
    ax.grid(True, which="minor", alpha=0.15)
    ax.legend(fontsize="small")


def _exponents(sizes: list[float]) -> range:
    positive = [s for s in sizes if s > 0]
    if not positive:
        return range(0)
    return range(math.floor(math.log2(min(positive))), math.ceil(math.log2(max(positive))) + 1)


def _size_ticks(sizes: list[float]) -> list[float]:
    """At most about seven labelled powers of two, at round steps so 1 KiB and 1 MiB show."""
    exponents = _exponents(sizes)
    step = next((s for s in (1, 2, 4, 5, 10) if len(exponents) / s <= 7), 10)
    ticks = [2.0**e for e in exponents if e % step == 0]
    if sizes and sizes[0] == 0:
        # 0 B sits one octave left of 1 B on the symlog axis: label only one of them when ticks are sparse
        return [0.0] + [t for t in ticks if t != 1 or step == 1]
    return ticks


def compare(paths: list[str], out: str | None = None, metric_names: list[str] | None = None) -> int:
    """The subcommand: print the comparison, and write CSV and PNGs when asked."""
    metrics = parse_metrics(metric_names)
    out_dir = prepare_out_dir(out) if out else None
    series, tidy, notes = split_series(paths)
    chosen = kernel_metrics(tidy, metrics)
    if not chosen:
        raise UsageError(f"no measured values for {', '.join(metrics)} in these inputs")
    used = list(dict.fromkeys(m for ms in chosen.values() for m in ms))
    table = comparison_table(tidy, used)
    print(report(series, table, chosen, notes), flush=True)
    if out_dir:
        table.to_csv(out_dir / "comparison.csv", index=False)
        plots = write_plots(series, table, chosen, out_dir)
        files = ", ".join(["comparison.csv", *(p.name for p in plots)])
        print(f"# wrote {files} in {out_dir}/", file=sys.stderr)
    return 0
