"""Helpers the tests share: run the real CLI on real MPI ranks, read what it wrote.

Test modules import these by name (``from support import fabricbench``); conftest.py keeps only fixtures.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PYTHON = sys.executable
BIN = Path(PYTHON).parent
MPIEXEC = str(BIN / "mpiexec")
REPO = Path(__file__).resolve().parents[1]


def clean_env(extra: dict | None = None) -> dict:
    """This process's environment without a launcher's PMI_* or fabricbench's own settings, plus EXTRA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "FABRICBENCH_"))}
    env.update(extra or {})
    return env


def fabricbench(*args: str, timeout: float = 120, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m fabricbench ARGS``: started alone, so it launches its own local ranks."""
    return subprocess.run(
        [PYTHON, "-m", "fabricbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
        cwd=cwd,
    )


def mpiexec(ranks: int, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS python -m fabricbench ARGS``: fabricbench under a launcher."""
    return subprocess.run(
        [MPIEXEC, "-n", str(ranks), PYTHON, "-m", "fabricbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
    )


def run_until_first_row(*args: str) -> subprocess.Popen:
    """Start a latency sweep from 1 B that prints its table (``fabricbench run ARGS``); return once
    the two header lines and the first row (1 B) were read, with stdout still open."""
    run = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "run", "-k", "latency", "-m", "1:4M", "-i", "3000", "-x", "10", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    lines = [run.stdout.readline() for _ in range(3)]
    assert lines[-1].split()[0] == "1", lines
    return run


def read_rows(out_dir: Path):
    """The table and metadata a run wrote to OUT_DIR (pandas is imported only here)."""
    from fabricbench.analysis.load import read_run

    return read_run(out_dir)


def free_port() -> int:
    """A loopback port nothing listens on (bound a moment ago and closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening_above_a_free_port() -> tuple[socket.socket, int]:
    """A socket listening on port P + 1 (any free port), and P, found free: picking P first and then binding its
    neighbour races with the host's other sockets (CI once found P + 1 taken)."""
    for _ in range(100):
        busy = socket.socket()
        busy.bind(("0.0.0.0", 0))
        port = busy.getsockname()[1] - 1
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                busy.close()
                continue
        busy.listen()
        return busy, port
    raise RuntimeError("no free port below a free one in 100 tries")


def one_error_line(stderr: str, expected: str) -> None:
    """STDERR holds exactly one ``fabricbench: error:`` line, containing EXPECTED, and no traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith("fabricbench: error:")]
    assert "Traceback" not in stderr
    assert len(lines) == 1 and expected in lines[0], stderr


class Server:
    """``fabricbench serve ARGS`` on a free loopback port in the background, its log read line by line."""

    def __init__(self, *args: str, importtime: bool = False, env: dict | None = None):
        self.port = free_port()
        flags = ["-X", "importtime"] if importtime else []
        self.proc = subprocess.Popen(
            [PYTHON, *flags, "-m", "fabricbench", "serve", "--address", "127.0.0.1", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(env),
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for("listening on")

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def log(self) -> list[str]:
        return [line for line in self.lines if line.startswith("fabricbench")]

    def wait_for(self, text: str, count: int = 1, deadline: float = 30.0) -> str:
        """Wait until COUNT log lines hold TEXT; return the last of them."""
        end = time.monotonic() + deadline
        while True:
            found = [line for line in self.lines if text in line]
            if len(found) >= count:
                return found[count - 1]
            assert self.proc.poll() is None, f"serve exited: {self.lines[-5:]}"
            assert time.monotonic() < end, f"serve never logged {text!r}: {self.log()}"
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


# The network-namespace testbed (scripts/netns-testbed.sh): hosts as namespaces on one bridge, shaped with tc.
TESTBED = str(REPO / "scripts" / "netns-testbed.sh")
NETNS = [
    pytest.mark.netns,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"),
        reason="needs root with iproute2 (ip netns, tc)",
    ),
]


def run_testbed(prefix: str, *args: str) -> str:
    """Run one testbed command on the testbed named ``prefix``; its stdout. A failure fails the test."""
    result = subprocess.run([TESTBED, *args, "--prefix", prefix], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fabricbench_on_hosts(
    prefix: str, hosts: list[str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``fabricbench ARGS`` on one rank per namespace host of testbed ``prefix``, started by hydra through the
    namespace launcher (netns-testbed.sh mpiexec)."""
    command = [TESTBED, "mpiexec", "--prefix", prefix, "-n", str(len(hosts)), "-ppn", "1", "-hosts", ",".join(hosts)]
    return subprocess.run(
        [*command, PYTHON, "-m", "fabricbench", *args], capture_output=True, text=True, timeout=timeout, env=clean_env()
    )


def rx_bytes(host: str) -> int:
    """The bytes testbed host HOST has received on its veth0, counted by the kernel."""
    path = "/sys/class/net/veth0/statistics/rx_bytes"
    return int(
        subprocess.run(["ip", "netns", "exec", host, "cat", path], capture_output=True, text=True, check=True).stdout
    )


def executable_stub(directory: Path, name: str) -> Path:
    """An empty shell script named NAME in DIRECTORY: a program found on PATH that does nothing."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


RDMA_DEVICES = Path("/sys/class/infiniband")
# The marks of a test that needs a real RDMA device (tests/verbs): run inside the SoftRoCE VM where the host has none.
NEEDS_RDMA_DEVICE = [
    pytest.mark.verbs,
    pytest.mark.skipif(
        not (RDMA_DEVICES.is_dir() and any(RDMA_DEVICES.iterdir())),
        reason="needs an RDMA device; tests/test_softroce_vm.py runs these inside the SoftRoCE VM",
    ),
]


def process_gone(pid: int) -> bool:
    """Whether no process has this pid any more (reaped, or never there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def run_cases_together(cases, iterations: int = 3) -> list[Exception]:
    """Run each Case's ``run(iterations)`` in a thread of its own at once, as ranks would; the errors they raised."""
    import numpy as np

    errors = []

    def run(case):
        try:
            case.run(iterations, memoryview(np.zeros(iterations, np.int64)))
        except Exception as exc:  # noqa: BLE001 - the caller reads them
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(case,)) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors
