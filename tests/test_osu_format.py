"""--format osu prints OSU's layout, which OSU-scraping regexes read back exactly."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, replace

import pytest

from fabricbench.collectives import neighbor
from fabricbench.errors import UsageError
from fabricbench.launch import osu_shims
from fabricbench.measure.kernels import get_kernel
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


# --- Every shim's layout, from OSU's printf formats -----------------------------------------------------------------
# What OSU 7.4 prints for each program, read from its source and described here apart from report/osu.py: the
# lines between the title and the column header (print_preamble, print_header_one_sided, osu_mbw_mr's own), the
# value columns and the table's figure under each, whether a size column leads (show_size), whether -f adds Min/Max/
# Iterations, and whether -z's tails are latencies or bandwidths. Every program in BENCHMARKS must name its layout
# in LAYOUT_OF: one without FAILS test_every_shim_has_its_osu_layout_described, never skipped.


@dataclass(frozen=True)
class Layout:
    """One of OSU's layouts. A column is (heading, the table's figure under it), or (heading, figure, width, "d") for
    an integer column of another width (Iterations: "%*lu" 12 wide)."""

    before: tuple[str, ...]  # the lines after the title ({T}: the datatype, {pairs}, {W})
    values: tuple[tuple, ...]  # the value columns
    size: bool = True  # OSU's show_size: "%-10d" first, and "# Size" heading it
    full: tuple[tuple, ...] | None = None  # the value columns with -f (None: -f does not change them)
    tails: str = "Lat"  # -z: "Tail Lat(us)" of lat_p*, "Tail BW(MB/s)" of bw_win_p*, or "" (-z read, no columns)
    passed: str = "Pass"  # -c's word for a pass ("passed" in the atomic one-sided tests)
    first_width: int = 17  # without a size column: the first value's "%*.*f" width ("# " heads its name)
    graph: bool = False  # a neighbourhood program's grid and graph lines, then print_preamble's empty line, first


DATATYPE = "# Datatype: {T}."
ONE_SIDED = ("# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_flush", DATATYPE)
AVERAGE = (("Avg Latency(us)", "lat_rank_avg_us"),)
MIN_MAX_ITERATIONS = (
    ("Min Latency(us)", "lat_rank_min_us"),
    ("Max Latency(us)", "lat_rank_max_us"),
    ("Iterations", "iterations", 12, "d"),
)
NBC_PREAMBLE = ("# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait", "")
NBC_VALUES = (
    ("Overall(us)", "lat_rank_avg_us"),
    ("Compute(us)", "compute_us"),
    ("Pure Comm.(us)", "pure_comm_us"),
    ("Overlap(%)", "overlap_pct"),
)
NBC_FULL = (
    ("Overall(us)", "lat_rank_avg_us"),
    ("Compute(us)", "compute_us"),
    ("Coll. Init(us)", "init_us"),
    ("MPI_Test(us)", "test_us"),
    ("MPI_Wait(us)", "wait_us"),
    ("Pure Comm.(us)", "pure_comm_us"),
    ("Min Comm.(us)", "pure_comm_min_us"),
    ("Max Comm.(us)", "pure_comm_max_us"),
    ("Overlap(%)", "overlap_pct"),
)
OSU_LAYOUTS = {
    "pt2pt-latency": Layout((DATATYPE,), (("Avg Latency(us)", "lat_mean_us"),)),
    "pt2pt-latency-no-tails": Layout((DATATYPE,), (("Avg Latency(us)", "lat_mean_us"),), tails=""),  # osu_multi_lat
    "pt2pt-bandwidth": Layout((DATATYPE,), (("Bandwidth (MB/s)", "bw_MBps"),), tails="BW"),
    "mbw-mr": Layout(
        ("# [ pairs: {pairs} ] [ window size: {W} ]", DATATYPE),
        (("MB/s", "bw_MBps"), ("Messages/s", "msgrate_per_s")),
        tails="BW",
    ),
    "collective": Layout((DATATYPE,), AVERAGE, full=AVERAGE + MIN_MAX_ITERATIONS),
    "collective-no-size": Layout((), AVERAGE, size=False, full=AVERAGE + MIN_MAX_ITERATIONS),
    "one-sided-latency": Layout(ONE_SIDED, (("Latency (us)", "lat_mean_us"),)),
    "one-sided-bandwidth": Layout(ONE_SIDED, (("Bandwidth (MB/s)", "bw_MBps"),), tails="BW"),
    "one-sided-atomic": Layout(ONE_SIDED, (("Latency (us)", "lat_mean_us"),), passed="passed"),
    # osu_get_acc_latency's own: MPI_Win_create by default, and no datatype line
    "one-sided-no-datatype": Layout(
        ("# Window creation: MPI_Win_create", "# Synchronization: MPI_Win_flush"), (("Latency (us)", "lat_mean_us"),)
    ),
    "one-sided-bibw": Layout(
        ("# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_post/start/complete/wait", DATATYPE),
        (("Bandwidth (MB/s)", "bw_MBps"),),
        tails="BW",
    ),
    # osu_i*: print_preamble_nbc's line and a blank one, print_only_header_nbc's and print_stats_nbc's columns
    "nonblocking": Layout((*NBC_PREAMBLE, DATATYPE), NBC_VALUES, full=NBC_FULL),
    "nonblocking-no-size": Layout(NBC_PREAMBLE, NBC_VALUES, size=False, full=NBC_FULL, first_width=13),
}
# The neighbourhood programs: Dimensions and the graph's creation time, an empty line, then the title.
OSU_LAYOUTS["graph"] = replace(OSU_LAYOUTS["collective"], graph=True)
OSU_LAYOUTS["nonblocking-graph"] = replace(OSU_LAYOUTS["nonblocking"], graph=True)
# Programs whose text is not a title, lines and a table (osu_init, osu_hello) or puts lines above the title
# (osu_latency_mt's threads, osu_latency_mp's processes): each has its own test, named here, under mpiexec below.
OWN_LAYOUTS = {
    "osu_init": "test_shim_start_up_programs_print_osus_two_lines",
    "osu_hello": "test_shim_start_up_programs_print_osus_two_lines",
    "osu_latency_mt": "test_shim_latency_mt_prints_its_threads_then_osus_table",
    "osu_latency_mp": "test_shim_latency_mp_prints_its_processes_then_osus_table",
}
# Each program's layout and its BENCHMARK string (the title, "%s" standing for "-CUDA" and the like).
LAYOUT_OF = {
    "osu_latency": ("pt2pt-latency", "OSU MPI%s Latency Test"),
    "osu_multi_lat": ("pt2pt-latency-no-tails", "OSU MPI%s Multi Latency Test"),
    "osu_bw": ("pt2pt-bandwidth", "OSU MPI%s Bandwidth Test"),
    "osu_bibw": ("pt2pt-bandwidth", "OSU MPI%s Bi-Directional Bandwidth Test"),
    "osu_mbw_mr": ("mbw-mr", "OSU MPI%s Multiple Bandwidth / Message Rate Test"),
    "osu_bw_fan_in": ("pt2pt-bandwidth", "OSU MPI%s Bandwidth Congestion In Test"),
    "osu_bw_fan_out": ("pt2pt-bandwidth", "OSU MPI%s Bandwidth Congestion Out Test"),
    "osu_allreduce": ("collective", "OSU MPI%s Allreduce Latency Test"),
    "osu_allgather": ("collective", "OSU MPI%s Allgather Latency Test"),
    "osu_alltoall": ("collective", "OSU MPI%s All-to-All Personalized Exchange Latency Test"),
    "osu_bcast": ("collective", "OSU MPI%s Broadcast Latency Test"),
    "osu_reduce": ("collective", "OSU MPI%s Reduce Latency Test"),
    "osu_reduce_scatter": ("collective", "OSU MPI%s Reduce_scatter Latency Test"),
    "osu_barrier": ("collective-no-size", "OSU MPI%s Barrier Latency Test"),
    "osu_gather": ("collective", "OSU MPI%s Gather Latency Test"),
    "osu_gatherv": ("collective", "OSU MPI%s Gatherv Latency Test"),
    "osu_scatter": ("collective", "OSU MPI%s Scatter Latency Test"),
    "osu_scatterv": ("collective", "OSU MPI%s Scatterv Latency Test"),
    "osu_allgatherv": ("collective", "OSU MPI%s Allgatherv Latency Test"),
    "osu_alltoallv": ("collective", "OSU MPI%s All-to-Allv Personalized Exchange Latency Test"),
    "osu_alltoallw": ("collective", "OSU MPI%s All-to-Allw Personalized Exchange Latency Test"),
    "osu_reduce_scatter_block": ("collective", "OSU MPI%s Reduce_scatter_block Latency Test"),
    "osu_allgather_persistent": ("collective", "OSU MPI%s Allgather Persistent Latency Test"),
    "osu_allgatherv_persistent": ("collective", "OSU MPI%s Allgatherv Persistent Latency Test"),
    "osu_allreduce_persistent": ("collective", "OSU MPI%s Allreduce Persistent Latency Test"),
    "osu_alltoall_persistent": ("collective", "OSU MPI%s All-to-All Personalized Exchange Persistent Latency Test"),
    "osu_alltoallv_persistent": ("collective", "OSU MPI%s All-to-Allv Personalized Exchange Persistent Latency Test"),
    "osu_alltoallw_persistent": ("collective", "OSU MPI%s All-to-Allw Personalized Exchange Persistent Latency Test"),
    "osu_barrier_persistent": ("collective-no-size", "OSU MPI%s Barrier Persistent Latency Test"),
    "osu_bcast_persistent": ("collective", "OSU MPI%s Broadcast Persistent Latency Test"),
    "osu_gather_persistent": ("collective", "OSU MPI%s Gather Persistent Latency Test"),
    "osu_gatherv_persistent": ("collective", "OSU MPI%s Gatherv Persistent Latency Test"),
    "osu_reduce_persistent": ("collective", "OSU MPI%s Reduce Persistent Latency Test"),
    "osu_reduce_scatter_persistent": ("collective", "OSU MPI%s Reduce_scatter Persistent Latency Test"),
    "osu_scatter_persistent": ("collective", "OSU MPI%s Scatter Persistent Latency Test"),
    "osu_scatterv_persistent": ("collective", "OSU MPI%s Scatterv Persistent Latency Test"),
    "osu_put_latency": ("one-sided-latency", "OSU MPI_Put%s Latency Test"),
    "osu_get_latency": ("one-sided-latency", "OSU MPI_Get%s latency Test"),
    "osu_put_bw": ("one-sided-bandwidth", "OSU MPI_Put%s Bandwidth Test"),
    "osu_get_bw": ("one-sided-bandwidth", "OSU MPI_Get%s Bandwidth Test"),
    "osu_acc_latency": ("one-sided-atomic", "OSU MPI_Accumulate%s latency Test"),
    "osu_fop_latency": ("one-sided-atomic", "OSU MPI_Fetch_and_op%s latency Test"),
    "osu_cas_latency": ("one-sided-atomic", "OSU MPI_Compare_and_swap%s latency Test"),
    "osu_get_acc_latency": ("one-sided-no-datatype", "OSU MPI_Get_accumulate%s latency Test"),
    "osu_put_bibw": ("one-sided-bibw", "OSU MPI_Put%s Bi-directional Bandwidth Test"),
    "osu_latency_persistent": ("pt2pt-latency", "OSU MPI%s Latency Persistent Test"),
    "osu_bw_persistent": ("pt2pt-bandwidth", "OSU MPI%s Bandwidth Persistent Test"),
    "osu_bibw_persistent": ("pt2pt-bandwidth", "OSU MPI%s Bi-Directional Bandwidth Persistent Test"),
    "osu_neighbor_allgather": ("graph", "OSU MPI%s Neighborhood Allgather Latency Test"),
    "osu_neighbor_allgatherv": ("graph", "OSU MPI%s Neighborhood Allgatherv Latency Test"),
    "osu_neighbor_alltoall": ("graph", "OSU MPI%s Neighborhood All-to-All Latency Test"),
    "osu_neighbor_alltoallv": ("graph", "OSU MPI%s Neighborhood All-to-Allv Latency Test"),
    "osu_neighbor_alltoallw": ("graph", "OSU MPI%s Neighborhood All-to-Allw Latency Test"),
    "osu_iallreduce": ("nonblocking", "OSU MPI%s Non-blocking Allreduce Latency Test"),
    "osu_iallgather": ("nonblocking", "OSU MPI%s Non-blocking Allgather Latency Test"),
    "osu_ialltoall": ("nonblocking", "OSU MPI%s Non-blocking All-to-All Latency Test"),
    "osu_ibcast": ("nonblocking", "OSU MPI%s Non-Blocking Broadcast Latency Test"),
    "osu_ireduce": ("nonblocking", "OSU MPI%s Non-blocking Reduce Latency Test"),
    "osu_ireduce_scatter": ("nonblocking", "OSU MPI%s Non-blocking Reduce_scatter Latency Test"),
    "osu_ibarrier": ("nonblocking-no-size", "OSU MPI%s Non-blocking Barrier Latency Test"),
    "osu_igather": ("nonblocking", "OSU MPI%s Non-blocking Gather Latency Test"),
    "osu_igatherv": ("nonblocking", "OSU MPI%s Non-blocking Gatherv Latency Test"),
    "osu_iscatter": ("nonblocking", "OSU MPI%s Non-blocking Scatter Latency Test"),
    "osu_iscatterv": ("nonblocking", "OSU MPI%s Non-blocking Scatterv Latency Test"),
    "osu_iallgatherv": ("nonblocking", "OSU MPI%s Non-blocking Allgatherv Latency Test"),
    "osu_ialltoallv": ("nonblocking", "OSU MPI%s Non-blocking All-to-Allv Personalized Exchange Latency Test"),
    "osu_ialltoallw": ("nonblocking", "OSU MPI%s Non-blocking All-to-Allw Personalized Exchange Latency Test"),
    "osu_ireduce_scatter_block": ("nonblocking", "OSU MPI%s Non-blocking Reduce_scatter_block Latency Test"),
    "osu_ineighbor_allgather": ("nonblocking-graph", "OSU MPI%s Non-blocking Neighborhood Allgather Latency Test"),
    "osu_ineighbor_allgatherv": ("nonblocking-graph", "OSU MPI%s Non-blocking Neighborhood Allgatherv Latency Test"),
    "osu_ineighbor_alltoall": ("nonblocking-graph", "OSU MPI%s Non-blocking Neighborhood All-to-All Latency Test"),
    "osu_ineighbor_alltoallv": ("nonblocking-graph", "OSU MPI%s Non-blocking Neighborhood All-to-Allv Latency Test"),
    "osu_ineighbor_alltoallw": ("nonblocking-graph", "OSU MPI%s Non-blocking Neighborhood All-to-Allw Latency Test"),
}
TABLED = sorted(set(osu_shims.BENCHMARKS) - set(OWN_LAYOUTS))  # the programs the layout table describes
# The command lines OSU 7.4's own binaries were run under beside the shims, every program with each (the barriers,
# which have no sizes, with COMPARED_NO_SIZES): each must be among the layout cases below, none refused.
COMPARED = ("-m 1:64 -x 2 -i 5", "-z 50,99")
COMPARED_NO_SIZES = ("-x 2 -i 5", "-f")
# The command lines each shim's layout is checked under: those its program takes and fabricbench honours.
OPTION_SETS = ("", "-c", "-f", "-z", "-z50,99", "-z 50,99", "-f -c -z", "-T mpi_int", "-T mpi_float -c -z90", "-m 8")
OPTION_SETS += ("-R 0", "-R 0 -c", *COMPARED, *COMPARED_NO_SIZES)
# One figure per column the table may hold, each its own, so that a column printed from another figure shows.
FIGURES = {"lat_mean_us": 1.25, "lat_rank_avg_us": 2.5, "lat_rank_min_us": 2.25, "lat_rank_max_us": 2.75}
FIGURES |= {"bw_MBps": 1234.5, "msgrate_per_s": 98765.25, "lat_p50_us": 3.5, "lat_p90_us": 4.5, "lat_p99_us": 5.5}
FIGURES |= {"bw_win_p50_MBps": 1100.25, "bw_win_p90_MBps": 1200.25, "bw_win_p99_MBps": 1300.25, "iterations": 1000}
FIGURES |= {"compute_us": 1.75, "pure_comm_us": 2.125, "pure_comm_min_us": 2.0, "pure_comm_max_us": 2.375}
FIGURES |= {"init_us": 0.25, "test_us": 0.125, "wait_us": 0.625, "overlap_pct": 37.5, "topology_us": 3.75}
GRAPH_RANKS = 4  # the ranks of the neighbourhood programs' "Dimensions size" line


def _method_options(bench) -> dict:
    """The plan's transport_options a shim's run has: its --method where it names one (osu_i*: nonblocking)."""
    return osu_shims.run_options(bench)


def _layout_cases() -> list[tuple[str, str]]:
    """(program, command line) for every shim and every option set it takes (the refused ones are the unit tests')."""
    cases = []
    for name in TABLED:
        for line in OPTION_SETS:
            try:
                osu_shims.parse(name, line.split())
            except UsageError:
                continue
            cases.append((name, line))
    return cases


@pytest.mark.parametrize("name", sorted(osu_shims.BENCHMARKS))
def test_every_shim_has_its_osu_layout_described(name):
    if name in OWN_LAYOUTS:
        assert callable(globals().get(OWN_LAYOUTS[name])), f"{name}'s own layout test is missing"
        return
    assert name in LAYOUT_OF, f"{name} has a shim but no OSU layout here: describe it from OSU 7.4's printf formats"
    assert LAYOUT_OF[name][0] in OSU_LAYOUTS, f"{name}'s layout {LAYOUT_OF[name][0]!r} is not described"
    assert any(case[0] == name for case in _layout_cases())  # at least its plain command line is checked


def test_every_program_is_checked_under_the_command_lines_osus_binaries_ran():
    # The 77 programs less OWN_LAYOUTS' four (each under mpiexec in its own test below), none left out or refused.
    cases = set(_layout_cases())
    checked = []
    for name in TABLED:
        sizes = get_kernel(osu_shims.BENCHMARKS[name].kernel).moves_data
        checked += [(name, line) for line in (COMPARED if sizes else COMPARED_NO_SIZES)]
    assert [case for case in checked if case not in cases] == []
    assert len(TABLED) + len(OWN_LAYOUTS) == 77


def _osu_tails(values: dict) -> list[int]:
    """The percentiles OSU 7.4 reads from -z as its getopt left it: its default without a list, else each part's
    leading digits (atoi)."""
    if "z" not in values:
        return []
    return [int(re.match(r"\d*", part)[0] or 0) for part in values["z"].split(",") if part] or [50, 90, 99]


def _osu_prints(name: str, values: dict, columns, datatype: str) -> tuple[list[str], list[str], str]:
    """OSU's lines before its title (a neighbourhood program's grid and graph, print_preamble's empty line), its
    lines after the title, and one data line of FIGURES, from its printf formats, for this command line."""
    layout = OSU_LAYOUTS[LAYOUT_OF[name][0]]
    above = []
    if layout.graph:
        above += [printf("Dimensions size = %d ", GRAPH_RANKS)]
        above += [printf("Time took to create topology graph:%.2f us.", FIGURES["topology_us"]), ""]
    head = printf("%-*s", 10, "# Size") if layout.size else ""
    line = printf("%-*d", 10, 64) if layout.size else ""
    shown = layout.full if "f" in values and layout.full else layout.values
    shown = shown[:1] if values.get("R") == "0" else shown  # osu_mbw_mr's -R 0: MB/s alone
    for number, (heading, figure, *form) in enumerate(shown):
        width, kind = form or (FIELD_WIDTH, "f")
        if not (layout.size or number):  # print_only_header's "# Avg Latency(us)" and print_stats' 17-wide average
            head += "# " + heading
            line += printf("%*.*f", layout.first_width, FLOAT_PRECISION, FIGURES[figure])
        elif kind == "d":
            head += printf("%*s", width, heading)
            line += printf("%*lu", width, FIGURES[figure])
        else:
            head += printf("%*s", width, heading)
            line += printf("%*.*f", width, FLOAT_PRECISION, FIGURES[figure])
    if "c" in values:
        head += printf("%*s", FIELD_WIDTH, "Validation")
        line += printf("%*s", FIELD_WIDTH, layout.passed)
    for percent in _osu_tails(values) if layout.tails else []:
        unit = "Tail BW(MB/s)" if layout.tails == "BW" else "Tail Lat(us)"
        head += printf("%*sP%d " + unit, FIELD_WIDTH - len("Px " + unit) - (percent > 9), "", percent)
        figure = f"bw_win_p{percent:g}_MBps" if layout.tails == "BW" else f"lat_p{percent:g}_us"
        line += printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, FIGURES[figure])
    before = [text.format(T=datatype, pairs=1, W=64) for text in layout.before]
    return above, [*before, head], line


