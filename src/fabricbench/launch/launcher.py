"""Finding the launcher we run under, or starting local ranks ourselves, and passing signals on.

``fabricbench run`` outside any launcher re-executes itself under the
``mpiexec`` that belongs to the MPI mpi4py uses (the one in this Python's
environment first), so a fresh install needs no extra step. That parent passes
SIGINT and SIGTERM on to the job; on every rank, ``InterruptWatch`` makes
Ctrl-C end the run promptly, even while the rank sits inside C (``watch_rank``
from the rank's start, ``runner.execute``'s own while it runs the plan).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fabricbench.control.mpi import find_mpiexec
from fabricbench.errors import UsageError
from fabricbench.launch import slurm

T = TypeVar("T")

# Variables that a launcher sets in every rank it starts.
_LAUNCHER_VARS = [
    ("PMI_RANK", "mpiexec (hydra/PMI)"),
    ("PMIX_RANK", "mpirun (PMIx)"),
    ("OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)"),
    ("MPI_LOCALRANKID", "mpiexec (Intel MPI)"),
]
SRUN = "srun"
CHILD_FLAG = "FABRICBENCH_LAUNCHED"
# The ranks fabricbench starts are local: MPICH's hydra forks them here, with no host list from a resource manager.
# Inside a Slurm allocation hydra would otherwise take the job's nodes and start its proxy through srun, under the
# site's MpiDefault (pmix: MPI_Init aborts). Open MPI's mpirun ignores these.
LOCAL_HYDRA = {"HYDRA_LAUNCHER": "fork", "HYDRA_RMK": "user"}

# A signal the self-launching parent passes on: what the job is sent, the parent's exit code and its one line.
# hydra passes SIGINT and SIGTERM on to every rank but not SIGHUP, which the job in its own session no longer
# gets from a closing terminal.
_PASSED_ON = {
    signal.SIGINT: (signal.SIGINT, 130, "interrupted"),
    signal.SIGTERM: (signal.SIGTERM, 143, "terminated"),
    signal.SIGHUP: (signal.SIGTERM, 129, "hung up"),
}
JOB_GRACE_S = 20.0  # after passing a signal on: how long the job may take to end before it is killed, ranks and all

STOP_GRACE_S = 0.5  # a rank's main thread that has not begun to stop this soon after Ctrl-C is inside C
LEADER_GRACE_S = 5.0  # how long other ranks leave the stop to rank 0, which closes the table and ends every rank
EXIT_GRACE_S = 10.0  # a rank still alive this long after it began to stop (a wedged MPI_Abort) exits by itself


def launcher() -> str | None:
    """The launcher this process was started by, or None when started alone."""
    if os.environ.get(CHILD_FLAG):
        return os.environ[CHILD_FLAG]
    # srun before the PMI variables: its pmi2 and pmix plugins set PMI_RANK or PMIX_RANK as mpiexec does.
    if slurm.started_by_srun(os.environ):
        return SRUN
    for var, name in _LAUNCHER_VARS:
        if var in os.environ:
            return name
    return None


def env_rank() -> int:
    """This process's rank as the launcher announced it, before MPI starts (0 alone, and 0 where the rank is not
    below the size given beside it: no launcher announced that, and this process must still say what is wrong)."""
    if _contradiction():
        return 0
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


# A launcher's rank variable and the world size it sets beside it.
_RANK_AND_SIZE = [("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")]


def _contradiction() -> tuple[str, str] | None:
    """(rank variable, size variable) of a launcher's pair whose rank is not below its size, or None."""
    for rank_var, size_var in _RANK_AND_SIZE:
        rank, size = os.environ.get(rank_var, ""), os.environ.get(size_var, "")
        if rank.isdigit() and size.isdigit() and int(rank) >= int(size):
            return rank_var, size_var
    return None


def _launch_variables() -> list[str]:
    """The variables that made launcher() take this process for a rank of a launched job (and the sizes beside
    them), in the order it reads them."""
    names = [CHILD_FLAG] if os.environ.get(CHILD_FLAG) else []
    if slurm.started_by_srun(os.environ):
        names += ["SLURM_PROCID", *slurm.STEP_VARS]
    for var, _ in _LAUNCHER_VARS:
        names += [var] if var in os.environ else []
    names += [size for _, size in _RANK_AND_SIZE if size in os.environ]
    return names


def _unset_advice(why: str) -> str:
    """Why run took itself for a launched rank, naming the variables it read and their values, and what to unset."""
    names = _launch_variables()
    shown = ", ".join(f"{name}={os.environ[name]!r}" for name in names)
    return (
        f"{why}: run took this process for a rank of a job a launcher started, since {shown} "
        f"{'is' if len(names) == 1 else 'are'} set; if no launcher started it, "
        f"{'it is' if len(names) == 1 else 'they are'} inherited: `unset {' '.join(names)}` and run starts its "
        "own ranks"
    )


