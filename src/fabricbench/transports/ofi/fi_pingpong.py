"""Transport ``fi-pingpong``: reference rows from libfabric's own fi_pingpong, between the same two ranks.

fi_pingpong (libfabric-bin) is a ping-pong over one libfabric endpoint, so
it has one kernel, ``latency``, whose rows sit beside those of fabricbench's
``ofi`` transport, measured with the same options (ofi_options): --ofi-provider
is -p (none: fi_pingpong's own choice, fi_getinfo's first match, which
fi_info names for the row), --ofi-endpoint -e, --ofi-messages -m, --ofi-domain
-d, and a run with -c passes -c. Rank N/2 starts the server on a free control
port (-B) and rank 0 the client (-P) once that port listens (reference_tool).

fi_pingpong times the whole loop with gettimeofday, in whole microseconds,
with no warm-up: its usec/xfer is elapsed / iterations / 2 transfers, half a
round trip as a mean, and that is the row's lat_mean_us (it has no p50 or
spread). Its MB/sec (a ping's and a pong's bytes per iteration over the same
time, MB = 10^6 B) goes in the note: a latency row has no bandwidth columns
(kernels.BANDWIDTH_COLUMNS are NaN where a kernel has no such figure). A loop
shorter than the clock's tick prints 0 µs per transfer, and a wall-clock step
a wrong one; such a row has no figure and its note says why.

What fi_pingpong cannot do is an ``unsupported`` row, decided on every rank
alike before a server starts: --ofi-progress wait (it always busy-polls
fi_cq_read), and a size above the provider's max_msg_size (fi_pingpong would
skip it and print nothing). -c makes fi_pingpong fill and check every message
inside its timed loop; corrupt data ends its run, and so the run, with its own
words ("Error at iteration=...").
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.rows import base_row
from fabricbench.measure.schema import MEASURED
from fabricbench.transports.base import Diagnosis, Transport
from fabricbench.transports.ofi.options import BIN_HINT, OFI_OPTIONS, OFIUnavailable
from fabricbench.transports.reference_tool import (
    host_record,
    last_line,
    pair_ranks,
    run_pair,
    server_address,
    tool_output,
)

TOOL = "fi_pingpong"
FI_INFO = "fi_info"
ENDPOINT_TYPES = {"rdm": "FI_EP_RDM", "msg": "FI_EP_MSG"}  # --ofi-endpoint as fi_info's -t
CAPABILITIES = {"tagged": "FI_TAGGED", "msg": "FI_MSG"}  # --ofi-messages as fi_info's -c (fi_pingpong's -m sets it)
HEADER = ["bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"]
COUNT_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9}  # #sent and #ack (fi_pingpong's cnt_str, truncated)
SIZE_SUFFIXES = {"k": 2**10, "m": 2**20, "g": 2**30}  # bytes and total (its size_str: binary, one decimal below 10)
NO_MATCH = "fi_getinfo: -61"  # fi_info's answer when no provider offers what was asked (-FI_ENODATA)
DATA_ERROR = "Error at iteration="  # what -c prints when a message arrives other than sent
DEFAULT_PROVIDER = "fi_pingpong's default (fi_getinfo's first match)"
# The row's note: fi_pingpong's statistic (the module's docstring says more), what -c adds, and its MB/sec.
STATISTIC = "fi_pingpong's mean, half a round trip: loop time / iterations / 2 (gettimeofday, no warm-up)"
CHECKED = "; -c checks each message inside the loop"
RATE = "; its MB/sec {:.2f} (ping and pong bytes, MB = 10^6 B)"
NO_FIGURE = "no figure: fi_pingpong printed usec/xfer {:g} (its loop is timed with gettimeofday, in whole µs)"
NO_WAIT = "fi_pingpong always busy-polls fi_cq_read: it has no blocking wait (--ofi-progress wait)"


@dataclass(frozen=True)
class Result:
    """fi_pingpong's line of figures, as printed (the non-finite ones as NaN or inf)."""

    size: int
    sent: int  # truncated to its suffix: 1234 prints as 1k
    total_bytes: float  # binary suffix, as few digits as fi_pingpong keeps
    seconds: float
    mb_per_s: float
    usec_per_xfer: float
    mxfers_per_s: float