@pytest.mark.parametrize(("name", "line"), _layout_cases())
def test_every_shims_layout_is_osus_printf_layout(name, line):
    request = osu_shims.parse(name, line.split())
    bench, argv = request.bench, osu_shims.run_argv(request, "OUT")

    def after(flag):
        return argv[argv.index(flag) + 1] if flag in argv else ""

    percentiles = tuple(float(p) for p in after("--osu-percentiles").split(",") if p)
    columns = osu_text.Columns("-c" in argv, "--osu-full" in argv, percentiles, after("--osu-datatype"))
    columns = replace(columns, rate="--osu-no-rate" not in argv, transport_options=osu_shims.run_options(bench))
    kernel = get_kernel(bench.kernel).with_datatype(columns.datatype)
    osu_text.check_columns(kernel, columns, bench.transport)  # what the run's plan checks: nothing refused
    row = {"kernel": bench.kernel, "status": "ok", "size_B": 64 if kernel.moves_data else 0, "ranks": GRAPH_RANKS}
    row |= FIGURES | {"validation": "pass"}
    text = osu_text.header(bench.transport, bench.kernel, 64, 1, columns)
    if osu_text.prints_topology(bench.kernel):  # what the reporter prints once the first row holds the graph's time
        text = osu_text.with_topology(text, row)
    lines = text.splitlines()
    expected_above, expected_head, expected_line = _osu_prints(name, request.values, columns, kernel.osu_datatype)
    assert lines[0].startswith("# fabricbench ")  # the one line that names fabricbench, before all of OSU's
    assert lines[1:] == [*expected_above, "# " + LAYOUT_OF[name][1] % "" + " v7.4", *expected_head]
    assert osu_text.line(row, columns) == expected_line


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


