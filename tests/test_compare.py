"""`fabricbench compare` on real runs: ratios, the overlap, the tidy CSV, the plots, schemas, bad input."""

from __future__ import annotations

import json
import re
import struct
import subprocess

import pandas as pd
import pytest

from fabricbench.measure.schema import SCHEMA_VERSION
from support import PYTHON, REPO, fabricbench, read_rows

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
OVERLAP = [64, 128, 256, 512, 1024]


def _size(text: str) -> int:
    number, unit = text.split()
    return int(float(number) * UNITS[unit])


def _blocks(stdout: str) -> dict[str, tuple[str, list[dict[str, str]]]]:
    """Block name -> (its title line, rows as {column title: cell}) from the console comparison. A block is named by
    its title without the parenthesis: the kernel ("latency"), with the letters of its group where a kernel has
    several baselines ("latency: A, C") and the metrics of its part where it was cut to fit ("... [p50]"). Cells
    are read by the header's right-aligned columns, so a cell may hold a space ("not significant")."""
    blocks, lines = {}, stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#     size"):
            name = re.sub(r" \(.*\)", "", lines[i - 1].removeprefix("# "))
            spans = [(m.group(), m.end()) for m in re.finditer(r"\S+(?: \S+)*", " " + line[1:])]
            rows = []
            for data in lines[i + 1 :]:
                if not data.strip() or data.startswith("#"):
                    break
                starts = [0] + [end for _, end in spans[:-1]]
                rows.append({t: data[a:end].strip() for (t, end), a in zip(spans, starts, strict=True)})
            blocks[name] = (lines[i - 1], rows)
    return blocks