def count(text: str) -> int:
    """fi_pingpong's #sent / #ack: ``1k`` is 1000, ``10m`` 10^7 (it truncates: 1999 prints as 1k)."""
    suffix = text[-1:].lower()
    if suffix in COUNT_SUFFIXES:
        return int(text[:-1]) * COUNT_SUFFIXES[suffix]
    return int(text)


def byte_size(text: str) -> float:
    """fi_pingpong's bytes / total: ``15k`` is 15 KiB, ``1.5m`` 1.5 MiB (binary, truncated)."""
    suffix = text[-1:].lower()
    if suffix in SIZE_SUFFIXES:
        return float(text[:-1]) * SIZE_SUFFIXES[suffix]
    return float(text)


def parse(text: str) -> Result:
    """The line of figures under fi_pingpong's header (one size: -S); a PeerError with its last line if none."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.split() == HEADER and number + 1 < len(lines):
            values = lines[number + 1].split()
            if len(values) != len(HEADER) or not values[4].endswith("s"):
                break
            if not values[2].startswith("="):  # '+N' or '-N': the pongs counted differ from the pings sent
                raise PeerError(f"{TOOL} counted pongs other than its pings (#sent {values[1]}, #ack {values[2]})")
            try:
                return Result(
                    size=int(byte_size(values[0])),
                    sent=count(values[1]),
                    total_bytes=byte_size(values[3]),
                    seconds=float(values[4][:-1]),
                    mb_per_s=float(values[5]),
                    usec_per_xfer=float(values[6]),
                    mxfers_per_s=float(values[7]),
                )
            except ValueError:
                break
    raise PeerError(f"{TOOL} printed no result line: {last_line(text)}")


def figures(result: Result, validate: bool) -> dict:
    """The row's figure and note from fi_pingpong's line: usec/xfer as lat_mean_us, its statistic, what -c adds
    and its MB/sec; NaN and why where usec/xfer is no time (0: a loop under the clock's tick, inf or nan)."""
    latency = result.usec_per_xfer
    if not (math.isfinite(latency) and latency > 0):
        return {"lat_mean_us": math.nan, "note": NO_FIGURE.format(latency)}
    note = STATISTIC + (CHECKED if validate else "")
    if math.isfinite(result.mb_per_s):
        note += RATE.format(result.mb_per_s)
    return {"lat_mean_us": latency, "note": note}


def data_error(text: str) -> str:
    """The line in which -c reported corrupt data ("Error at iteration=3 size=8 byte=0"), or ''."""
    for line in text.splitlines():
        if DATA_ERROR in line:
            return f"-c found corrupt data: {line.strip()}"
    return ""


def method_flags(settings: dict, validate: bool) -> list[str]:
    """The flags that make the measurement what it is (the method column): provider, endpoint, calls, -c."""
    chosen = ["-p", settings["provider"]] if settings.get("provider") else []
    chosen += ["-e", settings.get("endpoint", "rdm"), "-m", settings.get("messages", "tagged")]
    return chosen + (["-c"] if validate else [])


def command(settings: dict, validate: bool, size: int, iterations: int) -> list[str]:
    """fi_pingpong's command line for one size, but the control port and the server's address."""
    domain = ["-d", settings["domain"]] if settings.get("domain") else []
    return [TOOL, *method_flags(settings, validate), *domain, "-I", str(iterations), "-S", str(size)]


def lookup(settings: dict) -> list[str]:
    """fi_info's query for the endpoint fi_pingpong asks fi_getinfo for with these settings."""
    query = [FI_INFO, "-t", ENDPOINT_TYPES[settings.get("endpoint", "rdm")]]
    query += ["-c", CAPABILITIES[settings.get("messages", "tagged")]]
    for flag, key in (("-p", "provider"), ("-d", "domain")):
        if settings.get(key):
            query += [flag, settings[key]]
    return query


def first_match(text: str) -> dict | None:
    """From ``fi_info -v``: the first fi_info it lists (what fi_getinfo hands fi_pingpong first) as {provider,
    domain, max_msg_size}; None where it lists none."""
    found: dict = {}
    section = ""
    for line in text.splitlines():
        if line.strip() == "---":
            if found:
                break
            continue
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        if not value.strip():
            section = key
        elif key == "max_msg_size" and section == "fi_ep_attr":
            found["max_msg_size"] = int(value)
        elif key == "name" and section == "fi_domain_attr":
            found["domain"] = value.strip()
        elif key == "prov_name" and section == "fi_fabric_attr":
            found["provider"] = value.strip()
    return found if {"provider", "domain", "max_msg_size"} <= set(found) else None


def find_endpoint(settings: dict) -> dict | None:
    """What libfabric here offers first for these settings (first_match); None where fi_info says nothing
    matches (fi_getinfo's -FI_ENODATA), {} where fi_info is missing or its answer cannot be read."""
    if shutil.which(FI_INFO) is None:
        return {}
    text = tool_output([*lookup(settings), "-v"]) or ""
    found = first_match(text)
    if found is None:
        return None if NO_MATCH in text else {}
    return found


def no_endpoint(settings: dict) -> str:
    """The one line that says libfabric here has no endpoint for these settings, and where to look."""
    what = f"no {settings.get('endpoint', 'rdm')} endpoint with {settings.get('messages', 'tagged')} messages"
    provider = f" from provider {settings['provider']!r}" if settings.get("provider") else ""
    domain = f" in domain {settings['domain']!r}" if settings.get("domain") else ""
    return f"libfabric has {what}{provider}{domain} here ({' '.join(lookup(settings))}: none); fi_info -l lists them"


def require_tool() -> None:
    if shutil.which(TOOL) is None:
        raise OFIUnavailable(f"fi_pingpong is not installed ({BIN_HINT})")


def version(text: str) -> str:
    """libfabric's version from what ``fi_info --version`` printed ('unknown' where it names none)."""
    for line in text.splitlines():
        if line.startswith("libfabric:"):
            return line.partition(":")[2].strip()
    return "unknown"


def libfabric_version() -> str:
    """libfabric's version as fi_info reports it (fi_pingpong has no version of its own)."""
    return version(tool_output([FI_INFO, "--version"]) or "") if shutil.which(FI_INFO) else "unknown"


def _checked(record: object, rank: int) -> dict | None:
    """A rank's first_match as the control plane brought it, each field checked; None: it has none to offer."""
    if record is None or record == {}:
        return record
    fields = record if isinstance(record, dict) else {}
    size = fields.get("max_msg_size")
    if not (
        isinstance(fields.get("provider"), str)
        and isinstance(fields.get("domain"), str)
        and type(size) is int
        and size >= 0
    ):
        raise PeerError(f"rank {rank} sent a malformed libfabric endpoint record: {record!r:.200}")
    return fields


class FiPingpongTransport(Transport):
    """libfabric's fi_pingpong between rank 0 (client) and rank N/2 (server), with the ofi transport's options."""

    name = "fi-pingpong"
    kernels = frozenset({"latency"})
    option_groups = (OFI_OPTIONS,)  # the same provider, domain, endpoint and calls as the ofi transport

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        require_tool()
        chosen = OFI_OPTIONS.of(settings)
        if find_endpoint(chosen) is None:
            raise OFIUnavailable(no_endpoint(chosen))

    @classmethod
    def doctor(cls) -> Diagnosis:
        """preflight's verdict with its default settings, asking fi_info once; what fi_getinfo would choose."""
        try:
            require_tool()
        except OFIUnavailable as exc:
            return Diagnosis(False, str(exc))
        first = find_endpoint({})
        if first is None:
            return Diagnosis(False, no_endpoint({}))
        details = {"tool": shutil.which(TOOL), "libfabric": libfabric_version()}
        if first:
            details["default"] = f"{first['provider']} on {first['domain']} (rdm, tagged)"
        return Diagnosis(True, details=details)

    def __init__(self, ctrl, plan):
        self.ctrl, self.plan = ctrl, plan
        self.settings = OFI_OPTIONS.of(plan.transport_options)
        self.role, self.server_rank = pair_ranks(ctrl)
        if self.role:
            require_tool()
        # Each side of the pair asks its own libfabric what fi_pingpong will open (provider, domain, largest
        # message), so a size or a setting it cannot take is refused on every rank alike.
        mine = host_record(ctrl) | {"endpoint": find_endpoint(self.settings) if self.role else {}}
        records = allgather_json(ctrl, mine)
        self.server_address = server_address(records, self.server_rank)
        self.sides = [_checked(records[rank].get("endpoint"), rank) for rank in (0, self.server_rank)]
        for rank, side in zip((0, self.server_rank), self.sides, strict=True):
            if side is None:
                raise OFIUnavailable(f"rank {rank}: {no_endpoint(self.settings)}")
        known = [side["max_msg_size"] for side in self.sides if side]
        self.max_msg_size = min(known) if known else None
        self.version = libfabric_version() if ctrl.rank == 0 else ""

    def unsupported(self, kernel: Kernel) -> str | None:
        if self.settings.get("progress") == "wait":
            return NO_WAIT
        return super().unsupported(kernel)

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """Run one size: the server on rank N/2, the client on rank 0; rank 0 returns the row."""
        if self.max_msg_size is not None and size > self.max_msg_size:
            provider = self.sides[0]["provider"] if self.sides[0] else "the provider"
            raise Unsupported(
                f"{provider} takes messages of at most {self.max_msg_size} B (fi_info max_msg_size); "
                f"{TOOL} would skip {size} B"
            )
        iterations, _ = self.plan.counts(kernel, size)
        output = run_pair(
            self.ctrl,
            self.role,
            self.server_rank,
            command(self.settings, self.plan.validate, size, iterations),
            self.server_address,
            self.plan.timeout,
            port_flags=("-B", "-P"),
            explain=lambda text: data_error(text) or last_line(text),
        )
        if self.ctrl.rank != 0:
            return None
        return self._row(kernel, size, iterations, parse(output))

    def _row(self, kernel: Kernel, size: int, iterations: int, result: Result) -> dict:
        row = base_row(self.plan, self.name, kernel, size, self.ctrl.size)
        method = " ".join([TOOL, *method_flags(self.settings, self.plan.validate)])
        provider = self.sides[0]["provider"] if self.sides[0] else ""
        row.update(figures(result, self.plan.validate))
        row.update(
            method=f"{method}, provider {provider}" if provider else method,
            pairs=1,
            window=0,
            iterations=iterations,
            warmup=0,
            status=MEASURED,
            validation="pass" if self.plan.validate else "off",
        )
        return row

    def metadata(self) -> dict:
        client, server = self.sides
        return {
            "tool": shutil.which(TOOL),
            "libfabric": self.version,
            "provider_asked": self.settings.get("provider") or DEFAULT_PROVIDER,
            "endpoint": self.settings.get("endpoint", "rdm"),
            "messages": self.settings.get("messages", "tagged"),
            "domain_asked": self.settings.get("domain") or "any",
            # What fi_info says fi_getinfo offers first on each side ({}: fi_info is not installed there).
            "client_endpoint": client,
            "server_endpoint": server,
            "max_msg_size_B": self.max_msg_size,
            "server": self.server_address,
        }
