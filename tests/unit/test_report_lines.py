"""The text reports, line by line, on hand-made rows: the console table and OSU's exact layout.

OSU's layout is what existing scrapers read, so its strings are compared whole: titles and headers as
OSU 7.4 prints them, sizes as ``%-10d``, values as ``%20.2f`` (iterations ``%12d``).
"""

from __future__ import annotations

import math

import pytest

from fabricbench import __version__
from fabricbench.report import console, osu

LATENCY = {
    "kernel": "latency",
    "status": "ok",
    "size_B": 8,
    "iterations": 10000,
    "lat_min_us": 1.234,
    "lat_p50_us": 1.5,
    "lat_mean_us": 1.61,
    "lat_p99_us": 3.0,
    "lat_max_us": 12.346,
    "lat_stdev_us": 0.25,
    "validation": "pass",
    "note": "",
}
MSGRATE = {
    "kernel": "msgrate",
    "status": "ok",
    "size_B": 1024,
    "iterations": 100,
    "bw_MBps": 1234.567,
    "bw_peak_MBps": 2000.0,
    "msgrate_per_s": 1205632.4,
    "lat_p50_us": 53.1,
    "validation": "off",
    "note": "unstable: block medians vary by 12%",
}
BARRIER = {
    "kernel": "barrier",
    "status": "ok",
    "size_B": 0,
    "iterations": 1000,
    "lat_rank_avg_us": 3.5,
    "lat_rank_min_us": 3.25,
    "lat_rank_max_us": 3.75,
    "lat_p50_us": 3.4,
    "lat_p99_us": 5.0,
    "algbw_GBps": math.nan,
    "busbw_GBps": math.nan,
    "validation": "off",
}
UNSUPPORTED = {"kernel": "alltoall", "status": "unsupported: tcp has no alltoall kernel", "size_B": 8}


# --- console ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "kernel", "ranks", "title", "expected"),
    [
        (
            "mpi",
            "latency",
            2,
            "MPICH 4.2",
            "# mpi latency on 2 ranks - MPICH 4.2\n"
            "#  size(B)  iters    min us    p50 us   mean us    p99 us    max us  stdev us valid",
        ),
        (
            "tcp",
            "bw",
            2,
            "",  # a peer run has no MPI library to name
            "# tcp bw on 2 ranks\n#  size(B)  iters        MB/s   peak MB/s        msg/s p50 win us valid",
        ),
        (
            "mpi",
            "allreduce",
            4,
            "Open MPI 5.0",
            "# mpi allreduce on 4 ranks - Open MPI 5.0 (avg/min/max: over the ranks' means; p50/p99: over rank 0's "
            "iterations)\n"
            "#  size(B)  iters    avg us    min us    max us    p50 us    p99 us algbw GB/s busbw GB/s"
            " valid #wrong",
        ),
    ],
)
def test_console_header_names_the_run_and_right_aligns_the_columns(transport, kernel, ranks, title, expected):
    assert console.header(transport, kernel, ranks, title) == expected


def test_console_lines_line_up_under_the_header():
    assert (
        console.line(LATENCY) == "         8  10000      1.23      1.50      1.61      3.00     12.35      0.25  pass"
    )
    assert len(console.line(LATENCY)) == len(console.header("mpi", "latency", 2, "").splitlines()[1])
    # Messages per second without decimals; a note follows the row in brackets.
    assert console.line(MSGRATE) == (
        "      1024    100     1234.57     2000.00      1205632      53.10   off  (unstable: block medians vary by 12%)"
    )


def test_console_says_a_rows_share_of_its_link_after_the_figures():
    row = MSGRATE | {"kernel": "bw", "link": "eth0 10 Gb/s", "link_MBps": 1177.0, "link_pct": 94.6, "note": ""}
    assert console.line(row) == (
        "      1024    100     1234.57     2000.00      1205632      53.10   off  95 % of eth0 10 Gb/s"
    )
    assert console.line(row | {"link": ""}).endswith("  95 % of the link")
    assert console.line(row | {"link_pct": math.nan}).endswith("   off")  # no path known: nothing said


def test_console_prints_a_missing_value_as_a_dash():
    assert (
        console.line(BARRIER)
        == "         0   1000      3.50      3.25      3.75      3.40      5.00          -          -   off      -"
    )
    assert console.line(LATENCY | {"lat_p99_us": None, "lat_stdev_us": math.nan}) == (
        "         8  10000      1.23      1.50      1.61         -     12.35         -  pass"
    )


def test_an_in_place_row_says_so_after_its_figures_and_out_of_place_goes_unsaid():
    assert console.line(BARRIER | {"placement": "in-place"}).endswith("   off      -  (in place)")
    assert console.line(BARRIER | {"placement": "out-of-place", "note": "unstable"}).endswith("-  (unstable)")