def _close(printed: str, expected: float) -> bool:
    """The printed number is ``expected`` rounded to the digits it shows."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed) - expected) <= 0.5 * 10**-decimals + 1e-12


def _p50(table: pd.DataFrame, kernel: str, column: str = "lat_p50_us") -> dict[int, float]:
    rows = table[(table.kernel == kernel) & (table.status == "ok")]
    return dict(zip(rows.size_B.astype(int), rows[column], strict=True))


@pytest.fixture(scope="module")
def compared(finished_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    result = fabricbench("compare", str(finished_runs["a"]), str(finished_runs["b"]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return result, out


def test_console_ratios_are_b_over_a_from_the_two_tables(finished_runs, compared):
    result, _ = compared
    a, _ = read_rows(finished_runs["a"])
    b, meta_b = read_rows(finished_runs["b"])
    lines = result.stdout.splitlines()
    assert "A is the baseline, ratios are X/A for X in B" in lines[0]
    assert lines[1].startswith("#   A = fabric-a: mpi from ")
    # B has no label: its run id names it.
    assert any(line.startswith(f"#   B = {meta_b['run_id']}: mpi from ") for line in lines[2:4])
    blocks = _blocks(result.stdout)
    assert set(blocks) == {"latency", "bw"}
    for kernel, metrics in (
        ("latency", [("p50 us", "p50", "lat_p50_us")]),
        ("bw", [("p50 us", "p50", "lat_p50_us"), ("bw MB/s", "bw", "bw_MBps")]),
    ):
        _, rows = blocks[kernel]
        # Only the sizes both runs measured are side by side.
        assert [_size(row["size"]) for row in rows] == OVERLAP
        for unit, short, column in metrics:
            values_a, values_b = _p50(a, kernel, column), _p50(b, kernel, column)
            for row in rows:
                size = _size(row["size"])
                assert _close(row[f"A {unit}"], values_a[size]), (kernel, size, row)
                assert _close(row[f"B {unit}"], values_b[size]), (kernel, size, row)
                assert _close(row[f"B/A {short}"], values_b[size] / values_a[size]), (kernel, size, row)


def test_sizes_only_one_run_holds_are_listed(finished_runs, compared):
    result, _ = compared
    _, meta_b = read_rows(finished_runs["b"])
    assert "# only in A (fabric-a): latency 1 B-32 B (6 sizes); bw 1 B-32 B (6 sizes)" in result.stdout
    assert f"# only in B ({meta_b['run_id']}): latency 2 KiB-4 KiB (2 sizes); bw 2 KiB-4 KiB (2 sizes)" in (
        result.stdout
    )


def test_comparison_csv_is_tidy_with_ratios(finished_runs, compared):
    _, out = compared
    a, _ = read_rows(finished_runs["a"])
    b, meta_b = read_rows(finished_runs["b"])
    table = pd.read_csv(out / "comparison.csv")
    for column in (
        "kernel",
        "size_B",
        "series",
        "letter",
        "baseline",
        "transport",
        "run_id",
        "lat_p50_us",
        "bw_MBps",
        "lat_p50_us_ratio",
        "bw_MBps_ratio",
    ):
        assert column in table.columns, column
    # Every measured row of both runs is there, once.
    assert len(table) == len(a) + len(b)
    assert not table.duplicated(["kernel", "size_B", "letter"]).any()
    assert set(table.series) == {"fabric-a", meta_b["run_id"]}
    assert (table.baseline == "A").all()
    mine = table[table.letter == "B"].set_index(["kernel", "size_B"])
    for kernel in ("latency", "bw"):
        values_a, values_b = _p50(a, kernel), _p50(b, kernel)
        for size, value_b in values_b.items():
            ratio = mine.loc[(kernel, size), "lat_p50_us_ratio"]
            if size in values_a:
                assert ratio == pytest.approx(value_b / values_a[size], rel=1e-9)
            else:
                assert pd.isna(ratio)
    bw_a, bw_b = _p50(a, "bw", "bw_MBps"), _p50(b, "bw", "bw_MBps")
    assert mine.loc[("bw", 512), "bw_MBps_ratio"] == pytest.approx(bw_b[512] / bw_a[512], rel=1e-9)
    assert (table[table.letter == "A"].lat_p50_us_ratio == 1.0).all()
    assert table[table.kernel == "latency"].bw_MBps.isna().all()


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plots_are_real_pngs_with_something_drawn(compared):
    _, out = compared
    import matplotlib.image

    for name in ("latency_p50.png", "bw.png"):
        path = out / name
        assert path.stat().st_size > 20_000, name
        width, height = _png_size(path)
        assert width >= 600 and height >= 400, (name, width, height)
        pixels = matplotlib.image.imread(path)
        # Not a blank canvas: many distinct colours (lines of two series, text, grid).
        assert len(pd.unique(pixels.reshape(-1, pixels.shape[-1]).sum(axis=1).round(3))) > 20
    assert not (out / "busbw.png").exists()  # no collective in either run


def test_one_run_with_two_transports_is_two_series_and_unsupported_rows_are_listed(finished_runs, tmp_path):
    result = fabricbench("compare", str(finished_runs["mixed"]), str(finished_runs["a"]), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "#   A = mixed (mpi): mpi from " in result.stdout
    assert "#   B = mixed (mpi-rma): mpi-rma from " in result.stdout
    assert "#   C = fabric-a (mpi): mpi from " in result.stdout
    blocks = _blocks(result.stdout)
    _, rows = blocks["latency"]
    assert [_size(row["size"]) for row in rows] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert "C/A p50" in rows[0]
    # bw: only in C, so there is nothing to compare it with; put only in B.
    assert "bw" not in blocks and "put" not in blocks
    assert "# only in B (mixed (mpi-rma)): put 1 B-256 B (9 sizes)" in result.stdout
    assert "# only in C (fabric-a (mpi)): latency 512 B-1 KiB (2 sizes); bw 1 B-1 KiB (11 sizes)" in result.stdout
    assert "# not compared, A (mixed (mpi)): put all sizes: unsupported: mpi has no put kernel" in result.stdout
    assert "# not compared, B (mixed (mpi-rma)): latency all sizes: unsupported:" in result.stdout
    table = pd.read_csv(tmp_path / "comparison.csv", keep_default_na=False, na_values=[""])
    unsupported = table[table.status.str.startswith("unsupported")]
    assert set(zip(unsupported.letter, unsupported.kernel, strict=True)) == {("A", "put"), ("B", "latency")}
    assert (table[table.kernel == "put"].baseline == "B").all()


def test_chosen_metrics_and_a_concatenated_table_split_by_run(finished_runs, tmp_path):
    """Two runs in one CSV (a's rows twice) are two series; the repeated rows are said, not doubled."""
    a, b = (pd.read_csv(finished_runs[name] / "results.csv") for name in ("a", "b"))
    joined = tmp_path / "joined.csv"
    pd.concat([a, a, b]).to_csv(joined, index=False)
    result = fabricbench("compare", str(joined), "--metric", "p99,bw_MBps")
    assert result.returncode == 0, result.stderr
    assert "#   A = fabric-a: mpi from " in result.stdout and "#   B = " in result.stdout
    assert f"# note: A holds {len(a)} repeated (kernel, size) rows; the last of each is used" in result.stdout
    blocks = _blocks(result.stdout)
    _, rows = blocks["bw"]
    assert {"A p99 us", "B p99 us", "B/A p99", "A bw MB/s", "B bw MB/s", "B/A bw"} <= set(rows[0])
    assert "A p50 us" not in rows[0]


def test_two_runs_of_two_transports_compare_transport_with_transport_in_120_columns(tmp_path):
    """Run two's mpi is divided by run one's mpi and its tcp by run one's tcp (never tcp by mpi), with repeats and
    two metrics, every console line within 120 columns."""
    runs = []
    for name in ("one", "two"):
        out = tmp_path / name
        args = ["-t", "mpi,tcp", "-k", "latency", "-m", "8:64", "--repeat", "3", "--label", name]
        result = fabricbench("run", *args, "-i", "20", "-x", "2", "--format", "none", "--out", str(out))
        assert result.returncode == 0, result.stderr
        runs.append(read_rows(out)[0])
    result = fabricbench("compare", str(tmp_path / "one"), str(tmp_path / "two"), "--metric", "p50,p99")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    fitted = [line for line in lines if str(tmp_path) not in line]  # the legend names the inputs as given
    assert max(len(line) for line in fitted) <= 120, max(fitted, key=len)
    assert "#   A = one (mpi): mpi from " in result.stdout and "#   D = two (tcp): tcp from " in result.stdout
    assert "# ratios: C/A, D/B" in lines
    blocks = _blocks(result.stdout)
    assert set(blocks) == {f"latency: {group} [{m}]" for group in ("A, C", "B, D") for m in ("p50", "p99")}
    for group, transport, base, other in (("A, C", "mpi", "A", "C"), ("B, D", "tcp", "B", "D")):
        title, rows = blocks[f"latency: {group} [p50]"]
        assert f"({transport}; " in title
        one, two = (r[(r.transport == transport) & (r.status == "ok")] for r in runs)
        for row in rows:
            size = _size(row["size"])
            medians = [r[r.size_B == size].lat_p50_us.median() for r in (one, two)]
            assert _close(row[f"{other}/{base} p50"], medians[1] / medians[0]), (group, row)
            assert row[f"{other}/{base}"] in ("significant", "not significant"), row
    assert not any(f"/{x}" in line for line in lines for x in "CD")  # nothing is divided by run two


def test_an_option_between_the_runs_is_accepted_and_a_stray_option_is_refused(finished_runs, tmp_path):
    a, b = str(finished_runs["a"]), str(finished_runs["b"])
    between = fabricbench("compare", a, "--out", str(tmp_path), b)
    assert between.returncode == 0, between.stderr
    assert "#   A = fabric-a" in between.stdout and "#   B = " in between.stdout
    assert (tmp_path / "comparison.csv").exists()
    stray = fabricbench("compare", a, "--frobnicate", b)
    assert stray.returncode == 2
    assert "unrecognized arguments: --frobnicate" in stray.stderr and "Traceback" not in stray.stderr


def test_compare_needs_no_mpi(finished_runs, tmp_path):
    """Rank-free: with mpi4py made unimportable, compare still works, and the CLI imports no pandas."""
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import fabricbench.cli as cli\n"
        "assert 'pandas' not in sys.modules and 'matplotlib' not in sys.modules\n"
        f"rc = cli.main(['compare', {str(finished_runs['a'])!r}, {str(finished_runs['b'])!r}, '--out', "
        f"{str(tmp_path)!r}])\n"
        "assert rc == 0 and sys.modules['mpi4py'] is None\n"
    )
    result = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "comparison.csv").exists()


