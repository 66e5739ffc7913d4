"""Transport ``ucx-perftest``: reference rows from UCX's own ucx_perftest, between the same two ranks.

ucx_perftest (ucx-utils) runs UCP's tests between a server and a client that
meet on a TCP port (-p); rank N/2 starts the server and rank 0 the client once
that port listens (reference_tool). Its rows sit beside those of fabricbench's
``ucx`` transport, with the same sizes, counts and UCX environment (UCX_TLS,
UCX_NET_DEVICES reach the tool as they reach the ranks):

- latency: tag_lat (``--ucx-api stream``: stream_lat, ``am``: ucp_am_lat), a
  ping-pong, half a round trip;
- bw: tag_bw (stream_bw, ucp_am_bw), a stream of sends with no
  acknowledgement per window;
- put: ucp_put_lat, a ping-pong of puts (each side waits, polling its memory,
  for the peer's put): half a round trip, where fabricbench's put is a put
  and its flush, a whole one;
- put-bw: ucp_put_bw; get, get-bw: ucp_get (its latency, and its bandwidth).

-n is the run's iterations (times its window for the bandwidth kernels,
whose iterations are messages to ucx_perftest) and -w its warm-up. The row
takes ucx_perftest's final CSV line (-f -v): latency p50 (its 50th
percentile) and mean (its overall average), µs; bandwidth its overall
average, from its MB/s (2^20 B) to MB/s (10^6 B), and messages per second.
ucx_perftest checks no data (its -c is CPU affinity), so a run with -c says
``off`` in the validation column. What it cannot do is an ``unsupported``
row, decided on every rank alike before a server starts: bibw (it has no
bidirectional test), --ucx-progress wait or yield (it busy-polls: auto runs
it as it is), messages of 0 B.
"""

from __future__ import annotations

import math
import shutil

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
from fabricbench.transports.ucx.options import BIN_HINT, UCX_OPTIONS, UCXUnavailable, ucx_environment

TOOL = "ucx_perftest"
UCX_INFO = "ucx_info"
LATENCY_TESTS = {"tag": "tag_lat", "stream": "stream_lat", "am": "ucp_am_lat"}
BW_TESTS = {"tag": "tag_bw", "stream": "stream_bw", "am": "ucp_am_bw"}
RMA_TESTS = {"put": "ucp_put_lat", "put-bw": "ucp_put_bw", "get": "ucp_get", "get-bw": "ucp_get"}
CSV_HEADER = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"
MIB_TO_MB = 2**20 / 1e6  # ucx_perftest's MB/s are 2^20 B per second
NO_BIBW = "ucx_perftest has no bidirectional test"
NO_WAIT = "ucx_perftest always busy-polls ucp_worker_progress: it has no blocking wait (--ucx-progress wait)"
NO_YIELD = "ucx_perftest always busy-polls ucp_worker_progress: it never yields the CPU (--ucx-progress yield)"
NO_ZERO = "ucx_perftest measures messages of 1 B and more"
LATENCY_NOTE = "ucx_perftest's own timing: p50 its 50th percentile, mean its overall average; no data check"
PUT_NOTE = "ucx_perftest's ucp_put_lat: a ping-pong of puts, half a round trip (fabricbench's put: put and flush)"
GET_NOTE = "ucx_perftest's ucp_get: one get's time, its overall average; no data check"
BW_NOTE = "ucx_perftest's overall average bandwidth (its MB = 2^20 B, converted); no acknowledgement per window"


def test_name(kernel: str, api: str) -> str | None:
    """The ucx_perftest test for a kernel with --ucx-api ``api``; None where it has none (bibw)."""
    if kernel == "latency":
        return LATENCY_TESTS[api]
    if kernel == "bw":
        return BW_TESTS[api]
    return RMA_TESTS.get(kernel)


def parse(text: str) -> dict[str, float]:
    """ucx_perftest's final CSV line (-f -v) as {"iterations", "p50_us", "mean_us", "MBps", "msg_per_s"}, its
    MB/s converted to 10^6 B; a PeerError with its last line where there is none."""
    lines = [line.strip() for line in text.splitlines()]
    for number, line in enumerate(lines):
        if line == CSV_HEADER and number + 1 < len(lines):
            values = lines[number + 1].split(",")
            if len(values) != len(CSV_HEADER.split(",")):
                break
            try:
                numbers = [float(value) for value in values]
            except ValueError:
                break
            numbers = [value if math.isfinite(value) else math.nan for value in numbers]
            return {
                "iterations": numbers[0],
                "p50_us": numbers[1],
                "mean_us": numbers[3],
                "MBps": numbers[5] * MIB_TO_MB,
                "msg_per_s": numbers[7],
            }
    raise PeerError(f"{TOOL} printed no result line: {last_line(text)}")