def osu(shims, tmp_path, name: str, *args: str, env: dict | None = None, ranks: int = 2):
    """``mpiexec -n 2 NAME ARGS`` with the shims on PATH, in an empty working directory that must stay empty (OSU
    leaves it as it was), the results root $FABRICBENCH_OSU_RESULTS = tmp_path/results unless ``env`` says
    otherwise; returns the run and its results folder (or None)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    before = sorted(cwd.iterdir())
    run_env = clean_env({"PATH": f"{shims}:{MPIEXEC.rsplit('/', 1)[0]}:/usr/bin:/bin"})
    run_env.update({"FABRICBENCH_OSU_RESULTS": str(tmp_path / "results")} if env is None else env)
    run = subprocess.run(
        [MPIEXEC, "-n", str(ranks), name, *args], capture_output=True, text=True, timeout=120, env=run_env, cwd=cwd
    )
    assert sorted(cwd.iterdir()) == before, "a shim left something in the working directory"
    found = RESULTS_LINE.search(run.stderr)
    return run, (found["dir"] if found else None)


def _data(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if not line.startswith("#")]


def _data_lines(stdout: str) -> list[str]:
    """The lines that hold figures: not comments, nor the blank line of a non-blocking program's preamble."""
    return [line for line in stdout.splitlines() if line and not line.startswith("#")]


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
            "-T mpi_double: OSU 7.4 knows mpi_char, mpi_int, mpi_float and all",
        ),
        ("osu_latency", ["-m", "8", "-T", "mpi_double"], "-T mpi_double: OSU 7.4 knows mpi_char"),
        ("osu_latency", ["-m", "8", "-G", "tty"], "osu_latency: -G: graphs of per-iteration values"),
        ("osu_latency", ["-m", "8", "-f"], "osu_latency: invalid option -f"),
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
    assert run.returncode == 0 and run.stdout == "# OSU MPI Bandwidth Test v7.4\n"  # OSU's line, and nothing else


