"""The all-pairs heatmap with a topology: hosts in switch order, lines between switches, switches named."""

from __future__ import annotations

import itertools

import pandas as pd

from fabricbench.analysis.plots import _heatmap, write_heatmaps
from fabricbench.measure.topology import parse_slurm

# Ranks 0..3 on hosts whose switches alternate: rank order is not switch order.
FABRIC = parse_slurm(
    "SwitchName=leaf1 Nodes=h0,h2\nSwitchName=leaf2 Nodes=h1,h3\nSwitchName=spine Switches=leaf[1-2]", "t"
)


def _pairs() -> pd.DataFrame:
    rows = [
        {"src": s, "dst": d, "src_host": f"h{s}", "dst_host": f"h{d}", "bw_MBps": 1000.0 if (s - d) % 2 else 2000.0}
        for s, d in itertools.permutations(range(4), 2)
    ]
    return pd.DataFrame(rows)


def test_hosts_are_ordered_by_switch_with_a_line_between_and_the_switches_named():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots()
    place = _heatmap(fig, ax, _pairs(), "bw_MBps", fabric=FABRIC)
    assert sorted(place, key=place.get) == [0, 2, 1, 3]
    # One horizontal and one vertical line (axis fraction 0 to 1) between the second and third host.
    assert [sorted({*line.get_xdata(), *line.get_ydata()}) for line in ax.lines] == [[0, 1, 1.5]] * 2
    names = [t.get_text() for child in ax.child_axes for t in child.get_xticklabels() + child.get_yticklabels()]
    assert names.count("leaf1") == 2 and names.count("leaf2") == 2
    fig, ax = plt.subplots()
    assert sorted(_heatmap(fig, ax, _pairs(), "bw_MBps")) == [0, 1, 2, 3] and not ax.child_axes
    plt.close("all")


def test_write_heatmaps_takes_each_series_fabric(tmp_path):
    rows = _pairs().rename(columns={"src": "src_rank", "dst": "dst_rank"})
    rows = rows.assign(series="A", transport="tcp", kernel="pairs-bw", schedule="isolated", size_B=65536)
    rows = rows.assign(status="ok", validation="off", src_gpu=float("nan"))
    (path,) = write_heatmaps(rows, tmp_path, {"A": FABRIC})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
