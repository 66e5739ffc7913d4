"""Launcher variables inherited from elsewhere (a stray PMI_RANK, FABRICBENCH_LAUNCHED) make run take itself for
a launched rank: the one line it ends with names the variables it read, their values, and what to unset."""

from __future__ import annotations

import pytest

from fabricbench.cli import main
from fabricbench.errors import UsageError
from fabricbench.launch import launcher

LAUNCH_VARS = ["PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID"]


@pytest.fixture
def environment(monkeypatch):
    for var in [*LAUNCH_VARS, launcher.CHILD_FLAG, "SLURM_STEP_ID", "SLURM_PROCID"]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_a_rank_not_below_its_size_is_refused_before_mpi_starts_naming_what_to_unset(environment, capsys):
    environment.setenv("PMI_RANK", "7")
    environment.setenv("PMI_SIZE", "2")
    assert launcher.env_rank() == 0  # no launcher announced rank 7 of 2: this process says what is wrong
    assert main(["run", "-k", "latency", "-m", "8", "--format", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("fabricbench: error: PMI_RANK=7 is not below PMI_SIZE=2: ")
    assert "PMI_RANK='7', PMI_SIZE='2' are set" in err and "`unset PMI_RANK PMI_SIZE`" in err


def test_a_world_of_one_under_an_inherited_flag_says_why_run_believed_it_was_launched(environment):
    environment.setenv(launcher.CHILD_FLAG, "mpiexec (started by fabricbench)")

    def make_plan(ranks: int):
        raise UsageError(f"kernel 'latency' needs at least 2 ranks, got {ranks}")

    with pytest.raises(UsageError) as refused:
        launcher.explain_world_of_one(make_plan)(1)
    said = str(refused.value)
    assert said.startswith("kernel 'latency' needs at least 2 ranks, got 1, as MPI gives a world of 1: ")
    assert f"{launcher.CHILD_FLAG}='mpiexec (started by fabricbench)' is set" in said
    assert f"`unset {launcher.CHILD_FLAG}`" in said
    with pytest.raises(UsageError, match="got 3$"):  # a real world's refusal is left as it was
        launcher.explain_world_of_one(make_plan)(3)
    assert launcher.explain_world_of_one(lambda ranks: ranks * 2)(1) == 2
