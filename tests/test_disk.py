"""The table on a real disk that fills up, and an output folder used twice.

Disks are small tmpfs mounts made for each test (root only), filled for real
with a file of zeros. A run starts alone, under mpiexec, or as ``run --peer``
against a real ``fabricbench serve`` (whose session is rank 1). A run that
hangs is killed with its ranks and fails the test.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fabricbench.measure.schema import COLUMNS, SCHEMA_VERSION
from support import MPIEXEC, PYTHON, Server, clean_env, fabricbench, one_error_line, read_rows

DISK_SIZE = "64k"
QUICK = ["-i", "20", "-x", "2", "--format", "none"]
# A sweep of 39 rows of up to 0.1 s each (within serve's caps): long enough to fill the disk under it.
SLOW_SWEEP = ["-k", "latency,bw,bibw", "-m", "1:4K", "-W", "8", "-i", "5000", "--max-time", "0.1"]
SLOW_SWEEP_ROWS = 3 * 13
HANG_S = 120  # a run still going after this long hangs
MODES = ["alone", "mpiexec", "peer"]


class Start:
    """How a run starts: alone (it launches its own ranks), under mpiexec, or against a `fabricbench serve`."""

    def __init__(self, mode: str):
        self.mode = mode
        self.server = Server() if mode == "peer" else None

    def command(self, *args: str) -> list[str]:
        if self.mode == "mpiexec":
            return [MPIEXEC, "-n", "2", PYTHON, "-m", "fabricbench", "run", *args]
        peer = ["--peer", f"127.0.0.1:{self.server.port}"] if self.server else []
        return [PYTHON, "-m", "fabricbench", "run", *peer, *args]

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
        )

    def rank1_ended(self, code: int) -> None:
        """Under serve, rank 1 is the server's session: it ended with ``code`` and the server goes on."""
        if self.server:
            self.server.wait_for(f"session ended with exit code {code}; still serving")


@pytest.fixture(params=MODES)
def start(request):
    started = Start(request.param)
    yield started
    if started.server:
        started.server.stop()


@pytest.fixture
def disk(tmp_path):
    """A tmpfs of DISK_SIZE mounted for this test alone, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    mount_command = ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount)]
    mounted = subprocess.run(mount_command, capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    yield mount
    for pid in _processes_naming(str(mount)):  # what a failed test left behind must not keep the mount busy
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(mount: Path) -> None:
    """Write zeros to a file on ``mount`` until the disk is full."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (a run's own --out path names its ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _finish(run: subprocess.Popen, out: Path) -> str:
    """Wait for ``run`` to end and return its stderr; a hang kills it and its ranks, and fails the test."""
    try:
        _, stderr = run.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        left = _processes_naming(str(out))
        for pid in [run.pid, *left]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, stderr = run.communicate()
        pytest.fail(f"the run hung for {HANG_S} s (processes {left}); stderr: {stderr}")
    end = time.monotonic() + 10
    while _processes_naming(str(out)) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _processes_naming(str(out)), "a rank outlived the run"
    return stderr


def _only_error_line(stderr: str, expected: str) -> None:
    """The one ``fabricbench: error:`` line, holding EXPECTED, is all of STDERR (not the watchdog's)."""
    one_error_line(stderr, expected)
    assert len(stderr.strip().splitlines()) == 1 and "made no progress" not in stderr, stderr


def test_a_full_disk_at_the_start_ends_every_rank_with_one_line(start, disk):
    fill(disk)
    out = disk / "run"
    began = time.monotonic()
    run = start.popen("-k", "latency", "-m", "8:64", "--timeout", "100", "--out", str(out), *QUICK)
    stderr = _finish(run, out)
    assert run.returncode == 1
    _only_error_line(stderr, f"fabricbench: error: results: no space left on device: {out / 'results.csv'}")
    assert time.monotonic() - began < 90  # the watchdog (--timeout 100) is not what ended it
    start.rank1_ended(1)
    assert not [path.name for path in out.iterdir()]  # no header-only table, no file aside


