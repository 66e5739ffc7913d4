"""OSU's one-sided options and the start-up programs' lines, without processes: what mpi-rma's -w and -s mean, and
the lines osu_init, osu_hello and the persistent tests print."""

from __future__ import annotations

import pytest

from fabricbench.measure.kernels import get_kernel
from fabricbench.report import osu
from fabricbench.transports.mpi.rma import MPIRMATransport, default_sync, operand, rma_op, sync_reason

INIT_ROW = {"kernel": "init", "status": "ok", "ranks": 4, "lat_rank_min_us": 119999.9, "lat_rank_max_us": 163000.0}
INIT_ROW |= {"lat_rank_avg_us": 141500.5, "size_B": 0}


@pytest.mark.parametrize(
    ("kernel", "op", "sync"),
    [("put", "put", "flush"), ("get-bw", "get", "flush"), ("put-bibw", "put", "pscw"), ("get-acc", "get_acc", "flush")],
)
def test_each_kernel_names_its_operation_and_osus_default_sync(kernel, op, sync):
    assert rma_op(get_kernel(kernel)) == op
    assert default_sync(get_kernel(kernel)) == sync


def test_put_bibw_takes_active_syncs_only_and_fence_needs_two_ranks():
    bibw, acc = get_kernel("put-bibw"), get_kernel("acc")
    assert "pscw or fence" in sync_reason(bibw, "flush", 2)
    assert sync_reason(bibw, "pscw", 4) is None and sync_reason(bibw, "fence", 2) is None
    assert "2 ranks" in sync_reason(acc, "fence", 4)
    assert sync_reason(acc, "lock_all", 4) is None


def test_the_sums_operands_cannot_overflow_a_signed_char_in_the_check():
    for rank in range(8):
        data = operand("acc", 4096, rank)
        assert data.min() >= 1 and 2 * int(data.max()) <= 127
    assert operand("fop", 8, 3).view("i8")[0] == 104  # one int64, small: its sums never overflow
    assert operand("put", 64, 0).tolist() != operand("put", 64, 1).tolist()


@pytest.mark.parametrize(
    ("kernel", "options", "lines"),
    [
        ("put", {}, ["# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_flush"]),
        (
            "put-bibw",
            {},
            ["# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_post/start/complete/wait"],
        ),
        (
            "acc",
            {"rma": {"window": "dynamic", "sync": "lock_all"}},
            ["# Window creation: MPI_Win_create_dynamic", "# Synchronization: MPI_Win_lock_all/unlock_all"],
        ),
        (
            "cas",
            {"rma": {"window": "create", "sync": "lock"}},
            ["# Window creation: MPI_Win_create", "# Synchronization: MPI_Win_lock/unlock"],
        ),
    ],
)
def test_the_window_and_sync_lines_say_what_ran(kernel, options, lines):
    assert MPIRMATransport.osu_header_lines(get_kernel(kernel), options) == lines


def test_get_acc_prints_no_datatype_line_and_the_atomics_say_passed():
    lines = osu.header("mpi-rma", "get-acc", 64, 1).splitlines()
    assert lines[1:] == [
        "# OSU MPI_Get_accumulate latency Test v7.4",
        "# Window creation: MPI_Win_create",  # osu_get_acc_latency's own default
        "# Synchronization: MPI_Win_flush",
        "# Size          Latency (us)",
    ]
    row = {"kernel": "fop", "status": "ok", "size_B": 8, "lat_mean_us": 0.5, "validation": "pass"}
    assert osu.line(row, osu.Columns(validate=True)) == f"{8:<10d}{0.5:18.2f}{'passed':>18}"  # OSU: "%-*d%*.*f%*s"


def test_osu_init_and_hello_print_their_one_line_under_their_title():
    assert osu.header("mpi", "init", 64, 1).splitlines()[1:] == ["# OSU MPI Init Test v7.4"]
    assert osu.line(INIT_ROW) == "nprocs: 4, min: 119 ms, max: 163 ms, avg: 141 ms"
    assert osu.header("mpi", "hello", 64, 1).splitlines()[1:] == ["# OSU MPI Hello World Test v7.4"]
    assert osu.line(INIT_ROW | {"kernel": "hello"}) == "This is a test with 4 processes"


@pytest.mark.parametrize(
    ("kernel", "words"),
    [
        ("latency", "Latency Persistent Test"),
        ("bw", "Bandwidth Persistent Test"),
        ("bibw", "Bi-Directional Bandwidth Persistent Test"),
    ],
)
def test_the_persistent_method_titles_as_osus_persistent_programs(kernel, words):
    persistent = {"mpi": {"method": "persistent"}}
    assert osu.title("mpi", kernel, transport_options=persistent) == f"# OSU MPI {words} v7.4"
    assert "Persistent" not in osu.title("mpi", kernel)
    # a persistent collective says it before "Latency Test", as osu_allreduce_persistent
    assert (
        osu.title("mpi", "allreduce", transport_options=persistent)
        == "# OSU MPI Allreduce Persistent Latency Test v7.4"
    )


