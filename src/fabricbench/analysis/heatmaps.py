"""The all-pairs pictures of ``compare --out``: each group's matrix at any size, and a switch x switch matrix.

A group of pair rows (measure.verdict.PairGroup) is drawn as an image, sources down and destinations across,
hosts in group, switch and rank order where the run's topology places them. Up to NUMBERED_UP_TO hosts each cell
shows its figure; up to NAMED_UP_TO each host is named; past that the axes name switches (or ranks), lines part
the switches and groups, and past PIXELS hosts a pixel holds a block of pairs, the worst of them (lowest
bandwidth, highest latency), so one slow pair among 10,000 hosts still shows. The colour scale is logarithmic:
a fabric at 0.01x beside its healthy pairs keeps both readable. What the verdict names is outlined in red: a slow
pair's cell, a slow host's row and column, a slow uplink's switch band, a slow global link's block. Beside it, with
a topology, the switch x switch matrix: the median of the pairs between two switches (the diagonal: within one),
readable at any size. Each matrix is reduced to what is drawn as it is read, so one is held at a time.

matplotlib is imported here and in analysis/plots.py, and nowhere else; compare imports them only when it writes
plots.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib import colors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from fabricbench.measure.formatting import format_size
from fabricbench.measure.topology import Topology
from fabricbench.measure.verdict import METRICS, PairGroup, verdict
from fabricbench.terminal import LINE, printable

NUMBERED_UP_TO = 16  # hosts on an axis up to which every cell shows its figure
NAMED_UP_TO = 64  # hosts on an axis up to which each is named
PIXELS = 800  # the most pixels a side of an image: past it a pixel holds the worst of a block of pairs
LABELS = 32  # the most switch (or rank) names on an axis past NAMED_UP_TO
SWITCH_LINES_UP_TO = 48  # switches up to which a line parts each from the next; past it only groups are parted
GROUP_LINES_UP_TO = 16  # groups up to which a line parts each from the next; past it the lines would hide the pairs
MARGIN = 1 / 150  # past NAMED_UP_TO an outline stands this share of the axis off what it marks, which stays in view
DARK_BELOW = 0.179  # a cell darker than this relative luminance takes white figures: their contrast is the higher
PANEL_INCHES = 7.5
DPI = 110
COLOURS = {"low": "viridis", "high": "viridis_r"}  # dark where a pair is slow: low bandwidth, high latency
LABEL = {"bw_MBps": "bandwidth (MB/s, MB = 10⁶ B)", "lat_p50_us": "one-way latency p50 (µs)"}
LABEL["bw_GBps"] = "copy bandwidth (GB/s, GB = 10⁹ B)"  # GPU pairs: hundreds of GB/s over NVLink


@dataclass
class Drawn:
    """One group reduced to what its panels show: the image (pooled ``pool`` hosts a pixel side) in display order,
    the hosts' names, their switches' spans, the verdict's slow parts as spans of the display, and with a topology
    the switch x switch medians."""

    title: str
    metric: str
    worse: str
    count: int
    pool: int
    image: np.ndarray
    names: list[str]
    switches: list[tuple[str, int, int, str]] = field(default_factory=list)  # (switch, first, end, group)
    cells: list[tuple[int, int]] = field(default_factory=list)  # slow pairs, (source, destination) in display order
    rows: list[int] = field(default_factory=list)  # slow hosts' places
    bands: list[tuple[int, int]] = field(default_factory=list)  # slow uplinks' switches' spans
    blocks: list[tuple[int, int, int, int]] = field(default_factory=list)  # slow global links' (rows, columns)
    switch_medians: np.ndarray | None = None
    slow_switches: list[int] = field(default_factory=list)
    switch_blocks: list[tuple[int, int, int, int]] = field(default_factory=list)  # slow global links, by switch


def _order(group: PairGroup, fabric: Topology | None) -> np.ndarray:
    """The display order of the group's ranks: by group, switch and rank where the topology places every host."""
    if fabric is None or not all(host in fabric.switch for host in group.hosts):
        return np.arange(len(group.ranks))
    keys = [(fabric.group_of(h), fabric.switch_of(h), rank) for h, rank in zip(group.hosts, group.ranks, strict=True)]
    return np.array(sorted(range(len(keys)), key=keys.__getitem__))


