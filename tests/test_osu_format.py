"""--format osu prints OSU's layout, which OSU-scraping regexes read back exactly."""

from __future__ import annotations

import re
import subprocess

import pytest

from fabricbench.report import osu as osu_text
from support import MPIEXEC, clean_env, fabricbench, one_error_line, read_rows

# What scripts that parse osu_latency / osu_bw output use.
OSU_TITLE = re.compile(r"^# OSU MPI[ _]?(?P<title>.+) v(?P<version>\d+\.\d+)$")
OSU_LINE = re.compile(r"^(?P<size>\d+)\s+(?P<value>\d+\.\d{2})$")


def _printed(value: str, exact: float) -> bool:
    """The printed two decimals are the table's value rounded (the CSV keeps 9 digits)."""
    return abs(float(value) - exact) <= 0.005 + 1e-9


OSU_COLLECTIVE = re.compile(r"^(\d+)\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+)$")  # with -f

# --- OSU 7.4's own layout, from its printf formats ----------------------------------------------------------------
# A build made with OSU's configure: AC_DEFINE([FIELD_WIDTH], [18]) in configure.ac (osu_util.h's 20 is only the
# fallback of a build without it), FLOAT_PRECISION 2. Python's % operator reads C's formats, "*" widths included.
FIELD_WIDTH, FLOAT_PRECISION = 18, 2


def printf(form: str, *args) -> str:
    """C's printf of ``form``: Python's % reads C's conversions, "*" widths included."""
    return form % args


def osu_column_header(values: list[str], full=False, validate=False, percentiles=()) -> str:
    """The header OSU prints (print_only_header, print_header_one_sided): "# Size", the value columns, -f's
    Min/Max/Iterations, -c's Validation, then -z's tail columns."""
    text = printf("%-*s", 10, "# Size")
    for name in values:
        text += printf("%*s", FIELD_WIDTH, name)
    if full:
        text += printf("%*s", FIELD_WIDTH, "Min Latency(us)") + printf("%*s", FIELD_WIDTH, "Max Latency(us)")
        text += printf("%*s", 12, "Iterations")
    if validate:
        text += printf("%*s", FIELD_WIDTH, "Validation")
    for p in percentiles:
        text += printf("%*sP%d Tail Lat(us)", FIELD_WIDTH - len("Px Tail Lat(us)") - (p > 9), "", p)
    return text


def osu_data_line(size: int, values, full=None, validation=None, tails=()) -> str:
    """One size as OSU prints it (print_stats_validate, osu_latency's and osu_bw's fprintf)."""
    text = printf("%-*d", 10, size)
    for value in values:
        text += printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, value)
    if full:
        low, high, iterations = full
        text += printf(
            "%*.*f%*.*f%*lu",
            FIELD_WIDTH,
            FLOAT_PRECISION,
            low,
            FIELD_WIDTH,
            FLOAT_PRECISION,
            high,
            12,
            iterations,
        )
    if validation:
        text += printf("%*s", FIELD_WIDTH, validation)
    for tail in tails:
        text += printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, tail)
    return text


def masked(line: str) -> str:
    """A line with its digits masked: what is left is the layout alone."""
    return re.sub(r"\d", "#", line)


def as_osu_prints_it(line: str, values: int, full=False, validate=False, tails=0) -> str:
    """``line``'s own figures in OSU's layout: equal to ``line`` exactly when fabricbench printed it as OSU would."""
    fields = line.split()
    size, rest = int(fields[0]), fields[1:]
    numbers, rest = [float(x) for x in rest[:values]], rest[values:]
    low_high = None
    if full:
        low_high, rest = (float(rest[0]), float(rest[1]), int(rest[2])), rest[3:]
    word = None
    if validate:
        word, rest = rest[0], rest[1:]
    assert len(rest) == tails, line
    return osu_data_line(size, numbers, low_high, word, [float(x) for x in rest])


LATENCY_ROW = {"kernel": "latency", "status": "ok", "size_B": 8, "lat_mean_us": 1.614, "validation": "pass"}
LATENCY_ROW |= {"lat_p50_us": 1.5, "lat_p90_us": 2.25, "lat_p99_us": 3.0}
ALLREDUCE_ROW = LATENCY_ROW | {"kernel": "allreduce", "size_B": 1048576, "lat_rank_avg_us": 12345.678}
ALLREDUCE_ROW |= {"lat_rank_min_us": 3.25, "lat_rank_max_us": 3.75, "iterations": 100, "validation": "fail"}


