"""--format osu prints OSU's layout, which OSU-scraping regexes read back exactly."""

from __future__ import annotations

import re
import subprocess

import pytest

from support import MPIEXEC, clean_env, fabricbench, one_error_line, read_rows

# What scripts that parse osu_latency / osu_bw output use.
OSU_TITLE = re.compile(r"^# OSU MPI[ _]?(?P<title>.+) v(?P<version>\d+\.\d+)$")
OSU_LINE = re.compile(r"^(?P<size>\d+)\s+(?P<value>\d+\.\d{2})$")


def _printed(value: str, exact: float) -> bool:
    """The printed two decimals are the table's value rounded (the CSV keeps 9 digits)."""
    return abs(float(value) - exact) <= 0.005 + 1e-9


OSU_COLLECTIVE = re.compile(r"^(\d+)\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+)$")  # with -f


def _blocks(text: str) -> dict[str, list[str]]:
    blocks, title = {}, None
    for line in text.splitlines():
        match = OSU_TITLE.match(line)
        if match:
            title = match["title"]
            blocks[title] = []
        elif title and not line.startswith("#"):
            blocks[title].append(line)
    return blocks


def test_osu_text_round_trips(out):
    result = fabricbench(
        *("run", "-k", "latency,bw,allreduce", "-m", "0:1K", "-i", "20", "-x", "2"),
        *("--format", "osu", "--osu-full", "--out", str(out)),
    )
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert "# Size       Avg Latency(us)" in result.stdout
    assert "# Size      Bandwidth (MB/s)" in result.stdout
    blocks = _blocks(result.stdout)
    assert set(blocks) == {"Latency Test", "Bandwidth Test", "Allreduce Latency Test"}

    latency = rows[rows.kernel == "latency"].set_index("size_B")
    parsed = [OSU_LINE.match(line) for line in blocks["Latency Test"]]
    assert all(parsed) and len(parsed) == len(latency)
    for match in parsed:
        assert _printed(match["value"], latency.lat_mean_us[int(match["size"])])

    bw = rows[rows.kernel == "bw"].set_index("size_B")
    for line in blocks["Bandwidth Test"]:
        match = OSU_LINE.match(line)
        assert match and _printed(match["value"], bw.bw_MBps[int(match["size"])])

    allreduce = rows[(rows.kernel == "allreduce") & (rows.status == "ok")].set_index("size_B")
    data = [line for line in blocks["Allreduce Latency Test"] if not line.startswith("#")]
    assert len(data) == len(allreduce)
    for line in data:
        size, avg, low, high, iters = OSU_COLLECTIVE.match(line).groups()
        row = allreduce.loc[int(size)]
        assert _printed(avg, row.lat_rank_avg_us) and _printed(low, row.lat_rank_min_us)
        assert _printed(high, row.lat_rank_max_us) and int(iters) == 20


# --- the OSU stand-ins (fabricbench osu-shims) under mpiexec, as a harness runs OSU ----------------------------------

RESULTS_LINE = re.compile(r"^# \d+ rows in (?P<dir>.+)/ \(", re.M)


@pytest.fixture(scope="module")
def shims(tmp_path_factory):
    folder = tmp_path_factory.mktemp("osu-shims")
    made = fabricbench("osu-shims", str(folder))
    assert made.returncode == 0, made.stderr
    return folder