def test_shim_bw_tail_bandwidths_are_its_windows_rates(shims, tmp_path):
    # OSU's osu_bw -z: "P50 Tail BW(MB/s)" columns, each window's bytes over its time, smallest first.
    run, folder = osu(shims, tmp_path, "osu_bw", "-m", "4096:8192", "-x", "1", "-i", "20", "-W", "8", "-z")
    assert run.returncode == 0, run.stderr
    head = [line for line in run.stdout.splitlines() if line.startswith("# Size")]
    assert head == ["# Size      Bandwidth (MB/s) P50 Tail BW(MB/s) P90 Tail BW(MB/s) P99 Tail BW(MB/s)"]
    table = read_rows(folder)[0].set_index("size_B")
    for size, bw, p50, p90, p99 in _data(run.stdout):
        row = table.loc[int(size)]
        assert _printed(bw, row.bw_MBps) and _printed(p50, row.bw_win_p50_MBps)
        assert _printed(p90, row.bw_win_p90_MBps) and _printed(p99, row.bw_win_p99_MBps)
        # no window beats the fastest (the table's figures: the printed ones are rounded)
        assert row.bw_win_p50_MBps <= row.bw_win_p90_MBps <= row.bw_win_p99_MBps <= row.bw_peak_MBps * 1.000001
    for line in _data_lines(run.stdout):
        assert masked(line) == masked(as_osu_prints_it(line, 1, tails=3))


