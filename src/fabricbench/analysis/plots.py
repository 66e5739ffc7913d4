"""The plots of ``fabricbench compare``: one PNG per metric, one panel per kernel, one line per series.

matplotlib is imported here and nowhere else; compare imports this module only
when it writes plots.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from fabricbench.analysis.load import Series, comparable, shown_metrics
from fabricbench.measure.formatting import format_size, short_name

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


# The all-pairs heatmaps: the colour map per judged figure, dark where a pair is slow in both.
HEATMAP_COLOURS = {"bw_MBps": "viridis", "lat_p50_us": "viridis_r", "bw_GBps": "viridis"}
HEATMAP_LABELS = {"bw_MBps": "bandwidth (MB/s)", "lat_p50_us": "one-way latency p50 (µs)"}
HEATMAP_LABELS["bw_GBps"] = "copy bandwidth (GB/s, GB = 10⁹ B)"  # GPU pairs: hundreds of GB/s over NVLink
ANNOTATED_UP_TO = 16  # ranks on an axis up to which every cell shows its figure


def write_heatmaps(pairs: pd.DataFrame, out: Path, fabrics: dict | None = None) -> list[Path]:
    """One PNG per all-pairs kernel (``heatmap_pairs-bw.png``): a panel per (series, transport, schedule, size),
    sources down and destinations across, named by host and rank; slow pairs (fabricbench.measure.verdict) boxed in red.
    ``fabrics``: each series' Topology (or None): its hosts ordered by group and switch, lines between switches
    (thicker between groups) and the switches named, its verdict judged by tier.
    GPU pairs (cuda-copy ``peer``) get ``heatmap_peer.png``: a panel per (series, host, size), GPU by GPU."""
    from fabricbench.measure.verdict import METRICS

    written = []
    rows = pairs[comparable(pairs)].copy()
    gpu_rows = rows[rows["src_gpu"].notna()].copy()
    rows = rows[rows["src_rank"].notna()].copy()
    rows["src"] = pd.to_numeric(rows["src_rank"]).astype(int)
    rows["dst"] = pd.to_numeric(rows["dst_rank"]).astype(int)
    for kernel, of_kernel in rows.groupby("kernel", sort=False):
        if kernel not in METRICS:
            continue
        metric, _ = METRICS[kernel]
        groups = list(of_kernel.groupby(["series", "transport", "schedule", "size_B"], sort=False))
        fig, axes = _grid(len(groups), 5.4)
        for ax, ((series, transport, schedule, size), group) in zip(axes, groups, strict=False):
            fabric = (fabrics or {}).get(series)
            _box_slow_pairs(ax, group, _heatmap(fig, ax, group, metric, fabric=fabric), fabric)
            ax.set_title(f"{series}: {transport} {kernel}, {schedule}, {format_size(size)}", fontsize="medium")
        fig.suptitle("fabricbench all-pairs matrix: source (rows) to destination (columns)", fontsize="large")
        path = out / f"heatmap_{kernel}.png"
        fig.savefig(path, dpi=90)
        written.append(path)
    if len(gpu_rows):
        written.append(_gpu_heatmaps(gpu_rows, out))
    return written


def _gpu_heatmaps(rows: pd.DataFrame, out: Path) -> Path:
    """The NVLink/PCIe matrix: copy bandwidth between every ordered pair of one host's GPUs."""
    rows["src"] = pd.to_numeric(rows["src_gpu"]).astype(int)
    rows["dst"] = pd.to_numeric(rows["dst_gpu"]).astype(int)
    groups = list(rows.groupby(["series", "transport", "kernel", "src_host", "size_B"], sort=False))
    fig, axes = _grid(len(groups), 5.4)
    for ax, ((series, transport, kernel, host, size), group) in zip(axes, groups, strict=False):
        named = group.assign(
            src_host=[f"GPU {g}" for g in group["src"]],
            dst_host=[f"GPU {g}" for g in group["dst"]],
            bw_GBps=group["bw_MBps"] / 1000,
        )
        _heatmap(fig, ax, named, "bw_GBps", numbered=False)
        ax.set_title(f"{series}: {transport} {kernel} on {host}, {format_size(size)}", fontsize="medium")
    fig.suptitle("fabricbench GPU-pair copies: source (rows) to destination", fontsize="large")
    path = out / "heatmap_peer.png"
    fig.savefig(path, dpi=90)
    return path