@pytest.mark.parametrize(
    ("transport", "kernel", "row", "columns", "title", "values", "expected"),
    [
        (
            "mpi",
            "latency",
            LATENCY_ROW,
            osu_text.Columns(validate=True),
            ["# OSU MPI Latency Test v7.4", "# Datatype: MPI_CHAR."],
            ["Avg Latency(us)"],
            osu_data_line(8, [1.614], validation="Pass"),
        ),
        (
            "mpi",
            "latency",
            LATENCY_ROW,
            osu_text.Columns(validate=True, percentiles=(50.0, 90.0, 99.0)),
            ["# OSU MPI Latency Test v7.4", "# Datatype: MPI_CHAR."],
            ["Avg Latency(us)"],
            osu_data_line(8, [1.614], validation="Pass", tails=[1.5, 2.25, 3.0]),
        ),
        (
            "mpi",
            "allreduce",
            ALLREDUCE_ROW,
            osu_text.Columns(validate=True, full=True, percentiles=(50.0, 99.0), datatype="MPI_CHAR"),
            ["# OSU MPI Allreduce Latency Test v7.4", "# Datatype: MPI_CHAR."],
            ["Avg Latency(us)"],
            osu_data_line(1048576, [12345.678], (3.25, 3.75, 100), "Fail", [1.5, 3.0]),
        ),
        (
            "mpi",
            "bw",
            {"kernel": "bw", "status": "ok", "size_B": 4194304, "bw_MBps": 23456.789, "validation": "pass"},
            osu_text.Columns(validate=True),
            ["# OSU MPI Bandwidth Test v7.4", "# Datatype: MPI_CHAR."],
            ["Bandwidth (MB/s)"],
            osu_data_line(4194304, [23456.789], validation="Pass"),
        ),
        (
            "mpi",
            "msgrate",
            {"kernel": "msgrate", "status": "ok", "size_B": 1, "bw_MBps": 3.5, "msgrate_per_s": 3500000.0},
            osu_text.Columns(),
            [
                "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4",
                "# [ pairs: 1 ] [ window size: 64 ]",
                "# Datatype: MPI_CHAR.",
            ],
            ["MB/s", "Messages/s"],
            osu_data_line(1, [3.5, 3500000.0]),
        ),
        (
            "mpi-rma",
            "put",
            {"kernel": "put", "status": "ok", "size_B": 64, "lat_mean_us": 0.875},
            osu_text.Columns(),
            [
                "# OSU MPI_Put Latency Test v7.4",
                "# Window creation: MPI_Win_allocate",
                "# Synchronization: MPI_Win_flush",
                "# Datatype: MPI_CHAR.",
            ],
            ["Latency (us)"],
            osu_data_line(64, [0.875]),
        ),
    ],
)
def test_osu_text_is_osus_printf_layout_line_by_line(transport, kernel, row, columns, title, values, expected):
    lines = osu_text.header(transport, kernel, 64, 1, columns).splitlines()
    head = osu_column_header(values, columns.full, columns.validate, [int(p) for p in columns.percentiles])
    assert lines[1:] == [*title, head]
    assert osu_text.line(row, columns) == expected
    assert masked(osu_text.line(row, columns)) == masked(expected)
    assert len(osu_text.line(row, columns)) == len(head)  # every column sits under its name


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