def _pooled(values: np.ndarray, order: np.ndarray, pool: int, worse: str) -> np.ndarray:
    """The matrix in display order, each pool x pool block its worst pair (NaN only where none was measured);
    read a band of rows at a time, so no reordered copy of the whole matrix is made."""
    worst = np.fmin if worse == "low" else np.fmax  # NaN-blind: a block's measured pairs decide it
    count = len(order)
    starts = np.arange(0, count, pool)
    image = np.empty((len(starts), len(starts)))
    for band, first in enumerate(starts):
        rows = values[order[first : first + pool]][:, order]
        image[band] = worst.reduceat(worst.reduce(rows, axis=0), starts)
    return image


def _switch_medians(values: np.ndarray, order: np.ndarray, spans: list[tuple[str, int, int, str]]) -> np.ndarray:
    """The median of the measured pairs between each two switches (the diagonal: within one), NaN for none."""
    medians = np.full((len(spans), len(spans)), math.nan)
    for i, (_, first, end, _) in enumerate(spans):
        rows = values[order[first:end]][:, order]
        for j, (_, start, stop, _) in enumerate(spans):
            block = rows[:, start:stop]
            measured = block[~np.isnan(block)]
            if measured.size:
                medians[i, j] = np.median(measured)
    return medians


def reduce_group(series: str, group: PairGroup, fabric: Topology | None) -> Drawn:
    """What the panels of one group show, and its verdict's slow parts placed on them."""
    transport, kernel, schedule, size = group.key
    metric, worse = METRICS[kernel]
    order = _order(group, fabric)
    count = len(order)
    pool = max(1, math.ceil(count / PIXELS))
    hosts = [group.hosts[i] for i in order]
    ranks = [int(group.ranks[i]) for i in order]
    named = [f"{host} ({rank})" if host else str(rank) for host, rank in zip(hosts, ranks, strict=True)]
    title = f"{series}: {transport} {kernel}, {schedule}, {format_size(size)}"
    drawn = Drawn(title, metric, worse, count, pool, _pooled(group.values, order, pool, worse), named)
    if fabric is not None and all(host in fabric.switch for host in hosts):
        switches = [fabric.switch_of(host) for host in hosts]
        starts = [i for i in range(count) if i == 0 or switches[i] != switches[i - 1]]
        ends = [*starts[1:], count]
        drawn.switches = [(switches[a], a, b, fabric.group_of(hosts[a])) for a, b in zip(starts, ends, strict=True)]
        drawn.switch_medians = _switch_medians(group.values, order, drawn.switches)
    _place_slow(drawn, group, order, fabric)
    return drawn


def _place_slow(drawn: Drawn, group: PairGroup, order: np.ndarray, fabric: Topology | None) -> None:
    """The verdict's slow pairs, hosts, uplinks and global links, as places on the display."""
    found = verdict([group], topology=fabric if drawn.switches else None)
    place = {int(group.ranks[index]): at for at, index in enumerate(order.tolist())}
    drawn.cells = [(place[s], place[d]) for link in found["slow_links"] for s, d in link["directions"]]
    drawn.rows = [place[host["rank"]] for host in found["slow_hosts"]]
    span = {name: (first, end) for name, first, end, _ in drawn.switches}
    groups: dict[str, tuple[int, int]] = {}  # each group's span of hosts
    by_switch: dict[str, tuple[int, int]] = {}  # and of switches
    for number, (_, first, end, name) in enumerate(drawn.switches):
        low, high = groups.get(name, (first, end))
        groups[name] = (min(low, first), max(high, end))
        low, high = by_switch.get(name, (number, number + 1))
        by_switch[name] = (min(low, number), max(high, number + 1))
    for uplink in found.get("slow_uplinks", []):
        if "switch" in uplink:
            drawn.bands.append(span[uplink["switch"]])
            drawn.slow_switches.append([s[0] for s in drawn.switches].index(uplink["switch"]))
        else:
            (a, b), (c, d) = (groups[g] for g in uplink["groups"])
            drawn.blocks += [(a, b, c, d), (c, d, a, b)]
            (a, b), (c, d) = (by_switch[g] for g in uplink["groups"])
            drawn.switch_blocks += [(a, b, c, d), (c, d, a, b)]


