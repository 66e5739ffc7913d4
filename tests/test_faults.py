"""Faults on real ranks: a killed or frozen rank ends the run and keeps the rows."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fabricbench.measure.schema import COLUMNS
from support import MPIEXEC, PYTHON, clean_env, read_rows, run_until_first_row


def _start(out, *args):
    return subprocess.Popen(
        [
            MPIEXEC,
            "-n",
            "2",
            PYTHON,
            "-m",
            "fabricbench",
            "run",
            "-k",
            "latency",
            "-m",
            "0:4M",
            "--out",
            str(out),
            "--format",
            "none",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def _wait_for_rows(out, rows: int, deadline: float = 60.0) -> dict:
    """Wait until the CSV holds ``rows`` data rows; return the run's metadata."""
    csv = out / "results.csv"
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if csv.exists() and len(csv.read_text().splitlines()) > rows:
            return json.loads((out / "metadata.json").read_text())
        time.sleep(0.05)
    pytest.fail("no rows appeared")


def test_rank_killed_mid_sweep_leaves_readable_rows(out):
    run = _start(out, "-i", "3000", "-x", "10")
    meta = _wait_for_rows(out, 3)
    os.kill(meta["ranks"][1]["pid"], signal.SIGKILL)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode != 0
    rows, meta = read_rows(out)
    assert list(rows.columns) == COLUMNS
    assert 3 <= len(rows) < 23
    assert (rows.status == "ok").all() and rows.lat_p50_us.notna().all()
    assert list(rows.size_B) == [0] + [2**k for k in range(len(rows) - 1)]
    assert meta["complete"] is False


def _states(launcher: int, pids) -> str:
    """ps's view of the launcher, its children and the ranks: what a hang left behind."""
    ps = [
        "ps",
        "-o",
        "pid,ppid,stat,wchan:24,args",
        "--ppid",
        str(launcher),
        "-p",
        ",".join(map(str, [launcher, *pids])),
    ]
    return subprocess.run(ps, capture_output=True, text=True, check=False).stdout


def test_frozen_peer_times_out_instead_of_hanging(out):
    run = _start(out, "-i", "3000", "-x", "10", "--timeout", "3")
    meta = _wait_for_rows(out, 2)
    ranks = [rank["pid"] for rank in meta["ranks"]]
    frozen = ranks[1]
    os.kill(frozen, signal.SIGSTOP)
    try:
        _, stderr = run.communicate(timeout=60)
    except subprocess.TimeoutExpired as hung:
        states = _states(run.pid, ranks)
        for pid in [run.pid, *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.communicate()
        pytest.fail(f"the job outlived rank 0's watchdog by a minute; stderr: {hung.stderr!r}\n{states}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGKILL)
    assert run.returncode != 0
    assert "made no progress for 3 s; a peer may have died" in stderr
    rows, _ = read_rows(out)
    assert len(rows) >= 2


def test_console_reader_going_away_under_mpiexec_leaves_no_rank(out):
    """`fabricbench run -n 2 | head`: the console is only a view of the table, so the run finishes every row
    (the self-launching parent drops what it can no longer show), exits 141 as on SIGPIPE and leaves no rank."""
    # --max-time: every row, without 3000 iterations of the largest sizes (seconds each).
    run = run_until_first_row("-n", "2", "-t", "tcp", "--max-time", "0.2", "--out", str(out))
    ranks = [rank["pid"] for rank in json.loads((out / "metadata.json").read_text())["ranks"]]
    run.stdout.close()
    try:
        stderr = run.stderr.read()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 141 and "Traceback" not in stderr, stderr
    rows, meta = read_rows(out)
    assert meta["complete"] and len(rows) == meta["rows"] and (rows.status == "ok").all()
    end = time.monotonic() + 10
    while any(_alive(pid) for pid in ranks) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in ranks), "a rank outlived the run"


def _alive(pid: int) -> bool:
    """Running or stopped; a zombie has ended (its parent may be gone and nobody reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