def test_console_unsupported_row_is_a_comment_with_its_reason():
    assert console.line(UNSUPPORTED) == "# 8 B: unsupported: tcp has no alltoall kernel"
    assert console.line(UNSUPPORTED | {"size_B": None}) == "# unsupported: tcp has no alltoall kernel"


# --- OSU text -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "kernel", "window", "pairs", "expected"),
    [
        (
            "mpi",
            "latency",
            64,
            1,
            ["# OSU MPI Latency Test v7.4", "# Datatype: MPI_CHAR.", "# Size       Avg Latency(us)"],
        ),
        (
            "mpi",
            "bw",
            64,
            1,
            ["# OSU MPI Bandwidth Test v7.4", "# Datatype: MPI_CHAR.", "# Size      Bandwidth (MB/s)"],
        ),
        (
            "mpi",
            "msgrate",
            64,
            2,
            [
                "# OSU MPI Multiple Bandwidth / Message Rate Test v7.4",
                "# [ pairs: 2 ] [ window size: 64 ]",
                "# Datatype: MPI_CHAR.",
                "# Size                  MB/s        Messages/s",
            ],
        ),
        (
            "mpi",
            "allreduce",
            64,
            1,
            [
                "# OSU MPI Allreduce Latency Test v7.4",
                "# Datatype: MPI_FLOAT.",
                "# Size       Avg Latency(us)",
            ],
        ),
        (
            "mpi",
            "barrier",
            64,
            1,
            [
                "# OSU MPI Barrier Latency Test v7.4",
                "# Avg Latency(us)",  # no size column: OSU's show_size 0
            ],
        ),
        (
            "mpi-rma",
            "put",
            64,
            1,
            [
                "# OSU MPI_Put Latency Test v7.4",
                "# Window creation: MPI_Win_allocate",
                "# Synchronization: MPI_Win_flush",
                "# Datatype: MPI_CHAR.",
                "# Size          Latency (us)",
            ],
        ),
        (
            "mpi-rma",
            "get-bw",
            64,
            1,
            [
                "# OSU MPI_Get Bandwidth Test v7.4",
                "# Window creation: MPI_Win_allocate",
                "# Synchronization: MPI_Win_flush",
                "# Datatype: MPI_CHAR.",
                "# Size      Bandwidth (MB/s)",
            ],
        ),
        (
            "tcp",
            "latency",
            64,
            1,
            ["# OSU fabricbench tcp Latency Test v7.4", "# Datatype: MPI_CHAR.", "# Size       Avg Latency(us)"],
        ),
        (
            "tcp",
            "msgrate",
            16,
            4,
            [
                "# OSU fabricbench tcp Multiple Bandwidth / Message Rate Test v7.4",
                "# [ pairs: 4 ] [ window size: 16 ]",
                "# Datatype: MPI_CHAR.",
                "# Size                  MB/s        Messages/s",
            ],
        ),
    ],
)
def test_osu_header_is_osus_own_after_one_line_that_names_fabricbench(transport, kernel, window, pairs, expected):
    made_by, *lines = osu.header(transport, kernel, window, pairs).split("\n")
    assert made_by == f"# fabricbench {__version__} made this table, in the text layout of OSU Micro-Benchmarks v7.4"
    assert lines == expected


def test_osu_lines_use_osus_field_widths():
    # %-10d, then %*.*f with OSU's FIELD_WIDTH 18 (its configure.ac) and FLOAT_PRECISION 2
    assert osu.line(LATENCY) == "8                       1.61"
    assert osu.line(LATENCY | {"size_B": 4194304, "lat_mean_us": 1234.5678}) == "4194304              1234.57"
    assert osu.line({"kernel": "bw", "status": "ok", "size_B": 1, "bw_MBps": 0.4567}) == (
        "1                       0.46"
    )
    assert osu.line(MSGRATE) == "1024                 1234.57        1205632.40"
    assert osu.line(BARRIER) == "             3.50"  # no size column: OSU's average alone, 17 wide
    full = osu.Columns(full=True)
    assert osu.line(BARRIER, full) == "             3.50              3.25              3.75        1000"
    allreduce = BARRIER | {"kernel": "allreduce", "size_B": 4}
    assert osu.line(allreduce) == "4                       3.50"  # a collective without -f: the average alone
    put = {"kernel": "put", "status": "ok", "size_B": 64, "lat_mean_us": 0.875}
    assert osu.line(put) == "64                      0.88"


