"""mpi-rma's one-sided kernels under every window creation and synchronisation OSU's -w and -s name, checked with -c,
on real mpiexec ranks: PyPI's MPICH at 2 and 4 ranks, and PyPI's Open MPI."""

from __future__ import annotations

import subprocess

import pytest

from fabricbench.transports import transport_class
from support import PYTHON, REPO, clean_env, fabricbench, read_rows

RMA_KERNELS = sorted(transport_class("mpi-rma").kernels)
QUICK = ["-m", "1:256", "-i", "10", "-x", "2", "-W", "4", "-c", "--format", "none"]
METHODS = {
    "lock": "lock/unlock",
    "flush": "lock/flush",
    "flush_local": "lock/flush_local",
    "lock_all": "lock_all/unlock_all",
    "pscw": "post/start/complete/wait",
    "fence": "fence",
}
WINDOW_WORDS = {"allocate": "", "create": ", MPI_Win_create", "dynamic": ", MPI_Win_create_dynamic"}


def _check(out, sync: str | None, window: str, ranks: int) -> None:
    """Every kernel measured and checked under ``sync`` (None: OSU's defaults, pscw for put-bibw, else flush)."""
    rows, meta = read_rows(out)
    assert set(rows.kernel) == set(RMA_KERNELS)
    bibw = rows[rows.kernel == "put-bibw"]
    others = rows[rows.kernel != "put-bibw"]
    if sync in (None, "pscw", "fence"):
        measured = rows
        bibw_method = f"c loop, {METHODS[sync or 'pscw']}{WINDOW_WORDS[window]}"
        assert set(bibw.method) == {bibw_method}
    else:  # osu_put_bibw synchronises actively only: a row that says so, no figure
        assert bibw.status.str.startswith("unsupported: put-bibw synchronises actively").all()
        assert bibw.bw_MBps.isna().all()
        measured = others
    assert (measured.status == "ok").all(), measured[["kernel", "size_B", "status"]]
    assert (measured.validation == "pass").all(), measured[["kernel", "size_B", "validation"]]
    assert (measured.ranks == ranks).all()
    own = f"c loop, {METHODS[sync or 'flush']}{WINDOW_WORDS[window]}"
    assert set(measured[measured.kernel != "put-bibw"].method) == {own}
    # The atomics move one 8-byte element; every latency is a positive, physically possible figure.
    assert set(rows[rows.kernel.isin(["fop", "cas"])].size_B) == {8}
    latency = measured[measured["sample"] == "op"]
    assert (latency.lat_mean_us > 0).all() and (latency.lat_mean_us < 1e6).all()
    assert (measured[measured["sample"] == "window"].bw_MBps > 0).all()
    assert meta["transports"]["mpi-rma"]["rma_window"].startswith("MPI_Win_")


# Each synchronisation once and each window creation at least twice, every kernel in each launch.
@pytest.mark.parametrize(
    ("sync", "window"),
    [
        ("flush", "allocate"),
        ("lock", "create"),
        ("flush_local", "dynamic"),
        ("lock_all", "allocate"),
        ("pscw", "dynamic"),
        ("fence", "create"),
    ],
)
def test_every_one_sided_kernel_validates_under_each_sync_and_window(tmp_path, sync, window):
    out = tmp_path / "run"
    options = ["--rma-sync", sync, "--rma-window", window]
    result = fabricbench(
        "run", "-t", "mpi-rma", "-k", ",".join(RMA_KERNELS), *options, "--loop", "c", "--out", str(out), *QUICK,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check(out, sync, window, 2)


def test_four_ranks_pair_rank_0_with_rank_2_and_fence_says_why_it_does_not(tmp_path):
    out = tmp_path / "run"
    result = fabricbench(
        "run", "--np", "4", "-t", "mpi-rma", "-k", ",".join(RMA_KERNELS), "--rma-window", "dynamic", "--loop", "c",
        "--out", str(out), *QUICK, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check(out, None, "dynamic", 4)
    fenced = tmp_path / "fenced"
    result = fabricbench(
        "run", "--np", "4", "-t", "mpi-rma", "-k", "acc", "--rma-sync", "fence", "--out", str(fenced), *QUICK
    )
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(fenced)
    assert rows.status.str.startswith("unsupported: --rma-sync fence makes every rank of the window fence").all()


def test_the_python_loop_says_which_kernels_it_leaves_to_c(out):
    result = fabricbench("run", "-t", "mpi-rma", "-k", "put,acc", "--loop", "python", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    put, acc = rows[rows.kernel == "put"], rows[rows.kernel == "acc"]
    assert (put.status == "ok").all() and (put.validation == "pass").all()
    assert (put.method == "python loop, lock/flush").all()
    assert acc.status.str.contains("acc with lock/flush is timed in C only").all()


def test_the_one_sided_kernels_validate_under_pypis_open_mpi(open_mpi_venv, tmp_path):
    # Open MPI's own RMA paths (its vector MPI_SUM on signed chars saturates, so the check's sums stay small).
    python = str(open_mpi_venv / "bin" / "python")
    env = clean_env(
        {
            "PYTHONPATH": str(REPO / "src"),
            "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache"),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }
    )
    for sync, window in (("flush", "dynamic"), ("pscw", "create")):
        out = tmp_path / sync
        result = subprocess.run(
            [python, "-m", "fabricbench", "run", "-n", "2", "-t", "mpi-rma", "-k", ",".join(RMA_KERNELS),
             "--rma-sync", sync, "--rma-window", window, "--loop", "c", "--out", str(out), *QUICK],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        _check(out, sync, window, 2)
        rows, meta = read_rows(out)
        assert "Open MPI" in meta["mpi_library_version"]


def test_fop_and_cas_operate_on_each_of_osus_types_and_validate(tmp_path, open_mpi_venv):
    # osu_fop_latency and osu_cas_latency's -T: one element of MPI_CHAR (their default), MPI_INT or MPI_FLOAT (fop
    # only), whose size is the row's; on MPICH, and on Open MPI, whose vector sums of signed chars saturate.
    openmpi_env = clean_env(
        {"PYTHONPATH": str(REPO / "src"), "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")}
        | {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    )
    cases = [
        ("mpi_char", "fop,cas", 1, PYTHON, None),
        ("mpi_int", "fop,cas", 4, PYTHON, None),
        ("mpi_float", "fop", 4, PYTHON, None),
        ("mpi_char", "fop,cas", 1, str(open_mpi_venv / "bin" / "python"), openmpi_env),
    ]
    for number, (datatype, kernels, size, python, env) in enumerate(cases):
        out = tmp_path / f"run{number}"
        result = subprocess.run(
            [python, "-m", "fabricbench", "run", "-n", "2", "-t", "mpi-rma", "-k", kernels, "--format", "osu",
             "--osu-datatype", datatype, "--rma-sync", "lock", "-c", "-i", "10", "-x", "2", "--out", str(out)],
            capture_output=True, text=True, timeout=300, env=env or clean_env(), cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"# Datatype: {datatype.upper()}." in result.stdout
        # OSU's summary after each atomic table with -c, rank by rank
        passed = "Atomic Data Validation results for Rank={}:\nPASSED: All 1 combinations of ops and datatypes tested"
        assert all(result.stdout.count(passed.format(rank)) == len(kernels.split(",")) for rank in (0, 1))
        rows, meta = read_rows(out)
        assert set(rows.kernel) == set(kernels.split(",")) and (rows.size_B == size).all()
        assert (rows.status == "ok").all() and (rows.validation == "pass").all(), rows[["kernel", "status"]]
        assert {step["datatype"] for step in meta["steps"]} == {datatype.upper()}
