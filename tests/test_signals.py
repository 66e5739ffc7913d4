"""Signals on real ranks: SIGINT and SIGTERM end the whole job promptly, keep the rows and say so in one line.

A self-launched run passes the signal on to mpiexec; under an explicit mpiexec, a terminal's Ctrl-C reaches
mpiexec, which passes it on to the ranks. Every run has a unique --out path, so ps finds what it left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fabricbench.errors import UsageError
from support import MPIEXEC, PYTHON, clean_env, read_rows, run_until_first_row

ENDS_WITHIN_S = 15.0  # generous: the job ends in a second or two; the C-loop size alone would take minutes


def _left_running(out: Path) -> list[str]:
    """Live processes whose command line names this run's output folder: the parent, mpiexec, the ranks."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines()[1:] if str(out) in line and line.split()[1][0] not in "ZX"]


def _assert_nothing_left(out: Path) -> None:
    end = time.monotonic() + 10
    while _left_running(out) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _left_running(out), _left_running(out)


def _ended(run: subprocess.Popen, out: Path, signalled_at: float) -> str:
    """Wait for the job; return its stderr. Fails, killing what is left, when it outlives ENDS_WITHIN_S."""
    try:
        _, stderr = run.communicate(timeout=60)
    finally:
        for line in _left_running(out) if run.poll() is None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
    assert time.monotonic() - signalled_at < ENDS_WITHIN_S, stderr
    assert "Traceback" not in stderr, stderr
    return stderr


def _our_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fabricbench:")]


