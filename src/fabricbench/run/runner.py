"""The runner: on every rank, the same sequence of warm-up, timing and checking.

It owns barriers, time budgets, validation and the per-rank summary. It never
formats anything: rank 0 hands each finished row to the reporter at once, so
the table on disk grows size by size.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback

import numpy as np

from fabricbench.errors import FabricbenchError, Unsupported
from fabricbench.launch.launcher import InterruptWatch
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.memory import case_bytes
from fabricbench.measure.plan import Plan, iteration_bytes
from fabricbench.measure.rows import measured_row, rank_summary, unsupported_row
from fabricbench.run.matrix import measure_pairs
from fabricbench.transports import open_transport

CORRUPT_HOOK = "FABRICBENCH_TEST_CORRUPT"  # test hook: flip a received byte before the check
LINK_HOOK = "FABRICBENCH_TEST_LINK_MBPS"  # test hook: every case's link_MBps, as a NIC would report it


ABORT_GRACE_S = 10.0  # how long the watchdog's abort may take before the rank just exits
SLOW_BYTES_PER_S = 100e6  # what a size is assumed to move at least while no warm-up has said how fast it goes
EXPECTED_SLACK = 4  # a size's expected length is four times its estimate: a busy host must not look like a stall
NAMED_GUESS_S = 1.0  # a guessed allowance this long may itself be why a size ran out: the message says so


class Watchdog:
    """Ends the run when a size makes no progress: MPI calls have no timeout of their own.

    It aborts through the control plane (MPI_Abort: the launcher kills every
    rank on every host; without MPI the peer sees the connection close), so
    no rank is left hanging, and the rows already written stay on disk. A
    rank that merely exited was not enough: hydra now and then left a frozen
    peer running. Should the abort itself hang in a wedged MPI library, the
    rank exits after ABORT_GRACE_S.

    --timeout bounds a stall, not a long size: each size gets what it should
    take on top, from its warm-up, or before any warm-up (or with none) from
    its bytes at SLOW_BYTES_PER_S, so a large size is not taken for a dead peer;
    EXPECTED_SLACK times over either way.
    """

    def __init__(self, rank: int, abort):
        self.rank = rank
        self._abort = abort
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, what: str, expected_s: float = 0.0, guessed: bool = False) -> None:
        """Fire after ``seconds`` beyond ``expected_s``, what the size should take (``guessed``: from its bytes)."""
        self.disarm()
        delay = min(seconds + expected_s, threading.TIMEOUT_MAX)  # a timer takes no longer wait
        self._timer = threading.Timer(delay, self._fire, args=(seconds, expected_s, guessed, what))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer:
            self._timer.cancel()
            self._timer = None

    @staticmethod
    def guess(plan: Plan, kernel: Kernel, size: int, ranks: int, iterations: int) -> float:
        """Seconds to build a case and run ``iterations`` of it (and validation's) at SLOW_BYTES_PER_S, with slack."""
        per_iteration = iteration_bytes(kernel, size, ranks, plan.window)
        moved = case_bytes(kernel, size, ranks) + (iterations + int(plan.validate)) * per_iteration
        return EXPECTED_SLACK * moved / SLOW_BYTES_PER_S

    def _fire(self, seconds: float, expected_s: float, guessed: bool, what: str) -> None:
        if guessed and expected_s >= NAMED_GUESS_S:
            why = (
                f"took longer than --timeout {seconds:g} s beyond the {expected_s:.0f} s its size was given "
                f"({EXPECTED_SLACK} times its bytes at {SLOW_BYTES_PER_S / 1e6:.0f} MB/s, before any warm-up "
                "timed it); raise --timeout"
            )
        else:
            why = f"made no progress for {seconds + expected_s:.0f} s; a peer may have died"
        sys.stderr.write(f"fabricbench: error: rank {self.rank}: {what} {why} (rows measured so far are kept)\n")
        sys.stderr.flush()
        fallback = threading.Timer(ABORT_GRACE_S, os._exit, args=(3,))
        fallback.daemon = True
        fallback.start()
        self._abort(3)
        os._exit(3)


class Stopped(Exception):
    """Rank 0 could not write the table: every rank leaves the sweep at the same point, with exit code ``code``."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def stop_if_failed(ctrl, failure: FabricbenchError | None) -> None:
    """Every rank calls this at the same point; all raise Stopped when rank 0 brings a ``failure``.

    It is one allreduce, so it is also a barrier: a size's first barrier
    carries it at no cost. The code crossed the network, so anything but a
    small positive integer stops with 1.
    """
    agreed = ctrl.allreduce_max(float(failure.exit_code) if failure else 0.0)
    if agreed:
        raise Stopped(int(agreed) if agreed.is_integer() and 1 <= agreed <= 255 else 1)


def measure(ctrl, transport, kernel: Kernel, size: int, plan: Plan, watchdog: Watchdog, failure=None):
    """Time one size on this rank; rank 0 returns the row, the others None.

    ``failure`` is rank 0's failure to write the table so far (None elsewhere): every rank stops before the size.
    """
    iterations, warmup = plan.counts(kernel, size)
    what = f"{transport.name} {kernel.name} at {size} B"
    probe = warmup or (1 if plan.max_time else 0)
    watchdog.arm(plan.timeout, what, watchdog.guess(plan, kernel, size, ctrl.size, probe), guessed=True)
    case = transport.case(kernel, size)
    try:
        if LINK_HOOK in os.environ:
            case.link_MBps, case.link_label = float(os.environ[LINK_HOOK]), LINK_HOOK
        times = np.zeros(max(iterations, probe, 1), dtype=np.int64)
        view = memoryview(times)
        stop_if_failed(ctrl, failure)  # the size's first barrier
        case.run(probe, view)
        if probe:
            # Every rank must agree on the count: take the slowest rank's estimate.
            # The median: one preempted warm-up iteration must not shrink the count.
            estimate_ns = float(np.median(times[:probe])) if case.initiator else 0.0
            estimate_ns = max(ctrl.allreduce_max(estimate_ns), 1.0)
            if plan.max_time:
                iterations = max(1, min(iterations, int(plan.max_time * 1e9 / estimate_ns)))
            watchdog.arm(plan.timeout, what, EXPECTED_SLACK * iterations * estimate_ns / 1e9)
        else:
            watchdog.arm(plan.timeout, what, watchdog.guess(plan, kernel, size, ctrl.size, iterations), guessed=True)
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


def measure_routes(ctrl, transport, kernel: Kernel, size: int, plan: Plan, watchdog: Watchdog, failure=None):
    """A GPU-pair kernel (cuda-copy ``peer``): ``measure`` once per ordered pair of GPUs on rank 0's host, which
    the transport's ``routes`` lists alike on every rank; rank 0 returns a row per pair, the others []."""
    rows = []
    host = socket.gethostname()
    for src, dst in transport.routes(kernel):
        transport.route = (src, dst)
        try:
            row = measure(ctrl, transport, kernel, size, plan, watchdog, failure)
        finally:
            transport.route = None
        if row is not None:
            row.update(src_gpu=src, dst_gpu=dst, src_host=host, dst_host=host)
            rows.append(row)
    return rows


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


def run_sizes(plan: Plan, ctrl, transport, step, repeat: int, reporter, watchdog: Watchdog) -> None:
    """One step's sweep over its sizes on the ranks of ``ctrl``; rank 0 hands each row, with its repeat, on."""
    kernel = step.spec

    def hand_on(row: dict | None, sizes: int = 1) -> None:
        if reporter and row is not None:
            row["repeat"] = repeat
            reporter.row(row)
        if reporter:
            reporter.advance(sizes)

    reason = transport.unsupported(kernel)
    if reason:
        hand_on(
            unsupported_row(plan, step.transport, kernel, None, ctrl.size, reason, transport.buffer), len(step.sizes)
        )
        return
    for size in step.sizes:
        if size % kernel.elem_bytes:
            why = f"size is not a multiple of the {kernel.elem_bytes}-byte element"
            row = unsupported_row(plan, step.transport, kernel, size, ctrl.size, why, transport.buffer)
        else:
            try:
                failure = reporter.failure if reporter else None
                if transport.self_timed:
                    stop_if_failed(ctrl, failure)
                    watchdog.arm(2 * plan.timeout, f"{transport.name} {kernel.name} at {size} B")
                    row = transport.reference_row(kernel, size)
                    watchdog.disarm()
                elif kernel.pattern in ("matrix", "gpu-pairs"):  # one row per ordered pair of ranks, or of GPUs
                    by_pairs = measure_pairs if kernel.pattern == "matrix" else measure_routes
                    pair_rows = by_pairs(ctrl, transport, kernel, size, plan, watchdog, failure)
                    for pair_row in pair_rows[:-1]:
                        hand_on(pair_row, 0)
                    row = pair_rows[-1] if pair_rows else None
                else:
                    row = measure(ctrl, transport, kernel, size, plan, watchdog, failure)
            except Unsupported as exc:  # raised by case() on every rank alike, before any traffic
                watchdog.disarm()
                row = unsupported_row(plan, step.transport, kernel, size, ctrl.size, str(exc), transport.buffer)
        hand_on(row)


def execute(plan: Plan, ctrl, reporter) -> None:
    """Run the plan's schedule (every step per repeat, per --ranks count); ``reporter`` is rank 0's sink for rows
    (None elsewhere).

    A ``--ranks`` entry runs on a control plane of the first N ranks (an MPI sub-communicator, made once per N
    by every rank); the other ranks wait at a barrier that sleeps, then every rank agrees whether rank 0 can
    still write the table, so a failure there stops all of them together.
    """
    watchdog = Watchdog(ctrl.rank, ctrl.abort)
    transports: dict = {}  # (transport name, ranks) -> the transport open on those ranks
    subsets: dict = {}  # rank count -> the control plane of the first N ranks (None on the others)

    def keep_what_was_measured(in_main_thread: bool) -> None:
        """Ctrl-C: the rows so far stay, and the table is closed (complete: false) before every rank ends."""
        watchdog.disarm()
        if in_main_thread:  # otherwise the main thread may still be inside a transport's C code
            for transport in transports.values():
                transport.release()
        if reporter:
            reporter.close(complete=False)

    interrupts = InterruptWatch(keep_what_was_measured, ctrl.abort, leader=ctrl.rank == 0)
    try:
        for entry in plan.schedule():
            step, count = entry.step, entry.ranks
            subset = count is not None and count < ctrl.size
            if subset and count not in subsets:
                subsets[count] = ctrl.first(count)  # collective over every rank, at the same entry on each
            here = subsets[count] if subset else ctrl
            if here is not None:
                key = (step.transport, here.size)
                if key not in transports:
                    transports[key] = open_transport(step.transport, here, plan)
                    if reporter and step.transport not in reporter.metadata.get("transports", {}):
                        reporter.add_transport(step.transport, transports[key].metadata())
                if reporter:
                    reporter.start_step(step, entry.repeat, here.size)
                try:
                    run_sizes(plan, here, transports[key], step, entry.repeat, reporter, watchdog)
                except Stopped:
                    if not subset:  # a subset's ranks stopped together; the check below stops the others too
                        raise
            if subset:
                ctrl.idle_barrier()
                stop_if_failed(ctrl, reporter.failure if reporter else None)
        stop_if_failed(ctrl, reporter.failure if reporter else None)  # the last rows' failure
    except KeyboardInterrupt:
        interrupts.stop()
        raise  # only where the control plane's abort came back
    except Stopped:
        raise  # not one rank's failure: every rank stops here together, and rank 0 says why
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
        interrupts.close()
        watchdog.disarm()
        for transport in transports.values():
            transport.close()
