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
import errno
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fabricbench import hostinfo
from fabricbench.control.mpi import find_mpiexec
from fabricbench.errors import UsageError
from fabricbench.hostinfo import usable_cpus
from fabricbench.launch import slurm
from fabricbench.terminal import LINE, printable

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


# How many local ranks a self-launched run may start (check_ranks). Measured with MPICH's hydra here: its proxy
# holds 4 descriptors a rank and about 10 of its own, a rank 2 a rank and about 30 of its own; a rank is 5 tasks
# (threads), and the parent, mpiexec and the proxy 1 each.
RANKS_PER_CORE = 8  # beyond it each spinning rank gets too small a share of a core for --timeout's watchdog
FILES_PER_RANK = 4
FILES_OF_ITS_OWN = 48
TASKS_PER_RANK = 6
TASKS_OF_ITS_OWN = 3


@dataclass(frozen=True)
class HostLimits:
    """What bounds the local ranks this host can start; None where there is no limit."""

    cores: int
    files: int | None  # RLIMIT_NOFILE's hard limit: the soft one is raised to it as far as the job needs
    tasks: int | None  # tasks (processes and threads) this user or cgroup may still start
    tasks_from: str = ""  # where ``tasks`` comes from ("ulimit -u is 400"), for the one line


def most_ranks(limits: HostLimits, oversubscribe: bool) -> tuple[int, str]:
    """The most local ranks these limits allow, and the words for the tightest of them."""
    bounds = []
    if not oversubscribe:
        bounds.append(
            (
                limits.cores * RANKS_PER_CORE,
                f"{limits.cores} cores, {RANKS_PER_CORE} ranks a core; --oversubscribe lifts this",
            )
        )
    if limits.files is not None:
        bounds.append(
            (
                (limits.files - FILES_OF_ITS_OWN) // FILES_PER_RANK,
                f"ulimit -n is {limits.files} open files a process; mpiexec's proxy needs {FILES_OF_ITS_OWN} "
                f"and {FILES_PER_RANK} a rank",
            )
        )
    if limits.tasks is not None:
        bounds.append(
            (
                (limits.tasks - TASKS_OF_ITS_OWN) // TASKS_PER_RANK,
                f"{limits.tasks_from} tasks; the job needs {TASKS_OF_ITS_OWN} and {TASKS_PER_RANK} a rank",
            )
        )
    return min(bounds, default=(sys.maxsize, ""))


def check_ranks(ranks: int, limits: HostLimits, oversubscribe: bool, given: bool = True) -> None:
    """Refuse, in one line, more local ranks than ``limits`` allow: mpiexec would fail with a line a rank or hang.
    ``given``: whether --np was (its default is not named as if it had been)."""
    most, why = most_ranks(limits, oversubscribe)
    if ranks > most:
        if most < 2:
            raise UsageError(f"{f'--np {ranks}: ' if given else ''}this host cannot start local ranks ({why})")
        raise UsageError(f"--np {ranks} is more local ranks than this host can start: at most {most} ({why})")


def host_limits() -> HostLimits:
    """This host's cores, descriptors and tasks left, as check_ranks takes them."""
    cores = usable_cpus()
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    tasks = []
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if nproc != resource.RLIM_INFINITY and os.geteuid() != 0:  # root is not held to RLIMIT_NPROC
        tasks.append((nproc, f"ulimit -u is {nproc}"))
    tasks += _cgroup_pids()
    left, where = min(tasks, default=(None, ""))
    return HostLimits(cores, None if files == resource.RLIM_INFINITY else files, left, where)


def _cgroup_pids() -> list[tuple[int, str]]:
    """(tasks left, the pids.max file) for this process's cgroup and each above it that sets a limit."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers not in ("", "pids"):  # "": cgroup v2; "pids": v1's pids hierarchy
                continue
            place = Path("/sys/fs/cgroup", *(["pids"] if controllers else []), *Path(path).parts[1:])
            for folder in [place, *place.parents]:
                with contextlib.suppress(OSError, ValueError):
                    most = (folder / "pids.max").read_text().strip()
                    if most != "max":
                        now = int((folder / "pids.current").read_text())
                        left = max(int(most) - now, 0)
                        found.append((left, f"{folder / 'pids.max'} leaves {left}"))
                if folder == Path("/sys/fs/cgroup"):
                    break
    return found


def _files_for(ranks: int) -> None:
    """Raise this process's soft descriptor limit (inherited by the job) to what ``ranks`` need, if it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = FILES_OF_ITS_OWN + FILES_PER_RANK * ranks
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