def check_launched() -> None:
    """Under what launcher() takes for a launcher: refuse, before MPI starts, variables that contradict each
    other (PMI_RANK=7 beside PMI_SIZE=2), which no launcher sets."""
    found = _contradiction()
    if found:
        rank_var, size_var = found
        raise UsageError(
            _unset_advice(f"{rank_var}={os.environ[rank_var]} is not below {size_var}={os.environ[size_var]}")
        )


def explain_world_of_one(make_plan: Callable[[int], T]) -> Callable[[int], T]:
    """``make_plan(ranks)``, its refusal of a world of one rank (a kernel that needs two) saying why run believed
    it was launched: an inherited PMI_RANK or FABRICBENCH_LAUNCHED, with no launcher, gives MPI a world of 1."""

    def make(ranks: int) -> T:
        try:
            return make_plan(ranks)
        except UsageError as exc:
            if ranks != 1:
                raise
            raise UsageError(_unset_advice(f"{exc}, as MPI gives a world of 1")) from None

    return make


def say_interrupted(rank: int) -> None:
    """The one line a Ctrl-C costs: from rank 0, unless a self-launching parent (which saw the signal) says it."""
    if rank == 0 and CHILD_FLAG not in os.environ:
        print(f"fabricbench: {_PASSED_ON[signal.SIGINT][2]}", file=sys.stderr, flush=True)


def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out


def relaunch(argv: list[str], ranks: int, progress: bool) -> int:
    """Run ``fabricbench argv`` on ``ranks`` local ranks; return the launcher's exit code.

    A SIGINT, SIGTERM or SIGHUP sent here ends the job and returns 130, 143 or 129 with one line.
    """
    mpiexec = find_mpiexec()
    env = slurm.without_wire_up(os.environ)  # an allocation's PMIx next to hydra's PMI aborts MPICH in MPI_Init
    env.update(LOCAL_HYDRA)
    env[CHILD_FLAG] = f"{Path(mpiexec).name} (started by fabricbench)"
    if progress:
        env["FABRICBENCH_PROGRESS"] = "1"
    command = [mpiexec]
    if _is_open_mpi(mpiexec):
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        if ranks > (os.cpu_count() or 1):
            # Only when needed: oversubscribed Open MPI yields when idle, which costs latency.
            command.append("--oversubscribe")
    command += ["-n", str(ranks), sys.executable, "-m", "fabricbench", *argv]
    job = _Job(command, env)
    code = job.wait()
    if job.received:
        _, code, word = _PASSED_ON[job.received[0]]
    elif code == _PASSED_ON[signal.SIGINT][1]:  # a rank was sent SIGINT of its own, and ended the job
        word = _PASSED_ON[signal.SIGINT][2]
    else:
        return code
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(f"fabricbench: {word}", file=sys.stderr, flush=True)
    return code


