"""The runner: on every rank, the same sequence of warm-up, timing and checking.

It owns barriers, time budgets, validation and the per-rank summary. It never
formats anything: rank 0 hands each finished row to the reporter at once, so
the table on disk grows size by size.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

import numpy as np

from fabricbench.errors import FabricbenchError, Unsupported
from fabricbench.kernels import Kernel
from fabricbench.plan import Plan
from fabricbench.rows import measured_row, rank_summary, unsupported_row
from fabricbench.transports import open_transport

CORRUPT_HOOK = "FABRICBENCH_TEST_CORRUPT"  # test hook: flip a received byte before the check


ABORT_GRACE_S = 10.0  # how long the watchdog's abort may take before the rank just exits


class Watchdog:
    """Ends the run when a size makes no progress: MPI calls have no timeout of their own.

    It aborts through the control plane (MPI_Abort: the launcher kills every
    rank on every host; without MPI the peer sees the connection close), so
    no rank is left hanging, and the rows already written stay on disk. A
    rank that merely exited was not enough: hydra now and then left a frozen
    peer running. Should the abort itself hang in a wedged MPI library, the
    rank exits after ABORT_GRACE_S.
    """

    def __init__(self, rank: int, abort):
        self.rank = rank
        self._abort = abort
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, what: str) -> None:
        self.disarm()
        self._timer = threading.Timer(seconds, self._fire, args=(seconds, what))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer:
            self._timer.cancel()
            self._timer = None

    def _fire(self, seconds: float, what: str) -> None:
        sys.stderr.write(
            f"fabricbench: error: rank {self.rank}: {what} made no progress for {seconds:.0f} s; "
            "a peer may have died (rows measured so far are kept)\n"
        )
        sys.stderr.flush()
        fallback = threading.Timer(ABORT_GRACE_S, os._exit, args=(3,))
        fallback.daemon = True
        fallback.start()
        self._abort(3)
        os._exit(3)


def measure(ctrl, transport, kernel: Kernel, size: int, plan: Plan, watchdog: Watchdog):
    """Time one size on this rank; rank 0 returns the row, the others None."""
    iterations, warmup = plan.counts(kernel, size)
    what = f"{transport.name} {kernel.name} at {size} B"
    watchdog.arm(plan.timeout, what)
    case = transport.case(kernel, size)
    try:
        probe = warmup or (1 if plan.max_time else 0)
        times = np.zeros(max(iterations, probe, 1), dtype=np.int64)
        view = memoryview(times)
        ctrl.barrier()
        case.run(probe, view)
        if probe:
            # Every rank must agree on the count: take the slowest rank's estimate.
            # The median: one preempted warm-up iteration must not shrink the count.
            estimate_ns = float(np.median(times[:probe])) if case.initiator else 0.0
            estimate_ns = max(ctrl.allreduce_max(estimate_ns), 1.0)
            if plan.max_time:
                iterations = max(1, min(iterations, int(plan.max_time * 1e9 / estimate_ns)))
            # --timeout bounds a stall, not a long size: give the timed loop its expected length on top.
            watchdog.arm(plan.timeout + 4 * iterations * estimate_ns / 1e9, what)
        ctrl.barrier()
        case.run(iterations, view)
        samples = times[:iterations].copy() if case.initiator else times[:0]
        valid = check(ctrl, case, kernel) if plan.validate else -1
        gathered = ctrl.gather(rank_summary(case.initiator, iterations, samples, valid))
    finally:
        case.close()
    watchdog.disarm()
    if ctrl.rank != 0:
        return None
    return measured_row(plan, transport.name, kernel, size, case, warmup, samples, gathered, transport.buffer)


def check(ctrl, case, kernel: Kernel) -> int:
    """One untimed iteration into poisoned buffers, then compare: 1 pass, 0 fail."""
    case.poison()
    ctrl.barrier()
    case.run(1, memoryview(np.zeros(1, dtype=np.int64)))
    ctrl.barrier()
    received = case.received
    if os.environ.get(CORRUPT_HOOK) == kernel.name and received.size:
        received.view(np.uint8)[received.size // 2] ^= 0xFF
    return int(np.array_equal(received.view(np.uint8), case.expected().view(np.uint8)))


def execute(plan: Plan, ctrl, reporter) -> None:
    """Run every step of the plan; ``reporter`` is rank 0's sink for rows (None elsewhere)."""
    watchdog = Watchdog(ctrl.rank, ctrl.abort)
    transports: dict = {}
    try:
        for step in plan.steps:
            kernel = step.spec
            if step.transport not in transports:
                transports[step.transport] = open_transport(step.transport, ctrl, plan)
                if reporter:
                    reporter.add_transport(step.transport, transports[step.transport].metadata())
            transport = transports[step.transport]
            if reporter:
                reporter.start_step(step)
            reason = transport.unsupported(kernel)
            if reason:
                if reporter:
                    reporter.row(unsupported_row(plan, step.transport, kernel, None, ctrl.size, reason))
                    reporter.advance(len(step.sizes))
                continue
            for size in step.sizes:
                if size % kernel.elem_bytes:
                    row = unsupported_row(
                        plan,
                        step.transport,
                        kernel,
                        size,
                        ctrl.size,
                        f"size is not a multiple of the {kernel.elem_bytes}-byte element",
                    )
                else:
                    try:
                        if transport.self_timed:
                            watchdog.arm(2 * plan.timeout, f"{transport.name} {kernel.name} at {size} B")
                            row = transport.reference_row(kernel, size)
                            watchdog.disarm()
                        else:
                            row = measure(ctrl, transport, kernel, size, plan, watchdog)
                    except Unsupported as exc:  # raised by case() on every rank alike, before any traffic
                        watchdog.disarm()
                        row = unsupported_row(plan, step.transport, kernel, size, ctrl.size, str(exc))
                if reporter:
                    reporter.row(row)
                    reporter.advance(1)
    except Exception as exc:  # noqa: BLE001 - one rank failing must end every rank
        watchdog.disarm()
        if isinstance(exc, FabricbenchError):
            message, code = str(exc), exc.exit_code
        else:
            message, code = f"internal error: {type(exc).__name__}: {exc}", 1
            if os.environ.get("FABRICBENCH_DEBUG"):
                traceback.print_exc()
        sys.stderr.write(f"fabricbench: error: rank {ctrl.rank}: {message}\n")
        sys.stderr.flush()
        for transport in transports.values():
            transport.release()  # the abort below ends the process without running finally
        if reporter:
            reporter.close(complete=False)
        ctrl.abort(code)
    finally:
        watchdog.disarm()
        for transport in transports.values():
            transport.close()