def _norm(image: np.ndarray) -> colors.LogNorm | None:
    """A log scale over the figures of one panel (None where nothing positive was measured)."""
    positive = image[np.isfinite(image) & (image > 0)]
    if not positive.size:
        return None
    low, high = float(positive.min()), float(positive.max())
    return colors.LogNorm(low, high if high > low else low * 1.01)


def _cell_text(value: float) -> str:
    """A cell's figure, one form for all: 12.3, 799, 1,490."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _ticks(ax, places: list[float], labels: list[str], rotate: bool) -> None:
    labels = _shown(labels)
    ax.set_xticks(places, labels, rotation=45 if rotate else 0, ha="right" if rotate else "center", fontsize="small")
    ax.set_yticks(places, labels, fontsize="small")


def _shown(names: list[str]) -> list[str]:
    """Host, switch and run names as drawn: with their control characters escaped (terminal.printable), as the
    console shows them: a raw control character has no glyph, and matplotlib would warn with it on the terminal."""
    return [printable(name) for name in names]


def _draw_matrix(fig, ax, drawn: Drawn) -> None:
    """The pairs' image with its names, switch lines and the slow parts outlined."""
    count = drawn.count
    norm = _norm(drawn.image)
    image = ax.imshow(
        np.ma.masked_invalid(drawn.image),
        cmap=COLOURS[drawn.worse],
        norm=norm,
        interpolation="nearest",
        extent=(-0.5, count - 0.5, count - 0.5, -0.5),
    )
    label = LABEL[drawn.metric] + (f", worst of {drawn.pool} x {drawn.pool} pairs a pixel" if drawn.pool > 1 else "")
    fig.colorbar(image, ax=ax, shrink=0.8, label=label)
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    if count <= NAMED_UP_TO:
        _ticks(ax, list(range(count)), drawn.names, rotate=True)
        if drawn.switches:  # and each switch beside its block: above the columns, right of the rows
            middles = [(a + b - 1) / 2 for _, a, b, _ in drawn.switches]
            names = _shown([name for name, *_ in drawn.switches])
            top, right = ax.secondary_xaxis("top"), ax.secondary_yaxis("right")
            top.set_xticks(middles, names, fontsize="small")
            right.set_yticks(middles, names, fontsize="small", rotation=-90, va="center")
            top.tick_params(length=0)
            right.tick_params(length=0)
    elif drawn.switches:
        step = math.ceil(len(drawn.switches) / LABELS)
        chosen = drawn.switches[::step]
        _ticks(ax, [(a + b - 1) / 2 for _, a, b, _ in chosen], [name for name, *_ in chosen], rotate=True)
    else:
        places = np.linspace(0, count - 1, min(LABELS, count)).round().astype(int).tolist()
        _ticks(ax, places, [f"rank {drawn.names[p].rsplit('(', 1)[-1].rstrip(')')}" for p in places], rotate=True)
    parts = len(drawn.switches) <= SWITCH_LINES_UP_TO
    groups = len({group for *_, group in drawn.switches}) <= GROUP_LINES_UP_TO
    for (_, start, _, group), (_, _, _, before) in zip(drawn.switches[1:], drawn.switches, strict=False):
        if parts or (groups and group != before):
            width = 1.6 if group != before else 0.6
            ax.axhline(start - 0.5, color="white", linewidth=width)
            ax.axvline(start - 0.5, color="white", linewidth=width)
    if count <= NUMBERED_UP_TO:
        _numbered(ax, image, drawn.image)
    _outline(ax, drawn)


