"""How the MPI C loop finds its compiler wrapper and where it caches the build: plain lookups, no process."""

from __future__ import annotations

import sys

import pytest

from fabricbench.transports import cbuild
from fabricbench.transports.mpi import cloop as mpi_cloop
from support import executable_stub


def test_mpicc_from_the_environment_wins_and_may_carry_flags(monkeypatch):
    monkeypatch.setenv("MPICC", "cc -DSITE=1")
    assert mpi_cloop.find_wrapper() == ["cc", "-DSITE=1"]


def test_the_wrapper_beside_the_interpreter_comes_before_path(monkeypatch, tmp_path):
    monkeypatch.delenv("MPICC", raising=False)
    venv_mpicc = executable_stub(tmp_path / "venv" / "bin", "mpicc")
    executable_stub(tmp_path / "elsewhere", "mpicc")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert mpi_cloop.find_wrapper() == [str(venv_mpicc)]


def test_path_then_crays_cc_then_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "no-venv"))
    on_path = executable_stub(tmp_path / "bin", "mpicc")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert mpi_cloop.find_wrapper() == [str(on_path)]
    on_path.unlink()
    cray = executable_stub(tmp_path / "bin", "cc")
    monkeypatch.delenv("CRAYPE_VERSION", raising=False)
    assert mpi_cloop.find_wrapper() is None  # a plain cc is no MPI wrapper
    monkeypatch.setenv("CRAYPE_VERSION", "2.7.30")
    assert mpi_cloop.find_wrapper() == [str(cray)]


def test_the_cache_lives_under_the_users_cache_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv("FABRICBENCH_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cbuild.cache_dir("mpiloop") == tmp_path / "home" / ".cache" / "fabricbench" / "mpiloop"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cbuild.cache_dir("mpiloop") == tmp_path / "xdg" / "fabricbench" / "mpiloop"
    monkeypatch.setenv("FABRICBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cbuild.cache_dir("mpiloop") == tmp_path / "mine" / "mpiloop"


def test_no_wrapper_is_one_line_before_any_build(monkeypatch, tmp_path):
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.delenv("CRAYPE_VERSION", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "no-venv"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(mpi_cloop.CLoopUnavailable, match=r"^no MPI compiler wrapper found \(set MPICC"):
        mpi_cloop.load("MPICH Version: 5.0.2")


def test_the_c_source_ships_beside_the_module():
    assert mpi_cloop.SOURCE.is_file() and "fb_pingpong" in mpi_cloop.SOURCE.read_text()
    assert set(mpi_cloop.SIGNATURES) == {
        "fb_pingpong",
        "fb_window",
        "fb_collective",
        "fb_rma_sync",
        "fb_pingpong_mt",
        "fb_pingpong_synced",
        "fb_fork_idle",
        "fb_canary",
        "fb_congestor",
        "fb_persistent_collectives",
        "fb_neighbor",
        "fb_icollective",
        "fb_fan",
    }