@pytest.mark.parametrize(("name", "ranks"), [("osu_bibw", 2), ("osu_put_bibw", 2), ("osu_mbw_mr", 4)])
def test_shim_tail_bandwidths_of_both_directions_and_of_every_pair_are_osus(shims, tmp_path, name, ranks):
    # OSU 7.4's -z here: P50/P90/P99 of rank 0's windows' rates, both directions' bytes on a bi-directional test,
    # rank 0's rate times the pairs on osu_mbw_mr: the table's bw_win_p* columns, after the figures. "-z 50,99" is
    # -z with OSU's default list, parsing stopping at 50,99, as OSU's getopt does.
    args = ["-m", "4096:8192", "-x", "1", "-i", "20", "-W", "8", "-z", "50,99"]
    run, folder = osu(shims, tmp_path, name, *args, ranks=ranks)
    assert run.returncode == 0, run.stderr
    values = ["MB/s", "Messages/s"] if name == "osu_mbw_mr" else ["Bandwidth (MB/s)"]
    head = printf("%-*s", 10, "# Size") + "".join(printf("%*s", FIELD_WIDTH, value) for value in values)
    for percent in (50, 90, 99):
        head += printf("%*sP%d Tail BW(MB/s)", FIELD_WIDTH - len("Px Tail BW(MB/s)") - 1, "", percent)
    assert [line for line in run.stdout.splitlines() if line.startswith("# Size")] == [head]
    table = read_rows(folder)[0].set_index("size_B")
    assert [int(d[0]) for d in _data(run.stdout)] == [4096, 8192]
    for line in _data_lines(run.stdout):
        fields = line.split()
        row = table.loc[int(fields[0])]
        tails = fields[1 + len(values) :]
        assert line == as_osu_prints_it(line, len(values), tails=3) and _printed(fields[1], row.bw_MBps)
        for printed, column in zip(tails, ("bw_win_p50_MBps", "bw_win_p90_MBps", "bw_win_p99_MBps"), strict=True):
            assert _printed(printed, row[column]), (column, printed, row[column])
        assert 0 < row.bw_win_p50_MBps <= row.bw_win_p90_MBps <= row.bw_win_p99_MBps


