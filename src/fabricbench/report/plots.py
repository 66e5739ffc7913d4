"""The plots of ``fabricbench compare``: one PNG per metric, one panel per kernel, one line per series.

matplotlib is imported here and nowhere else; compare imports this module only
when it writes plots.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fabricbench.report.compare import format_size, short_name, shown_metrics
from fabricbench.report.load import Series, comparable

# Axis labels; latency columns are built from the row's sample kind.
AXIS_LABELS = {
    "bw_MBps": "bandwidth (MB/s, MB = 10⁶ B)",
    "bw_peak_MBps": "peak bandwidth (MB/s, MB = 10⁶ B)",
    "msgrate_per_s": "message rate (messages/s)",
    "algbw_GBps": "algorithm bandwidth (GB/s, GB = 10⁹ B)",
    "busbw_GBps": "bus bandwidth (GB/s, GB = 10⁹ B)",
}
LATENCY_AXIS = {"rtt/2": "one-way latency", "window": "time per window", "op": "time per operation"}
MARKERS = "osD^vP*X"


def write_plots(series: list[Series], table: pd.DataFrame, chosen: dict[str, list[str]], out: Path) -> list[Path]:
    """One PNG per metric, one panel per kernel, one line per series."""
    compared = table[comparable(table) & table["size_B"].notna()]
    written = []
    for metric in shown_metrics(chosen):
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