def osu(shims, tmp_path, name: str, *args: str):
    """``mpiexec -n 2 NAME ARGS`` with the shims on PATH; returns the run and its results folder (or None)."""
    env = clean_env({"PATH": f"{shims}:{MPIEXEC.rsplit('/', 1)[0]}:/usr/bin:/bin"})
    env["FABRICBENCH_OSU_RESULTS"] = str(tmp_path)
    run = subprocess.run(
        [MPIEXEC, "-n", "2", name, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    found = RESULTS_LINE.search(run.stderr)
    return run, (found["dir"] if found else None)


def _data(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if not line.startswith("#")]


def test_shim_latency_as_reframe_runs_it_prints_the_validation_column(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_latency", "-m", "8", "-x", "2", "-i", "50", "-c", "D", "D")
    assert run.returncode == 0, run.stderr
    assert folder and folder.startswith(str(tmp_path / "fabricbench-osu-osu_latency-")), run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# fabricbench ") and lines[1:4] == [
        "# OSU MPI Latency Test v7.4",
        "# Datatype: MPI_CHAR.",
        "# Size       Avg Latency(us)          Validation",
    ]
    rows, meta = read_rows(folder)
    table = rows.set_index("size_B")
    assert [int(d[0]) for d in _data(run.stdout)] == [0, 1, 2, 4, 8] == sorted(table.index)
    for size, value, word in _data(run.stdout):
        assert word == "Pass" and table.validation[int(size)] == "pass"
        assert _printed(value, table.lat_mean_us[int(size)])
        assert re.search(rf"^{size}.*Pass", run.stdout, re.M)  # ReFrame's sanity pattern
    assert set(rows.iterations) == {50} and set(rows.buffer) == {"host"} and set(rows.label) == {"osu_latency"}


def test_shim_collective_full_tails_datatype_and_validation(shims, tmp_path):
    run, folder = osu(
        shims, tmp_path, "osu_allreduce", "-m", "4:16", "-x", "2", "-i", "40", "-f", "-z", "-T", "mpi_float", "-c"
    )
    assert run.returncode == 0, run.stderr
    assert "# Datatype: MPI_FLOAT." in run.stdout.splitlines()
    head = [line for line in run.stdout.splitlines() if line.startswith("# Size")]
    assert head == [
        "# Size       Avg Latency(us)     Min Latency(us)     Max Latency(us)  Iterations"
        "    P50 Tail Lat(us)    P90 Tail Lat(us)    P99 Tail Lat(us)          Validation"
    ]
    table = read_rows(folder)[0].set_index("size_B")
    data = _data(run.stdout)
    assert [int(d[0]) for d in data] == [4, 8, 16]
    for size, avg, low, high, iters, p50, p90, p99, word in data:
        row = table.loc[int(size)]
        assert (
            _printed(avg, row.lat_rank_avg_us)
            and _printed(low, row.lat_rank_min_us)
            and _printed(high, row.lat_rank_max_us)
        )
        assert int(iters) == row.iterations == 40 and word == "Pass"
        assert _printed(p50, row.lat_p50_us) and _printed(p90, row.lat_p90_us) and _printed(p99, row.lat_p99_us)


def test_shim_collective_without_f_prints_the_average_alone(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_alltoall", "-m", "8", "-x", "2", "-i", "20")
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith("# Size")] == ["# Size       Avg Latency(us)"]
    table = read_rows(folder)[0].set_index("size_B")
    for size, avg in _data(run.stdout):  # exactly two columns
        assert _printed(avg, table.lat_rank_avg_us[int(size)])


def test_shim_bandwidth_window_and_validation(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_bw", "-m", "1024", "-x", "1", "-i", "5", "-W", "8", "-c", "H", "H")
    assert run.returncode == 0, run.stderr
    table = read_rows(folder)[0].set_index("size_B")
    assert set(table.window) == {8}
    for size, bw, word in _data(run.stdout):
        assert _printed(bw, table.bw_MBps[int(size)]) and word == "Pass"


@pytest.mark.parametrize(
    ("name", "args", "problem"),
    [
        ("osu_latency", ["-m", "8", "-d", "rocm", "D", "D"], "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        ("osu_allreduce", ["-m", "8", "-T", "mpi_char"], "allreduce moves MPI_FLOAT only"),  # refused by rank 0's plan
        ("osu_bw", ["-m", "8", "-z"], "tail columns (-z) for bw"),
        ("osu_latency", ["-m", "8", "-G"], "cannot honour option -G"),
    ],
)
def test_shim_refuses_what_it_cannot_honour_in_one_line(shims, tmp_path, name, args, problem):
    run, folder = osu(shims, tmp_path, name, *args)
    assert run.returncode == 2 and folder is None
    one_error_line(run.stderr, problem)
    assert run.stdout == ""
    assert not list(tmp_path.glob("fabricbench-osu-*"))


def test_shim_help_and_version_once_under_mpiexec(shims, tmp_path):
    run, _ = osu(shims, tmp_path, "osu_bw", "--help")
    assert run.returncode == 0 and run.stdout.count("Usage: osu_bw") == 1
    run, _ = osu(shims, tmp_path, "osu_bw", "-v")
    assert (
        run.returncode == 0 and run.stdout.startswith("# OSU MPI Bandwidth Test v7.4") and run.stdout.count("\n") == 1
    )
