"""The runner: on every rank, the same sequence of warm-up, timing and checking.

It owns barriers, time budgets, validation and the per-rank summary. It never
formats anything: rank 0 hands each finished row to the reporter at once, so
the table on disk grows size by size.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Protocol

import numpy as np

from fabricbench.collectives.spec import wrong_elements
from fabricbench.errors import FabricbenchError, Unsupported
from fabricbench.measure.kernels import SLOW_BYTES_PER_S, Kernel
from fabricbench.measure.plan import Plan
from fabricbench.measure.rows import unsupported_row
from fabricbench.run.patterns import Pattern, Phase, Timed, pattern_of
from fabricbench.terminal import LINE, printable
from fabricbench.transports import open_transport
from fabricbench.transports.capabilities import SelfTimed
from fabricbench.transports.placement import in_place_refusal, placed_kernels

CORRUPT_HOOK = "FABRICBENCH_TEST_CORRUPT"  # test hook: flip a received byte before the check
LINK_HOOK = "FABRICBENCH_TEST_LINK_MBPS"  # test hook: every case's link_MBps, as a NIC would report it
# Test and benchmark hook: a folder where each rank writes, once, when its first timed run began (time.time_ns) and
# the modules it had imported by the end of that phase (benchmarks/startup.py, tests/test_startup.py).
STAMP_HOOK = "FABRICBENCH_TEST_STAMPS"


ABORT_GRACE_S = 10.0  # how long the watchdog's abort may take before the rank just exits
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
        per_iteration = kernel.iteration_bytes(size, ranks, plan.window)
        moved = kernel.held_bytes(size, ranks) + (iterations + int(plan.validate)) * per_iteration
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


Tidy = Callable[[bool], None]  # what a rank does on Ctrl-C before it ends: keep what was measured (in_main_thread)


class Interrupts(Protocol):
    """A watch for Ctrl-C around a run (launch.launcher.InterruptWatch)."""

    def stop(self) -> None:
        """The main thread's KeyboardInterrupt: end the rank."""

    def close(self) -> None:
        """The run ended: stop watching."""


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


def measure(ctrl, transport, kernel: Kernel, size: int, plan: Plan, watchdog: Watchdog, reporter=None, emit=None):
    """Time one size, phase by phase as the kernel's pattern lays them out; rank 0 returns the rows, the others [].

    ``reporter`` is rank 0's (None elsewhere): where it failed to write the table so far, every rank stops at the
    next phase's first barrier. A pattern that ``streams`` hands each phase's rows to ``emit`` (rank 0's) as the
    phase ends, so rank 0 never holds a size's rows: an all-pairs size at 10,000 ranks is 100 million of them.
    Raises Unsupported on every rank alike, before any traffic, where the pattern or the transport cannot run the
    kernel at this size.
    """
    pattern = pattern_of(kernel)(ctrl, transport, kernel, size, plan)
    iterations, warmup = plan.counts(kernel, size)
    probe = pattern.probe(plan, warmup)
    phases = pattern.phases()
    timed = []
    for number, phase in enumerate(phases, 1):
        failure = reporter.failure if reporter else None
        one = time_phase(ctrl, pattern, phase, iterations, probe, watchdog, failure)
        if not pattern.streams:
            timed.append(one)
        elif ctrl.rank == 0:
            emit(pattern.phase_rows(one, warmup, last=number == len(phases)))
    watchdog.disarm()
    return pattern.rows(timed, warmup) if ctrl.rank == 0 and not pattern.streams else []


def time_phase(
    ctrl, pattern: Pattern, phase: Phase, iterations: int, probe: int, watchdog: Watchdog, failure=None
) -> Timed:
    """The one timing protocol, on every rank: arm the watchdog, build this rank's case, meet the others (where
    rank 0 brings a ``failure``, all stop), time ``probe`` warm-up iterations, agree on the count, barrier, run,
    validate, gather."""
    plan, kernel, size = pattern.plan, pattern.kernel, pattern.size
    allowance = probe if pattern.rearm_from_warmup else probe + iterations
    watchdog.arm(plan.timeout, phase.what, watchdog.guess(plan, kernel, size, ctrl.size, allowance), guessed=True)
    case = pattern.case(phase)
    try:
        if LINK_HOOK in os.environ:
            case.link_MBps, case.link_label = float(os.environ[LINK_HOOK]), LINK_HOOK
        times = np.zeros(max(iterations, probe, 1), dtype=np.int64)
        view = memoryview(times)
        stop_if_failed(ctrl, failure)  # the phase's first barrier
        case.run(probe, view)
        if probe and (plan.max_time or pattern.rearm_from_warmup):
            # The median: one preempted warm-up iteration must not shrink the count.
            estimate_ns = float(np.median(times[:probe])) if case.initiator else 0.0
            estimate_ns = max(pattern.agree(phase, estimate_ns), 1.0)
            if plan.max_time:
                iterations = max(1, min(iterations, int(plan.max_time * 1e9 / estimate_ns)))
            if pattern.rearm_from_warmup:
                watchdog.arm(plan.timeout, phase.what, EXPECTED_SLACK * iterations * estimate_ns / 1e9)
        elif pattern.rearm_from_warmup:
            guess = watchdog.guess(plan, kernel, size, ctrl.size, iterations)
            watchdog.arm(plan.timeout, phase.what, guess, guessed=True)
        ctrl.barrier()
        started_ns = time.time_ns()
        case.run(iterations, view)
        samples = times[:iterations].copy() if case.initiator else times[:0]
        checked = plan.validate and case.checks
        timed = Timed(phase, case, iterations, samples, validate(ctrl, case, kernel) if checked else -1)
        timed.gathered = ctrl.gather(pattern.summary(timed))
    finally:
        case.close()
    if STAMP_HOOK in os.environ:
        _stamp(os.environ[STAMP_HOOK], ctrl.rank, started_ns)
    return timed