def test_osu_latency_mt_threads_are_senders_then_receivers():
    from argparse import ArgumentTypeError

    from fabricbench.transports.mpi.transport import thread_counts

    assert thread_counts("2:3") == [2, 3] and thread_counts("4") == [1, 4]  # OSU's -t RECV: one sender
    for bad in ("0:2", "2:", "a:b", "1:2:3", "129"):
        with pytest.raises(ArgumentTypeError, match="SENDERS:RECEIVERS"):
            thread_counts(bad)


def test_osu_latency_mt_prints_its_thread_counts_before_its_title():
    options = {"mpi": {"threads": [2, 3]}}
    lines = osu.header("mpi", "latency-mt", 64, 1, osu.Columns(transport_options=options)).splitlines()
    assert lines[1:] == [
        "# Number of Sender threads: 2 ",
        "# Number of Receiver threads: 3",
        "",  # OSU's print_preamble: an empty line, then the title
        "# OSU MPI Multi-threaded Latency Test v7.4",
        "# Size          Latency (us)",
        "# Datatype: MPI_CHAR.",
    ]


def test_osu_latency_mp_counts_forked_processes_and_prints_10_wide_without_minus_c():
    from argparse import ArgumentTypeError

    from fabricbench.transports.mpi.transport import process_counts

    assert process_counts("0:2") == [0, 2] and process_counts("3") == [0, 3]
    with pytest.raises(ArgumentTypeError, match="forked processes"):
        process_counts("1:0")
    options = {"mpi": {"processes": [1, 3]}}
    lines = osu.header("mpi", "latency-mp", 64, 1, osu.Columns(transport_options=options)).splitlines()
    assert lines[1:] == [
        "# Number of forked processes in sender: 1",
        "# Number of forked processes in receiver: 3",
        "",  # OSU's print_preamble: an empty line, then the title
        "# OSU MPI Multi-process Latency Test v7.4",
        "# Size          Latency (us)",
        "# Datatype: MPI_CHAR.",
    ]
    row = {"kernel": "latency-mp", "status": "ok", "size_B": 8, "lat_mean_us": 1.5, "validation": "pass"}
    assert osu.line(row) == f"{8:<10d}{1.5:10.2f}"  # OSU: "%-*d" 10, then "%*.*f" 10 wide
    assert osu.line(row, osu.Columns(validate=True)) == f"{8:<10d}{1.5:18.2f}{'Pass':>18}"


def test_a_neighbourhood_header_names_the_grid_and_the_graphs_creation_time_before_the_title():
    header = osu.header("mpi", "neighbor_allgather", 64, 1)
    made, title = header.splitlines()[:2]
    assert osu.prints_topology("neighbor_alltoallw") and not osu.prints_topology("allgather")
    shown = osu.with_topology(header, {"ranks": 6, "topology_us": 12.345}).splitlines()
    graph = ["Dimensions size = 6 ", "Time took to create topology graph:12.35 us.", ""]  # and print_preamble's line
    assert shown[:5] == [made, *graph, title]
    assert shown[5:] == header.splitlines()[2:]
    assert osu.with_topology(header, {"ranks": 2, "topology_us": float("nan")}) == header  # no graph: unsupported


def test_fop_and_cas_take_osus_types_as_their_one_element_on_mpi_rma_only():
    from fabricbench.errors import UsageError
    from fabricbench.transports.mpi.rma import atomic_element

    fop = get_kernel("fop")
    assert fop.osu_datatypes == ("MPI_LONG_LONG", "MPI_CHAR", "MPI_INT", "MPI_FLOAT")
    char = fop.with_datatype("mpi_char")
    assert (char.min_size, char.max_size, char.osu_datatype) == (1, 1, "MPI_CHAR")
    assert atomic_element(char) == ("i1", 2) and atomic_element(fop) == ("i8", 0)
    assert atomic_element(fop.with_datatype("MPI_FLOAT"))[0] == "f4"
    for rank in range(8):  # a signed char's two sums in the check stay below 127
        assert 1 <= operand("fop", 1, rank, "i1").view("i1")[0] <= 63
    osu.check_columns(char, osu.Columns(datatype="MPI_CHAR"), "mpi-rma")
    with pytest.raises(UsageError, match="MPI_Compare_and_swap takes integers"):
        osu.check_columns(get_kernel("cas").with_datatype("MPI_FLOAT"), osu.Columns(datatype="MPI_FLOAT"), "mpi-rma")
    with pytest.raises(UsageError, match="on verbs: its atomics take MPI_LONG_LONG only"):
        osu.check_columns(char, osu.Columns(datatype="MPI_CHAR"), "verbs")


def test_the_atomic_programs_summarise_each_ranks_validation_after_the_table_with_c():
    checked = osu.Columns(validate=True)
    said = osu.validation_summary("fop", checked, ["pass"], 2).splitlines()
    rule = "-" * 43
    assert said == [rule, "Atomic Data Validation results for Rank=0:", said[2], rule] * 1 + said[4:]
    assert said[2] == "PASSED: All 1 combinations of ops and datatypes tested passed." and len(said) == 8
    assert said[5] == "Atomic Data Validation results for Rank=1:"
    assert "FAILED: 1 of the 1 combinations" in osu.validation_summary("cas", checked, ["pass", "fail"], 2)
    assert osu.validation_summary("fop", osu.Columns(), ["pass"], 2) == ""  # without -c OSU prints nothing more
    assert osu.validation_summary("put", checked, ["pass"], 2) == ""  # nor after a put's table