# What makes an MPI's waiting ranks give up their core, read by MPI_Init. MPICH's ranks poll without pause while
# they wait: with more ranks than cores a waiting rank spins through the time slice of the rank it waits for, so
# a rank that finds nothing to do 100 polls in a row sleeps instead (as the test suite sets it; the figures are in
# docs/faults.md). Open MPI's counterpart is mpi_yield_when_idle.
YIELD_SETTINGS = {
    "this MPICH": {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "100"},
    "this Open MPI": {"OMPI_MCA_mpi_yield_when_idle": "1"},
}


def local_ranks(env: Mapping[str, str]) -> tuple[int, str] | None:
    """How many ranks of this job the launcher started on this host, and the variable that says so; None where no
    launcher said (before MPI starts, so that a rank can set what MPI reads in MPI_Init). srun's tasks read
    SLURM_STEP_TASKS_PER_NODE (slurm.tasks_here)."""
    announced = hostinfo.announced_local_ranks(env)
    if announced:
        return announced
    if slurm.started_by_srun(env):
        tasks = slurm.tasks_here(env)
        if tasks:
            return tasks, "SLURM_STEP_TASKS_PER_NODE"
    return None


def foreign_launch(env: Mapping[str, str], mpi: slurm.Speaks) -> str | None:
    """The one line when the variables that made run take this process for a launched rank belong to a launcher
    this MPI cannot be started by (most likely inherited from a shell that ran under one); else None.

    MPICH speaking PMI-2 beside a PMIX_RANK aborts in MPI_Init ("launcher not compatible with PMI1 client", six
    lines); an MPI other than Open MPI under Open MPI's OMPI_COMM_WORLD_* alone is a world of 1, and mpi4py warns
    of a "suspicious MPI execution environment" in four. A PMI_RANK (hydra's wire-up) beside them goes first.
    """
    if "PMI_RANK" in env or not mpi.pmi:
        return None
    if "PMIX_RANK" in env and mpi.pmi == "PMI-2":
        names = [name for name in ("PMIX_RANK", "PMIX_NAMESPACE") if name in env]
        whose, why = "a PMIx launcher's", f"{mpi.name} speaks PMI-2 and aborts in MPI_Init beside it"
    elif "OMPI_COMM_WORLD_RANK" in env and "PMIX_RANK" not in env and "Open MPI" not in mpi.name:
        names = sorted(name for name in env if name.startswith("OMPI_COMM_WORLD_"))
        whose, why = "Open MPI's mpirun's", f"mpi4py loads {mpi.name.removeprefix('this ')}, which it cannot start"
    else:
        return None
    shown = ", ".join(f"{name}={env[name]!r}" for name in names)
    one = len(names) == 1
    return (
        f"{shown} {'is' if one else 'are'} set, {whose}, but {why}: if no launcher started this process, "
        f"{'it is' if one else 'they are'} inherited: `unset {' '.join(names)}` and run starts its own ranks"
    )


def check_foreign_launch() -> None:
    """Under a launcher other than srun (which slurm checks), before MPI_Init: refuse in one line (exit 2) a
    launcher's variables this MPI cannot be started by (foreign_launch)."""
    from fabricbench.control.mpi import load_mpi

    line = foreign_launch(os.environ, slurm.speaks(load_mpi().Get_library_version()))
    if line:
        raise UsageError(line)


# This rank's oversubscription, once yield_if_oversubscribed has looked: {} where its host has a CPU a rank.
OVERSUBSCRIBED: dict = {}


def oversubscription(env: Mapping[str, str], cpus: int, library_version: str) -> dict:
    """Whether the launcher started more ranks on this host than this rank may use CPUs, and what makes the
    waiting ranks yield: {"ranks", "cpus", "from" (the launcher's variable), "yield_applied" (to set), "yield_kept"
    (the same settings already in ``env``, left as they are)}; {} where the host is not oversubscribed or no
    launcher said how many ranks it holds."""
    local = local_ranks(env)
    if local is None or local[0] <= cpus:
        return {}
    settings = YIELD_SETTINGS.get(slurm.speaks(library_version).name, {})
    return {
        "ranks": local[0],
        "cpus": cpus,
        "from": local[1],
        "yield_applied": {name: value for name, value in settings.items() if name not in env},
        "yield_kept": {name: env[name] for name in settings if name in env},
    }


