"""Under srun, without a process: who started the rank, the PMI plugin it used, and the one line of advice
for each plugin x MPI that cannot work together (tests/test_slurm.py runs the real srun); inside an allocation
without srun, what self-launched ranks keep of its environment and record of the job; the batch script's runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricbench.errors import UsageError
from fabricbench.launch import launcher as launch
from fabricbench.launch import slurm

# MPI_Get_library_version as the MPIs print it (the PyPI wheel's is this suite's own MPI).
MPICH_WHEEL = (
    "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\nMPICH ABI:          18:2:6\n"
    "MPICH Device:       ch4:ucx ofi\nMPICH configure:    --with-device=ch4:ucx,ofi --with-pm=hydra:gforker\n"
)
MPICH_PMIX = "MPICH Version:\t4.2.0\nMPICH configure:\t--prefix=/opt/mpich --with-pmix=/usr --with-pm=no\n"
MPICH_NO_PMIX = "MPICH Version:\t4.2.0\nMPICH configure:\t--prefix=/opt/mpich --with-pmix=no\n"
OPEN_MPI_4 = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022\x00"
OPEN_MPI_5 = "Open MPI v5.0.8, package: Open MPI conda@builder Distribution, ident: 5.0.8, repo rev: v5.0.8\n"
INTEL_MPI = "Intel(R) MPI Library 2021.13 for Linux* OS\n"
OTHER = "Some Vendor MPI 3.1 (build 42)\n"

# What srun puts in task 1's environment of a 2-task step, per --mpi plugin.
STEP = {"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
PMI2 = {**STEP, "SLURM_MPI_TYPE": "pmi2", "PMI_FD": "5", "PMI_JOBID": "17.0", "PMI_RANK": "1", "PMI_SIZE": "2"}
PMIX = {**STEP, "SLURM_MPI_TYPE": "pmix", "PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.17.0"}
NONE = {**STEP, "SLURM_MPI_TYPE": "none"}


@pytest.mark.parametrize("env", [PMI2, PMIX, NONE, {**NONE, "SLURM_MPI_TYPE": ""}])
def test_srun_tasks_are_srun_whatever_the_plugin(env, monkeypatch):
    # PMI_RANK (pmi2) and PMIX_RANK (pmix) come before SLURM_* in the launcher table; srun comes first.
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID", launch.CHILD_FLAG):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert slurm.started_by_srun(env)
    assert launch.launcher() == "srun"


@pytest.mark.parametrize(
    "env",
    [
        # mpiexec in a batch script: hydra starts one proxy per node as a 1-task step, the ranks below it.
        {**STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0", "PMI_RANK": "1", "PMI_SIZE": "2"},
        {**STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0", "PMI_RANK": "0", "PMI_SIZE": "2"},
        {**PMI2, "MPI_LOCALRANKID": "1"},
        # Open MPI's mpirun: its daemons are the step's tasks.
        {**STEP, "SLURM_PROCID": "0", "PMIX_RANK": "3", "OMPI_COMM_WORLD_RANK": "3"},
        # a batch script itself (no step variables), and no Slurm at all
        {"SLURM_JOB_ID": "17", "SLURM_PROCID": "0"},
        {},
    ],
)
def test_ranks_of_another_launcher_inside_a_step_are_not_srun(env):
    assert not slurm.started_by_srun(env)


@pytest.mark.parametrize(
    "env, plugin",
    [
        (PMI2, "pmi2"),
        (PMIX, "pmix"),
        (NONE, "none"),
        ({**PMIX, "SLURM_MPI_TYPE": "pmix_v4"}, "pmix_v4"),
        # srun without --mpi (the site's MpiDefault) may leave SLURM_MPI_TYPE out: the plugin's variables say.
        ({k: v for k, v in PMI2.items() if k != "SLURM_MPI_TYPE"}, "pmi2"),
        ({k: v for k, v in PMIX.items() if k != "SLURM_MPI_TYPE"}, "pmix"),
        (STEP, "none"),
    ],
)
def test_plugin_and_metadata(env, plugin):
    assert slurm.plugin(env) == plugin
    assert slurm.metadata(env) == {"slurm": {"mpi_plugin": plugin, "job_id": "17", "step_id": "0", "tasks": 2}}


@pytest.mark.parametrize(
    "version, name, pmi, plugin",
    [
        (MPICH_WHEEL, "this MPICH", "PMI-2", "pmi2"),
        (MPICH_PMIX, "this MPICH", "PMIx", "pmix"),
        (MPICH_NO_PMIX, "this MPICH", "PMI-2", "pmi2"),
        (OPEN_MPI_4, "this Open MPI", "PMIx", "pmix"),
        (OPEN_MPI_5, "this Open MPI", "PMIx", "pmix"),
        (INTEL_MPI, "this Intel MPI", "PMI-2", "pmi2"),
        (OTHER, "this MPI (Some Vendor MPI 3.1 (build 42))", "", ""),
    ],
)
def test_which_pmi_the_library_speaks(version, name, pmi, plugin):
    assert slurm.speaks(version) == slurm.Speaks(name, pmi, plugin)


def test_open_mpi_4_with_slurm_pmi_components_speaks_pmi2_too(tmp_path):
    assert not slurm.speaks(OPEN_MPI_4, tmp_path).pmi2_too
    (tmp_path / "mca_pmix_s2.so").touch()
    assert slurm.speaks(OPEN_MPI_4, tmp_path).pmi2_too
    assert not slurm.speaks(OPEN_MPI_5, tmp_path).pmi2_too  # Open MPI 5 has no PMI-1/2 at all


FIX_PMI2 = "this MPICH speaks PMI-2; run srun --mpi=pmi2 ... (or set SLURM_MPI_TYPE=pmi2)"
FIX_PMIX = "this Open MPI speaks PMIx; run srun --mpi=pmix ... (or set SLURM_MPI_TYPE=pmix)"


@pytest.mark.parametrize(
    "env, version, line",
    [
        # MPICH in a PMIx step would abort in MPI_Init: refused before it.
        (PMIX, MPICH_WHEEL, f"srun started 2 tasks with --mpi=pmix, but {FIX_PMI2}"),
        (
            {**PMIX, "SLURM_MPI_TYPE": "pmix_v4"},
            MPICH_WHEEL,
            f"srun started 2 tasks with --mpi=pmix_v4, but {FIX_PMI2}",
        ),
        # Open MPI outside PMIx would abort in MPI_Init too.
        (PMI2, OPEN_MPI_4, f"srun started 2 tasks with --mpi=pmi2, but {FIX_PMIX}"),
        (NONE, OPEN_MPI_5, f"srun started 2 tasks with --mpi=none, but {FIX_PMIX}"),
        # What works, what only MPI_Init can tell (MPICH in a step without PMI), and what is not known here.
        (PMI2, MPICH_WHEEL, None),
        (PMIX, MPICH_PMIX, None),
        (PMIX, OPEN_MPI_4, None),
        (NONE, MPICH_WHEEL, None),
        (PMIX, OTHER, None),
        ({**PMIX, "SLURM_STEP_NUM_TASKS": "1"}, MPICH_WHEEL, None),  # one task needs no wire-up
    ],
)
def test_advice_before_init(env, version, line):
    assert slurm.advice_before_init(env, slurm.speaks(version)) == line


def test_advice_before_init_spares_open_mpi_4_built_with_slurm_pmi(tmp_path):
    (tmp_path / "mca_pmix_s1.so").touch()
    assert slurm.advice_before_init(PMI2, slurm.speaks(OPEN_MPI_4, tmp_path)) is None


@pytest.mark.parametrize(
    "env, size, version, line",
    [
        (NONE, 1, MPICH_WHEEL, f"srun started 2 tasks but MPI formed 1-rank worlds (--mpi=none): {FIX_PMI2}"),
        # After MPI_Init the line names the plugin used, whichever it was.
        (PMIX, 1, MPICH_WHEEL, f"srun started 2 tasks but MPI formed 1-rank worlds (--mpi=pmix): {FIX_PMI2}"),
        (
            {**NONE, "SLURM_STEP_NUM_TASKS": "4"},
            2,
            OTHER,
            "srun started 4 tasks but MPI formed 2-rank worlds (--mpi=none): this MPI (Some Vendor MPI 3.1 "
            "(build 42)) is not one fabricbench knows; run srun --mpi=PLUGIN ... with its PMI (srun --mpi=list)",
        ),
        (PMI2, 2, MPICH_WHEEL, None),
        ({**PMI2, "SLURM_STEP_NUM_TASKS": "1"}, 1, MPICH_WHEEL, None),
    ],
)
def test_advice_after_init(env, size, version, line):
    assert slurm.advice_after_init(env, size, slurm.speaks(version)) == line


def test_checks_raise_one_usage_error_exit_2(monkeypatch):
    for var, value in PMIX.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(UsageError, match="^srun started 2 tasks with --mpi=pmix, but this MPICH") as refused:
        slurm.check_before_init(MPICH_WHEEL)
    assert refused.value.exit_code == 2
    monkeypatch.setenv("SLURM_MPI_TYPE", "none")
    for var in ("PMIX_RANK", "PMIX_NAMESPACE"):
        monkeypatch.delenv(var)
    speaks = slurm.check_before_init(MPICH_WHEEL)
    with pytest.raises(UsageError, match="^srun started 2 tasks but MPI formed 1-rank worlds"):
        slurm.check_after_init(1, speaks)
    slurm.check_after_init(2, speaks)


# What a shell inside `salloc -n 2` (site MpiDefault=pmix) may hold, besides the user's own variables.
ALLOCATION = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NTASKS": "2",
    "SLURM_MPI_TYPE": "pmix",
    "PMIX_NAMESPACE": "slurm.pmix.4242.0",
    "PMIX_SERVER_URI41": "pmix-server.1;tcp4://127.0.0.1:40000",
    "PMIX_MCA_gds": "hash",
    "SLURM_PMIXP_ABORT_AGENT_PORT": "40001",
    "PMI_FD": "7",
    "HOME": "/home/u",
}


def test_self_launched_ranks_lose_the_allocations_wire_up_but_keep_the_job():
    kept = slurm.without_wire_up(ALLOCATION)
    assert kept == {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "PMIX_MCA_gds": "hash", "HOME": "/home/u"}


def test_a_run_inside_a_job_records_it_whoever_started_the_ranks():
    assert slurm.job_metadata(PMIX, srun=True) == slurm.metadata(PMIX)
    local = slurm.job_metadata(slurm.without_wire_up(ALLOCATION), srun=False)
    assert local == {"slurm": {"mpi_plugin": "none (not started by srun)", "job_id": "4242", "step_id": "none"}}
    assert slurm.job_metadata({"SLURM_JOBID": "9", "SLURM_STEP_ID": "3"}, srun=False)["slurm"]["step_id"] == "3"
    assert slurm.job_metadata({"HOME": "/home/u"}, srun=False) == {}


def test_the_two_node_batch_script_asks_each_transport_only_for_its_own_kernels():
    import shlex

    from fabricbench.cli import build_parser
    from fabricbench.run.planner import _steps
    from fabricbench.transports import supported_kernels

    script = Path(__file__).resolve().parents[2] / "scripts" / "slurm-two-nodes.sbatch"
    runs = [line for line in script.read_text().splitlines() if "fabricbench run " in line]
    assert len(runs) == 2, runs
    for line in runs:
        words = shlex.split(line.replace('"$label"', "L").replace('"$mpi"', "pmi2"))
        steps = _steps(build_parser().parse_args(words[words.index("run") :]))
        lacking = [(s.transport, s.kernel) for s in steps if s.kernel not in supported_kernels(s.transport)]
        assert steps and not lacking, f"{line}: {lacking}"
