"""The plots of ``fabricbench compare``: one PNG per metric, one panel per kernel, one line per series.

matplotlib is imported here and in analysis/heatmaps.py (the all-pairs pictures), and
nowhere else; compare imports them only when it writes plots.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fabricbench.analysis.load import Series, comparable, shown_metrics
from fabricbench.measure.formatting import format_size, short_name
from fabricbench.terminal import printable

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


def _grid(panels: int, height: float):
    """A figure of ``panels`` panels, two to a row, each 6.4 wide and ``height`` high; the axes in order, the
    spare ones hidden."""
    cols = min(2, panels)
    fig = Figure(figsize=(6.4 * cols, height * math.ceil(panels / cols)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(math.ceil(panels / cols), cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


def write_plots(series: list[Series], table: pd.DataFrame, chosen: dict[str, list[str]], out: Path) -> list[Path]:
    """One PNG per metric, one panel per kernel, one line per series."""
    compared = table[comparable(table) & table["size_B"].notna()]
    written = []
    for metric in shown_metrics(chosen):
        kernels = [k for k, ms in chosen.items() if metric in ms]
        fig, axes = _grid(len(kernels), 4.6)
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
    divided = rows["letter"] != rows["baseline"]
    bases = set(rows.loc[divided, "baseline"]) if divided.any() else {series[0].letter}
    for index, s in enumerate(series):
        mine = drawn[drawn["letter"] == s.letter].sort_values("size_B")
        if len(mine):
            ax.plot(
                mine["size_B"],
                mine[metric],
                color=f"C{index % 10}",  # a series keeps its colour and marker in every panel
                marker=MARKERS[index % len(MARKERS)],
                markersize=4,
                linewidth=2.2 if s.letter in bases else 1.6,
                label=f"{s.letter}: {printable(s.name)}" + (" (baseline)" if s.letter in bases else ""),
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


SCALING_SIZES = 4  # lines per series in a scaling panel: the sizes spread from the smallest to the largest


def write_scaling_plot(series: list[Series], tidy: pd.DataFrame, out: Path) -> Path:
    """run --ranks: time (p50) and bus bandwidth against the rank count, a row of panels per collective, a line
    per (series, size), medians over repeats."""
    from fabricbench.analysis.load import SCALING

    rows = tidy[comparable(tidy) & (tidy[SCALING] != "")].copy()
    rows["ranks"] = pd.to_numeric(rows["ranks"])
    keys = ["letter", SCALING, "ranks", "size_B"]
    medians = rows.groupby(keys)[["lat_p50_us", "busbw_GBps"]].median().reset_index()
    kernels = list(dict.fromkeys(rows[SCALING]))
    fig = Figure(figsize=(12.8, 4.6 * len(kernels)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(kernels), 2, squeeze=False)
    for (time_ax, bw_ax), kernel in zip(axes, kernels, strict=True):
        mine = medians[medians[SCALING] == kernel]
        sizes = sorted(mine["size_B"].unique())
        picked = sorted({sizes[round(i * (len(sizes) - 1) / max(SCALING_SIZES - 1, 1))] for i in range(SCALING_SIZES)})
        for index, s in enumerate(series):
            for shade, size in enumerate(picked):
                line = mine[(mine["letter"] == s.letter) & (mine["size_B"] == size)].sort_values("ranks")
                style = {
                    "color": f"C{shade % 10}",
                    "marker": MARKERS[index % len(MARKERS)],
                    "linestyle": ("-", "--", ":", "-.")[index % 4],
                    "label": f"{s.letter}: {format_size(size)}",
                }
                if line["lat_p50_us"].notna().any():
                    time_ax.plot(line["ranks"], line["lat_p50_us"], **style)
                if line["busbw_GBps"].notna().any():
                    bw_ax.plot(line["ranks"], line["busbw_GBps"], **style)
        counts = sorted(mine["ranks"].unique())
        for ax, label in ((time_ax, "time per operation p50 (µs)"), (bw_ax, AXIS_LABELS["busbw_GBps"])):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(ticker.FixedLocator(counts))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda n, _: f"{n:g}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xlabel("ranks")
            ax.set_ylabel(label)
            ax.set_title(kernel)
            ax.grid(True, alpha=0.4)
            if ax.lines:
                ax.legend(fontsize="small")
            else:
                ax.set_visible(False)  # barrier moves no data: no bus bandwidth
        time_ax.set_yscale("log")
        bandwidths = mine.loc[mine["busbw_GBps"] > 0, "busbw_GBps"]
        if len(bandwidths) and bandwidths.max() / bandwidths.min() >= 100:  # as the size plots: a log axis then
            bw_ax.set_yscale("log")
    fig.suptitle("fabricbench compare: scaling with the rank count (run --ranks)", fontsize="large")
    path = out / "scaling.png"
    fig.savefig(path, dpi=110)
    return path


def write_congestion_plot(rows: pd.DataFrame, out: Path) -> Path:
    """``congestion.png``: for each (series, transport), the congestion impact factor of every canary test under
    each congestor pattern as bars (the mean solid, the 99th percentile hatched; 1 is no effect), and beside it a
    panel per canary test with its isolated and congested figures: p50 to p99 as a line, the mean as a dot."""
    from fabricbench.measure.congestion import CANARY_TITLES, CANARY_UNITS, NONE

    rows = rows[comparable(rows)]
    groups = list(rows.groupby(["series", "transport"], sort=False))
    canaries = list(dict.fromkeys(rows["canary"]))
    cols = 1 + len(canaries)
    fig = Figure(figsize=(4.6 * cols, 4.2 * max(1, len(groups))), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(groups)), cols, squeeze=False)
    for line, ((series, transport), group) in zip(axes, groups, strict=False):
        congestors = [c for c in dict.fromkeys(group["congestor"]) if c != NONE]
        ax, width = line[0], 0.8 / max(1, len(congestors))
        for index, congestor in enumerate(congestors):
            of = group[group["congestor"] == congestor].set_index("canary").reindex(canaries)
            places = np.arange(len(canaries)) + (index - (len(congestors) - 1) / 2) * width
            bars = ax.bar(places, of["cif_mean"], width * 0.9, label=congestor)
            colour = bars.patches[0].get_facecolor() if bars.patches else None
            ax.bar(places, of["cif_p99"], width * 0.45, color="none", edgecolor=colour, hatch="///")
        ax.axhline(1.0, color="black", linewidth=0.8)
        factors = pd.concat([group["cif_mean"], group["cif_p99"]]).dropna()
        if len(factors) and factors.max() > 20 * max(factors.min(), 1e-9):  # a shaped link's 100x beside 1x
            ax.set_yscale("log")
        ax.set_xticks(range(len(canaries)), [CANARY_TITLES.get(c, c) for c in canaries], fontsize="small")
        ax.set_ylabel("congestion impact factor (x; hatched: 99th percentile)")
        ax.set_title(f"{printable(series)}: {transport}", fontsize="medium")
        if congestors:
            ax.legend(fontsize="small")
        for ax, canary in zip(line[1:], canaries, strict=True):
            of = group[group["canary"] == canary]
            order = [NONE, *congestors]
            of = of.set_index("congestor").reindex(order)
            if canary == "rr-bw":
                mean, p50, p99 = of["bw_MBps"], of["bw_p50_MBps"], of["bw_p99_MBps"]
            else:
                mean, p50, p99 = of["lat_mean_us"], of["lat_p50_us"], of["lat_p99_us"]
            places = np.arange(len(order))
            ax.vlines(places, p50, p99, linewidth=3, color="tab:blue", label="p50 to p99")
            ax.plot(places, mean, "o", color="tab:orange", label="mean")
            ax.set_xticks(places, ["isolated" if c == NONE else c for c in order], rotation=30, fontsize="small")
            ax.set_yscale("log")  # a congested tail is often orders of magnitude off the isolated figure
            unit = "MB/s, MB = 10⁶ B" if CANARY_UNITS.get(canary) == "MB/s" else "µs"
            ax.set_ylabel(f"{CANARY_TITLES.get(canary, canary)} ({unit})")
            ax.legend(fontsize="x-small")
    fig.suptitle("fabricbench congestion: canaries alone and beside each congestor pattern", fontsize="large")
    path = out / "congestion.png"
    fig.savefig(path, dpi=90)
    return path