def yield_if_oversubscribed(library_version: str) -> None:
    """Before MPI_Init, on every rank: where this host runs more ranks than CPUs, set the yield settings that are
    not set already (a value the user gave stays), and keep what was found in OVERSUBSCRIBED."""
    OVERSUBSCRIBED.clear()
    OVERSUBSCRIBED.update(oversubscription(os.environ, hostinfo.job_cpus(), library_version))
    os.environ.update(OVERSUBSCRIBED.get("yield_applied", {}))


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


def relaunch(argv: list[str], ranks: int, progress: bool, out_dir: str = "") -> int:
    """Run ``fabricbench argv`` on ``ranks`` local ranks; return the launcher's exit code.

    A SIGINT, SIGTERM or SIGHUP sent here ends the job and returns 130, 143 or 129 with one line; a rank killed
    by a signal N (SIGKILL from the OOM killer) returns 128 + N with one line naming it (``out_dir``: the run's
    folder, whose metadata says which rank had its pid).
    """
    mpiexec = find_mpiexec()
    _files_for(ranks)
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
    stdout_closed = hold_fd(1)
    hold_fd(2)
    job = _Job(command, env)
    code = job.wait()
    if job.received:
        _, code, word = _PASSED_ON[job.received[0]]
    elif code == _PASSED_ON[signal.SIGINT][1]:  # a rank was sent SIGINT of its own, and ended the job
        word = _PASSED_ON[signal.SIGINT][2]
    else:
        return job.relay.finish(code, errno.EBADF if stdout_closed else job.relay.stdout_errno, out_dir)
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(f"fabricbench: {word}", file=sys.stderr, flush=True)
    return code


