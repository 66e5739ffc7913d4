"""Transport ``perftest``: reference rows from perftest's own tools, run between the same two ranks.

Rank N/2 starts the server (``ib_write_lat``, ``ib_write_bw``, ``ib_read_lat``),
waits until its TCP port listens (a client that starts earlier fails and
leaves the server hanging), and rank 0 runs the client against it. perftest
times itself; its summary line becomes the row, so verbs and perftest figures
for the same kernel and size sit side by side:

- latency: ib_write_lat (t_typical is the p50 column, half a round trip);
- bw, bibw: ib_write_bw and ib_write_bw -b with the run's window as tx depth
  (-t) and CQ moderation (-Q); perftest's MiB/s become MB/s (10^6 B);
- get: ib_read_lat (a full round trip, as perftest reports reads).

perftest sorts its samples and drops the two largest before its statistics;
the row's note says so. Its p90 is not printed, so that column stays empty.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import signal
import socket
import subprocess
import time

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.kernels import Kernel
from fabricbench.rows import base_row
from fabricbench.transports.base import Diagnosis, Transport
from fabricbench.transports.rdma import VerbsUnavailable, check_cq_mod, default_cq_mod

TOOLS = {"latency": "ib_write_lat", "bw": "ib_write_bw", "bibw": "ib_write_bw", "get": "ib_read_lat"}
INSTALL_HINT = "Debian/Ubuntu: apt-get install perftest; RHEL/Fedora: dnf install perftest"
MIB_TO_MB = 1.048576  # perftest computes MiB/s even where it prints MB/sec
LATENCY_COLUMNS = {  # perftest's header names -> fabricbench's columns
    "t_min[usec]": "lat_min_us",
    "t_max[usec]": "lat_max_us",
    "t_typical[usec]": "lat_p50_us",
    "t_avg[usec]": "lat_mean_us",
    "t_stdev[usec]": "lat_stdev_us",
    "99%_percentile[usec]": "lat_p99_us",
    "99.9%_percentile[usec]": "lat_p999_us",
}
LATENCY_NOTE = "perftest's statistics (top 2 samples dropped; t_typical as p50)"
BW_NOTE = "perftest's figures (its MiB/s as MB/s = 10^6 B/s)"
LISTEN = "0A"  # TCP state in /proc/net/tcp
SYSFS_DEVICES = "/sys/class/infiniband"  # where libibverbs finds devices too


def _summary(text: str, first_column: str) -> dict[str, str]:
    """perftest's result table: the header line that starts with ``#bytes`` and the line of values under it."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.strip().startswith(first_column):
            header = line.replace("% percentile", "%_percentile").replace("BW ", "BW_").split()
            values = lines[number + 1].split() if number + 1 < len(lines) else []
            if len(values) != len(header):
                break
            return dict(zip(header, values, strict=True))
    raise PeerError(f"perftest printed no result table: {_last_line(text)}")


