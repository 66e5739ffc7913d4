"""The mpi and mpi-rma transports on real mpiexec ranks: rows, units, validation."""

from __future__ import annotations

import json
import math

import pytest

from fabricbench.measure.schema import COLUMNS
from support import fabricbench, mpiexec, read_rows

P2P = ["latency", "bw", "bibw", "msgrate", "multi-latency"]
COLLECTIVES = ["allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter", "barrier"]
RMA = ["put", "get", "put-bw", "get-bw"]
QUICK = ["-i", "30", "-x", "3", "-W", "8", "--format", "none"]


def test_self_launched_p2p_rows_units_and_validation(out):
    result = fabricbench("run", "-t", "mpi", "-k", ",".join(P2P), "-m", "0:64K", "-c", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    assert list(rows.columns) == COLUMNS
    assert set(rows.kernel) == set(P2P)
    assert (rows.status == "ok").all()
    assert (rows.validation == "pass").all()
    assert (rows.iterations == 30).all() and (rows.warmup == 3).all()
    assert (rows.ranks == 2).all()
    latency = rows[rows.kernel == "latency"]
    assert list(latency.size_B) == [0] + [2**k for k in range(17)]
    assert (latency["sample"] == "rtt/2").all() and (latency.method == "c loop, blocking").all()
    # Percentiles are ordered and in µs: a shared-memory round trip is well under a second.
    ordered = ["lat_min_us", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us"]
    assert (latency[ordered].diff(axis=1).iloc[:, 1:] >= 0).all().all()
    assert (latency.lat_p50_us > 0).all() and (latency.lat_p50_us < 1e6).all()
    assert latency.bw_MBps.isna().all()
    bw = rows[rows.kernel.isin(["bw", "bibw", "msgrate"])]
    nonzero = bw[bw.size_B > 0]
    assert (nonzero.bw_MBps > 0).all() and (nonzero.msgrate_per_s > 0).all()
    assert (bw.window == 8).all() and (bw["sample"] == "window").all()
    # bw_MBps is bytes / seconds / 1e6: one window of W messages per sample.
    big = rows[(rows.kernel == "bw") & (rows.size_B == 65536)].iloc[0]
    assert big.bw_MBps == pytest.approx(65536 * 8 / (big.lat_mean_us * 1e-6) / 1e6, rel=1e-3)
    assert meta["complete"] is True
    assert meta["launcher"].startswith("mpiexec")
    for key in (
        "mpi_library_version",
        "mpi_vendor",
        "mpi4py_version",
        "numpy_version",
        "python_version",
        "hosts",
        "cpu_model",
        "fabricbench_version",
        "command_line",
        "started_utc",
        "transparent_hugepage",
        "numpy_madvise_hugepage",
        "NUMPY_MADVISE_HUGEPAGE",
    ):
        assert meta[key] not in (None, ""), key
    assert all("cpu_affinity" in r and r["pid"] > 0 for r in meta["ranks"]) and len(meta["ranks"]) == 2
    assert "MPICH" in meta["mpi_library_version"]
    assert (out / "results.parquet").exists()


def test_collectives_on_four_ranks_validate_and_report_bus_bandwidth(out):
    result = mpiexec(
        4,
        "run",
        "-t",
        "mpi",
        "-k",
        ",".join(COLLECTIVES),
        "-m",
        "4:16K",
        "-c",
        "-i",
        "10",
        "-x",
        "2",
        "--out",
        str(out),
        "--format",
        "none",
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    assert (rows.validation == "pass").all(), rows[rows.validation != "pass"][["kernel", "size_B"]]
    assert (rows.ranks == 4).all() and meta["launcher"].startswith("mpiexec (hydra")
    ar = rows[(rows.kernel == "allreduce") & (rows.size_B == 16384)].iloc[0]
    seconds = ar.lat_rank_avg_us * 1e-6
    assert ar.algbw_GBps == pytest.approx(16384 / seconds / 1e9, rel=1e-6)
    assert ar.busbw_GBps == pytest.approx(ar.algbw_GBps * 2 * 3 / 4, rel=1e-6)
    ag = rows[(rows.kernel == "allgather") & (rows.size_B == 16384)].iloc[0]
    assert ag.algbw_GBps == pytest.approx(16384 * 4 / (ag.lat_rank_avg_us * 1e-6) / 1e9, rel=1e-6)
    assert ag.busbw_GBps == pytest.approx(ag.algbw_GBps * 3 / 4, rel=1e-6)
    assert (rows.lat_rank_min_us <= rows.lat_rank_avg_us).all()
    assert (rows.lat_rank_avg_us <= rows.lat_rank_max_us).all()
    assert list(rows[rows.kernel == "barrier"].size_B) == [0]


def test_one_sided_put_get_validate(out):
    result = fabricbench("run", "-t", "mpi-rma", "-k", ",".join(RMA), "-m", "1:4K", "-c", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert set(rows.kernel) == set(RMA)
    assert (rows.validation == "pass").all() and (rows.method == "c loop, lock/flush").all()
    assert (rows[rows.kernel.isin(["put-bw", "get-bw"])].bw_MBps > 0).all()


def test_corrupted_receive_buffer_fails_validation(out):
    result = fabricbench(
        "run",
        "-k",
        "allreduce,latency",
        "-m",
        "64:64",
        "-c",
        "--out",
        str(out),
        *QUICK,
        env={"FABRICBENCH_TEST_CORRUPT": "allreduce"},
    )
    assert result.returncode == 1
    assert "validation failed in 1 rows" in result.stderr
    rows, _ = read_rows(out)
    verdict = dict(zip(rows.kernel, rows.validation, strict=True))
    assert verdict == {"allreduce": "fail", "latency": "pass"}


def test_unsupported_kernel_is_a_row_not_a_number(out):
    result = fabricbench("run", "-t", "mpi", "-k", "put,allreduce", "-m", "1:8", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    put = rows[rows.kernel == "put"].iloc[0]
    assert put.status.startswith("unsupported: mpi has no put kernel")
    assert math.isnan(put.lat_p50_us) and math.isnan(put.bw_MBps)
    sizes = rows[rows.kernel == "allreduce"].set_index("size_B").status
    assert sizes[1].startswith("unsupported: size is not a multiple of the 4-byte element")
    assert sizes[4] == "ok" and sizes[8] == "ok"


def test_max_time_lowers_and_records_the_iteration_count(out):
    result = fabricbench(
        "run",
        "-k",
        "latency",
        "-m",
        "1M:1M",
        "-i",
        "100000",
        "-x",
        "2",
        "--max-time",
        "0.05",
        "--out",
        str(out),
        "--format",
        "none",
    )
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    assert 1 <= rows.iterations.iloc[0] < 100000
    assert meta["plan"]["max_time"] == 0.05


def test_blocking_method_is_recorded(out):
    result = fabricbench(
        "run", "-k", "latency,bw", "-m", "8:8", "--method", "blocking", "-c", "--out", str(out), *QUICK
    )
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert (rows.method == "c loop, blocking").all() and (rows.validation == "pass").all()


def test_metadata_names_the_hugepage_setting(out):
    result = fabricbench("run", "-k", "latency", "-m", "8:8", "--hugepages", "off", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["numpy_madvise_hugepage"] is False