def hold_fd(fd: int) -> bool:
    """/dev/null on ``fd`` where it is closed (``>&-``), so that no file this process opens takes its number and
    the job gets a descriptor to write to; True when it was closed."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        return True


# Lines of the launcher's own on a rank's failure (hydra's, MPICH's MPI_Abort, Open MPI's banners): held back,
# and said in one line only when no rank said why.
_LAUNCHER_LINES = ("[mpiexec@", "[proxy:", "Abort(", "=", "-----", "mpirun ", "prterun ", "\n")
_SUMMARY = re.compile(r"# [\d,]+ rows in ")  # rank 0's last line on stderr, folded into the line for a lost console
# hydra's banner when a rank ends badly, which it writes to stdout, inside the console table: held back too.
_BANNER_LINES = ("=", "YOUR APPLICATION TERMINATED WITH", "This typically refers to a problem", "Please see the FAQ")
_BANNER_PID = re.compile(r"=\s+PID (\d+) RUNNING AT")
_BANNER_SIGNAL = re.compile(r"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*\(signal (\d+)\)")
RELAY_JOIN_S = 10.0  # how long after mpiexec ends its output may take to drain (a rank that outlived it holds it)


class _Relay:
    """The job's stdout and stderr, passed on by the self-launching parent.

    stdout: the console table, a view of the table on disk. Where this
    process's stdout fails (a reader gone, a full disk, a closed descriptor)
    the job is kept from knowing: what it writes is read and dropped, so that
    hydra and rank 0 run on and finish the table, Parquet and metadata.
    hydra's banner for a rank that ended badly, which it writes there, is
    held back with the launcher's lines on stderr.
    stderr: passed on as it comes (a progress bar's ``\\r`` too), but of the
    ``fabricbench: error:`` lines every rank of a failing job may write, only
    the first; and the launcher's own lines are held back (_LAUNCHER_LINES).
    """

    def __init__(self, process: subprocess.Popen):
        self.stdout_errno = 0
        self._said = False  # a ``fabricbench: error:`` line was passed on
        self._held: list[str] = []
        self._summary = ""
        self._threads = [
            threading.Thread(target=self._pass_out, args=(process.stdout,), daemon=True),
            threading.Thread(target=self._pass_err, args=(process.stderr,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pass_out(self, pipe) -> None:
        pending = b""
        while chunk := os.read(pipe.fileno(), 65536):
            *whole, pending = (pending + chunk).split(b"\n")
            self._out(b"".join(line + b"\n" for line in whole if not self._banner(line)))
        if not self._banner(pending):
            self._out(pending)

    def _banner(self, line: bytes) -> bool:
        """Whether ``line`` is hydra's banner's, held back if so."""
        text = line.decode(errors="replace")
        if text.startswith(_BANNER_LINES):
            self._held.append(text)
            return True
        return False

    def _out(self, data: bytes) -> None:
        if data and not self.stdout_errno:
            try:
                write_all(1, data)
            except OSError as exc:
                self.stdout_errno = exc.errno or errno.EIO

    def _pass_err(self, pipe) -> None:
        pending = b""
        while chunk := os.read(pipe.fileno(), 65536):
            *whole, pending = re.split(rb"(?<=[\r\n])", pending + chunk)
            for piece in whole:
                self._err_piece(piece)
        if pending:
            self._err_piece(pending)

    def _err_piece(self, piece: bytes) -> None:
        text = piece.decode(errors="replace")
        if text.startswith("fabricbench: error:"):
            if self._said:
                return
            self._said = True
        elif _SUMMARY.match(text):
            self._summary = text.strip()
            return
        elif text.startswith(_LAUNCHER_LINES):
            self._held.append(text.strip("\n"))
            return
        with contextlib.suppress(OSError):
            write_all(2, piece)

    def finish(self, code: int, stdout_errno: int, out_dir: str = "") -> int:
        """After the job: what was held back, said in one line at most; the run's exit code.

        A console lost (``stdout_errno``) under a run that wrote its table: a reader gone (EPIPE) ends as a Unix
        tool's 141, saying nothing more than the usual summary; any other failure says so in one line, exit 1.
        A rank killed by signal N, where no rank said why: one line naming it, exit 128 + N, as a shell's.
        """
        for thread in self._threads:
            thread.join(RELAY_JOIN_S)
        killed = killed_rank(self._held) if code and not self._said else None
        if killed:
            _say(printable(killed_line(*killed, out_dir), LINE))  # the folder's name as the user gave it
            return 128 + killed[1]
        if code == 0 and stdout_errno and stdout_errno != errno.EPIPE:
            say = f"fabricbench: error: cannot write to stdout: {os.strerror(stdout_errno)}; the run finished"
            say += f": {self._summary.removeprefix('# ')}" if self._summary else ""
            _say(say)
            return 1
        if self._summary:
            _say(self._summary)
        held = [line for line in self._held if line.strip("=-\n ")]
        if code and held and not self._said:
            _say(f"fabricbench: error: the job ended with exit {code}: {held[0].strip('= ')}")
        elif not code:
            for line in held:
                _say(line)
        return 141 if code == 0 and stdout_errno == errno.EPIPE else code


def killed_rank(held: list[str]) -> tuple[int, int] | None:
    """(pid, signal) of the rank hydra's banner says a signal killed, or None."""
    pids = [int(found.group(1)) for line in held if (found := _BANNER_PID.match(line))]
    signals = [int(found.group(1)) for line in held if (found := _BANNER_SIGNAL.match(line))]
    return (pids[0], signals[0]) if pids and signals else None


def killed_line(pid: int, signum: int, out_dir: str) -> str:
    """The one line for a rank a signal killed: which rank (its pid in the run's metadata), which signal, and
    where the rows measured before it are."""
    rank = "a rank"
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        ranks = json.loads((Path(out_dir) / "metadata.json").read_text())["ranks"]
        rank = f"rank {[each['pid'] for each in ranks].index(pid)}"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "an unnamed signal"
    why = ", as the kernel's OOM killer and kill -9 end a process" if signum == signal.SIGKILL else ""
    where = f"kept in {out_dir}/, marked incomplete" if out_dir else "kept, marked incomplete"
    killed = f"{rank} (pid {pid}) was killed by signal {signum} ({name}{why})"
    return f"fabricbench: error: {killed}; the rows measured before it are {where}"


def write_all(fd: int, data: bytes) -> None:
    rest = memoryview(data)
    while rest:
        rest = rest[os.write(fd, rest) :]


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


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
            self._process = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except BaseException:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            raise
        self.relay = _Relay(self._process)
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