def _heatmap(fig, ax, group: pd.DataFrame, metric: str, numbered: bool = True, fabric=None) -> dict:
    """One matrix: the median over repeats of each (source, destination), the diagonal left empty; the axes name
    each ``src``/``dst`` by its host column, with the number in brackets when ``numbered``; with a ``fabric``
    (Topology) in group, switch and rank order, with its switches marked (_switch_lines). Returns each source's
    or destination's place on the axes."""
    values = group.groupby(["src", "dst"])[metric].median()
    hosts = {int(r): h for r, h in zip(group["src"], group["src_host"], strict=True)}
    hosts.update({int(r): h for r, h in zip(group["dst"], group["dst_host"], strict=True)})
    ranks = sorted(set(group["src"]) | set(group["dst"]))
    if fabric is not None:
        ranks.sort(key=lambda r: (fabric.group_of(hosts[r]), fabric.switch_of(hosts[r]), r))
    place = {rank: i for i, rank in enumerate(ranks)}
    matrix = np.full((len(ranks), len(ranks)), np.nan)
    for (src, dst), value in values.items():
        matrix[place[src], place[dst]] = value
    image = ax.imshow(matrix, cmap=HEATMAP_COLOURS[metric], aspect="equal")
    fig.colorbar(image, ax=ax, shrink=0.8, label=HEATMAP_LABELS[metric])
    labels = [f"{hosts[r]} ({r})" if hosts.get(r) and numbered else hosts.get(r) or str(r) for r in ranks]
    ax.set_xticks(range(len(ranks)), labels, rotation=45, ha="right", fontsize="small")
    ax.set_yticks(range(len(ranks)), labels, fontsize="small")
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    if fabric is not None:
        _switch_lines(ax, [fabric.switch_of(hosts[r]) for r in ranks], [fabric.group_of(hosts[r]) for r in ranks])
    if len(ranks) <= ANNOTATED_UP_TO:
        finite = matrix[np.isfinite(matrix)]
        middle = float(np.median(finite)) if len(finite) else 0.0
        for (i, j), value in np.ndenumerate(matrix):
            if np.isfinite(value):
                dark = value < middle if metric.startswith("bw_") else value > middle
                text = f"{value:.3g}"
                ax.text(j, i, text, ha="center", va="center", fontsize="x-small", color="white" if dark else "black")
    return place


def _switch_lines(ax, switches: list[str], groups: list[str]) -> None:
    """Lines between the hosts of one switch and the next (thicker where the group changes too), and each switch's
    name beside its block of rows and above its block of columns."""
    starts = [i for i in range(len(switches)) if i == 0 or switches[i] != switches[i - 1]]
    for i in starts[1:]:
        width = 2.5 if groups[i] != groups[i - 1] else 1.0
        ax.axhline(i - 0.5, color="white", linewidth=width)
        ax.axvline(i - 0.5, color="white", linewidth=width)
    middles = [(start + end - 1) / 2 for start, end in zip(starts, [*starts[1:], len(switches)], strict=True)]
    names = [switches[start] for start in starts]
    top = ax.secondary_xaxis("top")
    top.set_xticks(middles, names, fontsize="small")
    top.tick_params(length=0)
    right = ax.secondary_yaxis("right")
    right.set_yticks(middles, names, fontsize="small", rotation=-90, va="center")
    right.tick_params(length=0)


def _box_slow_pairs(ax, group: pd.DataFrame, place: dict, fabric=None) -> None:
    """Red boxes round the pairs the all-pairs verdict (fabricbench.measure.verdict, by tier with a ``fabric``)
    calls slow, every pair of a slow host, and every pair a slow uplink explains; ``place``: each rank's place on
    the axes, as _heatmap drew them."""
    from fabricbench.measure.verdict import verdict

    pairs = set(zip(group["src"], group["dst"], strict=True))
    found = verdict(group.assign(src_rank=group["src"], dst_rank=group["dst"]).to_dict("records"), topology=fabric)
    slow = {tuple(d) for link in found["slow_links"] for d in link["directions"]}
    slow_hosts = {host["rank"] for host in found["slow_hosts"]}
    slow |= {(s, d) for s, d in pairs if s in slow_hosts or d in slow_hosts}
    if found.get("slow_uplinks"):
        hosts = dict(zip(group["src"], group["src_host"], strict=True)) | dict(
            zip(group["dst"], group["dst_host"], strict=True)
        )
        for uplink in found["slow_uplinks"]:
            slow |= {(s, d) for s, d in pairs if _crosses(uplink, fabric, hosts[s], hosts[d])}
    for src, dst in slow:
        if src in place and dst in place:
            corner = (place[dst] - 0.5, place[src] - 0.5)
            ax.add_patch(Rectangle(corner, 1, 1, fill=False, edgecolor="red", linewidth=2))


def _crosses(uplink: dict, fabric, src: str, dst: str) -> bool:
    """Whether a pair between hosts ``src`` and ``dst`` crosses the verdict's slow ``uplink`` (or global link)."""
    if "switch" in uplink:
        return (fabric.switch_of(src) == uplink["switch"]) != (fabric.switch_of(dst) == uplink["switch"])
    return {fabric.group_of(src), fabric.group_of(dst)} == set(uplink["groups"])


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
        ax.set_title(f"{series}: {transport}", fontsize="medium")
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
