"""From a plan to rows on disk: start local ranks, agree on the plan, run it, hand rows to the writers.

``cli`` parses and dispatches; this module is what happens next, for the
three ways a run starts: alone (it re-executes itself under ``mpiexec``),
under a launcher (every rank runs ``run_ranks``), or as one side of a
two-host run without MPI (``control.peer`` calls ``execute_plan``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from fabricbench.argtypes import masked_text
from fabricbench.control import ControlPlane
from fabricbench.errors import FabricbenchError
from fabricbench.measure.plan import Plan
from fabricbench.measure.results import RUN_ID_VAR
from fabricbench.terminal import LINE, printable
from fabricbench.transports import TRANSPORTS


def self_launch(plan: Plan, argv: list[str], ranks: int, out_given: bool, progress: bool, append: bool) -> int:
    """Started alone: check what can be checked here, then run ``argv`` again on ``ranks`` local ranks."""
    from fabricbench.launch import launcher as launch
    from fabricbench.measure.results import check_reuse, prepare_out_dir

    check_reuse(plan.out_dir, append, TRANSPORTS)
    prepare_out_dir(plan.out_dir)
    os.environ[RUN_ID_VAR] = plan.run_id
    child_argv = list(argv) if out_given else [*argv, "--out", plan.out_dir]
    return launch.relaunch(child_argv, ranks, progress=progress, out_dir=plan.out_dir)


def run_ranks(
    make_plan: Callable[[int], Plan],
    launcher: str,
    hugepages: str | None,
    append: bool,
    thread_level: str | None = None,
) -> int:
    """Under a launcher, on every rank: rank 0 builds the plan and broadcasts it as JSON, then all run it. MPI starts
    at ``thread_level`` (None: the control plane's own), which every rank reads from its command line.

    Bad input found on rank 0 reaches every rank through the broadcast, so
    every rank exits with the same code and one line is printed.
    """
    from fabricbench.control.mpi import MPIControl, import_mpi, load_mpi
    from fabricbench.launch import launcher as launch
    from fabricbench.launch import metadata as env
    from fabricbench.launch import slurm

    srun = launcher == launch.SRUN
    library_version = load_mpi().Get_library_version()  # callable before MPI_Init
    launch.yield_if_oversubscribed(library_version)  # MPI reads its settings in MPI_Init
    if srun:  # a PMI plugin this MPI cannot speak: one line before MPI_Init aborts or forms 1-rank worlds
        speaks = slurm.check_before_init(library_version)
    ctrl = MPIControl((import_mpi(thread_level) if thread_level else import_mpi()).COMM_WORLD)
    if srun:  # before the plan's "needs at least 2 ranks", which every 1-rank world would print
        slurm.check_after_init(ctrl.size, speaks)
    envelope = None
    if ctrl.rank == 0:
        try:
            from fabricbench.measure.results import check_reuse, prepare_out_dir

            plan = make_plan(ctrl.size)
            check_reuse(plan.out_dir, append, TRANSPORTS)
            prepare_out_dir(plan.out_dir)
            envelope = {"plan": json.loads(plan.to_json())}
        except FabricbenchError as exc:
            envelope = {"error": str(exc), "code": exc.exit_code}
    # Rank 0 alone builds the plan: the others wait asleep, not spinning in MPI on the cores it needs (8 ranks on
    # 2 cores take several times as long to start when they spin).
    ctrl.idle_barrier()
    envelope = json.loads(ctrl.bcast_bytes(json.dumps(envelope).encode() if ctrl.rank == 0 else None))
    if "error" in envelope:
        if ctrl.rank == 0:
            print(f"fabricbench: error: {printable(masked_text(envelope['error']), LINE)}", file=sys.stderr)
        return int(envelope["code"])
    plan = Plan.from_json(json.dumps(envelope["plan"]).encode())
    extra = {**env.mpi_info(), **slurm.job_metadata(os.environ, srun)} if ctrl.rank == 0 else None
    return execute_plan(plan, ctrl, launcher, hugepages, extra, idle_wait=True)


def execute_plan(
    plan: Plan,
    ctrl: ControlPlane,
    launcher: str | None,
    hugepages: str | None,
    extra_metadata: dict | None = None,
    idle_wait: bool = False,
) -> int:
    """Run the plan on this rank; rank 0 writes the table. Returns the exit code (1: validation failed).

    ``idle_wait``: the other ranks wait for rank 0 to start the table, and at the end to write it, at
    ``ctrl.idle_barrier()``, asleep (MPI, whose waits spin: seven ranks spinning in MPI_Finalize on two cores
    starve rank 0's Parquet write); a control plane whose waits block needs none.

    When rank 0 cannot write the table (a full disk), every rank stops at the
    same point: rank 0 raises the ResultsError that says why, the others
    return its exit code.
    """
    from pathlib import Path

    from fabricbench.launch import metadata as env
    from fabricbench.launch.launcher import InterruptWatch
    from fabricbench.run.runner import Stopped, execute, stop_if_failed

    if hugepages:
        env.set_numpy_hugepages(hugepages == "on")
    ranks = ctrl.gather_json(env.rank_info())
    reporter = None
    failure = None
    if ctrl.rank == 0:
        from fabricbench.run.reporter import Reporter

        try:
            metadata = env.run_metadata(plan, ranks, launcher)  # a host the topology does not place: refused here
            metadata.update(extra_metadata or {})
            for line in env.warnings(metadata):  # what the figures owe to the hosts; a --peer server names its own
                print(printable(line, LINE), file=sys.stderr, flush=True)
            reporter = Reporter(plan, Path(plan.out_dir), metadata, ctrl.size)
        except FabricbenchError as exc:
            failure = exc
    if idle_wait:
        ctrl.idle_barrier()
    try:
        stop_if_failed(ctrl, failure)  # no rank may wait in the sweep for a rank 0 without a table
        execute(plan, ctrl, reporter, lambda tidy: InterruptWatch(tidy, ctrl.abort, leader=ctrl.rank == 0))
    except Stopped as stopped:
        if ctrl.rank != 0:
            return stopped.code
        idle_wait = False  # every rank stopped: the others have left, none waits for the table
    try:
        if reporter:
            reporter.close()
            failure = reporter.failure or reporter.console_failure()
    finally:
        if idle_wait:  # the others wait asleep while rank 0 writes the table: in MPI_Finalize they spin
            ctrl.idle_barrier()
    if failure:
        raise failure
    return 1 if reporter and reporter.failed_validation else 0
