"""Transports ``perftest`` and ``perftest-send``: reference rows from perftest's own tools, between the same two ranks.

Rank N/2 starts the server, waits until its TCP port listens (a client that
starts earlier fails and leaves the server hanging), and rank 0 runs the
client against it. perftest times itself; its summary line becomes the row,
so verbs and perftest figures for the same kernel and size sit side by side.
``perftest`` mirrors ``verbs`` (RDMA WRITE, READ and atomics), ``perftest-send``
mirrors ``verbs-send`` (SEND/RECV):

- latency: ib_write_lat / ib_send_lat (t_typical is the p50 column, half a round trip);
- bw, bibw: ib_write_bw / ib_send_bw, -b for bibw, with the run's window as tx
  depth (-t) and CQ moderation (-Q); perftest's MiB/s become MB/s (10^6 B);
- get: ib_read_lat (a full round trip, as perftest reports reads);
- fop, cas: ib_atomic_lat -A FETCH_AND_ADD / CMP_AND_SWAP (8 B, a full round trip);
- fop-rate, cas-rate: ib_atomic_bw -A ... with -t and -Q as bw.

The verbs options become perftest's flags: --qp-type uc/ud is -c UC/UD,
--post-list N is -l N (bandwidth tools), --events is -e, and --inline N is
-I N (WRITE and SEND tools) where N is not the default 220: at 220 perftest
keeps its own default (220 B for WRITE, 236 for RC/UC SEND, 188 for UD, none
on a device it does not know, rxe among them). The method column names the
flags passed and the inline size perftest's banner reports. What perftest
refuses (READ or atomics on UC or UD, WRITE on UD, -e with WRITE, UD messages
over the path MTU, a post list that is not a multiple of an explicit --cq-mod)
is an ``unsupported`` row in perftest's own words, decided on every rank alike
before a server starts.

perftest sorts its samples and drops the two largest before its statistics;
the row's note says so. Its p90 is not printed, so that column stays empty.
Where perftest's estimate of its cycle counter's rate failed (it warns
"Correlation coefficient r^2 ... < 0.9" and then prints inf latencies and 0.00
bandwidths), the row's figures are NaN and its note says why.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import asdict, dataclass

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.rows import base_row
from fabricbench.measure.schema import MEASURED
from fabricbench.transports.base import Diagnosis, Transport
from fabricbench.transports.reference_tool import (
    host_record,
    last_line,
    pair_ranks,
    run_pair,
    server_address,
    tool_output,
)
from fabricbench.transports.verbs.rdma import (
    MAX_WINDOW,
    MTU_BYTES,
    QP_TYPES,
    RDMA_OPTIONS,
    VerbsUnavailable,
    check_cq_mod,
    default_cq_mod,
    load_pyverbs,
)

TOOLS = {  # perftest: the kernels of the verbs transport
    "latency": "ib_write_lat",
    "bw": "ib_write_bw",
    "bibw": "ib_write_bw",
    "get": "ib_read_lat",
    "fop": "ib_atomic_lat",
    "cas": "ib_atomic_lat",
    "fop-rate": "ib_atomic_bw",
    "cas-rate": "ib_atomic_bw",
}
SEND_TOOLS = {"latency": "ib_send_lat", "bw": "ib_send_bw", "bibw": "ib_send_bw"}  # perftest-send: verbs-send's
ATOMIC_OPS = {"fop": "FETCH_AND_ADD", "cas": "CMP_AND_SWAP", "fop-rate": "FETCH_AND_ADD", "cas-rate": "CMP_AND_SWAP"}
DEFAULT_INLINE = 220  # the verbs options' --inline default: there perftest is left to its own per-verb default
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
# perftest's warning when its estimate of the cycle counter's rate fails: it then counts 0 MHz, so its latencies
# read inf and its bandwidths 0.00; neither is a measurement (seen under emulation, with preempted vCPUs).
CLOCK_FAILED = "Correlation coefficient r^2"
CLOCK_NOTE = "no figures: perftest's CPU clock estimate failed (Correlation coefficient r^2 < 0.9)"
# What perftest 4.5 prints when it refuses a combination, before it listens; a server that exits with one of
# these is an unsupported row, not an error (refusal() rules the known ones out first, in the same words).
REFUSALS = (
    "not possible in READ/ATOMIC verbs",
    "only possible in SEND verb",
    "feature not available on",
    "cannot be greater than MTU",
    "supported in BW tests only",
    "must be a multiple of",
)
SYSFS_DEVICES = "/sys/class/infiniband"  # where libibverbs finds devices too


@dataclass(frozen=True)
class Mode:
    """The run's queue-pair settings, rank 0's on every rank (perftest's server and client must agree)."""

    qp_type: str = "rc"
    post_list: int = 1
    events: bool = False
    cq_mod: int | None = None  # as the user gave it; None: the window's default

    @classmethod
    def from_settings(cls, settings: dict) -> Mode:
        return cls(
            qp_type=settings.get("qp_type") or "rc",
            post_list=settings.get("post_list") or 1,
            events=bool(settings.get("events")),
            cq_mod=settings.get("cq_mod") or None,
        )

    @classmethod
    def decode(cls, record: object) -> Mode:
        """Rank 0's settings as the control plane brought them, every field checked."""
        fields = record if isinstance(record, dict) else {}
        mode = cls(**{name: fields.get(name) for name in ("qp_type", "post_list", "events", "cq_mod")})
        counts = [mode.post_list] + ([] if mode.cq_mod is None else [mode.cq_mod])
        if (
            mode.qp_type not in QP_TYPES
            or type(mode.events) is not bool
            or not all(type(n) is int and 1 <= n <= MAX_WINDOW for n in counts)
        ):
            raise PeerError(f"rank 0 sent malformed perftest settings: {record!r:.200}")
        return mode

    def cq_moderation(self, window: int) -> int:
        """perftest's -Q: --cq-mod; else the window's default, or the post list where that is not a multiple of it
        (perftest's own choice for -l without -Q)."""
        if self.cq_mod:
            return self.cq_mod
        default = default_cq_mod(window)
        return self.post_list if self.post_list > 1 and self.post_list % default else default


def verb(tool: str) -> str:
    """``ib_write_bw`` -> ``WRITE``: the verb a perftest tool posts (WRITE, READ, ATOMIC, SEND)."""
    return tool.split("_")[1].upper()


def flags(tool: str, kernel: Kernel, mode: Mode, window: int, inline: int | None) -> list[str]:
    """The flags that make the measurement what it is (the method column), beyond device, size and counts."""
    chosen = ["-A", ATOMIC_OPS[kernel.name]] if kernel.name in ATOMIC_OPS else []
    if kernel.directions == 2:
        chosen.append("-b")
    if mode.qp_type != "rc":
        chosen += ["-c", mode.qp_type.upper()]
    if kernel.windowed:
        chosen += ["-t", str(window), "-Q", str(mode.cq_moderation(window))]
        if mode.post_list > 1:
            chosen += ["-l", str(mode.post_list)]
    if mode.events:
        chosen.append("-e")
    if inline is not None and inline != DEFAULT_INLINE and verb(tool) in ("WRITE", "SEND"):
        chosen += ["-I", str(inline)]
    return chosen


def refusal(tool: str, kernel: Kernel, size: int, mode: Mode, path_mtu: int | None = None) -> str | None:
    """Why perftest would refuse this run, in its own words (perftest 4.5's checks), or None when it runs it."""
    operation = verb(tool)
    if mode.qp_type == "uc" and operation in ("READ", "ATOMIC"):
        return f"{tool} -c UC: UC connection not possible in READ/ATOMIC verbs"
    if mode.qp_type == "ud" and operation != "SEND":
        return f"{tool} -c UD: UD connection only possible in SEND verb"
    if mode.events and operation == "WRITE":
        return f"{tool} -e: Events feature not available on WRITE verb"
    if kernel.windowed and mode.post_list > 1 and mode.cq_mod and mode.post_list % mode.cq_mod:
        return f"{tool} -l {mode.post_list} -Q {mode.cq_mod}: Post list size must be a multiple of CQ moderation"
    if mode.qp_type == "ud" and path_mtu is not None and size > path_mtu:
        return f"{tool} -c UD -s {size}: Max message size in UD cannot be greater than MTU ({path_mtu} B)"
    return None


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
    raise PeerError(f"perftest printed no result table: {last_line(text)}")


def _number(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else math.nan


def parse_latency(text: str) -> dict[str, float]:
    """The latency columns from ib_write_lat / ib_send_lat / ib_read_lat / ib_atomic_lat output (µs); ``inf`` and
    ``-nan`` (a failed clock estimate) become NaN."""
    table = _summary(text, "#bytes")
    return {column: _number(table[name]) for name, column in LATENCY_COLUMNS.items() if name in table}


def parse_bandwidth(text: str) -> dict[str, float]:
    """Average and peak bandwidth in MB/s (10^6 B, from perftest's MiB/s) and messages per second
    (ib_write_bw, ib_send_bw, ib_atomic_bw)."""
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


def refused(text: str) -> str:
    """The line in which perftest refused a combination (REFUSALS), or ''."""
    for line in text.splitlines():
        if any(words in line for words in REFUSALS):
            return line.strip()
    return ""


def local_mtu(settings: dict) -> int | None:
    """The active MTU (bytes) of the port perftest opens here: its -d and -i, else the first device and port 1.

    Asked of libibverbs through pyverbs; None where pyverbs or the port cannot say, and then perftest refuses
    an oversized UD message itself (REFUSALS).
    """
    try:
        verbs = load_pyverbs()
    except VerbsUnavailable:
        return None
    try:
        name = settings.get("device")
        if not name:
            found = verbs.get_device_list()
            if not found:
                return None
            name = found[0].name.decode() if isinstance(found[0].name, bytes) else str(found[0].name)
        context = verbs.Context(name=name)
        try:
            return MTU_BYTES.get(context.query_port(settings.get("port") or 1).active_mtu)
        finally:
            context.close()
    except verbs.PyverbsError:
        return None


def _tool_version(tool: str) -> str:
    output = tool_output([tool, "--version"])
    return "unknown" if output is None else last_line(output)


class PerftestTransport(Transport):
    """perftest's ib_write_*, ib_read_lat and ib_atomic_* between rank 0 (client) and rank N/2 (server)."""

    name = "perftest"
    tools = TOOLS
    kernels = frozenset(TOOLS)
    option_groups = (RDMA_OPTIONS,)  # the same device, port, GID, CQ moderation and QP type as the verbs transports

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        missing = sorted({tool for tool in cls.tools.values() if shutil.which(tool) is None})
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
            found.details = {"tools": {name: shutil.which(name) for name in sorted(set(cls.tools.values()))}}
            found.details["version"] = _tool_version(next(iter(cls.tools.values())))
        return found

    def __init__(self, ctrl, plan):
        self.preflight({}, ctrl.size)
        self.ctrl, self.plan = ctrl, plan
        self.settings = settings = RDMA_OPTIONS.of(plan.transport_options)
        self.window = plan.window
        self.inline = settings.get("inline")  # this host's own, as the device settings
        self.common = []
        for flag, key in (("-d", "device"), ("-i", "port"), ("-x", "gid_index")):
            if settings.get(key) is not None:
                self.common += [flag, str(settings[key])]
        self.role, self.server_rank = pair_ranks(ctrl)
        self.path_mtu: int | None = None
        self.mtu_asked = False
        # The client reaches the server by the address the control plane uses, else by host name; the QP type,
        # post list, events and CQ moderation are rank 0's, so both sides run the same test (serve has none).
        mine = host_record(ctrl)
        if ctrl.rank == 0:
            mine["mode"] = asdict(Mode.from_settings(settings))
        records = allgather_json(ctrl, mine)
        self.mode = Mode.decode(records[0].get("mode"))
        check_cq_mod(self.mode.cq_moderation(self.window), self.window)
        self.server_address = server_address(records, self.server_rank)
        self.version = _tool_version(next(iter(self.tools.values()))) if ctrl.rank == 0 else ""
        if self.mode.qp_type == "ud" and "SEND" in map(verb, self.tools.values()):
            self._path_mtu()  # now, for the metadata; every rank alike

    def _path_mtu(self) -> int | None:
        """The smaller of both sides' active MTUs (asked once, on every rank alike); None where either cannot say."""
        if not self.mtu_asked:
            mine = local_mtu(self.settings) if self.role else None
            records = allgather_json(self.ctrl, {"mtu": mine})
            sides = [records[rank].get("mtu") for rank in (0, self.server_rank)]
            if any(mtu is not None and (type(mtu) is not int or mtu < 1) for mtu in sides):
                raise PeerError(f"a perftest rank announced a bad MTU {sides!r}")
            self.path_mtu = None if None in sides else min(sides)
            self.mtu_asked = True
        return self.path_mtu

    def _command(self, tool: str, kernel: Kernel, size: int, iterations: int, chosen: list[str]) -> list[str]:
        command = [tool, *self.common, "-F"]
        if kernel.name not in ATOMIC_OPS:  # atomics are 8 B, whatever -s says
            command += ["-s", str(size)]
        if kernel.windowed:
            command += ["-n", str(iterations * self.window)]
        else:
            command += ["-n", str(max(iterations, 5))]  # perftest's minimum
        return command + chosen

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """Run one size: the server on rank N/2, the client on rank 0; rank 0 returns the row."""
        if size < 1:
            raise Unsupported("perftest measures messages of 1 B and more")
        tool = self.tools[kernel.name]
        why = refusal(tool, kernel, size, self.mode)
        if why is None and self.mode.qp_type == "ud":
            why = refusal(tool, kernel, size, self.mode, self._path_mtu())
        if why:
            raise Unsupported(f"perftest refuses {why}")
        iterations, _ = self.plan.counts(kernel, size)
        chosen = flags(tool, kernel, self.mode, self.window, self.inline)
        command = self._command(tool, kernel, size, iterations, chosen)
        output = run_pair(
            self.ctrl,
            self.role,
            self.server_rank,
            command,
            self.server_address,
            self.plan.timeout,
            port_flags=("-p", "-p"),
            refused=refused,
            explain=lambda text: refused(text) or last_line(text),
            suite="perftest",
        )
        if self.ctrl.rank != 0:
            return None
        return self._row(kernel, size, iterations, [tool, *chosen], output)

    def _row(self, kernel: Kernel, size: int, iterations: int, invocation: list[str], output: str) -> dict:
        row = base_row(self.plan, self.name, kernel, size, self.ctrl.size)
        figures = parse_bandwidth(output) if kernel.windowed else parse_latency(output)
        clock_failed = CLOCK_FAILED in output
        row.update({column: math.nan for column in figures} if clock_failed else figures)
        method = " ".join(invocation)
        inline = setting(output, "Max inline data")  # what perftest used; the atomics and READ print none
        row.update(
            method=f"{method}, inline {inline}" if inline else method,
            pairs=1,
            window=self.window if kernel.windowed else 0,
            iterations=iterations,
            warmup=0,
            status=MEASURED,
            validation="off",
            note=CLOCK_NOTE if clock_failed else BW_NOTE if kernel.windowed else LATENCY_NOTE,
        )
        return row

    def metadata(self) -> dict:
        return {
            "version": self.version,
            "tools": {name: shutil.which(name) for name in sorted(set(self.tools.values()))},
            "options": " ".join(self.common) or "perftest's defaults (device, port, GID index)",
            "server": self.server_address,
            "mode": asdict(self.mode),  # rank 0's QP type, post list, events and --cq-mod (None: the default)
            "path_mtu_B": self.path_mtu,  # asked for UD only
        }


class PerftestSendTransport(PerftestTransport):
    """perftest's ib_send_lat and ib_send_bw (SEND/RECV, as verbs-send) between rank 0 and rank N/2."""

    name = "perftest-send"
    tools = SEND_TOOLS
    kernels = frozenset(SEND_TOOLS)