def test_a_disk_filling_mid_run_keeps_whole_rows_and_ends_every_rank(start, disk):
    out = disk / "run"
    run = start.popen(*SLOW_SWEEP, "--timeout", "100", "--out", str(out), "--format", "none")
    table = out / "results.csv"
    end = time.monotonic() + HANG_S
    while not (table.exists() and len(table.read_bytes().splitlines()) > 2):
        assert run.poll() is None and time.monotonic() < end, "no rows appeared"
        time.sleep(0.02)
    fill(disk)
    stderr = _finish(run, out)
    assert run.returncode == 1
    _only_error_line(stderr, f"fabricbench: error: results: no space left on device: {table} (")
    start.rank1_ended(1)
    text = table.read_bytes().decode()
    assert text.endswith("\r\n")
    lines = list(csv.reader(text.splitlines()))
    assert lines[0] == COLUMNS and all(len(line) == len(COLUMNS) for line in lines)
    assert 2 <= len(lines) - 1 < SLOW_SWEEP_ROWS
    rows, meta = read_rows(out)
    assert len(rows) == len(lines) - 1 and (rows.status == "ok").all() and meta["complete"] is False
    assert not list(out.glob("*.tmp"))


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory) -> Path:
    """A finished run's folder, made once: copies of it are the folders a new run is pointed at."""
    out = tmp_path_factory.mktemp("earlier") / "run"
    done = fabricbench("run", "-k", "latency", "-m", "8:16", "--label", "first", "--out", str(out), *QUICK)
    assert done.returncode == 0, done.stderr
    return out


def _contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for name, data in _contents(folder).items():
        (to / name).write_bytes(data)
    return to


def test_an_earlier_runs_folder_is_refused_without_append(start, earlier_run, tmp_path):
    out = _copy(earlier_run, tmp_path / "run")
    run = start.popen("-k", "latency", "-m", "8:16", "--out", str(out), *QUICK)
    stderr = _finish(run, out)
    assert run.returncode == 2
    _only_error_line(stderr, f"output directory {str(out)!r} is not empty: give a new --out, or --append")
    assert _contents(out) == _contents(earlier_run)


@pytest.mark.parametrize(
    "args,folder,expected",
    [
        (["--append"], None, "--append adds to the table in an earlier run's folder: give it with --out DIR"),
        (
            ["--out", "{out}", "--append"],
            {"results.csv": "a,b\r\n1,2\r\n"},
            f"has another header than a schema {SCHEMA_VERSION}",
        ),
        (["--out", "{out}", "--append"], {"results.csv": ",".join(COLUMNS) + "\r\nrun,x"}, "ends in a cut row"),
        (
            ["--out", "{out}", "--append"],
            {"metadata.json": "[1, 2]"},
            f"is not the metadata of a schema {SCHEMA_VERSION} fabricbench",
        ),
        (["--out", "{out}", "--append"], {"metadata.json": "{"}, "metadata.json: Expecting"),
    ],
    ids=["without --out", "another table", "cut row", "other metadata", "metadata not JSON"],
)
def test_append_refuses_what_it_cannot_add_to(args, folder, expected, tmp_path):
    out = tmp_path / "run"
    if folder:
        out.mkdir()
        for name, text in folder.items():
            (out / name).write_text(text)
    result = fabricbench("run", "-k", "latency", *[a.format(out=out) for a in args], *QUICK, timeout=60)
    assert result.returncode == 2
    _only_error_line(result.stderr, expected)
    if folder:
        assert _contents(out) == {name: text.encode() for name, text in folder.items()}
    else:
        assert not out.exists()


def test_append_keeps_every_runs_rows_and_metadata(start, earlier_run, tmp_path):
    out = _copy(earlier_run, tmp_path / "run")
    first = json.loads((out / "metadata.json").read_text())
    first_rows = len(read_rows(out)[0])
    run = start.popen("-k", "latency", "-m", "32:64", "--label", "second", "--append", "--out", str(out), *QUICK)
    stderr = _finish(run, out)
    assert run.returncode == 0, stderr
    third = fabricbench("run", "-k", "latency", "-m", "8:8", "--label", "third", "--append", "--out", str(out), *QUICK)
    assert third.returncode == 0, third.stderr

    meta = json.loads((out / "metadata.json").read_text())
    second = meta["previous_runs"][1]
    assert meta["previous_runs"][0] == first and second["label"] == "second" and second["complete"] is True
    assert meta["label"] == "third" and "previous_runs" not in second
    with open(out / "results.csv", newline="") as table:
        lines = list(csv.reader(table))
    assert lines[0] == COLUMNS and COLUMNS not in lines[1:]
    rows, read_meta = read_rows(out)  # the Parquet copy, made again from the whole CSV
    assert read_meta == meta and len(rows) == len(lines) - 1 == first_rows + 2 + 1
    runs = [first["run_id"], second["run_id"], meta["run_id"]]
    assert list(rows.run_id.unique()) == runs and list(rows.label.unique()) == ["first", "second", "third"]

    compared = fabricbench("compare", str(out), timeout=60)
    assert compared.returncode == 0, compared.stderr
    for letter, label in zip("ABC", ["first", "second", "third"], strict=True):
        assert f"#   {letter} = {label}" in compared.stdout, compared.stdout
