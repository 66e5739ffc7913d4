"""More ranks than CPUs on a host, and hosts that share one kernel: what a rank reads before MPI_Init, and what
rank 0 records and says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fabricbench.hostinfo import boot_id
from fabricbench.launch.launcher import YIELD_SETTINGS, local_ranks, oversubscription
from fabricbench.launch.metadata import SharedKernel, oversubscribed_hosts, shared_kernels, warnings
from fabricbench.launch.slurm import tasks_here
from fabricbench.measure.rows import RowBatch

MPICH = "MPICH Version:      5.0.2\nMPICH Release date: unreleased\nMPICH ABI:          0:0:0\n"
OPEN_MPI = "Open MPI v5.0.7, package: Open MPI root@host Distribution, ident: 5.0.7, repo rev: v5.0.7"
THROTTLE = "MPIR_CVAR_CH4_PROGRESS_THROTTLE"
SRUN_TASK = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "7", "SLURM_PROCID": "5"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MPI_LOCALNRANKS": "4", "PMI_RANK": "0"}, (4, "MPI_LOCALNRANKS")),
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, (3, "OMPI_COMM_WORLD_LOCAL_SIZE")),
        ({**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "1"}, (2, "SLURM_STEP_TASKS_PER_NODE")),
        ({**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, (1, "SLURM_STEP_TASKS_PER_NODE")),
        # A rank of hydra inside a step carries the step's variables too: hydra's count is this host's.
        (
            {**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "7", "SLURM_NODEID": "0", "MPI_LOCALNRANKS": "2"},
            (2, "MPI_LOCALNRANKS"),
        ),
        ({"SLURM_STEP_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}, None),  # not an srun task: a batch script's
        ({}, None),
        ({"MPI_LOCALNRANKS": "0"}, None),
        ({"MPI_LOCALNRANKS": "many"}, None),
        ({"MPI_LOCALNRANKS": "\u00b2"}, None),  # a superscript two: str.isdigit says yes, int() says no
        ({"PMIX_LOCAL_SIZE": "4"}, (4, "PMIX_LOCAL_SIZE")),
        ({**SRUN_TASK, "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "\u0660"}, None),  # an Arabic-Indic zero
    ],
)
def test_local_ranks_reads_the_launchers_count_of_ranks_on_this_host(env, expected):
    assert local_ranks(env) == expected


@pytest.mark.parametrize(
    ("tasks", "node", "expected"),
    [("2(x3),1", "0", 2), ("2(x3),1", "3", 1), ("2(x3),1", "4", None), ("5", "", None), ("x", "0", None)],
)
def test_tasks_here_unfolds_slurms_tasks_per_node(tasks, node, expected):
    assert tasks_here({"SLURM_STEP_TASKS_PER_NODE": tasks, "SLURM_NODEID": node}) == expected


def test_boot_id_is_this_kernels():
    assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", boot_id())
    assert boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_an_oversubscribed_mpich_rank_is_given_the_throttle_and_a_users_value_stays():
    found = oversubscription({"MPI_LOCALNRANKS": "4"}, 2, MPICH)
    assert found == {
        "ranks": 4,
        "cpus": 2,
        "from": "MPI_LOCALNRANKS",
        "yield_applied": YIELD_SETTINGS["this MPICH"],
        "yield_kept": {},
    }
    kept = oversubscription({"MPI_LOCALNRANKS": "4", THROTTLE: "0"}, 2, MPICH)
    assert kept["yield_kept"] == {THROTTLE: "0"} and THROTTLE not in kept["yield_applied"]
    assert oversubscription({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 1, OPEN_MPI)["yield_applied"] == {
        "OMPI_MCA_mpi_yield_when_idle": "1"
    }
    assert oversubscription({"MPI_LOCALNRANKS": "3"}, 1, "SomeMPI 1.0")["yield_applied"] == {}


@pytest.mark.parametrize("env", [{"MPI_LOCALNRANKS": "2"}, {"MPI_LOCALNRANKS": "1"}, {}])
def test_a_host_with_a_cpu_a_rank_or_no_count_is_not_oversubscribed(env):
    assert oversubscription(env, 2, MPICH) == {}


def _rank(host: str, cpus: list[int], boot: str = "k1", **more) -> dict:
    return {"host": host, "pid": 1, "cpu_affinity": cpus, "boot_id": boot, **more}


def test_oversubscribed_hosts_counts_each_hosts_ranks_against_the_union_of_their_cpus():
    said = {"from": "MPI_LOCALNRANKS", "yield_applied": {THROTTLE: "1"}, "yield_kept": {}}
    ranks = [
        *[_rank("a", [0, 1], oversubscribed=dict(said)) for _ in range(3)],
        _rank("b", [0]),
        _rank("b", [1]),  # each bound to a CPU of its own: not oversubscribed
    ]
    assert oversubscribed_hosts(ranks) == {
        "a": {"ranks": 3, "cpus": 2, "yield_applied": {THROTTLE: "1"}, "yield_kept": {}}
    }
    assert all("oversubscribed" not in rank for rank in ranks)  # summed per host, not kept per rank
    assert oversubscribed_hosts([_rank("a", [0]), _rank("a", [1])]) == {}


def test_shared_kernels_groups_the_hosts_of_one_boot_id():
    ranks = [
        _rank("h1", [0]),
        _rank("h3", [0]),
        _rank("h2", [0], boot="k2"),
        _rank("h1", [1]),
        _rank("x", [0], "unknown"),
    ]
    assert shared_kernels(ranks) == [["h1", "h3"]]
    assert (
        shared_kernels([_rank("h1", [0]), _rank("h1", [1])]) == []
    )  # one host's ranks share its kernel, as they should


def test_warnings_name_the_hosts_the_counts_and_the_settings_in_one_line_each():
    crowded = {"vm": {"ranks": 4, "cpus": 2, "yield_applied": YIELD_SETTINGS["this MPICH"], "yield_kept": {}}}
    lines = warnings({"oversubscribed": crowded, "shared_kernel": [["h1", "h3"]]})
    assert lines == [
        "fabricbench: warning: oversubscribed, 4 ranks on 2 CPUs of vm: ranks take turns on the CPUs and times "
        "include the wait; waiting ranks yield: MPI_Init was given MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 "
        "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT=100",
        "fabricbench: warning: hosts h1, h3 share one kernel (one boot id): a transport may move bytes between "
        "them through shared memory, not their network (MPI over UCX does, unless UCX_TLS=tcp UCX_NET_DEVICES=IFACE)",
    ]
    kept = {"vm": {"ranks": 3, "cpus": 1, "yield_applied": {}, "yield_kept": {THROTTLE: "0"}}}
    assert warnings({"oversubscribed": kept})[0].endswith(f"left as set: {THROTTLE}=0")
    spin = {"vm": {"ranks": 3, "cpus": 1, "yield_applied": {}, "yield_kept": {}}}
    assert warnings({"oversubscribed": spin})[0].endswith("no yield setting is known for this MPI: waiting ranks spin")
    assert warnings({"oversubscribed": {}, "shared_kernel": []}) == []


def test_a_peers_record_of_the_wrong_kinds_is_passed_over():
    """A --peer run's server sends its own rank_info(): what is not of its kinds counts for nothing."""
    hostile = {"host": ["x"], "cpu_affinity": 5, "boot_id": 7, "oversubscribed": {"yield_applied": {"A": 1, "B": "2"}}}
    ranks = [_rank("a", [0]), hostile]
    assert oversubscribed_hosts(ranks) == {
        "['x']": {"ranks": 1, "cpus": 0, "yield_applied": {"B": "2"}, "yield_kept": {}}
    }
    assert shared_kernels([_rank("a", [0]), {"host": "b", "boot_id": ["k1"]}]) == []


