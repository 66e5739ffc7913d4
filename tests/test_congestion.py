"""The congestion kernel on real MPI ranks and over tcp: every canary test beside every congestor pattern moves
checked data, its rows and key results are what GPCNeT reports, a pattern a transport cannot run says why, and a run
that cannot place its ranks stops before any starts.

Ranks on one host share its cores, so no figure is asserted here: the testbed's shaped link
(tests/test_congestion_netns.py) is where an impact factor must show.
"""

from __future__ import annotations

import json
import math
import socket

import numpy as np
import pytest

from fabricbench.errors import PeerError
from fabricbench.measure.congestion import Role
from fabricbench.measure.congestion import Test as Asked
from fabricbench.transports.tcp import congestion as tcp_congestion
from fabricbench.transports.tcp import transport as tcp
from support import fabricbench, one_error_line, read_rows, run_cases_together

CANARY_TESTS = ["rr-latency", "rr-bw", "allreduce"]
CONGESTORS = ["all-to-all", "incast", "put-incast", "get-bcast"]
# Small and few: eight ranks busy-poll two cores.
SMALL = ["--canaries", "rr-latency,rr-bw:16K,allreduce", "-i", "20", "-x", "2", "--timeout", "60"]


def congestion_run(out, ranks: int, *extra: str, transport: str = "mpi"):
    result = fabricbench(
        "run", "-n", str(ranks), "-t", transport, "-k", "congestion", "-c", "--out", str(out), *SMALL, *extra,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_every_canary_beside_every_congestor_moves_intact_data_on_eight_ranks(tmp_path):
    result = congestion_run(tmp_path / "run", 8, "--congestors", ",".join(CONGESTORS))
    rows, meta = read_rows(tmp_path / "run")
    assert len(rows) == len(CANARY_TESTS) * (1 + len(CONGESTORS))
    assert list(zip(rows.congestor, rows.canary, strict=True)) == [
        (congestor, canary) for congestor in ["none", *CONGESTORS] for canary in CANARY_TESTS
    ]
    assert (rows.status == "ok").all() and (rows.validation == "pass").all(), rows[["canary", "congestor"]]
    assert (rows.canaries == 2).all() and (rows.ranks == 8).all()
    assert (rows.method.str.startswith("c loop")).all()
    isolated, congested = rows[rows.congestor == "none"], rows[rows.congestor != "none"]
    assert (isolated.congestors == 0).all() and isolated.cif_mean.isna().all() and isolated.congestor_MBps.isna().all()
    assert (congested.congestors == 6).all()
    # The congestors ran while the canaries were timed, and said how much they moved.
    assert (congested.congestor_MBps > 0).all(), congested[["canary", "congestor", "congestor_MBps"]]
    assert (congested.cif_mean > 0).all() and (congested.cif_p99 > 0).all()
    assert congested.note.str.startswith("congestors: c loop").all()
    latency = rows[rows.canary == "rr-latency"]
    assert (latency.size_B == 8).all() and (latency["sample"] == "rtt/2").all() and (latency.lat_p99_us > 0).all()
    bandwidth = rows[rows.canary == "rr-bw"]
    assert (bandwidth.size_B == 16384).all() and (bandwidth.window == 8).all()
    assert (bandwidth.bw_p99_MBps <= bandwidth.bw_p50_MBps).all() and (bandwidth.bw_MBps > 0).all()
    # The impact factor is the congested figure over the isolated one, from the figures in the rows.
    for _, row in congested[congested.canary == "rr-latency"].iterrows():
        alone = isolated[isolated.canary == "rr-latency"].iloc[0]
        assert math.isclose(row.cif_mean, row.lat_mean_us / alone.lat_mean_us, rel_tol=1e-6)  # as the CSV holds them
    placement = meta["congestion"]
    assert placement["seed"] == 1 and placement["placed_by"] == "ranks" and len(placement["canaries"]) == 2
    assert sorted(placement["canaries"] + placement["congestors"]) == list(range(8))
    # The console ends with GPCNeT's key results: a column pair per congestor, a line per canary test.
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("# Congestion impact factor")) :]
    assert table[2].split()[1:] == CONGESTORS
    assert [line.split("(")[0].strip() for line in table[4:7]] == [
        "RR Two-sided Lat",
        "RR Two-sided BW+Sync",
        "Multiple Allreduce",
    ]
    assert all(cell.endswith("x") for line in table[4:7] for cell in line.split(")")[1].split())


def test_mix_runs_the_four_patterns_at_once_on_quarters_of_the_congestors(tmp_path):
    congestion_run(tmp_path / "run", 10, "--canaries", "allreduce", "--congestors", "mix:1K", "-i", "10")
    rows, meta = read_rows(tmp_path / "run")
    assert list(rows.congestor) == ["none", "mix"] and (rows.validation == "pass").all()
    assert rows.congestors.tolist() == [0, 8] and rows.congestor_MBps.iloc[1] > 0
    for calls in ("MPI_Alltoall", "MPI_Send to the first rank", "MPI_Put", "MPI_Get"):  # each quarter's pattern
        assert calls in rows.note.iloc[1], rows.note.iloc[1]
    assert json.dumps(meta["congestion"])  # the placement is recorded


