"""The environment the benchmarks give the programs they launch (benchmarks/harness.py). Pure logic, no
processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness import REPO, child_env  # noqa: E402


def test_a_child_keeps_the_environment_less_the_dropped_prefixes(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("FABRICBENCH_LAUNCHED", "1")
    monkeypatch.setenv("FABRICBENCH_PROGRESS", "0")
    monkeypatch.setenv("KEPT_BY_THE_HARNESS", "yes")
    env = child_env(drop=("PMI_", "FABRICBENCH_LAUNCHED"))
    assert "PMI_RANK" not in env and "FABRICBENCH_LAUNCHED" not in env
    assert env["FABRICBENCH_PROGRESS"] == "0" and env["KEPT_BY_THE_HARNESS"] == "yes"
    assert child_env() == dict(os.environ)


def test_open_mpi_is_told_it_may_run_as_root_only_when_asked_and_root(monkeypatch):
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert child_env(mpi_as_root=True)["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in child_env()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in child_env(mpi_as_root=True)


def test_the_checkout_comes_first_on_the_python_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert child_env(checkout_path=True)["PYTHONPATH"] == os.pathsep.join([str(REPO / "src"), "/elsewhere"])
    monkeypatch.delenv("PYTHONPATH")
    assert child_env(checkout_path=True)["PYTHONPATH"] == str(REPO / "src")