def _stamp(folder: str, rank: int, started_ns: int) -> None:
    """STAMP_HOOK: rank<N>.json with the first timed run's start and the modules imported so far; the first
    phase's only (a file already there is kept). Written after the phase, so the timed run waits for no file."""
    import json

    try:
        with open(os.path.join(folder, f"rank{rank}.json"), "x") as out:
            json.dump({"first_sample_ns": started_ns, "modules": sorted(sys.modules)}, out)
    except FileExistsError:
        pass


def validate(ctrl, case, kernel: Kernel) -> int:
    """One untimed iteration into poisoned buffers, then compare: 1 pass, 0 fail. ``case.wrong`` keeps how many
    elements were wrong (nccl-tests' #wrong), or what a case that checks on its device counted, if more."""
    case.poison()
    ctrl.barrier()
    case.run(1, memoryview(np.zeros(1, dtype=np.int64)))
    ctrl.barrier()
    received = case.received
    if os.environ.get(CORRUPT_HOOK) == kernel.name and received.size:
        received.view(np.uint8)[received.size // 2] ^= 0xFF
    counted = wrong_elements(received, case.expected(), kernel.elem_bytes)
    case.wrong = max(counted, getattr(case, "wrong", 0))
    return int(case.wrong == 0)


def run_sizes(plan: Plan, ctrl, transport, step, repeat: int, reporter, watchdog: Watchdog) -> None:
    """One step's sweep over its sizes on the ranks of ``ctrl``; rank 0 hands each row, with its repeat, on."""
    kernel = step.kernel_def

    def hand_on(row: dict | None, sizes: int = 1) -> None:
        if reporter and row is not None:
            row["repeat"] = repeat
            reporter.row(row)
        if reporter:
            reporter.advance(sizes)

    def emit(batch) -> None:
        batch.columns["repeat"] = repeat
        reporter.batch(batch)

    reason = transport.unsupported(kernel)
    if reason:
        hand_on(
            unsupported_row(plan, step.transport, kernel, None, ctrl.size, reason, transport.buffer), len(step.sizes)
        )
        return
    placed = placed_kernels(kernel, plan.transport_options)  # a collective out of place and/or in place
    for size in step.sizes:
        rows = []
        for kernel in placed:  # nccl-tests' order: a size's in-place row right after its out-of-place one
            why = in_place_refusal(kernel, type(transport))
            if size % kernel.elem_bytes:
                why = f"size is not a multiple of the {kernel.elem_bytes}-byte element"
            if why:
                rows.append(unsupported_row(plan, step.transport, kernel, size, ctrl.size, why, transport.buffer))
                continue
            try:
                if isinstance(transport, SelfTimed):
                    stop_if_failed(ctrl, reporter.failure if reporter else None)
                    watchdog.arm(2 * plan.timeout, f"{transport.name} {kernel.name} at {size} B")
                    row = transport.reference_row(kernel, size)
                    watchdog.disarm()
                    rows += [row] if row is not None else []
                else:
                    rows += measure(ctrl, transport, kernel, size, plan, watchdog, reporter, emit)
            except Unsupported as exc:  # raised on every rank alike, before any traffic
                watchdog.disarm()
                rows.append(unsupported_row(plan, step.transport, kernel, size, ctrl.size, str(exc), transport.buffer))
        for row in rows[:-1]:
            hand_on(row, 0)
        hand_on(rows[-1] if rows else None)


def execute(plan: Plan, ctrl, reporter, watch_interrupts: Callable[[Tidy], Interrupts] | None = None) -> None:
    """Run the plan's schedule (every step per repeat, per --ranks count); ``reporter`` is rank 0's sink for rows
    (None elsewhere).

    A ``--ranks`` entry runs on a control plane of the first N ranks (an MPI sub-communicator, made once per N
    by every rank); the other ranks wait at a barrier that sleeps, then every rank agrees whether rank 0 can
    still write the table, so a failure there stops all of them together.

    ``watch_interrupts(tidy)``, where given, watches for Ctrl-C while the plan runs and ends the rank with
    ``tidy`` first (launch.launcher.InterruptWatch). It takes the process's signals, so only a rank that is the
    process's main thread passes one; ranks run as threads pass none.
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

    interrupts = watch_interrupts(keep_what_was_measured) if watch_interrupts else None
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
        if interrupts:
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
        # One line whatever it quotes: a peer's refusal carries the other side's words.
        sys.stderr.write(f"fabricbench: error: rank {ctrl.rank}: {printable(message, LINE)}\n")
        sys.stderr.flush()
        for transport in transports.values():
            transport.release()  # the abort below ends the process without running finally
        if reporter:
            reporter.close(complete=False)
        ctrl.abort(code)
    finally:
        if interrupts:
            interrupts.close()
        watchdog.disarm()
        for transport in transports.values():
            transport.close()