def figures(kernel: Kernel, result: dict[str, float]) -> dict:
    """The row's columns from ucx_perftest's figures, and the note that says how it timed them."""
    if kernel.windowed:
        return {"bw_MBps": result["MBps"], "msgrate_per_s": result["msg_per_s"], "note": BW_NOTE}
    note = PUT_NOTE if kernel.name == "put" else GET_NOTE if kernel.name == "get" else LATENCY_NOTE
    return {"lat_p50_us": result["p50_us"], "lat_mean_us": result["mean_us"], "note": note}


def parse_devices(text: str) -> list[str]:
    """``ucx_info -d``'s transports and devices, each once in its order: ``tcp/eth0``, ``posix/memory``."""
    found, transport = [], None
    for line in text.splitlines():
        words = line.strip("# \t").split(":", 1)
        if len(words) != 2:
            continue
        key, value = words[0].strip(), words[1].strip()
        if key == "Transport":
            transport = value
        elif key == "Device" and transport:
            found.append(f"{transport}/{value}")
    return list(dict.fromkeys(found))


def ucx_info_devices() -> list[str] | str:
    """What ``ucx_info -d`` lists here, or why it cannot say."""
    if shutil.which(UCX_INFO) is None:
        return f"ucx_info is not installed ({BIN_HINT})"
    said = tool_output([UCX_INFO, "-d"])
    if said is None:
        return "ucx_info -d did not answer"
    return parse_devices(said) or "ucx_info -d lists no transport"


def ucx_version() -> str:
    """UCX's version as ``ucx_info -v`` reports it ('unknown' where it cannot say)."""
    said = tool_output([UCX_INFO, "-v"]) if shutil.which(UCX_INFO) else None
    for line in (said or "").splitlines():
        if "Version" in line:
            return line.split("Version", 1)[1].strip()
    return "unknown"


def require_tool() -> None:
    if shutil.which(TOOL) is None:
        raise UCXUnavailable(f"ucx_perftest is not installed ({BIN_HINT})")


class UCXPerftestTransport(Transport):
    """UCX's ucx_perftest between rank 0 (client) and rank N/2 (server), with the ucx transport's options."""

    name = "ucx-perftest"
    kernels = frozenset({"latency", "bw", "put", "put-bw", "get", "get-bw"})
    option_groups = (UCX_OPTIONS,)

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        require_tool()

    @classmethod
    def doctor(cls) -> Diagnosis:
        try:
            require_tool()
        except UCXUnavailable as exc:
            return Diagnosis(False, str(exc))
        return Diagnosis(True, details={"tool": shutil.which(TOOL), "ucx": ucx_version()})

    def __init__(self, ctrl, plan):
        self.ctrl, self.plan = ctrl, plan
        self.settings = UCX_OPTIONS.of(plan.transport_options)
        self.api = self.settings.get("api", "tag")
        self.role, self.server_rank = pair_ranks(ctrl)
        if self.role:
            require_tool()
        records = allgather_json(ctrl, host_record(ctrl))
        self.server_address = server_address(records, self.server_rank)
        self.version = ucx_version() if ctrl.rank == 0 else ""

    def unsupported(self, kernel: Kernel) -> str | None:
        refused = {"wait": NO_WAIT, "yield": NO_YIELD}.get(self.settings.get("progress"))
        if refused:
            return refused
        if kernel.name == "bibw":
            return NO_BIBW
        return super().unsupported(kernel)

    def command(self, kernel: Kernel, size: int, iterations: int, warmup: int) -> list[str]:
        """The client's flags (the server takes the same; ucx_perftest's server reads the test from its client)."""
        count = iterations * self.plan.window if kernel.windowed else iterations
        test = test_name(kernel.name, self.api)
        return [TOOL, "-t", test, "-s", str(size), "-n", str(count), "-w", str(max(warmup, 1)), "-f", "-v"]

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """Run one size: the server on rank N/2, the client on rank 0; rank 0 returns the row."""
        if size < 1:
            raise Unsupported(NO_ZERO)
        iterations, warmup = self.plan.counts(kernel, size)
        command = self.command(kernel, size, iterations, warmup)
        output = run_pair(
            self.ctrl,
            self.role,
            self.server_rank,
            command,
            self.server_address,
            self.plan.timeout,
            port_flags=("-p", "-p"),
            suite="ucx_perftest",
        )
        if self.ctrl.rank != 0:
            return None
        row = base_row(self.plan, self.name, kernel, size, self.ctrl.size)
        row.update(figures(kernel, parse(output)))
        row.update(
            method=" ".join(command[:3] + command[-2:]),
            pairs=1,
            window=self.plan.window if kernel.windowed else 0,
            iterations=iterations,
            warmup=warmup,
            status=MEASURED,
            validation="off",
        )
        return row

    def metadata(self) -> dict:

        return {
            "tool": shutil.which(TOOL),
            "ucx": self.version,
            "api": self.api,
            "server": self.server_address,
            "ucx_environment": ucx_environment(),
        }