def test_a_row_between_hosts_of_one_kernel_says_so_in_its_note():
    metadata = {"shared_kernel": [["h1", "h3"]], "ranks": [_rank(h, [0]) for h in ("h1", "h3", "h2", "h2")]}
    marks = SharedKernel.of(metadata)
    world = {"ranks": 4, "note": "unstable: block medians vary by 40%"}
    marks.mark(world)
    assert world["note"] == "unstable: block medians vary by 40%; hosts h1, h3 share one kernel"
    subset = {"ranks": 2, "note": ""}  # --ranks 2: ranks 0 and 1, on h1 and h3
    marks.mark(subset)
    assert subset["note"] == "hosts h1, h3 share one kernel"
    pair = {"ranks": 4, "src_host": "h2", "dst_host": "h3", "note": ""}  # an all-pairs row: its own two hosts
    marks.mark(pair)
    assert pair["note"] == ""
    batch = RowBatch(
        3,
        {"ranks": 4, "src_host": np.array(["h3", "h1", "h1"]), "dst_host": np.array(["h1", "h2", "h1"]), "note": ""},
        3,
    )
    marks.mark_batch(batch)
    assert batch.column("note") == ["hosts h1, h3 share one kernel", "", ""]
    assert SharedKernel.of({"shared_kernel": [], "ranks": metadata["ranks"]}) is None