@pytest.mark.parametrize("full", [False, True])
def test_shim_barrier_prints_no_size_column_as_osu(shims, tmp_path, full):
    # osu_barrier on 4 ranks: OSU's "# Avg Latency(us)" header and its average alone, 17 wide (print_stats without
    # show_size), with -f its Min/Max/Iterations; -m is read and ignored, as OSU does.
    args = ["-m", "8", "-x", "2", "-i", "30", *(["-f"] if full else [])]
    run, folder = osu(shims, tmp_path, "osu_barrier", *args, ranks=4)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    head = "# Avg Latency(us)" + ("   Min Latency(us)   Max Latency(us)  Iterations" if full else "")
    assert lines[1:3] == ["# OSU MPI Barrier Latency Test v7.4", head]
    data = _data_lines(run.stdout)
    row = read_rows(folder)[0].iloc[0]
    assert len(data) == 1 and row.ranks == 4 and row.size_B == 0
    # The widths as OSU's formats give them, each figure the table's rounded (_printed: the CSV keeps 9 digits, so
    # re-printing it may land one unit off on a rounding edge).
    columns = [("lat_rank_avg_us", 17)] + ([("lat_rank_min_us", FIELD_WIDTH), ("lat_rank_max_us", FIELD_WIDTH)] * full)
    ends = [sum(width for _, width in columns[: i + 1]) for i in range(len(columns))]
    fields = [data[0][end - width : end] for (_, width), end in zip(columns, ends, strict=True)]
    assert all(re.fullmatch(r" *\d+\.\d{2}", field) for field in fields), data
    assert all(_printed(field, row[column]) for field, (column, _) in zip(fields, columns, strict=True)), data
    assert data[0][ends[-1] :] == (printf("%*lu", 12, 30) if full else ""), data


