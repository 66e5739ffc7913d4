"""What a rank does before it measures, on real ranks: the modules it has imported by its first timed sample,
and the compiler wrapper asked once per host rather than once per rank."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess

import pytest

from fabricbench.launch.launcher import YIELD_SETTINGS
from support import BIN, MPIEXEC, PYTHON, clean_env, fabricbench

# Rank 0 loads pandas and pyarrow for the table after the sweep; no rank needs them, nor the rest, to measure.
NOT_BEFORE_MEASURING = (
    "pandas",
    "pyarrow",
    "matplotlib",
    "tqdm",
    "cupy",
    "importlib.metadata",
    "fabricbench.transports.mpi.congestion",
    "fabricbench.transports.tcp.congestion",
)


def test_a_rank_measures_before_loading_the_writers_libraries(tmp_path):
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    run = ["run", "-n", "2", "-k", "barrier", "-i", "10", "--format", "none", "--out", str(tmp_path / "out")]
    result = fabricbench(*run, env={"FABRICBENCH_TEST_STAMPS": str(stamps)})
    assert result.returncode == 0, result.stderr
    found = {path.name: json.loads(path.read_text()) for path in stamps.iterdir()}
    assert sorted(found) == ["rank0.json", "rank1.json"]
    for stamp in found.values():
        assert stamp["first_sample_ns"] > 0
        modules = stamp["modules"]
        assert "fabricbench.transports.mpi.transport" in modules and "mpi4py.MPI" in modules
        early = [m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_BEFORE_MEASURING)]
        assert early == []
    assert (tmp_path / "out" / "results.parquet").exists()  # rank 0 still writes it, after the sweep


def test_the_compiler_wrapper_is_asked_once_per_host(tmp_path):
    """The C loop's cache key holds what the MPI wrapper adds (mpicc -show): one rank per host asks."""
    log = tmp_path / "wrapper.log"
    wrapper = tmp_path / "mpicc"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {BIN / "mpicc"} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {"MPICC": str(wrapper), "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")}
    run = ["run", "-n", "4", "-k", "barrier", "-i", "10", "--format", "none", "--out", str(tmp_path / "out")]
    result = fabricbench(*run, env=env)
    assert result.returncode == 0, result.stderr
    asked = [line for line in log.read_text().splitlines() if line in ("-show", "--showme")]
    assert asked == ["-show"]
    rows = (tmp_path / "out" / "results.csv").read_text()
    assert "c loop" in rows  # built with the wrapper, and used on every rank


SUITE_YIELD = YIELD_SETTINGS["this MPICH"]  # conftest.py sets these for every test: here they are taken away


def _on_first_cpus(count: int):
    """A preexec_fn that narrows the child's affinity (and so its ranks') to this process's first COUNT CPUs."""
    cpus = set(sorted(os.sched_getaffinity(0))[:count])
    return lambda: os.sched_setaffinity(0, cpus)


def _crowded(launch: list[str], out, cpus: int, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    """``LAUNCH fabricbench run`` (alone: 2 ranks of its own) on this process's first CPUS CPUs."""
    sweep = ["-k", "barrier", "-i", "10", "-x", "2", "--format", "none"]
    run = ["run", *([] if launch else ["-n", "2"]), *sweep, "--out", str(out)]
    result = subprocess.run(
        [*launch, PYTHON, "-m", "fabricbench", *run],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_on_first_cpus(cpus),
    )
    assert result.returncode == 0, result.stderr
    return result, json.loads((out / "metadata.json").read_text())


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fabricbench: warning: oversubscribed")]


def test_more_ranks_than_cpus_says_so_once_and_makes_the_waiting_ranks_yield(tmp_path):
    """fabricbench's own 2 ranks on 1 CPU, with none of MPICH's yield settings in the environment: the ranks set
    them before MPI_Init, one line says so, and the metadata holds the host's ranks, CPUs and what was set."""
    env = {name: value for name, value in clean_env().items() if name not in SUITE_YIELD}
    result, meta = _crowded([], tmp_path / "own", 1, env)
    host = socket.gethostname()
    settings = " ".join(f"{name}={value}" for name, value in SUITE_YIELD.items())
    assert _warnings(result.stderr) == [
        f"fabricbench: warning: oversubscribed, 2 ranks on 1 CPU of {host}: ranks take turns on the CPUs and times "
        f"include the wait; waiting ranks yield: MPI_Init was given {settings}"
    ], result.stderr
    assert meta["oversubscribed"] == {host: {"ranks": 2, "cpus": 1, "yield_applied": SUITE_YIELD, "yield_kept": {}}}
    assert all("oversubscribed" not in rank and rank["boot_id"] for rank in meta["ranks"])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binding 2 ranks a core each needs 2 CPUs")
def test_ranks_bound_a_core_each_are_not_taken_for_an_oversubscribed_host(tmp_path):
    """``mpiexec -bind-to core -n 2`` on 2 CPUs: each rank's mask holds one CPU, but the host gives the job two, one a
    rank: no warning, no yield settings, no oversubscribed host."""
    env = {name: value for name, value in clean_env().items() if name not in SUITE_YIELD}
    result, meta = _crowded([MPIEXEC, "-bind-to", "core", "-n", "2"], tmp_path / "bound", 2, env)
    assert _warnings(result.stderr) == [], result.stderr
    assert meta["oversubscribed"] == {}
    assert [len(rank["cpu_affinity"]) for rank in meta["ranks"]] == [1, 1]  # bound, as asked


def test_a_launchers_crowded_ranks_keep_the_users_yield_settings(tmp_path):
    """``mpiexec -n 3`` on 2 CPUs (or 1) with the settings already set (the suite's): left as they are, and said."""
    cpus = min(2, len(os.sched_getaffinity(0)))
    result, meta = _crowded([MPIEXEC, "-n", "3"], tmp_path / "launched", cpus, clean_env())
    host = socket.gethostname()
    assert meta["oversubscribed"] == {host: {"ranks": 3, "cpus": cpus, "yield_applied": {}, "yield_kept": SUITE_YIELD}}
    settings = " ".join(f"{name}={value}" for name, value in SUITE_YIELD.items())
    assert len(_warnings(result.stderr)) == 1 and _warnings(result.stderr)[0].endswith(f"left as set: {settings}")