def _numbered(ax, image, values: np.ndarray) -> None:
    """Each measured cell's figure, white on a dark cell and black on a light one, as the cell's own colour in
    ``image`` (the drawn AxesImage) is: its relative luminance, the contrast measure of WCAG."""
    shown = np.isfinite(values)
    cells = np.asarray(image.to_rgba(np.where(shown, values, np.nan)))[..., :3]
    linear = np.where(cells <= 0.04045, cells / 12.92, ((cells + 0.055) / 1.055) ** 2.4)
    luminance = linear @ np.array([0.2126, 0.7152, 0.0722])
    for (i, j), value in np.ndenumerate(values):
        if shown[i, j]:
            ax.text(
                j,
                i,
                _cell_text(value),
                ha="center",
                va="center",
                fontsize="x-small",
                color="white" if luminance[i, j] < DARK_BELOW else "black",
            )


def _boxed(ax, slow: np.ndarray) -> None:
    """A red box round each cell of a small matrix that ``slow`` marks."""
    for src, dst in zip(*np.nonzero(slow), strict=True):
        ax.add_patch(Rectangle((dst - 0.5, src - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))


def _outline(ax, drawn: Drawn) -> None:
    """Red outlines round the slow parts: a cell for a slow pair (a ring where cells are smaller than it), a row
    and a column for a slow host, a switch's band of rows and columns for its slow uplink, a block for a slow
    global link."""
    count = drawn.count
    if count <= NAMED_UP_TO:  # a box round each slow cell: every pair of a slow host or across a slow uplink
        slow = np.zeros((count, count), dtype=bool)
        for src, dst in drawn.cells:
            slow[src, dst] = True
        slow[drawn.rows, :] = slow[:, drawn.rows] = True
        for first, end in drawn.bands:
            inside = np.zeros(count, dtype=bool)
            inside[first:end] = True
            slow |= inside[:, None] != inside[None, :]
        for a, b, c, d in drawn.blocks:
            slow[a:b, c:d] = True
        np.fill_diagonal(slow, False)
        _boxed(ax, slow)
        return
    for src, dst in drawn.cells:
        ax.plot(dst, src, "o", markersize=7, markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.6)
    _bands(ax, [(at, at + 1) for at in drawn.rows] + list(drawn.bands), count)
    _blocks(ax, drawn.blocks, count)
    ax.set_xlim(-0.5, count - 0.5)
    ax.set_ylim(count - 0.5, -0.5)


def _blocks(ax, blocks: list[tuple[int, int, int, int]], count: int) -> None:
    """Outline each block of rows a:b and columns c:d (a slow global link's pairs), MARGIN off it."""
    pad = count * MARGIN
    red = {"fill": False, "edgecolor": "red", "linewidth": 1.2}
    for a, b, c, d in blocks:
        ax.add_patch(Rectangle((c - 0.5 - pad, a - 0.5 - pad), d - c + 2 * pad, b - a + 2 * pad, **red))


def _bands(ax, spans: list[tuple[int, int]], count: int) -> None:
    """Outline each span's rows and its columns (a slow host's, a slow uplink's switch's), MARGIN off them so that
    the band itself, a pixel or two wide on a large matrix, stays in view."""
    pad = count * MARGIN
    red = {"fill": False, "edgecolor": "red", "linewidth": 1.2}
    for first, end in spans:
        ax.add_patch(Rectangle((-0.5, first - 0.5 - pad), count, end - first + 2 * pad, **red))
        ax.add_patch(Rectangle((first - 0.5 - pad, -0.5), end - first + 2 * pad, count, **red))


def _draw_switches(fig, ax, drawn: Drawn) -> None:
    """The switch x switch medians, each switch named (or one in so many past LABELS), slow uplinks outlined."""
    medians = drawn.switch_medians
    count = len(medians)
    image = ax.imshow(
        np.ma.masked_invalid(medians), cmap=COLOURS[drawn.worse], norm=_norm(medians), interpolation="nearest"
    )
    fig.colorbar(image, ax=ax, shrink=0.8, label=f"median {LABEL[drawn.metric]}")
    names = [name for name, *_ in drawn.switches]
    step = math.ceil(count / LABELS)
    _ticks(ax, list(range(0, count, step)), names[::step], rotate=True)
    ax.set_xlabel("destination switch")
    ax.set_ylabel("source switch")
    if count <= NUMBERED_UP_TO:
        _numbered(ax, image, medians)
    slow = np.zeros(count, dtype=bool)
    slow[drawn.slow_switches] = True
    if count <= NAMED_UP_TO:  # the cells across a slow uplink (its switch with every other), or a global link
        cells = slow[:, None] != slow[None, :]
        for a, b, c, d in drawn.switch_blocks:
            cells[a:b, c:d] = True
        _boxed(ax, cells)
        return
    _bands(ax, [(at, at + 1) for at in drawn.slow_switches], count)
    _blocks(ax, drawn.switch_blocks, count)
    ax.set_xlim(-0.5, count - 0.5)
    ax.set_ylim(count - 0.5, -0.5)


def _figure(panels: int):
    cols = min(2, panels)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(PANEL_INCHES * cols, (PANEL_INCHES - 0.8) * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


def write_heatmaps(groups: Iterable[tuple[str, PairGroup, Topology | None]], out: Path) -> list[Path]:
    """``heatmap_KERNEL.png`` per all-pairs kernel, a panel per (series, transport, schedule, size) group, and with
    a topology ``switches_KERNEL.png`` beside it, its switch x switch matrices; ``groups``: (series name, group,
    the series' topology or None), read one at a time."""
    by_kernel: dict[str, list[Drawn]] = {}
    for series, group, fabric in groups:
        by_kernel.setdefault(group.key[1], []).append(reduce_group(series, group, fabric))
    written = []
    for kernel, drawn in by_kernel.items():
        fig, axes = _figure(len(drawn))
        for ax, each in zip(axes, drawn, strict=False):
            _draw_matrix(fig, ax, each)
            ax.set_title(printable(f"{each.title}: {each.count:,} hosts", LINE), fontsize="medium")
        fig.suptitle("fabricbench all-pairs matrix: source (rows) to destination (columns)", fontsize="large")
        path = out / f"heatmap_{kernel}.png"
        fig.savefig(path, dpi=DPI)
        written.append(path)
        switched = [each for each in drawn if each.switch_medians is not None]
        if switched:
            fig, axes = _figure(len(switched))
            for ax, each in zip(axes, switched, strict=False):
                _draw_switches(fig, ax, each)
                ax.set_title(printable(f"{each.title}: {len(each.switches):,} switches", LINE), fontsize="medium")
            fig.suptitle("fabricbench switch x switch: median of the pairs between two switches", fontsize="large")
            path = out / f"switches_{kernel}.png"
            fig.savefig(path, dpi=DPI)
            written.append(path)
    return written


def write_gpu_heatmap(rows, out: Path) -> Path:
    """``heatmap_peer.png``: the NVLink/PCIe matrix of cuda-copy's peer rows (a DataFrame), copy bandwidth between
    every ordered pair of one host's GPUs, a panel per (series, transport, kernel, host, size)."""
    keys = ["series", "transport", "kernel", "src_host", "size_B"]
    panels = []
    for (series, transport, kernel, host, size), group in rows.groupby(keys, sort=False):
        src, dst = group["src_gpu"].astype(int).to_numpy(), group["dst_gpu"].astype(int).to_numpy()
        gpus = np.unique(np.concatenate([src, dst]))
        values = np.full((len(gpus), len(gpus)), math.nan)
        values[np.searchsorted(gpus, src), np.searchsorted(gpus, dst)] = group["bw_MBps"].to_numpy() / 1000
        title = f"{series}: {transport} {kernel} on {host}, {format_size(size)}"
        panels.append(Drawn(title, "bw_GBps", "low", len(gpus), 1, values, [f"GPU {g}" for g in gpus]))
    fig, axes = _figure(len(panels))
    for ax, each in zip(axes, panels, strict=False):
        _draw_matrix(fig, ax, each)
        ax.set_title(printable(each.title, LINE), fontsize="medium")
    fig.suptitle("fabricbench GPU-pair copies: source (rows) to destination", fontsize="large")
    path = out / "heatmap_peer.png"
    fig.savefig(path, dpi=DPI)
    return path