@pytest.mark.parametrize(
    ("ranks", "extra", "message"),
    [
        (3, [], "kernel 'congestion' needs at least 4 ranks, got 3"),
        (5, ["--canary-fraction", "0.7"], "congestion needs at least 6 ranks: 4 canaries at --canary-fraction 0.7"),
        (8, ["--congestors", "incast,mix"], "congestion needs at least 10 ranks"),
        (4, ["--canaries", "rr-lat"], "unknown canary 'rr-lat'; known: rr-latency, rr-bw, allreduce"),
        (4, ["--canary-fraction", "0"], "--canary-fraction"),
        (4, ["--congestion-placement", "cross-switch"], "--congestion-placement cross-switch needs a topology"),
    ],
)
def test_a_run_that_cannot_place_its_ranks_stops_in_one_line_before_any_rank(tmp_path, ranks, extra, message):
    result = fabricbench("run", "-n", str(ranks), "-k", "congestion", "--out", str(tmp_path / "r"), *extra)
    assert result.returncode == 2
    one_error_line(result.stderr, message)
    assert not (tmp_path / "r").exists()


def test_a_placement_by_switch_on_hosts_under_one_switch_is_an_unsupported_row_naming_why(tmp_path):
    topology = tmp_path / "topology.conf"
    topology.write_text(f"SwitchName=leaf1 Nodes={socket.gethostname()}\nSwitchName=spine Switches=leaf1\n")
    result = fabricbench(
        "run", "-n", "4", "-k", "congestion", "--congestion-placement", "within-switch", "--topology", str(topology),
        "--out", str(tmp_path / "r"), "--format", "none",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(tmp_path / "r")
    assert rows.status.unique().tolist() == [
        "unsupported: --congestion-placement within-switch needs units under at least 2 switches; all are under leaf1"
    ]


def test_tcp_runs_every_canary_beside_all_to_all_and_incast_and_says_why_not_the_one_sided_patterns(tmp_path):
    congestion_run(tmp_path / "run", 8, "--congestors", ",".join(CONGESTORS), transport="tcp")
    rows, meta = read_rows(tmp_path / "run")
    measured, refused = rows[rows.status == "ok"], rows[rows.status != "ok"]
    assert list(zip(measured.congestor, measured.canary, strict=True)) == [
        (congestor, canary) for congestor in ["none", "all-to-all", "incast"] for canary in CANARY_TESTS
    ]
    assert (measured.validation == "pass").all(), measured[["canary", "congestor", "validation"]]
    assert (measured.canaries == 2).all() and (measured.transport == "tcp").all()
    assert measured.method.str.startswith("c loop").all()  # CI has a compiler: the tcp C loops run
    congested = measured[measured.congestor != "none"]
    assert (congested.congestors == 6).all() and (congested.congestor_MBps > 0).all()
    assert (congested.cif_mean > 0).all() and congested.note.str.contains("stop agreed through the first rank").all()
    assert list(zip(refused.congestor, refused.canary, strict=True)) == [
        (congestor, canary) for congestor in ["put-incast", "get-bcast"] for canary in CANARY_TESTS
    ]
    assert set(refused.status) == {
        "unsupported: TCP sockets have no one-sided put (put-incast runs on mpi)",
        "unsupported: TCP sockets have no one-sided get (get-bcast runs on mpi)",
    }
    assert meta["congestion"]["canaries"]  # the placement is recorded


def test_a_transport_without_congestion_loops_says_unsupported(tmp_path):
    result = fabricbench("run", "-n", "4", "-t", "mpi-rma", "-k", "congestion", "--out", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(tmp_path / "r")
    assert rows.status.tolist() == ["unsupported: mpi-rma has no congestion kernel"]


def test_the_tcp_c_loop_moves_large_windows_both_ways_on_one_socket_and_names_a_silent_or_closed_peer():
    """Two canaries (left == right) on a socket pair, in this process: rr-bw's windows of 100 kB cannot deadlock,
    land each on its side and leave the socket clean; a silent peer is a timeout naming it, a closed one says so."""
    try:
        module = tcp.load_c_loop().module
    except tcp.CLoopUnavailable as exc:
        pytest.skip(f"no tcp C loop here: {exc}")
    a, b = socket.socketpair()
    try:
        cases = [
            tcp_congestion.Canary({1: a}, Role(0, Asked("rr-bw", 100_000), (0, 1), ()), 5.0, module),
            tcp_congestion.Canary({0: b}, Role(1, Asked("rr-bw", 100_000), (0, 1), ()), 5.0, module),
        ]
        assert run_cases_together(cases) == []  # seconds to spare: a loaded host may leave a thread unscheduled
        assert all(np.array_equal(case.received, case.expected()) for case in cases)
        assert cases[0].method.startswith("c loop")
        for sock in (a, b):
            with pytest.raises(BlockingIOError):
                sock.recv(1, socket.MSG_DONTWAIT)
        cases[0].timeout = 0.3  # the silent peer: waited for as briefly as the caller asks
        with pytest.raises(PeerError, match=r"rr-bw at 100000 B: timed out after 0.3 s waiting for rank 1$"):
            cases[0].run(1, memoryview(np.zeros(1, np.int64)))
        b.close()
        with pytest.raises(PeerError, match=r"rank 1 (closed the connection|.*lost)"):
            cases[0].run(1, memoryview(np.zeros(1, np.int64)))
    finally:
        a.close()
        b.close()