def osu(shims, tmp_path, name: str, *args: str, env: dict | None = None):
    """``mpiexec -n 2 NAME ARGS`` with the shims on PATH, in an empty working directory that must stay empty (OSU
    leaves it as it was), the results root $FABRICBENCH_OSU_RESULTS = tmp_path/results unless ``env`` says
    otherwise; returns the run and its results folder (or None)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    before = sorted(cwd.iterdir())
    run_env = clean_env({"PATH": f"{shims}:{MPIEXEC.rsplit('/', 1)[0]}:/usr/bin:/bin"})
    run_env.update({"FABRICBENCH_OSU_RESULTS": str(tmp_path / "results")} if env is None else env)
    run = subprocess.run(
        [MPIEXEC, "-n", "2", name, *args], capture_output=True, text=True, timeout=120, env=run_env, cwd=cwd
    )
    assert sorted(cwd.iterdir()) == before, "a shim left something in the working directory"
    found = RESULTS_LINE.search(run.stderr)
    return run, (found["dir"] if found else None)


def _data(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if not line.startswith("#")]


def _data_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not line.startswith("#")]


def test_shim_latency_as_reframe_runs_it_prints_osus_layout_from_1_byte(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_latency", "-m", "8", "-x", "2", "-i", "50", "-c", "D", "D")
    assert run.returncode == 0, run.stderr
    assert folder and folder.startswith(str(tmp_path / "results" / "fabricbench-osu-osu_latency-")), run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# fabricbench ") and lines[1:4] == [
        "# OSU MPI Latency Test v7.4",
        "# Datatype: MPI_CHAR.",
        osu_column_header(["Avg Latency(us)"], validate=True),
    ]
    rows, meta = read_rows(folder)
    table = rows.set_index("size_B")
    # OSU 7.4 skips the 0-byte size (no MPI_CHAR in it): 1, 2, 4, 8, and so does the run behind the text.
    assert [int(d[0]) for d in _data(run.stdout)] == [1, 2, 4, 8] == sorted(table.index)
    for line in _data_lines(run.stdout):
        assert masked(line) == masked(as_osu_prints_it(line, 1, validate=True))
        assert line == as_osu_prints_it(line, 1, validate=True)
    for size, value, word in _data(run.stdout):
        assert word == "Pass" and table.validation[int(size)] == "pass"
        assert _printed(value, table.lat_mean_us[int(size)])
        assert re.search(rf"^{size}.*Pass", run.stdout, re.M)  # ReFrame's sanity pattern
    assert set(rows.iterations) == {50} and set(rows.buffer) == {"host"} and set(rows.label) == {"osu_latency"}


def test_shim_collective_full_validation_tails_and_datatype_in_osus_order(shims, tmp_path):
    run, folder = osu(
        shims, tmp_path, "osu_allreduce", "-m", "4:16", "-x", "2", "-i", "40", "-f", "-z", "-T", "mpi_float", "-c"
    )
    assert run.returncode == 0, run.stderr
    assert "# Datatype: MPI_FLOAT." in run.stdout.splitlines()
    head = [line for line in run.stdout.splitlines() if line.startswith("# Size")]
    assert head == [osu_column_header(["Avg Latency(us)"], True, True, [50, 90, 99])]
    assert head == [
        "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations"
        "        Validation  P50 Tail Lat(us)  P90 Tail Lat(us)  P99 Tail Lat(us)"
    ]
    table = read_rows(folder)[0].set_index("size_B")
    assert [int(d[0]) for d in _data(run.stdout)] == [4, 8, 16]
    for line in _data_lines(run.stdout):
        assert line == as_osu_prints_it(line, 1, full=True, validate=True, tails=3)
    for size, avg, low, high, iters, word, p50, p90, p99 in _data(run.stdout):
        row = table.loc[int(size)]
        assert (
            _printed(avg, row.lat_rank_avg_us)
            and _printed(low, row.lat_rank_min_us)
            and _printed(high, row.lat_rank_max_us)
        )
        assert int(iters) == row.iterations == 40 and word == "Pass"
        assert _printed(p50, row.lat_p50_us) and _printed(p90, row.lat_p90_us) and _printed(p99, row.lat_p99_us)


def test_shim_reduction_without_minus_T_sums_mpi_char_from_1_byte_as_osu(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_allreduce", "-m", "8", "-x", "2", "-i", "20", "-c")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1:4] == [
        "# OSU MPI Allreduce Latency Test v7.4",
        "# Datatype: MPI_CHAR.",
        osu_column_header(["Avg Latency(us)"], validate=True),
    ]
    rows, meta = read_rows(folder)
    assert [int(d[0]) for d in _data(run.stdout)] == [1, 2, 4, 8] == sorted(rows.size_B)
    assert set(rows.status) == {"ok"} and set(rows.validation) == {"pass"}  # the chars arrived summed
    assert [(s["kernel"], s["datatype"]) for s in meta["steps"]] == [("allreduce", "MPI_CHAR")]
    assert meta["plan"]["osu"]["datatype"] == "MPI_CHAR"
    for line in _data_lines(run.stdout):
        assert line == as_osu_prints_it(line, 1, validate=True)


def test_shim_collective_without_f_prints_the_average_alone(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_alltoall", "-m", "8", "-x", "2", "-i", "20")
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith("# Size")] == ["# Size       Avg Latency(us)"]
    table = read_rows(folder)[0].set_index("size_B")
    for line in _data_lines(run.stdout):
        assert line == as_osu_prints_it(line, 1)
    for size, avg in _data(run.stdout):  # exactly two columns
        assert _printed(avg, table.lat_rank_avg_us[int(size)])


def test_shim_bandwidth_window_and_validation(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_bw", "-m", "1024", "-x", "1", "-i", "5", "-W", "8", "-c", "H", "H")
    assert run.returncode == 0, run.stderr
    table = read_rows(folder)[0].set_index("size_B")
    assert set(table.window) == {8}
    assert osu_column_header(["Bandwidth (MB/s)"], validate=True) in run.stdout.splitlines()
    for line in _data_lines(run.stdout):
        assert line == as_osu_prints_it(line, 1, validate=True)
    for size, bw, word in _data(run.stdout):
        assert _printed(bw, table.bw_MBps[int(size)]) and word == "Pass"


def test_shim_results_go_under_the_per_user_data_directory_and_stderr_says_where(shims, tmp_path):
    # No FABRICBENCH_OSU_RESULTS: the root is $XDG_DATA_HOME/fabricbench/osu; the working directory stays empty.
    data = tmp_path / "xdg-data"
    run, folder = osu(shims, tmp_path, "osu_bcast", "-m", "4", "-x", "1", "-i", "5", env={"XDG_DATA_HOME": str(data)})
    assert run.returncode == 0, run.stderr
    assert folder and folder.startswith(str(data / "fabricbench" / "osu" / "fabricbench-osu-osu_bcast-"))
    assert len(run.stderr.splitlines()) == 1 and folder in run.stderr  # one line says where
    assert len(read_rows(folder)[0]) == 3  # 1, 2 and 4 B
    assert [p.name for p in data.iterdir()] == ["fabricbench"]


@pytest.mark.parametrize(
    ("name", "args", "problem"),
    [
        ("osu_latency", ["-m", "8", "-d", "rocm", "D", "D"], "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        (
            "osu_allreduce",
            ["-m", "8", "-T", "mpi_double"],
            "allreduce sums MPI_CHAR, MPI_INT or MPI_FLOAT",  # refused by rank 0's plan
        ),
        ("osu_latency", ["-m", "8", "-T", "mpi_int"], "latency moves MPI_CHAR only"),
        ("osu_bw", ["-m", "8", "-z"], "tail columns (-z) for bw"),
        ("osu_latency", ["-m", "8", "-G"], "cannot honour option -G"),
    ],
)
def test_shim_refuses_what_it_cannot_honour_in_one_line(shims, tmp_path, name, args, problem):
    run, folder = osu(shims, tmp_path, name, *args)
    assert run.returncode == 2 and folder is None
    one_error_line(run.stderr, problem)
    assert run.stdout == ""
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_shim_help_and_version_once_under_mpiexec(shims, tmp_path):
    run, _ = osu(shims, tmp_path, "osu_bw", "--help")
    assert run.returncode == 0 and run.stdout.count("Usage: osu_bw") == 1
    assert "the working directory is left as it was" in run.stdout
    run, _ = osu(shims, tmp_path, "osu_bw", "-v")
    assert (
        run.returncode == 0 and run.stdout.startswith("# OSU MPI Bandwidth Test v7.4") and run.stdout.count("\n") == 1
    )


# --- OSU's other one-sided, persistent and start-up programs under mpiexec -n 2 -------------------------------------

ONE_SIDED_HEAD = ["# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_flush"]


@pytest.mark.parametrize(
    ("name", "args", "head", "values", "word"),
    [
        (
            "osu_acc_latency",
            ["-c"],
            ["# OSU MPI_Accumulate latency Test v7.4", *ONE_SIDED_HEAD, "# Datatype: MPI_CHAR."],
            "Latency (us)",
            "passed",
        ),
        (
            "osu_get_acc_latency",
            [],
            ["# OSU MPI_Get_accumulate latency Test v7.4", *ONE_SIDED_HEAD],
            "Latency (us)",
            "",
        ),
        (
            "osu_cas_latency",
            ["-c", "-w", "dynamic", "-s", "lock"],
            [
                "# OSU MPI_Compare_and_swap latency Test v7.4",
                "# Window creation: MPI_Win_create_dynamic",
                "# Synchronization: MPI_Win_lock/unlock",
                "# Datatype: MPI_LONG_LONG.",
            ],
            "Latency (us)",
            "passed",
        ),
        (
            "osu_fop_latency",
            ["-c", "-s", "fence"],
            [
                "# OSU MPI_Fetch_and_op latency Test v7.4",
                "# Window creation: MPI_Win_allocate",
                "# Synchronization: MPI_Win_fence",
                "# Datatype: MPI_LONG_LONG.",
            ],
            "Latency (us)",
            "passed",
        ),
        (
            "osu_put_bibw",
            ["-W", "8"],
            [
                "# OSU MPI_Put Bi-directional Bandwidth Test v7.4",
                "# Window creation: MPI_Win_allocate",
                "# Synchronization: MPI_Win_post/start/complete/wait",
                "# Datatype: MPI_CHAR.",
            ],
            "Bandwidth (MB/s)",
            "",
        ),
        (
            "osu_latency_persistent",
            ["-c"],
            ["# OSU MPI Latency Persistent Test v7.4", "# Datatype: MPI_CHAR."],
            "Avg Latency(us)",
            "Pass",
        ),
        (
            "osu_bw_persistent",
            ["-W", "8"],
            ["# OSU MPI Bandwidth Persistent Test v7.4", "# Datatype: MPI_CHAR."],
            "Bandwidth (MB/s)",
            "",
        ),
        (
            "osu_bibw_persistent",
            ["-W", "8"],
            ["# OSU MPI Bi-Directional Bandwidth Persistent Test v7.4", "# Datatype: MPI_CHAR."],
            "Bandwidth (MB/s)",
            "",
        ),
    ],
)
def test_shim_one_sided_and_persistent_programs_print_osus_layout(shims, tmp_path, name, args, head, values, word):
    sizes = [] if name in ("osu_fop_latency", "osu_cas_latency") else ["-m", "64"]
    run, folder = osu(shims, tmp_path, name, *sizes, "-x", "2", "-i", "20", *args)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# fabricbench ")
    assert lines[1 : -len(_data_lines(run.stdout)) - 1] == head
    assert lines[len(head) + 1] == osu_column_header([values], validate=bool(word))
    rows, _ = read_rows(folder)
    assert set(rows.status) == {"ok"} and set(rows.label) == {name}
    data = _data_lines(run.stdout)
    assert len(data) == len(rows) and data, run.stdout
    for line in data:
        fields = line.split()
        own = osu_data_line(int(fields[0]), [float(fields[1])], validation=word or None)
        assert line == own and masked(line) == masked(own)  # OSU's "%-*d%*.*f" (and "%*s") layout, to the byte
        assert not word or fields[2] == word
    if word:
        assert set(rows.validation) == {"pass"}


def test_shim_put_latency_refuses_minus_c_in_osus_words(shims, tmp_path):
    run, _ = osu(shims, tmp_path, "osu_put_latency", "-c")
    assert run.returncode == 2
    one_error_line(run.stderr, "osu_put_latency: -c: Benchmark does not support validation (as OSU 7.4's)")


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("osu_init", re.compile(r"^nprocs: 2, min: \d+ ms, max: \d+ ms, avg: \d+ ms$")),
        ("osu_hello", re.compile(r"^This is a test with 2 processes$")),
    ],
)
def test_shim_start_up_programs_print_osus_two_lines(shims, tmp_path, name, line):
    run, folder = osu(shims, tmp_path, name)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    title = "Init" if name == "osu_init" else "Hello World"
    assert lines[1] == f"# OSU MPI {title} Test v7.4" and line.match(lines[2]) and len(lines) == 3
    rows, _ = read_rows(folder)
    assert len(rows) == 1 and rows.lat_rank_min_us[0] > 0


def test_shim_latency_mt_prints_its_threads_then_osus_table(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_latency_mt", "-m", "16", "-x", "2", "-i", "30", "-t", "2:2", "-c")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1:6] == [
        "# Number of Sender threads: 2 ",
        "# Number of Receiver threads: 2",
        "# OSU MPI Multi-threaded Latency Test v7.4",
        osu_column_header(["Latency (us)"], validate=True),
        "# Datatype: MPI_CHAR.",
    ]
    data = _data_lines(run.stdout)
    assert [int(line.split()[0]) for line in data] == [1, 2, 4, 8, 16]
    for line in data:
        assert line == as_osu_prints_it(line, 1, validate=True) and line.endswith("Pass")
    rows, _ = read_rows(folder)
    assert set(rows.validation) == {"pass"} and set(rows.method) == {"c loop, blocking, 2:2 threads"}


@pytest.mark.parametrize("check", [True, False])
def test_shim_latency_mp_prints_its_processes_then_osus_table(shims, tmp_path, check):
    run, folder = osu(shims, tmp_path, "osu_latency_mp", "-m", "4", "-x", "2", "-i", "30", *(["-c"] if check else []))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1:6] == [
        "# Number of forked processes in sender: 0",
        "# Number of forked processes in receiver: 2",
        "# OSU MPI Multi-process Latency Test v7.4",
        osu_column_header(["Latency (us)"], validate=check),
        "# Datatype: MPI_CHAR.",
    ]
    data = _data_lines(run.stdout)
    assert [int(line.split()[0]) for line in data] == [1, 2, 4]
    for line in data:
        size, value = line.split()[:2]
        # OSU: "%-*d" then "%*.*f" 18 wide and "%*s" with -c, but 10 wide without it
        own = f"{int(size):<10d}{float(value):18.2f}{'Pass':>18}" if check else f"{int(size):<10d}{float(value):10.2f}"
        assert line == own
    assert set(read_rows(folder)[0].status) == {"ok"}
