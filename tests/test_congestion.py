"""The congestion kernel on real MPI ranks: every canary test beside every congestor pattern moves checked data,
its rows and key results are what GPCNeT reports, and a run that cannot place its ranks stops before any starts.

Ranks on one host share its cores, so no figure is asserted here: the testbed's shaped link
(tests/test_congestion_netns.py) is where an impact factor must show.
"""

from __future__ import annotations

import json
import math

import pytest

from support import fabricbench, one_error_line, read_rows

CANARY_TESTS = ["rr-latency", "rr-bw", "allreduce"]
CONGESTORS = ["all-to-all", "incast", "put-incast", "get-bcast"]
# Small and few: eight ranks busy-poll two cores.
SMALL = ["--canaries", "rr-latency,rr-bw:16K,allreduce", "-i", "20", "-x", "2", "--timeout", "60"]


def congestion_run(out, ranks: int, *extra: str):
    result = fabricbench(
        "run", "-n", str(ranks), "-t", "mpi", "-k", "congestion", "-c", "--out", str(out), *SMALL, *extra,
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
    ],
)
def test_a_run_that_cannot_place_its_ranks_stops_in_one_line_before_any_rank(tmp_path, ranks, extra, message):
    result = fabricbench("run", "-n", str(ranks), "-k", "congestion", "--out", str(tmp_path / "r"), *extra)
    assert result.returncode == 2
    one_error_line(result.stderr, message)
    assert not (tmp_path / "r").exists()


def test_a_transport_without_congestion_loops_says_unsupported(tmp_path):
    result = fabricbench("run", "-n", "4", "-t", "tcp", "-k", "congestion", "--out", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(tmp_path / "r")
    assert rows.status.tolist() == ["unsupported: tcp has no congestion kernel"]
