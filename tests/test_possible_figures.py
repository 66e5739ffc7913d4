"""Every figure is physically possible: on real mpiexec ranks, a bandwidth above what the link reports is refused.

No link on these machines reports a rate fabricbench trusts (loopback and shared memory are virtual), so the
test hook FABRICBENCH_TEST_LINK_MBPS stands in for a NIC that reports 1 MB/s: every bw and bibw figure of a
real run is then above it and must be refused, NaN and the note, while the rest of each row stands.
"""

from __future__ import annotations

import math

import pytest

from fabricbench.report import osu
from fabricbench.run.runner import LINK_HOOK
from support import fabricbench, mpiexec, read_rows

RUN = ["run", "-t", "tcp,mpi", "-k", "bw,bibw", "-m", "4K:16K", "-c", "-i", "20", "-x", "2", "-W", "8"]
RATES = ("bw_MBps", "bw_peak_MBps", "msgrate_per_s")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same sweep twice, with the hook's 1 MB/s link and without it: (console output, table) each."""
    root = tmp_path_factory.mktemp("possible")
    done = {}
    for name, env in (("slow link", {LINK_HOOK: "1"}), ("no rate", None)):
        out = root / name.replace(" ", "-")
        result = mpiexec(2, *RUN, "--timeout", "60", "--out", str(out), env=env, timeout=240)
        assert result.returncode == 0, result.stderr
        rows, _ = read_rows(out)
        done[name] = (result.stdout, rows, out)
    return done


def test_every_figure_above_the_link_is_refused_and_the_rest_of_the_row_stands(runs):
    stdout, rows, _ = runs["slow link"]
    measured = {(t, k) for t in ("tcp", "mpi") for k in ("bw", "bibw")}
    assert set(zip(rows.transport, rows.kernel, strict=True)) == measured
    assert len(rows) == 12 and (rows.status == "ok").all()
    # What was measured is kept: the window times, the counts, the check of the data.
    assert (rows.validation == "pass").all() and (rows.iterations == 20).all() and (rows.window == 8).all()
    assert (rows.lat_min_us > 0).all() and (rows.lat_p50_us >= rows.lat_min_us).all()
    for row in rows.itertuples():
        link = 2 if row.kernel == "bibw" else 1  # MB/s: bibw may use both directions
        for column in RATES:
            value = getattr(row, column)
            assert math.isnan(value) or value <= link, (row.transport, row.kernel, row.size_B, column, value)
        # 8 messages of 4 KiB or more a window on loopback or shared memory: far above 1 MB/s, all refused.
        assert math.isnan(row.bw_MBps) and math.isnan(row.msgrate_per_s)
        scope = "2 MB/s of 2 directions at the 1 MB/s" if row.kernel == "bibw" else "1 MB/s"
        assert f"refused: above the {scope} the link reports ({LINK_HOOK}); windows timed shorter" in row.note
        # bw's windows hold their bytes' transit, so its peak is a figure, here refused; bibw's do not: no peak.
        assert ("bw_peak_MBps" in row.note) == (row.kernel == "bw"), row.note
    # The console prints each row as it finishes: no figure, "-" in its place, and why in the note.
    printed = [line.split() for line in stdout.splitlines() if line.startswith(" ")]
    assert len(printed) == 12 and all(cells[2:5] == ["-", "-", "-"] and "refused:" in cells for cells in printed)
    assert stdout.count("(bw_peak_MBps ") == 6


def test_without_a_link_rate_nothing_is_refused(runs):
    _, rows, _ = runs["no rate"]
    assert len(rows) == 12 and (rows.validation == "pass").all()
    assert not rows.note.fillna("").str.contains("refused").any()
    assert (rows.bw_MBps > 0).all() and (rows.msgrate_per_s > 0).all()
    bw, bibw = rows[rows.kernel == "bw"], rows[rows.kernel == "bibw"]
    assert (bw.bw_peak_MBps >= bw.bw_MBps * 0.999).all()
    assert bibw.bw_peak_MBps.isna().all()  # osu_bibw's windows do not hold their transit: never a peak


def test_compare_and_the_osu_text_read_a_table_of_refused_figures(runs, tmp_path):
    (_, refused, slow), (_, _, plain) = runs["slow link"], runs["no rate"]
    metrics = ["--metric", "bw,bw_peak,msgrate,p50"]
    compared = fabricbench("compare", str(plain), str(slow), *metrics, "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    assert (tmp_path / "cmp" / "comparison.csv").exists() and list((tmp_path / "cmp").glob("*.png"))
    alone = fabricbench("compare", str(slow), *metrics)
    assert alone.returncode == 0, alone.stderr
    # OSU's layout has no cell for "refused": the number it cannot print is nan, and the line still comes out.
    lines = [osu.line(row) for row in refused.to_dict("records")]
    assert all(line.split()[1:] == ["nan"] for line in lines)