class _Job:
    """The launcher and its ranks, with this process's SIGINT, SIGTERM and SIGHUP passed on to it.

    The job runs in a session of its own, so a terminal's Ctrl-C reaches this
    process alone and mpiexec gets exactly one SIGINT, from here (a second
    makes hydra kill every rank at once, before rank 0 closes the table).
    Each signal is passed on as it arrives, a second Ctrl-C too (hydra's and
    Open MPI's way to force the end). A job still running JOB_GRACE_S after
    the first is killed: mpiexec and everything it started, as hydra starts
    each proxy and rank in a session of its own.
    """

    def __init__(self, command: list[str], env: dict):
        self.received: list[int] = []
        self._sent = 0
        self._process: subprocess.Popen | None = None
        self._deadline: threading.Timer | None = None
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _PASSED_ON}
        try:
            self._process = subprocess.Popen(command, env=env, start_new_session=True)
        except BaseException:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            raise
        self._previous = previous
        self._pass_on()  # what arrived while it started

    def _on_signal(self, signum: int, frame) -> None:
        self.received.append(signum)
        if self._deadline is None:
            self._deadline = threading.Timer(JOB_GRACE_S, self._kill)
            self._deadline.daemon = True
            self._deadline.start()
        self._pass_on()

    def _pass_on(self) -> None:
        # Counted before sending, so a signal handled in between (this runs in the handler too) goes once.
        while self._process and self._sent < len(self.received):
            self._sent += 1
            self._process.send_signal(_PASSED_ON[self.received[self._sent - 1]][0])

    def _kill(self) -> None:
        if self._process:
            for pid in [self._process.pid, *_descendants(self._process.pid)]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def wait(self) -> int:
        """The job's exit code (128 + N when a signal N ended it); the signals go back to what they were."""
        try:
            code = self._process.wait()
        finally:
            if self._deadline:
                self._deadline.cancel()
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
        return code if code >= 0 else 128 - code


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (read from /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


class InterruptWatch:
    """Ends a rank on Ctrl-C (SIGINT) within a second or two, even while its main thread is inside C.

    Python raises KeyboardInterrupt only between bytecodes: a rank inside a C
    timed loop (the MPI loop runs a whole size in one call) or inside an MPI
    call waiting for its peer would see Ctrl-C when that call returns,
    minutes later or never. Python's C-level handler also writes the signal
    to a wakeup fd at once, whichever thread it lands on, and that wakes a
    thread here. The rank then ends once: from the main thread's
    KeyboardInterrupt (``stop``), or from the watching thread when the main
    thread has not begun within STOP_GRACE_S. Ending is ``tidy(in_main_thread)``
    (keep what was measured), the leader's one line, then ``abort(130)``
    (MPI_Abort: the launcher ends every rank, one stuck in C included). A rank
    other than the leader (rank 0) waits LEADER_GRACE_S before its abort, so
    that rank 0 closes the table first. A rank still alive EXIT_GRACE_S after
    it began to end (a wedged abort) exits 130. A second Ctrl-C changes
    nothing. Made and closed by the main thread.
    """

    def __init__(self, tidy: Callable[[bool], None], abort: Callable[[int], None], leader: bool):
        self._tidy = tidy
        self._abort = abort
        self._leader = leader
        self._guard = threading.Lock()
        self._state = ""  # "main" or "thread": who ends the rank; "closed": the run ended without Ctrl-C
        self._interrupted = False
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        self._thread = threading.Thread(target=self._watch, name="fabricbench-interrupt", daemon=True)
        self._thread.start()

    def _on_sigint(self, signum: int, frame) -> None:
        if not self._interrupted:
            self._interrupted = True
            raise KeyboardInterrupt

    def _claim(self, state: str) -> str:
        """Take ``state`` if nobody has yet; return what was there before ("" when it was ours to take)."""
        with self._guard:
            found = self._state
            self._state = found or state
            return found

    def _end(self, in_main_thread: bool) -> None:
        try:
            self._tidy(in_main_thread)
        except Exception as exc:  # noqa: BLE001 - the rank must end all the same
            print(f"fabricbench: error: {exc}", file=sys.stderr)
        if self._leader:
            say_interrupted(0)
        else:
            time.sleep(LEADER_GRACE_S)
        self._abort(130)

    def stop(self) -> None:
        """The main thread's KeyboardInterrupt: end the rank here, or let the watching thread finish doing so."""
        if self._claim("main") == "thread":
            threading.Event().wait()  # the watching thread ends the process
        self._end(True)

    def _watch(self) -> None:
        while True:
            try:
                data = self._reader.recv(64)  # signal numbers, written by Python's C-level handler
            except OSError:
                return
            if signal.SIGINT in data:
                break
            if not data or 0 in data:  # close() wakes the thread with a 0
                return
        time.sleep(STOP_GRACE_S)
        found = self._claim("thread")
        if found == "closed":
            return
        if not found:
            self._end(False)
        time.sleep(EXIT_GRACE_S)
        os._exit(130)

    def close(self) -> None:
        """The run ended: put SIGINT and the wakeup fd back, and end the watching thread."""
        signal.signal(signal.SIGINT, self._previous_handler)
        signal.set_wakeup_fd(self._previous_fd)
        if self._claim("closed") == "thread":
            threading.Event().wait()  # the watching thread ends the process
        with contextlib.suppress(OSError):
            self._writer.send(b"\0")
        self._thread.join(timeout=1.0)
        self._reader.close()
        self._writer.close()


def watch_rank() -> InterruptWatch | None:
    """Under a launcher, from a rank's start: Ctrl-C ends it promptly while no run is under way to tidy up
    (starting, finishing). A rank still inside MPI_Init, its peer gone, would otherwise wait there for good."""
    if launcher() is None:
        return None
    return InterruptWatch(lambda in_main_thread: None, _end_rank, leader=env_rank() == 0)


def _end_rank(code: int) -> None:
    """MPI_Abort where MPI has started (a peer may wait for this rank in a collective). Before that, die of
    the signal: a launcher takes a rank ended by a signal, not one that exits, as the end of the job, and a
    peer inside MPI_Init (which holds the GIL: no thread of its own can act) is killed with it."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(code)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGKILL)  # the watching thread cannot restore SIGINT's default action
