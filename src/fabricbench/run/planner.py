"""A Plan from run's parsed options: everything that can be checked before a byte moves.

This is the one part of the plan that asks the transport registry (which transports and kernels exist, what
each supports, its own options and preflight) and the OSU layout (which optional columns a kernel can fill).
"""

from __future__ import annotations

import argparse
import os
import socket

from fabricbench import transports
from fabricbench.errors import UsageError
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.memory import check_memory, local_rank_count
from fabricbench.measure.plan import NCCL_FORMAT, OSU_FORMAT, OsuColumns, Plan, Step, kernel_sizes
from fabricbench.measure.results import RUN_ID_VAR, new_run_id
from fabricbench.measure.topology import from_slurm_job, read_topology
from fabricbench.run.patterns import every_pattern, pattern_of

DEFAULT_SUITE_MAX_TIME = 0.2  # seconds per size keep the default sweep (transports.default_suite) to about a minute


def _topology(args: argparse.Namespace, local: bool) -> dict | None:
    """--topology's file read (one line naming the line where it is bad), else a Slurm job's tree, else None;
    ``local``: every rank runs on this host, which the topology must then place (checked here, before any rank
    starts; elsewhere rank 0 checks every rank's host)."""
    found = read_topology(args.topology) if args.topology else from_slurm_job()
    if found is None:
        return None
    if local:
        found.check_hosts([socket.gethostname()])
    return found.to_dict()


def build_plan(args: argparse.Namespace, ranks: int) -> Plan:
    """Everything that can be checked before a byte moves; raises UsageError."""
    steps = _steps(args)
    if args.output_format == NCCL_FORMAT:  # nccl-tests' layout has lines for the collectives only
        from fabricbench.report.nccl import check_kernels

        check_kernels([step.kernel_def for step in steps])
    default_suite = not args.transport and not args.kernel
    for step in steps:
        if _runs(step):
            _check_ranks(step, ranks)
    _check_rank_counts(args.ranks or [], steps, ranks)
    options = transports.transport_options(args, "run")
    # Every rank on this host (self-launched, or a launcher's ranks all local): what they will bind is checked here.
    local = not args.peer and local_rank_count(ranks) == ranks
    for transport in dict.fromkeys(step.transport for step in steps):
        transports.preflight(transport, options, ranks, local)
    # A self-launching parent names the run once; its ranks keep that name (RUN_ID_VAR).
    run_id = os.environ.get(RUN_ID_VAR) or new_run_id()
    progress = args.progress if args.progress is not None else os.environ.get("FABRICBENCH_PROGRESS") == "1"
    # Each pattern's options, from the steps of its kernels (the defaults where it has none), in registry order.
    chosen = {"output_format": args.output_format}
    for pattern in every_pattern():
        chosen |= pattern.plan_options(args, [s for s in steps if pattern_of(s.kernel_def) is pattern], ranks)
    plan = Plan(
        steps=steps,
        iterations=args.iterations,
        warmup=args.warmup,
        window=args.window,
        max_time=args.max_time or (DEFAULT_SUITE_MAX_TIME if default_suite else None),
        validate=args.validate,
        timeout=args.timeout,
        out_dir=args.out or os.path.join("results", run_id),
        run_id=run_id,
        label=args.label,
        osu=_osu_columns(args, steps),
        progress=progress,
        transport_options=options,
        repeat=args.repeat,
        ranks=args.ranks or [],
        topology=_topology(args, local),
        **chosen,
    )
    plan.check()
    check_memory(plan, ranks, 1 if args.peer else local_rank_count(ranks), args.max_memory)
    return plan


def _steps(args: argparse.Namespace) -> list[Step]:
    if not args.transport and not args.kernel:
        pairs = transports.default_suite()
    elif not args.transport:
        pairs = [(transports.natural_transport(k), [k]) for k in args.kernel]
    else:
        # -t alone: every kernel of the transport but those run only when named (congestion)
        every = {
            t: sorted(k for k in transports.supported_kernels(t) if not get_kernel(k).opt_in) for t in args.transport
        }
        pairs = [(t, args.kernel or every[t]) for t in args.transport]
    # OSU's -T changes what a reduction sums, and so its sizes (MPI_CHAR from 1 B); _osu_columns checks the rest.
    datatype = (args.osu_datatype or "").upper() if args.output_format == OSU_FORMAT else ""
    steps = []
    for transport, kernels in pairs:
        transports.check_transport(transport)
        for name in kernels:
            kernel = get_kernel(name)
            moved = kernel.with_datatype(datatype)
            chosen = datatype if moved is not kernel else ""
            steps.append(Step(transport, name, kernel_sizes(moved, args.message_size), chosen))
    return steps


def _check_ranks(step: Step, ranks: int) -> None:
    """Refuse a rank count the step's kernel cannot run on with its transport (Transport.min_ranks)."""
    step.kernel_def.check_ranks(ranks, transports.transport_class(step.transport).min_ranks(step.kernel_def))


def _check_rank_counts(counts: list[int], steps: list[Step], launched: int) -> None:
    """--ranks: every count within the launched ranks and each collective's minimum, on transports that can."""
    if not counts:
        return
    if counts[-1] > launched:
        raise UsageError(f"--ranks {counts[-1]} is more than the {launched} ranks launched (-n, or the launcher's)")
    collectives = [s for s in steps if s.kernel_def.collective and _runs(s)]
    if not collectives:
        raise UsageError("--ranks sizes the collectives; this run has none (e.g. -k allreduce)")
    for step in collectives:
        if not transports.transport_class(step.transport).sub_communicators:
            raise UsageError(f"--ranks: transport {step.transport!r} cannot run on a subset of the ranks (mpi can)")
        try:
            _check_ranks(step, counts[0])
        except UsageError as exc:
            raise UsageError(f"--ranks {counts[0]}: {exc}") from None


def _runs(step: Step) -> bool:
    """Whether the step's transport runs its kernel: it has the kernel, and its class the capability the kernel's
    pattern needs (transports.capabilities); the others get their ``unsupported`` rows at run time."""
    cls = transports.transport_class(step.transport)
    return step.kernel in cls.kernels and pattern_of(step.kernel_def).lacks(cls) is None


def _osu_columns(args: argparse.Namespace, steps: list[Step]) -> OsuColumns:
    """--format osu's optional columns, each checked against every kernel of the run (UsageError)."""
    from fabricbench.report.osu import Columns, check_columns

    given = args.osu_full or args.osu_percentiles or args.osu_datatype or args.osu_no_rate
    if not given:
        return OsuColumns()
    if args.output_format != OSU_FORMAT:
        raise UsageError(
            "--osu-full, --osu-percentiles, --osu-datatype and --osu-no-rate shape OSU's text: add --format osu"
        )
    columns = Columns(
        args.validate,
        args.osu_full,
        tuple(args.osu_percentiles or ()),
        args.osu_datatype or "",
        rate=not args.osu_no_rate,
    )
    for step in steps:
        check_columns(step.kernel_def, columns, step.transport)
    return OsuColumns(columns.full, columns.percentiles, columns.datatype.upper(), columns.rate)