def test_shim_mbw_mr_without_rate_prints_mb_per_s_alone(shims, tmp_path):
    # osu_mbw_mr -R 0 on 4 ranks (2 pairs); its option string has no "+", so -R after the buffer places is read too.
    run, folder = osu(shims, tmp_path, "osu_mbw_mr", "-m", "64:128", "-x", "1", "-i", "5", "D", "D", "-R", "0", ranks=4)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[2:4] == ["# [ pairs: 2 ] [ window size: 64 ]", "# Datatype: MPI_CHAR."]
    assert lines[4] == printf("%-*s%*s", 10, "# Size", FIELD_WIDTH, "MB/s")
    table = read_rows(folder)[0].set_index("size_B")
    for size, mbps in _data(run.stdout):
        assert _printed(mbps, table.bw_MBps[int(size)])
    assert [int(d[0]) for d in _data(run.stdout)] == [64, 128]


def test_shim_latency_of_ints_moves_whole_ints_from_4_bytes(shims, tmp_path):
    run, folder = osu(shims, tmp_path, "osu_latency", "-m", "16", "-x", "1", "-i", "20", "-T", "mpi_int", "-c")
    assert run.returncode == 0, run.stderr
    assert "# Datatype: MPI_INT." in run.stdout.splitlines()
    rows, meta = read_rows(folder)
    assert [int(d[0]) for d in _data(run.stdout)] == [4, 8, 16] == sorted(rows.size_B)  # 1 and 2 B hold no int
    assert set(rows.validation) == {"pass"} and [s["datatype"] for s in meta["steps"]] == ["MPI_INT"]