def test_osu_widths_hold_whatever_the_values():
    line = osu.line(
        BARRIER | {"kernel": "allreduce", "size_B": 1048576, "lat_rank_avg_us": 12345.678, "iterations": 100},
        osu.Columns(full=True),
    )
    assert [line[:10], line[10:28], line[28:46], line[46:64], line[64:]] == [
        "1048576   ",
        "          12345.68",
        "              3.25",
        "              3.75",
        "         100",
    ]


def test_osu_unsupported_row_is_a_comment():
    assert osu.line(UNSUPPORTED) == "# unsupported: tcp has no alltoall kernel"


# --- OSU's optional columns: -c, -f, -z, -T -----------------------------------------------------------------------

ALLREDUCE = BARRIER | {"kernel": "allreduce", "size_B": 8, "lat_p90_us": 4.125, "validation": "pass"}


def test_osu_validation_column_pass_or_fail_right_aligned():
    columns = osu.Columns(validate=True)
    assert osu.column_header("latency", columns) == "# Size       Avg Latency(us)        Validation"
    assert osu.line(LATENCY, columns) == "8                       1.61              Pass"
    assert osu.line(LATENCY | {"validation": "fail"}, columns).endswith("              Fail")
    bw = {"kernel": "bw", "status": "ok", "size_B": 1, "bw_MBps": 0.4567, "validation": "pass"}
    assert osu.line(bw, columns) == "1                       0.46              Pass"
    assert osu.column_header("bw", columns) == "# Size      Bandwidth (MB/s)        Validation"


def test_osu_collective_columns_in_osus_order_full_then_validation_then_tails():
    # OSU 7.4's print_only_header and print_stats_validate: Min, Max, Iterations, Validation, then P50...
    columns = osu.Columns(validate=True, full=True, percentiles=(50.0, 90.0))
    head = osu.column_header("allreduce", columns)
    assert head == (
        "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations"
        "        Validation  P50 Tail Lat(us)  P90 Tail Lat(us)"
    )
    line = osu.line(ALLREDUCE, columns)
    assert line == (
        "8                       3.50              3.25              3.75        1000"
        "              Pass              3.40              4.12"
    )
    assert len(line) == len(head) == 10 + 3 * 18 + 12 + 3 * 18
    # Without -f the tails follow the average directly.
    assert osu.line(ALLREDUCE, osu.Columns(percentiles=(99.0,))) == "8                       3.50              5.00"


def test_osu_tail_columns_of_a_latency_and_their_labels():
    columns = osu.Columns(percentiles=(50.0, 99.0, 99.9))
    assert osu.column_header("latency", columns) == (
        "# Size       Avg Latency(us)  P50 Tail Lat(us)  P99 Tail Lat(us)P99.9 Tail Lat(us)"
    )
    row = LATENCY | {"lat_p999_us": 7.0}
    assert (
        osu.line(row, columns) == "8                       1.61              1.50              3.00              7.00"
    )


def test_osu_datatype_line_names_minus_T_in_osus_capitals():
    lines = osu.header("mpi", "allreduce", 64, 1, osu.Columns(datatype="mpi_float")).splitlines()
    assert "# Datatype: MPI_FLOAT." in lines


def test_osu_header_of_cuda_buffers_is_osus_minus_d_cuda():
    on_gpu = osu.Columns(transport_options={"mpi": {"buffer": "cuda"}})
    latency = osu.header("mpi", "latency", 64, 1, on_gpu).splitlines()
    assert latency[1:3] == [
        "# OSU MPI-CUDA Latency Test v7.4",
        "# Send Buffer on DEVICE (D) and Receive Buffer on DEVICE (D)",
    ]
    allreduce = osu.header("mpi", "allreduce", 64, 1, on_gpu).splitlines()
    assert allreduce[1] == "# OSU MPI-CUDA Allreduce Latency Test v7.4"
    assert not any("Buffer on" in line for line in allreduce)  # OSU names buffer locations for point-to-point only
    put = osu.header("mpi-rma", "put", 64, 1, on_gpu).splitlines()
    assert put[1] == "# OSU MPI_Put Latency Test v7.4"  # mpi-rma's windows stay in host memory


