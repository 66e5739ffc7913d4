"""What a rank does before it measures, on real ranks: the modules it has imported by its first timed sample,
and the compiler wrapper asked once per host rather than once per rank."""

from __future__ import annotations

import json
import stat

from support import BIN, fabricbench

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