def test_runs_record_the_schema_version_and_read_without_migration(finished_runs, compared):
    result, _ = compared
    metadata = json.loads((finished_runs["a"] / "metadata.json").read_text())
    assert metadata["schema_version"] == SCHEMA_VERSION
    assert "os_release" in metadata and "kernel" not in metadata
    import pyarrow.parquet as pq

    schema = pq.read_schema(finished_runs["a"] / "results.parquet")
    assert json.loads(schema.metadata[b"fabricbench"])["schema_version"] == SCHEMA_VERSION
    assert "# note:" not in result.stdout


def test_the_shipped_example_written_before_schema_version_still_compares():
    example = "results/examples/default-sweep"
    result = fabricbench("compare", example, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith((REPO / "results/examples/default-sweep-compare/compare.txt").read_text())
    note = f"# note: {example}: read as schema 1 (it has no schema_version); migrated to {SCHEMA_VERSION}\n"
    assert result.stdout.endswith(note)


def _bad_inputs(root, run_a, run_b) -> dict[str, tuple[list[str], str]]:
    """Each case: the compare arguments (a good run beside the bad input) and the error it must name."""
    (root / "empty.csv").write_bytes(b"")
    (root / "header-only.csv").write_text((run_a / "results.csv").read_text().splitlines()[0] + "\n")
    (root / "not-a-table.csv").write_text("hello,world\n1,2\n")
    (root / "binary.csv").write_bytes(bytes(range(256)) * 4)
    (root / "broken.parquet").write_bytes((run_a / "results.parquet").read_bytes()[:300])
    (root / "no-results").mkdir()
    (root / "no-results" / "metadata.json").write_text((run_a / "metadata.json").read_text())
    metadata = json.loads((run_a / "metadata.json").read_text())
    for name, changed in (("newer", {"schema_version": SCHEMA_VERSION + 1}), ("hosts", {"hosts": 5}), ("list", None)):
        (root / name).mkdir()
        (root / name / "results.csv").write_text((run_a / "results.csv").read_text())
        (root / name / "metadata.json").write_text(json.dumps(metadata | changed if changed else [metadata]))
    good = str(run_b)
    return {
        "missing path": ([str(root / "nowhere"), good], "no such file or directory"),
        "empty csv": ([good, str(root / "empty.csv")], "is empty"),
        "header only": ([str(root / "header-only.csv"), good], "holds no result rows"),
        "not a table": ([str(root / "not-a-table.csv"), good], "is not a fabricbench table: no column transport"),
        "binary csv": ([str(root / "binary.csv"), good], "cannot read results from"),
        "corrupt parquet": ([str(root / "broken.parquet"), good], "cannot read results from"),
        "dir without results": ([str(root / "no-results"), good], "no results.csv or results.parquet in"),
        "newer schema": (
            [good, str(root / "newer")],
            f"was written by a newer fabricbench (schema {SCHEMA_VERSION + 1}); this one reads up to {SCHEMA_VERSION}",
        ),
        "hosts not a list": ([str(root / "hosts"), good], "has metadata field 'hosts' = 5, not a list of strings"),
        "metadata not an object": ([str(root / "list"), good], "has metadata that is not a JSON object"),
        "unknown metric": ([str(run_a), good, "--metric", "speed"], "unknown metric 'speed'"),
        "metric with no values": ([str(run_a), good, "--metric", "busbw"], "no measured values for busbw_GBps"),
        "unwritable out": ([str(run_a), good, "--out", "/proc/fabricbench"], "output directory '/proc/fabricbench'"),
    }


BAD = [
    "missing path",
    "empty csv",
    "header only",
    "not a table",
    "binary csv",
    "corrupt parquet",
    "dir without results",
    "newer schema",
    "hosts not a list",
    "metadata not an object",
    "unknown metric",
    "metric with no values",
    "unwritable out",
]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_and_exit_2(case, finished_runs, tmp_path):
    args, expected = _bad_inputs(tmp_path, finished_runs["a"], finished_runs["b"])[case]
    result = fabricbench("compare", *args, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fabricbench: error: ") and expected in lines[0], lines
    assert result.stdout == ""