@pytest.mark.parametrize(
    ("signum", "code", "line"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_signal_to_a_self_launched_run_ends_mpiexec_and_every_rank(out, signum, code, line):
    run = run_until_first_row("-n", "2", "--out", str(out))
    ranks = [rank["pid"] for rank in json.loads((out / "metadata.json").read_text())["ranks"]]
    assert len(_left_running(out)) >= 4  # the parent, mpiexec and both ranks
    assert all(Path(f"/proc/{pid}").exists() for pid in ranks)
    run.send_signal(signum)
    stderr = _ended(run, out, time.monotonic())
    assert run.returncode == code, stderr
    assert _our_lines(stderr) == [f"fabricbench: {line}"], stderr
    _assert_nothing_left(out)
    rows, meta = read_rows(out)
    assert 1 <= len(rows) < 23 and (rows.status == "ok").all() and meta["complete"] is False
    if signum == signal.SIGINT:  # the ranks saw Ctrl-C: rank 0 closed the table before the job ended
        assert meta["rows"] == len(rows)


def _explicit_mpiexec(out: Path, *args: str) -> subprocess.Popen:
    """``mpiexec -n 2 python -m fabricbench run ARGS`` as a shell starts it: a process group of its own."""
    return subprocess.Popen(
        [MPIEXEC, "-n", "2", PYTHON, "-m", "fabricbench", "run", "--out", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )


def _ctrl_c(run: subprocess.Popen) -> float:
    """What a terminal's Ctrl-C does: SIGINT to the whole foreground process group."""
    os.killpg(run.pid, signal.SIGINT)
    return time.monotonic()


def test_ctrl_c_under_mpiexec_ends_every_rank_and_keeps_the_rows(out):
    run = _explicit_mpiexec(out, "-k", "latency", "-m", "1:4M", "-i", "3000", "-x", "10")
    lines = [run.stdout.readline() for _ in range(3)]  # the table's two header lines, then the 1-byte row
    assert lines[-1].split()[0] == "1", lines
    assert len(_left_running(out)) >= 3  # mpiexec and the ranks
    stderr = _ended(run, out, _ctrl_c(run))
    assert run.returncode == 130, stderr
    assert _our_lines(stderr) == ["fabricbench: interrupted"], stderr
    _assert_nothing_left(out)
    rows, meta = read_rows(out)
    assert 1 <= len(rows) < 23 and (rows.status == "ok").all()
    assert meta["complete"] is False and meta["rows"] == len(rows)


def test_ctrl_c_under_mpiexec_ends_ranks_inside_the_mpi_c_loop(out):
    """One latency size of minutes, timed in C in a single call: Python on either rank sees nothing until it ends."""
    run = _explicit_mpiexec(out, "-k", "latency", "-m", "1M:1M", "-i", "2000000", "-x", "10", "--loop", "c")
    metadata = out / "metadata.json"
    end = time.monotonic() + 60
    while '"transports"' not in (metadata.read_text() if metadata.exists() else ""):
        assert time.monotonic() < end and run.poll() is None, "the run never opened its transport"
        time.sleep(0.05)
    time.sleep(1.5)  # past the ten warm-up iterations, well inside the timed loop
    assert len(_left_running(out)) >= 3
    stderr = _ended(run, out, _ctrl_c(run))
    assert run.returncode == 130, stderr
    assert _our_lines(stderr) == ["fabricbench: interrupted"], stderr
    _assert_nothing_left(out)
    # No row was finished: the table is its header alone, which the reader refuses as holding no result rows.
    with pytest.raises(UsageError, match="holds no result rows"):
        read_rows(out)
    assert len((out / "results.csv").read_text().splitlines()) == 1
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["complete"] is False and meta["rows"] == 0
    assert meta["transports"]["mpi"]["timed_loop"] == "c loop"


# Holds the import of the transport registry (which fabricbench.cli imports) until a signal comes: a real Ctrl-C
# (SIGINT) lands while fabricbench is still loading.
# SIGINT is set to Python's own handler first, as in a terminal: a process started in the background by a
# non-interactive shell inherits it ignored, and would sleep through the Ctrl-C.
_HOLD_IMPORT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
class Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "fabricbench.transports":
            print("loading fabricbench.transports", flush=True)
            time.sleep(60)
        return None
sys.meta_path.insert(0, Hold())
sys.argv = ["fabricbench", "doctor"]
from fabricbench.__main__ import entry
raise SystemExit(entry())
"""


@pytest.mark.parametrize(
    ("rank_env", "code", "said"),
    [
        ({}, 130, "fabricbench: interrupted\n"),
        # A rank of a launched job dies of the signal, so that its launcher ends the other ranks.
        ({"PMI_RANK": "1"}, -signal.SIGINT, ""),
    ],
)
def test_ctrl_c_while_fabricbench_loads_is_one_line_not_a_traceback(rank_env, code, said):
    run = subprocess.Popen(
        [PYTHON, "-c", _HOLD_IMPORT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(rank_env),
    )
    try:
        assert run.stdout.readline() == "loading fabricbench.transports\n"
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == code
    assert stderr == said


@pytest.mark.parametrize(("rank", "signum"), [(1, signal.SIGKILL), (0, signal.SIGKILL), (1, signal.SIGSEGV)])
def test_a_rank_killed_by_a_signal_is_named_in_one_line_and_the_rows_are_kept(out, rank, signum):
    """A rank killed as the OOM killer kills (SIGKILL) ended the run with exit 9, not a word on stderr, and
    hydra's 11-line banner on stdout, inside the console table."""
    run = run_until_first_row("-n", "2", "--out", str(out))
    pid = json.loads((out / "metadata.json").read_text())["ranks"][rank]["pid"]
    os.kill(pid, signum)
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + signum, stderr
    name = signal.Signals(signum).name
    assert _our_lines(stderr) == [
        f"fabricbench: error: rank {rank} (pid {pid}) was killed by signal {signum} ({name}"
        + (", as the kernel's OOM killer and kill -9 end a process" if signum == signal.SIGKILL else "")
        + f"); the rows measured before it are kept in {out}/, marked incomplete"
    ], stderr
    assert "BAD TERMINATION" not in stdout and "EXIT STRING" not in stdout, stdout
    _assert_nothing_left(out)
    rows, meta = read_rows(out)
    assert len(rows) >= 1 and meta["complete"] is False
