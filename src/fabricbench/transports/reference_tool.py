"""What the self-timed reference transports share: another tool's server and client, run between two ranks.

perftest and fi_pingpong both come as a server and a client that meet on a
TCP port of their own. The server runs on rank N/2 and the client on rank 0,
and only once the server's port listens: a client that starts earlier fails
and leaves the server hanging. Every child has the run's timeout and dies
with the rank that started it, so no server outlives its run.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import time
from collections.abc import Callable

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported

LISTEN = "0A"  # TCP state in /proc/net/tcp
QUERY_TIMEOUT = 30.0  # seconds for a tool's short answer (its version, a listing)


def last_line(text: str) -> str:
    """The last line that is not blank (what a tool said last, usually why it stopped), or 'no output'."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _no_refusal(text: str) -> str:
    return ""


def die_with_parent() -> None:
    """In the child: be killed when the rank that started it dies (PR_SET_PDEATHSIG), so no server is orphaned."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def listening(port: int) -> bool:
    """Whether some socket listens on ``port``, read from /proc: probing by connecting would eat the server's
    accept."""
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def tool_output(command: list[str]) -> str | None:
    """What a short query (``--version``, a listing) printed, stdout then stderr; None where it could not run or
    did not answer within QUERY_TIMEOUT."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr


def pair_ranks(ctrl) -> tuple[str | None, int]:
    """This rank's part ("client" on rank 0, "server" on rank N/2, else None) and the server's rank."""
    half = ctrl.size // 2
    return ({0: "client", half: "server"}.get(ctrl.rank) if ctrl.size >= 2 else None), half


def host_record(ctrl) -> dict:
    """What a rank says of where it runs, for server_address: its host name and the control plane's address."""
    return {"host": socket.gethostname(), "address": getattr(ctrl, "local_address", None)}


def server_address(records: list[dict], server_rank: int) -> str:
    """Where the client reaches the server, from every rank's host_record: loopback on the same host, else the
    address the control plane uses, else the host name."""
    server = records[server_rank]
    host, address = server.get("host"), server.get("address")
    if not isinstance(host, str) or not isinstance(address, (str, type(None))):
        raise PeerError(f"rank {server_rank}'s host record is malformed")
    return "127.0.0.1" if host == socket.gethostname() else address or host


def start_server(
    command: list[str], port: int, timeout: float, refused: Callable[[str], str] = _no_refusal
) -> tuple[subprocess.Popen | None, str]:
    """The server, once it listens on ``port``; or (None, the tool's words) where it exited first and ``refused``
    finds a refusal in what it printed."""
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent
    )
    deadline = time.monotonic() + timeout
    while not listening(port):
        if server.poll() is not None:
            output = server.stdout.read()
            if server.returncode and refused(output):
                return None, refused(output)
            raise PeerError(f"{command[0]} server exited ({server.returncode}): {last_line(output)}")
        if time.monotonic() > deadline:
            server.kill()
            raise PeerError(f"{command[0]} server did not listen on port {port} within {timeout:g} s")
        time.sleep(0.05)
    return server, ""


def run_client(command: list[str], timeout: float, explain: Callable[[str], str] = last_line) -> str:
    """The client's output (stdout then stderr); a PeerError with ``explain``'s line where it fails or overruns."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{command[0]} client did not finish within {timeout:g} s") from None
    output = done.stdout + done.stderr
    if done.returncode:
        raise PeerError(f"{command[0]} client failed ({done.returncode}): {explain(output)}")
    return output


def finish_server(server: subprocess.Popen, tool: str, timeout: float, explain: Callable[[str], str] = last_line):
    """Wait for the server to end after its client; a PeerError where it fails or overruns."""
    try:
        output, _ = server.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{tool} server did not finish within {timeout:g} s") from None
    if server.returncode:
        raise PeerError(f"{tool} server failed ({server.returncode}): {explain(output)}")


def run_pair(
    ctrl,
    role: str | None,
    server_rank: int,
    command: list[str],
    address: str,
    timeout: float,
    *,
    port_flags: tuple[str, str],
    refused: Callable[[str], str] = _no_refusal,
    explain: Callable[[str], str] = last_line,
    suite: str = "",
) -> str:
    """One run of ``command`` between the pair, every rank taking part: its server on ``server_rank`` on a free
    port, then, once that listens, its client on rank 0 with the server's ``address`` last. ``port_flags``: how
    the server and the client name that port (perftest: ``-p``, ``-p``).

    Returns the client's output on rank 0 ('' elsewhere). A refusal the server printed before it listened
    (``refused``) is Unsupported on every rank alike ("``suite`` refuses TOOL: ..."), and no client runs;
    ``explain`` picks the line that says why a client or server failed.
    """
    tool = command[0]
    server, refusal_line, output = None, "", ""
    port = free_port() if role == "server" else 0
    try:
        if role == "server":
            server, refusal_line = start_server(command + [port_flags[0], str(port)], port, timeout, refused)
        announced = allgather_json(ctrl, {"port": port, "refused": refusal_line})[server_rank]
        port, refusal_line = announced.get("port"), announced.get("refused")
        if not isinstance(refusal_line, str):
            raise PeerError(f"rank {server_rank} announced a malformed {suite or tool} refusal")
        if refusal_line:  # the tool itself said no: on every rank alike
            raise Unsupported(f"{suite or tool} refuses {tool}: {refusal_line[:200]}")
        if type(port) is not int or not 0 < port < 65536:
            raise PeerError(f"rank {server_rank} announced a bad {suite or tool} port {port!r}")
        if role == "client":
            output = run_client(command + [port_flags[1], str(port), address], timeout, explain)
        if server:
            finish_server(server, tool, timeout, explain)
    finally:
        if server and server.poll() is None:
            server.kill()
            server.wait()
    ctrl.barrier()
    return output
