"""The MPI kernels timed in C: every kernel through the C loop with validation, the Python loop beside it,
the fallback without a compiler, and the C loop built against PyPI's Open MPI as well as its MPICH."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fabricbench.collectives import neighbor
from fabricbench.transports import transport_class
from support import BIN, REPO, clean_env, fabricbench, read_rows

# Every mpi kernel but congestion, whose C loops tests/test_congestion.py runs (it has no Python loop to compare),
# bisection, whose two-way step has no C loop yet (tests/test_bisection.py runs it), and the neighbourhood
# collectives, C only and with no persistent form (tests/test_icollectives.py runs them), and the fan kernels, which
# need ranks on two or more hosts (tests/test_fan_netns.py runs them).
FAN = {"bw-fan-in", "bw-fan-out"}
MPI_KERNELS = sorted(transport_class("mpi").kernels - {"congestion", "bisection"} - neighbor.NAMES - FAN)
RMA_KERNELS = sorted(transport_class("mpi-rma").kernels)
# Timed in C only (their rows say unsupported with --loop python): threads, forks, and the one-sided kernels beyond
# lock/flush Put and Get; init and hello time MPI_Init, in no loop.
C_ONLY = {"latency-mt", "latency-mp", "acc", "get-acc", "fop", "cas", "put-bibw"}
NO_LOOP = {"init", "hello"}
TWO_RANKS_ONLY = {"latency-mp"}  # its barrier each round trip takes the whole job (tests/test_mpi_threads.py)
# 4 B to 512 B: every kernel and both element types at a few sizes, checked; the C loops and the Python loop alike.
QUICK = ["-m", "4:512", "-i", "20", "-x", "2", "-W", "8", "-c", "--format", "none"]


def _measured(out: Path):
    rows, meta = read_rows(out)
    return rows[rows.status == "ok"], meta


def test_every_mpi_kernel_runs_in_the_c_loop_and_validates(tmp_path):
    # --method persistent here: the default calls (blocking, OSU's) run in the C loop and validate in
    # test_mpi_kernels.py, every kernel but the all-pairs ones, which test_pairs.py runs.
    out, method = tmp_path / "run", "persistent"
    transports = ["mpi", "mpi-rma"]
    kernels = ",".join(MPI_KERNELS + (RMA_KERNELS if "mpi-rma" in transports else []))
    result = fabricbench(
        "run", "-t", ",".join(transports), "-k", kernels, "--loop", "c", "--method", method, "--np", "4",
        "--out", str(out), *QUICK, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = _measured(out)
    expected = {("mpi", k) for k in MPI_KERNELS} | {("mpi-rma", k) for k in RMA_KERNELS if "mpi-rma" in transports}
    expected -= {("mpi", k) for k in TWO_RANKS_ONLY}
    assert set(zip(rows.transport, rows.kernel, strict=True)) == expected
    assert (rows[~rows.kernel.isin(NO_LOOP)].validation == "pass").all()
    mpi = rows[(rows.transport == "mpi") & ~rows.kernel.isin(NO_LOOP | {"latency-mt"})]
    assert set(mpi.method) == {f"c loop, {method}"}, set(mpi.method)
    # get-acc's window is MPI_Win_create, osu_get_acc_latency's own default, and its method says so.
    rma_methods = {"c loop, lock/flush", "c loop, post/start/complete/wait", "c loop, lock/flush, MPI_Win_create"}
    assert set(rows[rows.transport == "mpi-rma"].method) <= rma_methods
    loop = meta["transports"]["mpi"]
    assert loop["timed_loop"] == "c loop" and loop["c_loop_wrapper"] and "MPICH" in loop["c_loop_built_against"]
    assert Path(loop["c_loop_library"]).is_file()


def test_the_python_loop_makes_the_same_rows_and_says_so(out):
    kernels = ",".join(MPI_KERNELS + RMA_KERNELS)
    result = fabricbench("run", "-t", "mpi,mpi-rma", "-k", kernels, "--loop", "python", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, meta = _measured(out)
    looped = set(MPI_KERNELS + RMA_KERNELS) - C_ONLY - NO_LOOP
    assert set(rows.kernel) == looped | NO_LOOP
    timed = rows[rows.kernel.isin(looped)]
    assert (timed.validation == "pass").all()
    assert set(timed.method) == {"python loop, blocking", "python loop, lock/flush"}
    every, _ = read_rows(out)
    said = every[every.status.str.contains("C loop only|timed in C only")]  # not the other transport's "has no" row
    assert set(said.kernel) == C_ONLY
    assert meta["transports"]["mpi"]["timed_loop"] == "python loop"


def _without_compiler(tmp_path: Path) -> dict:
    """PATH holds only the venv (its mpicc wrapper is there, the C compiler it calls is not), and a fresh cache."""
    return clean_env({"PATH": str(BIN), "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")})


def test_without_a_compiler_the_run_falls_back_with_one_notice(tmp_path):
    out = tmp_path / "run"
    result = fabricbench(
        "run", "-t", "mpi,mpi-rma", "-k", "latency,allreduce,put", "--out", str(out), *QUICK,
        env=_without_compiler(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if line.startswith("fabricbench: notice:")]
    assert len(notices) == 1 and "timed in Python" in notices[0] and "mpicc" in notices[0], result.stderr
    assert "Traceback" not in result.stderr
    rows, meta = _measured(out)
    assert set(rows.method) == {"python loop, blocking", "python loop, lock/flush"}
    assert (rows.validation == "pass").all()
    assert "mpicc" in meta["transports"]["mpi"]["c_loop_unavailable"]


def test_without_a_compiler_loop_c_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "run"
    result = fabricbench(
        "run", "-k", "latency", "--loop", "c", "--out", str(out), *QUICK, env=_without_compiler(tmp_path)
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fabricbench: error: --loop c: mpicc failed"), result.stderr
    assert not out.exists()


def test_the_c_loop_builds_and_runs_under_pypis_open_mpi(open_mpi_venv, tmp_path):
    out = tmp_path / "run"
    python = str(open_mpi_venv / "bin" / "python")
    env = clean_env({"PYTHONPATH": str(REPO / "src"), "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")})
    result = subprocess.run(
        [python, "-m", "fabricbench", "run", "-t", "mpi,mpi-rma", "-k", "latency,bw,allreduce,put",
         "--loop", "c", "--out", str(out), *QUICK],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = _measured(out)
    assert (rows.validation == "pass").all() and rows.method.str.startswith("c loop").all()
    assert "Open MPI" in meta["mpi_library_version"], meta["mpi_library_version"]
    loop = meta["transports"]["mpi"]
    assert loop["c_loop_wrapper"].startswith(str(open_mpi_venv)) and "Open MPI" in loop["c_loop_built_against"]
    assert json.loads((out / "metadata.json").read_text())["transports"]["mpi"]["timed_loop"] == "c loop"
    assert os.path.exists(loop["c_loop_library"])


# The rooted and v-variant collectives (tests/test_mpi_rooted_collectives.py runs them on MPICH).
ROOTED_AND_V = ["gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw"]


@pytest.mark.parametrize(("ranks", "method"), [(2, "blocking"), (4, "blocking"), (4, "persistent")])
def test_the_rooted_and_v_collectives_validate_under_pypis_open_mpi(open_mpi_venv, tmp_path, ranks, method):
    """Open MPI 5 reports MPI 3.1 but has MPI-4's persistent collectives: the C loop makes them there too."""
    out = tmp_path / "run"
    kernels = ",".join([*ROOTED_AND_V, "reduce_scatter_block", "allreduce"])
    env = clean_env({"PYTHONPATH": str(REPO / "src"), "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")})
    result = subprocess.run(
        [str(open_mpi_venv / "bin" / "python"), "-m", "fabricbench", "run", "-t", "mpi", "-k", kernels,
         "--np", str(ranks), "--loop", "c", "--method", method, "--out", str(out), *QUICK[:6], "-c",
         "--format", "none"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = _measured(out)
    assert "Open MPI" in meta["mpi_library_version"]
    assert set(rows.kernel) == {*ROOTED_AND_V, "reduce_scatter_block", "allreduce"} and (rows.ranks == ranks).all()
    assert (rows.validation == "pass").all() and (rows.method == f"c loop, {method}").all()