def _number(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else math.nan


def parse_latency(text: str) -> dict[str, float]:
    """The latency columns from ib_write_lat / ib_read_lat output (µs); ``inf`` becomes NaN."""
    table = _summary(text, "#bytes")
    return {column: _number(table[name]) for name, column in LATENCY_COLUMNS.items() if name in table}


def parse_bandwidth(text: str) -> dict[str, float]:
    """Average and peak bandwidth in MB/s (10^6 B, from perftest's MiB/s) and messages per second."""
    table = _summary(text, "#bytes")
    return {
        "bw_MBps": _number(table["BW_average[MB/sec]"]) * MIB_TO_MB,
        "bw_peak_MBps": _number(table["BW_peak[MB/sec]"]) * MIB_TO_MB,
        "msgrate_per_s": _number(table["MsgRate[Mpps]"]) * 1e6,
    }


def setting(text: str, name: str) -> str:
    """A value from perftest's banner, e.g. ``Max inline data : 0[B]`` -> ``0[B]`` ('' when absent)."""
    for line in text.splitlines():
        for part in line.split("\t"):
            key, sep, value = part.partition(":")
            if sep and key.strip() == name:
                return value.strip()
    return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _die_with_parent() -> None:
    """In the child: be killed when the rank that started it dies (PR_SET_PDEATHSIG), so no server is orphaned."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def listening(port: int) -> bool:
    """Whether some socket listens on ``port``, read from /proc: probing by connecting would eat perftest's accept."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows)
                for row in rows:
                    fields = row.split()
                    if fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return False


def _tool_version() -> str:
    try:
        out = subprocess.run(["ib_write_lat", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return _last_line(out.stdout + out.stderr)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


class PerftestTransport(Transport):
    """perftest's ib_write_lat, ib_write_bw and ib_read_lat between rank 0 (client) and rank N/2 (server)."""

    name = "perftest"
    kernels = frozenset(TOOLS)
    options_key = "verbs"  # the same device, port, GID, window and CQ moderation as the verbs transports
    self_timed = True

    @classmethod
    def preflight(cls, options: dict, ranks: int) -> None:
        missing = sorted({tool for tool in TOOLS.values() if shutil.which(tool) is None})
        if missing:
            raise VerbsUnavailable(f"perftest is not installed: no {', '.join(missing)} ({INSTALL_HINT})")
        if not (os.path.isdir(SYSFS_DEVICES) and os.listdir(SYSFS_DEVICES)):
            raise VerbsUnavailable(
                "no RDMA device found for perftest (load the NIC's driver; for SoftRoCE run scripts/softroce.sh up)"
            )

    @classmethod
    def doctor(cls) -> Diagnosis:
        found = super().doctor()
        if found.available:
            found.details = {"tools": {name: shutil.which(name) for name in sorted(set(TOOLS.values()))}}
            found.details["version"] = _tool_version()
        return found

    def __init__(self, ctrl, plan):
        self.preflight({}, ctrl.size)
        self.ctrl, self.plan = ctrl, plan
        settings = plan.transport_options.get(self.options_key, {})
        self.window = plan.window
        self.cq_mod = settings.get("cq_mod") or default_cq_mod(self.window)
        check_cq_mod(self.cq_mod, self.window)
        self.common = []
        for flag, key in (("-d", "device"), ("-i", "port"), ("-x", "gid_index")):
            if settings.get(key) is not None:
                self.common += [flag, str(settings[key])]
        half = ctrl.size // 2
        self.role = {0: "client", half: "server"}.get(ctrl.rank) if ctrl.size >= 2 else None
        self.server_rank = half
        # The client reaches the server by the address the control plane uses, else by host name.
        mine = {"host": socket.gethostname(), "address": getattr(ctrl, "local_address", None)}
        server = allgather_json(ctrl, mine)[half]
        host, address = server.get("host"), server.get("address")
        if not isinstance(host, str) or not isinstance(address, (str, type(None))):
            raise PeerError(f"rank {half}'s host record is malformed")
        self.server_address = "127.0.0.1" if host == socket.gethostname() else address or host
        self.version = _tool_version() if ctrl.rank == 0 else ""

    def _command(self, kernel: Kernel, size: int, iterations: int) -> list[str]:
        command = [TOOLS[kernel.name], *self.common, "-F", "-s", str(size)]
        if kernel.windowed:
            command += ["-n", str(iterations * self.window), "-t", str(self.window), "-Q", str(self.cq_mod)]
            if kernel.directions == 2:
                command.append("-b")
        else:
            command += ["-n", str(max(iterations, 5))]  # perftest's minimum
        return command

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """Run one size: the server on rank N/2, the client on rank 0; rank 0 returns the row."""
        if size < 1:
            raise Unsupported("perftest measures messages of 1 B and more")
        iterations, _ = self.plan.counts(kernel, size)
        command = self._command(kernel, size, iterations)
        server = None
        port = _free_port() if self.role == "server" else 0
        try:
            if self.role == "server":
                server = self._start_server(command + ["-p", str(port)])
            port = allgather_json(self.ctrl, {"port": port})[self.server_rank].get("port")
            if type(port) is not int or not 0 < port < 65536:
                raise PeerError(f"rank {self.server_rank} announced a bad perftest port {port!r}")
            output = self._run_client(command + ["-p", str(port), self.server_address]) if self.role == "client" else ""
            if server:
                self._finish(server, command[0])
        finally:
            if server and server.poll() is None:
                server.kill()
                server.wait()
        self.ctrl.barrier()
        if self.ctrl.rank != 0:
            return None
        return self._row(kernel, size, iterations, command, output)

    def _start_server(self, command: list[str]) -> subprocess.Popen:
        server = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent
        )
        port = int(command[command.index("-p") + 1])
        deadline = time.monotonic() + self.plan.timeout
        while not listening(port):
            if server.poll() is not None:
                raise PeerError(f"{command[0]} server exited ({server.returncode}): {_last_line(server.stdout.read())}")
            if time.monotonic() > deadline:
                server.kill()
                raise PeerError(f"{command[0]} server did not listen on port {port} within {self.plan.timeout:g} s")
            time.sleep(0.05)
        return server

    def _run_client(self, command: list[str]) -> str:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=self.plan.timeout, preexec_fn=_die_with_parent
            )
        except subprocess.TimeoutExpired:
            raise PeerError(f"{command[0]} client did not finish within {self.plan.timeout:g} s") from None
        output = done.stdout + done.stderr
        if done.returncode:
            raise PeerError(f"{command[0]} client failed ({done.returncode}): {_last_line(output)}")
        return output

    def _finish(self, server: subprocess.Popen, tool: str) -> None:
        try:
            output, _ = server.communicate(timeout=self.plan.timeout)
        except subprocess.TimeoutExpired:
            raise PeerError(f"{tool} server did not finish within {self.plan.timeout:g} s") from None
        if server.returncode:
            raise PeerError(f"{tool} server failed ({server.returncode}): {_last_line(output)}")

    def _row(self, kernel: Kernel, size: int, iterations: int, command: list[str], output: str) -> dict:
        row = base_row(self.plan, self.name, kernel, size, self.ctrl.size)
        row.update(parse_bandwidth(output) if kernel.windowed else parse_latency(output))
        method = command[0] + (" -b" if kernel.directions == 2 else "")
        if kernel.windowed:
            method += f" -t {self.window} -Q {self.cq_mod}"
        inline = setting(output, "Max inline data")
        row.update(
            method=f"{method}, inline {inline}" if inline else method,
            pairs=1,
            window=self.window if kernel.windowed else 0,
            iterations=iterations,
            warmup=0,
            status="ok",
            validation="off",
            note=BW_NOTE if kernel.windowed else LATENCY_NOTE,
        )
        return row

    def metadata(self) -> dict:
        return {
            "version": self.version,
            "tools": {name: shutil.which(name) for name in sorted(set(TOOLS.values()))},
            "options": " ".join(self.common) or "perftest's defaults (device, port, GID index)",
            "server": self.server_address,
        }