def test_osu_columns_a_kernel_cannot_fill_are_refused():
    from fabricbench.errors import UsageError
    from fabricbench.measure.kernels import get_kernel

    with pytest.raises(UsageError, match="-T.*allreduce sums MPI_CHAR, MPI_INT or MPI_FLOAT"):
        osu.check_columns(get_kernel("allreduce"), osu.Columns(datatype="mpi_double"), "mpi")
    with pytest.raises(UsageError, match="-T.*latency moves MPI_CHAR, MPI_INT or MPI_FLOAT"):
        osu.check_columns(get_kernel("latency"), osu.Columns(datatype="mpi_double"), "mpi")
    ints = get_kernel("latency").with_datatype("mpi_int")  # the bytes of ints, on any transport
    osu.check_columns(ints, osu.Columns(datatype="mpi_int"), "tcp")
    summing_chars = get_kernel("allreduce").with_datatype("mpi_char")
    osu.check_columns(summing_chars, osu.Columns(datatype="mpi_char"), "mpi")  # mpi sums OSU's default type
    with pytest.raises(
        UsageError,
        match=r"mpi_char.*allreduce on tcp: tcp sums MPI_FLOAT only \(mpi sums MPI_CHAR, MPI_INT or MPI_FLOAT\)$",
    ):
        osu.check_columns(summing_chars, osu.Columns(datatype="mpi_char"), "tcp")
    osu.check_columns(get_kernel("allreduce"), osu.Columns(datatype="mpi_float"), "tcp")  # its own type
    with pytest.raises(UsageError, match="barrier: it moves no data"):
        osu.check_columns(get_kernel("barrier"), osu.Columns(datatype="MPI_CHAR"), "mpi")
    for windowed in ("bw", "bibw", "msgrate", "bw-fan-in"):  # OSU's tail bandwidths, its definition for each
        osu.check_columns(get_kernel(windowed), osu.Columns(percentiles=(50.0,)), "mpi")
    with pytest.raises(UsageError, match=r"P99.9 \(-z\) for bw: the table keeps P50, P90, P99 of windows"):
        osu.check_columns(get_kernel("bw"), osu.Columns(percentiles=(99.9,)), "mpi")
    osu.check_columns(get_kernel("latency"), osu.Columns(True, False, (50.0,), "mpi_char"), "mpi")  # all fine


@pytest.mark.parametrize(
    ("text", "expected"),
    [("50,90,99", (50.0, 90.0, 99.0)), ("99.9", (99.9,)), ("90,50,90", (90.0, 50.0))],
)
def test_osu_percentile_lists(text, expected):
    assert osu.parse_percentiles(text) == expected


@pytest.mark.parametrize(("text", "problem"), [("50,95", "95 is not kept"), ("p50", "'p50' is not a number")])
def test_osu_percentile_lists_refused(text, problem):
    from fabricbench.errors import UsageError

    with pytest.raises(UsageError, match=problem):
        osu.parse_percentiles(text)


def test_osu_tail_bandwidths_are_the_windows_rates_smallest_first():
    from fabricbench.lazy import np
    from fabricbench.measure.stats import window_bandwidths

    # 100 windows of 1 MB: 1 ms to 100 ms, so 1000 MB/s down to 10 MB/s; OSU sorts the rates up and takes
    # sorted[round(N p / 100) - 1]: P50 is the 50th smallest rate, P99 the 99th.
    samples = np.arange(1, 101, dtype=np.int64) * 1_000_000
    rates = sorted(1_000_000 / (samples / 1e9) / 1e6)
    assert window_bandwidths(samples, 1_000_000) == {
        "bw_win_p50_MBps": rates[49],
        "bw_win_p90_MBps": rates[89],
        "bw_win_p99_MBps": rates[98],
    }
    assert window_bandwidths(np.array([0, 5], dtype=np.int64), 8) == {}  # a window timed at 0 ns has no rate
    columns = osu.Columns(percentiles=(50.0, 99.0))
    assert osu.column_header("bw", columns) == "# Size      Bandwidth (MB/s) P50 Tail BW(MB/s) P99 Tail BW(MB/s)"
    row = {"kernel": "bw", "status": "ok", "size_B": 8, "bw_MBps": 1.5, "bw_win_p50_MBps": 1.0}
    assert osu.line(row | {"bw_win_p99_MBps": 3.0}, columns) == f"{8:<10}{1.5:18.2f}{1.0:18.2f}{3.0:18.2f}"
    # A loop whose windows do not hold their transit keeps no window rates: OSU's column says nan, not a figure.
    assert osu.line(row, columns) == f"{8:<10}{1.5:18.2f}{1.0:18.2f}{'nan':>18}"


def test_a_window_bandwidth_above_the_link_is_refused_with_the_peak():
    from fabricbench.measure.rows import refuse_impossible

    row = {"bw_MBps": 900.0, "bw_peak_MBps": 1500.0, "bw_win_p50_MBps": 950.0, "bw_win_p99_MBps": 1400.0}
    refuse_impossible(row, 1, 1, 1000.0)
    assert math.isnan(row["bw_peak_MBps"]) and math.isnan(row["bw_win_p99_MBps"])
    assert row["bw_win_p50_MBps"] == 950.0 and row["bw_MBps"] == 900.0 and "bw_win_p99_MBps 1400" in row["note"]
