"""compare's all-pairs pictures: hosts in switch order, pooling by the worst pair, the slow parts placed, and the
switch x switch medians; no process, a real PNG."""

from __future__ import annotations

import warnings

import numpy as np

from fabricbench.analysis.heatmaps import PIXELS, _cell_text, _norm, _numbered, reduce_group, write_heatmaps
from fabricbench.measure.topology import parse_slurm, parse_toml
from fabricbench.measure.verdict import PairGroup

KEY = ("tcp", "pairs-bw", "isolated", 65536)
# Ranks 0..3 on hosts whose switches alternate: rank order is not switch order.
FABRIC = parse_slurm(
    "SwitchName=leaf1 Nodes=h0,h2\nSwitchName=leaf2 Nodes=h1,h3\nSwitchName=spine Switches=leaf[1-2]", "t"
)


def _group(count: int, figure, hosts=None) -> PairGroup:
    values = np.fromfunction(np.vectorize(figure), (count, count))
    np.fill_diagonal(values, np.nan)
    return PairGroup(KEY, np.arange(count), hosts or [f"h{i}" for i in range(count)], values)


def test_hosts_are_ordered_by_switch_and_each_pair_of_switches_has_its_median():
    drawn = reduce_group("A", _group(4, lambda s, d: 1000.0 if (s - d) % 2 else 2000.0), FABRIC)
    assert drawn.names == ["h0 (0)", "h2 (2)", "h1 (1)", "h3 (3)"] and drawn.pool == 1
    assert [(name, a, b) for name, a, b, _ in drawn.switches] == [("leaf1", 0, 2), ("leaf2", 2, 4)]
    np.testing.assert_array_equal(drawn.switch_medians, [[2000.0, 1000.0], [1000.0, 2000.0]])
    assert reduce_group("A", _group(4, lambda s, d: 1.0), None).switch_medians is None


def test_a_large_matrix_is_pooled_by_its_worst_pair_so_one_slow_pair_shows():
    count = 2 * PIXELS + 5
    group = _group(count, lambda s, d: 5.0 if (s, d) == (1000, 7) else 1000.0 + (s * 7 + d) % 13)
    drawn = reduce_group("A", group, None)
    assert drawn.pool == 3 and drawn.image.shape == (-(-count // 3),) * 2
    assert drawn.image[1000 // 3, 7 // 3] == 5.0 and np.nanmin(np.delete(drawn.image, 1000 // 3, 0)) >= 1000.0
    assert drawn.cells == [(1000, 7)]  # the verdict names the pair, placed in display order


def test_a_slow_uplink_is_its_switchs_band_and_a_slow_host_its_row(tmp_path):
    lines = [f"SwitchName=leaf{k} Nodes=h[{4 * k}-{4 * k + 3}]" for k in range(6)] + ["SwitchName=s Switches=leaf[0-5]"]
    fabric = parse_slurm("\n".join(lines), "t")

    def figure(s: int, d: int) -> float:
        crossing = (s // 4 == 2) != (d // 4 == 2)
        return 10.0 if crossing or 17 in (s, d) else (2000.0 if s // 4 == d // 4 else 1200.0) + (s + 3 * d) % 7

    drawn = reduce_group("A", _group(24, figure), fabric)
    assert drawn.bands == [(8, 12)] and drawn.slow_switches == [2] and drawn.rows == [17]
    written = write_heatmaps([("A", _group(24, figure), fabric)], tmp_path)
    assert [p.name for p in written] == ["heatmap_pairs-bw.png", "switches_pairs-bw.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_every_cell_has_one_form_of_figure():
    assert [_cell_text(v) for v in (1.234, 12.34, 799.4, 1490.0, 250000.0)] == [
        "1.23",
        "12.3",
        "799",
        "1,490",
        "250,000",
    ]


def test_a_slow_global_link_is_its_two_groups_block_in_both_pictures():
    text = "\n".join(
        f'[switches.s{k}]\nhosts = "h[{4 * k}-{4 * k + 3}]"\ngroup = "g{k // 2}"' for k in range(8)
    )  # four groups of two switches of four hosts
    fabric = parse_toml(text, "t.toml")

    def figure(s: int, d: int) -> float:
        base = 2000.0 if s // 4 == d // 4 else (1500.0 if s // 8 == d // 8 else 1000.0)
        return base / 2 if {s // 8, d // 8} == {0, 3} else base * (1 + 0.01 * ((s + 3 * d) % 5))

    drawn = reduce_group("A", _group(32, figure), fabric)
    assert drawn.blocks == [(0, 8, 24, 32), (24, 32, 0, 8)]
    assert drawn.switch_blocks == [(0, 2, 6, 8), (6, 8, 0, 2)]


def test_a_cells_figure_is_white_on_a_dark_cell_and_black_on_a_light_one():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    # Two slow pairs among ten near the top of the scale: those ten are all light, whatever the median says.
    values = np.array(
        [
            [np.nan, 12.0, 2100.0, 3100.0],
            [2260.0, np.nan, 12.0, 2270.0],
            [2300.0, 2140.0, np.nan, 2200.0],
            [2500.0, 2310.0, 2210.0, np.nan],
        ]
    )
    fig, ax = pyplot.subplots()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", norm=_norm(values))
    _numbered(ax, image, values)
    colours = {text.get_text(): text.get_color() for text in ax.texts}
    pyplot.close(fig)
    assert colours.pop("12") == "white" and len(colours) == 10
    assert set(colours.values()) == {"black"}


def test_control_characters_in_names_are_drawn_escaped_and_never_reach_the_terminal(tmp_path):
    """Raw, an ESC or a BEL in a host name had no glyph, and matplotlib's 'Glyph 27 (^[) missing' warning, with
    a source path, put the raw byte on the terminal."""
    hosts = ["h\x1b[31mred\x07", "h1", "h2\x1b]0;title\x07", "h3"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = write_heatmaps([("A\x1bZ", _group(4, lambda s, d: 1000.0, hosts), None)], tmp_path)
    assert len(written) == 1 and not [str(w.message) for w in caught if "Glyph" in str(w.message)]
    assert reduce_group("A", _group(4, lambda s, d: 1000.0, hosts), None).names[0] == "h\x1b[31mred\x07 (0)"