@pytest.mark.parametrize("name", TABLED)
def test_every_shim_runs_under_mpiexec_and_prints_osus_layout(shims, tmp_path, name):
    # Each stand-in as a harness runs it: 2 ranks for a point-to-point or one-sided test, 4 for a collective; small
    # sizes, few iterations. Its lines are OSU's (the layout described above) and its figures the table's.
    bench = osu_shims.BENCHMARKS[name]
    kernel = get_kernel(bench.kernel)
    ranks = 4 if kernel.collective else 2
    run, folder = osu(shims, tmp_path, name, "-m", "1:8", "-x", "1", "-i", "5", ranks=ranks)
    assert run.returncode == 0, run.stderr
    layout = OSU_LAYOUTS[LAYOUT_OF[name][0]]
    columns = osu_text.Columns(
        datatype=osu_shims.osu_datatype(bench, {}) or "", transport_options=_method_options(bench)
    )
    above, expected_head, _ = _osu_prints(name, {}, columns, kernel.with_datatype(columns.datatype).osu_datatype)
    expected_head = [line.replace("pairs: 1 ]", f"pairs: {ranks // 2} ]") for line in expected_head]
    lines = run.stdout.splitlines()
    table = read_rows(folder)[0]
    assert (kernel.name in neighbor.NAMES) == bool(above)
    if above:  # OSU's grid and graph lines and print_preamble's empty line, before the title
        took = re.fullmatch(r"Time took to create topology graph:(\d+\.\d\d) us\.", lines[2])
        assert lines[1] == f"Dimensions size = {ranks} " and took and lines[3] == "", lines[1:4]
        # OSU's %.2f of the table's figure: one unit of the last place apart on a rounding edge
        assert float(took[1]) == pytest.approx(table.topology_us[0], abs=0.0101) and (table.topology_us > 0).all()
        lines = [lines[0], *lines[1 + len(above) :]]
    assert lines[0].startswith("# fabricbench ") and lines[1] == "# " + LAYOUT_OF[name][1] % "" + " v7.4"
    assert lines[2 : 2 + len(expected_head)] == expected_head
    data = _data_lines("\n".join(lines))
    if kernel.pattern == "fan":  # one host here: the fan kernels' rows refuse it, and no figure is printed
        assert data == [] and table.status.str.startswith("unsupported: ").all()
        assert table.status.str.contains("need ranks on 2 or more hosts; all 2 ranks are on").all()
        return
    assert len(data) == len(table) == (1 if not kernel.moves_data else len(set(table.size_B)))
    for line, (_, row) in zip(data, table.sort_values("size_B").iterrows(), strict=True):
        fields = line.split()
        if layout.size:
            rebuilt = printf("%-*d", 10, int(fields[0]))
            rebuilt += "".join(printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, float(f)) for f in fields[1:])
            assert int(fields[0]) == row.size_B
        else:
            rebuilt = printf("%*.*f", layout.first_width, FLOAT_PRECISION, float(fields[0]))
            rebuilt += "".join(printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, float(f)) for f in fields[1:])
        assert line == rebuilt  # OSU's widths, whatever the figures
        figures = fields[1:] if layout.size else fields
        assert len(figures) == len(layout.values)
        for value, (_, column, *_) in zip(figures, layout.values, strict=True):
            assert _printed(value, row[column]), (column, value, row[column])


def test_shim_persistent_collective_makes_mpi_4s_persistent_calls_and_validates(shims, tmp_path):
    # osu_gatherv_persistent on 4 ranks: OSU's persistent title, its run made with MPI_Gatherv_init (the method
    # column) and checked (-c); every shim's layout, the persistent ones' included, is the test above's.
    run, folder = osu(shims, tmp_path, "osu_gatherv_persistent", "-m", "16", "-x", "1", "-i", "5", "-c", ranks=4)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1:4] == [
        "# OSU MPI Gatherv Persistent Latency Test v7.4",
        "# Datatype: MPI_CHAR.",
        osu_column_header(["Avg Latency(us)"], validate=True),
    ]
    rows = read_rows(folder)[0]
    assert set(rows.method) == {"c loop, persistent"} and set(rows.validation) == {"pass"} and (rows.ranks == 4).all()
    assert [int(d[0]) for d in _data(run.stdout)] == [1, 2, 4, 8, 16] == sorted(rows.size_B)
    for line in _data_lines(run.stdout):
        assert line == as_osu_prints_it(line, 1, validate=True)


# --- the programs with a layout of their own (OWN_LAYOUTS) -----------------------------------------------------


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
    assert lines[1:7] == [
        "# Number of Sender threads: 2 ",
        "# Number of Receiver threads: 2",
        "",  # print_preamble's empty line, before the title
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
    assert lines[1:7] == [
        "# Number of forked processes in sender: 0",
        "# Number of forked processes in receiver: 2",
        "",  # print_preamble's empty line, before the title
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
