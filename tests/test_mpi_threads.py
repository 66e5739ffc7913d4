"""latency-mt (osu_latency_mt) and latency-mp (osu_latency_mp) on real ranks: ping-pongs from several threads of
each rank at once with MPI at MPI_THREAD_MULTIPLE, and ping-pongs while each rank has forked idle processes, checked
with -c, under PyPI's MPICH (and latency-mt under Open MPI)."""

from __future__ import annotations

import subprocess

import pytest

from support import REPO, clean_env, fabricbench, read_rows

QUICK = ["-m", "0:256", "-i", "60", "-x", "6", "-c", "--format", "none"]


def _check(out, threads: str) -> None:
    rows, meta = read_rows(out)
    assert (rows.kernel == "latency-mt").all() and (rows.status == "ok").all()
    assert (rows.validation == "pass").all() and list(rows.size_B) == [0] + [2**k for k in range(9)]
    assert (rows.method == f"c loop, blocking, {threads} threads").all()
    assert (rows.lat_mean_us > 0).all() and (rows["sample"] == "rtt/2").all()
    assert meta["mpi_thread_level"] == "multiple"


@pytest.mark.parametrize("threads", ["1:2", "3:3"])
def test_latency_mt_runs_its_threads_at_thread_multiple(out, threads):
    result = fabricbench("run", "-t", "mpi", "-k", "latency-mt", "--mpi-threads", threads, "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    _check(out, threads)


def test_a_run_without_latency_mt_keeps_the_control_planes_thread_level(out):
    result = fabricbench("run", "-t", "mpi", "-k", "latency", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    assert read_rows(out)[1]["mpi_thread_level"] == "serialized"


def test_latency_mt_under_pypis_open_mpi(open_mpi_venv, tmp_path):
    out = tmp_path / "run"
    env = clean_env(
        {"PYTHONPATH": str(REPO / "src"), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    )
    result = subprocess.run(
        [str(open_mpi_venv / "bin" / "python"), "-m", "fabricbench", "run", "-n", "2", "-t", "mpi", "-k",
         "latency-mt", "--mpi-threads", "2:2", "--out", str(out), *QUICK],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check(out, "2:2")


def test_latency_mp_forks_idle_processes_and_reaps_them(out):
    result = fabricbench(
        "run", "-t", "mpi", "-k", "latency-mp", "--mpi-processes", "1:2", "--out", str(out), *QUICK
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert (rows.method == "c loop, blocking, 1:2 forked processes").all()
    assert meta["mpi_thread_level"] == "serialized"
    # Every forked process was killed and reaped with its case: none outlives the run.
    leftover = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert leftover.stdout == "", leftover.stdout


def test_latency_mp_says_why_it_does_not_run_on_four_ranks(out):
    result = fabricbench("run", "--np", "4", "-t", "mpi", "-k", "latency-mp", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert rows.status.str.startswith("unsupported: latency-mp's barrier before every round trip").all()
