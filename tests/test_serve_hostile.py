"""``fabricbench serve`` against hostile and unlucky clients, on real loopback sockets.

Every client here is real: raw sockets that stay silent, drip a HELLO byte by byte, ask for too much, send
garbage or a wrong token, a SIGSTOPped session child, and real ``fabricbench run --peer`` processes beside
them. No timing is asserted beyond generous upper bounds.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fabricbench import __version__
from fabricbench.control.rendezvous import (
    CHALLENGE,
    ERROR,
    HEADER,
    HELLO,
    MAGIC,
    PROOF,
    VERSION,
    FieldReader,
    Fields,
    Refused,
    recv_message,
    send_message,
)
from fabricbench.errors import PeerError
from fabricbench.launch.peer import EVICTED, NONCE_BYTES, client_handshake, encode_hello
from fabricbench.measure.plan import Plan, Step
from support import PYTHON, Server, clean_env, fabricbench, free_port, one_error_line, process_gone, read_rows

QUICK = ["-k", "latency", "-m", "8:64", "-i", "20", "-x", "2", "--format", "none", "--timeout", "20"]
TOKEN = "correct horse battery staple"


def _peer_run(port: int, out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return fabricbench("run", "--peer", f"127.0.0.1:{port}", "--out", str(out), *args, timeout=120, env=env)


def _plan(**fields) -> Plan:
    base = {"steps": [Step("tcp", "latency", [8])], "run_id": "hostile-1", "timeout": 20.0}
    return Plan(**(base | fields))


def _frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, kind, len(payload)) + payload


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.settimeout(20)
    return sock


def _session_pid(running_line: str) -> int:
    return int(re.search(r"pid (\d+)", running_line).group(1))


def _drip(port: int, data: bytes, every: float, stop: threading.Event, sent: list[int]) -> None:
    """Send DATA one byte every EVERY seconds until the server stops listening or STOP is set."""
    with _connect(port) as sock:
        for byte in data:
            if stop.wait(every):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return
            sent.append(byte)


def test_silent_dripping_and_over_asking_clients_do_not_hold_up_a_legitimate_one(tmp_path):
    server = Server("--handshake-timeout", "120")
    stop = threading.Event()
    dripped: list[int] = []
    hello = _frame(HELLO, encode_hello(_plan(), None))  # a few hundred bytes: a byte a second takes minutes
    drip = threading.Thread(target=_drip, args=(server.port, hello, 1.0, stop, dripped))
    try:
        silent = _connect(server.port)
        drip.start()
        over_asking = {
            ("-W", "65536"): "window 65536 is over this server's cap of 1024 (serve --max-window)",
            ("--timeout", "86400"): "timeout 86400 s is over this server's cap of 300 s (serve --max-timeout)",
            ("-i", "2000000"): "2000000 iterations is over this server's cap of 1000000 (serve --max-iterations)",
        }
        for args, words in over_asking.items():
            refused = _peer_run(server.port, tmp_path / "refused", "-k", "latency", "-m", "8", *args)
            assert refused.returncode == 3
            one_error_line(refused.stderr, f"fabricbench serve at 127.0.0.1:{server.port} refused the run: {words}")
            assert not (tmp_path / "refused").exists()  # a refused run leaves no results folder
        good = _peer_run(server.port, tmp_path / "good", *QUICK, "-c")
        assert good.returncode == 0, good.stderr
        rows, _ = read_rows(tmp_path / "good")
        assert len(rows) == 4 and (rows.validation == "pass").all()
        # The silent and the dripping client are still in their handshakes: nobody waited for them.
        silent.setblocking(False)
        with pytest.raises(BlockingIOError):
            silent.recv(1)
        assert drip.is_alive() and len(dripped) < len(hello)
    finally:
        stop.set()
        drip.join(timeout=30)
        silent.close()
        server.stop()
    refusals = [line for line in server.log() if ": refused: " in line]
    assert len(refusals) == len(over_asking) and all("(serve --max-" in line for line in refusals)


def test_a_handshake_has_one_deadline_however_slowly_its_bytes_come():
    server = Server("--handshake-timeout", "2")
    stop = threading.Event()
    dripped: list[int] = []
    hello = _frame(HELLO, encode_hello(_plan(), None))
    try:
        silent = _connect(server.port)
        started = time.monotonic()
        _drip(server.port, hello, 0.2, stop, dripped)  # 0.2 s a byte: the whole HELLO would take over 20 s
        assert time.monotonic() - started < 20 and len(dripped) < len(hello)
        with pytest.raises(Refused, match="no complete handshake within 2 s"):
            recv_message(silent, HELLO)  # the silent one is told the same
        silent.close()
        server.wait_for("refused: no complete handshake within 2 s; still serving", count=2)
    finally:
        stop.set()
        server.stop()


def test_a_busy_server_says_whom_it_serves_and_stopping_it_ends_the_session(tmp_path):
    server = Server()
    first = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{server.port}", "-k", "latency", "-m", "8"]
        + ["-i", "1000000", "--timeout", "60", "--format", "none", "--out", str(tmp_path / "first")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        session = _session_pid(server.wait_for("running tcp latency"))
        second = _peer_run(server.port, tmp_path / "second", *QUICK)
        assert second.returncode == 3
        one_error_line(second.stderr, "refused the run: busy: serving 127.0.0.1:")
        assert re.search(
            r"busy: serving 127\.0\.0\.1:\d+ since \d+ s \(run [^,]+, budget about \d+ s\); try again", second.stderr
        )
        server.wait_for("refused: busy: serving")
        server.stop()  # SIGTERM: serve ends its session child too, and leaves no process behind
        assert server.proc.returncode == 0 and "fabricbench serve: stopped" in server.lines
        deadline = time.monotonic() + 30
        while not process_gone(session):
            assert time.monotonic() < deadline, "the session child outlived serve"
            time.sleep(0.05)
        _, stderr = first.communicate(timeout=60)
        assert first.returncode == 3
        one_error_line(stderr, "peer closed the connection")
    finally:
        first.kill()
        first.wait(timeout=30)
        if server.proc.poll() is None:
            server.stop()


def test_a_stopped_session_child_is_killed_after_its_budget_and_serve_goes_on(tmp_path):
    server = Server()
    sock = _connect(server.port)
    try:
        # A session whose budget is a few seconds: --timeout 3 and ten iterations of 8 B.
        client_handshake(sock, encode_hello(_plan(iterations=10, warmup=0, timeout=3.0), None), None)
        running = server.wait_for("running tcp latency")
        session = _session_pid(running)
        budget = float(re.search(r"budget (\d+) s", running).group(1))
        assert budget < 10
        os.kill(session, signal.SIGSTOP)  # alive, holding the session, never ending it itself
        busy = _peer_run(server.port, tmp_path / "busy", *QUICK)
        assert busy.returncode == 3 and "busy: serving" in busy.stderr
        killed = server.wait_for("outlived its budget", deadline=60)
        assert f"pid {session})" in killed and killed.endswith("killed it; still serving")
        deadline = time.monotonic() + 30
        while not process_gone(session):
            assert time.monotonic() < deadline, "the stopped session child was not reaped"
            time.sleep(0.05)
    finally:
        sock.close()
    good = _peer_run(server.port, tmp_path / "good", *QUICK)
    assert good.returncode == 0, good.stderr
    server.stop()


def test_log_lines_escape_what_a_client_sent():
    server = Server()
    evil = "1.0\nfabricbench serve: forged line\x1b[2J\x1b[H"
    genuine = encode_hello(_plan(), None)
    hello = Fields().text(evil).payload() + genuine[2 + len(__version__.encode()) :]  # another version string
    try:
        with _connect(server.port) as sock:
            client_handshake(sock, hello, None)
            running = server.wait_for("running tcp latency")
        server.wait_for("session ended with exit code")  # the raw client left: the session failed, in one line
    finally:
        server.stop()
    assert "for fabricbench 1.0\\nfabricbench serve: forged line\\x1b[2J\\x1b[H (run hostile-1" in running
    assert not any(line.startswith("fabricbench serve: forged") for line in server.lines)
    assert not any("\x1b" in line for line in server.lines)


class Relay:
    """A loopback TCP relay between one client and serve that keeps every byte it passes, both ways."""

    def __init__(self, target_port: int):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target_port = target_port
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve_one, daemon=True)
        self.thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction; pass its end on, or on an error end both directions."""
        try:
            while data := source.recv(65536):
                with self.lock:
                    self.seen += data
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _serve_one(self) -> None:
        self.listener.settimeout(60)
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port), timeout=60)
        for sock in (client, server):
            sock.settimeout(120)
        pumps = [threading.Thread(target=self._pump, args=pair) for pair in ((client, server), (server, client))]
        for pump in pumps:
            pump.start()
        for pump in pumps:
            pump.join()
        client.close()
        server.close()
        self.listener.close()


def test_tokens_right_runs_wrong_or_missing_is_refused_on_both_sides_and_the_secret_never_travels(tmp_path):
    server = Server(env={"FABRICBENCH_TOKEN": TOKEN})
    try:
        assert "a token is required" in server.wait_for("listening on")
        relay = Relay(server.port)
        good = _peer_run(relay.port, tmp_path / "good", *QUICK, "--token", TOKEN)
        assert good.returncode == 0, good.stderr
        relay.thread.join(timeout=30)
        assert len(relay.seen) > 1000 and TOKEN.encode() not in relay.seen  # the whole session, both ways
        rows, meta = read_rows(tmp_path / "good")
        assert len(rows) == 4 and meta["token"] is True
        assert TOKEN not in (tmp_path / "good" / "metadata.json").read_text()
        server.wait_for("session done")
        cases = [
            (["--token", "wrong"], None, "wrong token"),
            ([], None, "this server needs a token: give run --token, or FABRICBENCH_TOKEN"),
            ([], {"FABRICBENCH_TOKEN": TOKEN + "!"}, "wrong token"),
        ]
        for i, (args, env, words) in enumerate(cases, 1):
            refused = _peer_run(server.port, tmp_path / f"refused{i}", *QUICK, *args, env=env)
            assert refused.returncode == 3
            one_error_line(refused.stderr, f"refused the run: {words}")
            server.wait_for(f"refused: {words}", count=sum(w == words for _, _, w in cases[:i]))
        from_env = _peer_run(server.port, tmp_path / "from-env", *QUICK, env={"FABRICBENCH_TOKEN": TOKEN})
        assert from_env.returncode == 0, from_env.stderr
        empty = _peer_run(server.port, tmp_path / "empty", *QUICK, "--token", "")
        assert empty.returncode == 2
        one_error_line(empty.stderr, "--token is empty")
    finally:
        server.stop()
    assert not any(TOKEN in line for line in server.lines)


def _vm_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))


def _fuzz_case(port: int, rng: random.Random, hello: bytes) -> str:
    """One hostile handshake; returns what it was. The client always ends its side, so serve never has to wait."""
    kind = rng.choice(["random", "truncated", "corrupted", "wrong token", "no token"])
    with _connect(port) as sock:
        if kind in ("wrong token", "no token"):
            send_message(sock, HELLO, hello)
            challenge = FieldReader(recv_message(sock, CHALLENGE), "CHALLENGE")
            assert len(challenge.blob()) == NONCE_BYTES
            proof = rng.randbytes(32) if kind == "wrong token" else b""
            send_message(sock, PROOF, Fields().blob(proof).payload())
            words = "wrong token" if kind == "wrong token" else "needs a token"
            with pytest.raises(Refused, match=words):
                recv_message(sock, HELLO)
            return kind
        frame = _frame(HELLO, hello)
        if kind == "random":
            data = rng.randbytes(rng.randrange(0, 300))
        elif kind == "truncated":
            data = frame[: rng.randrange(len(frame))]
        else:
            data = bytearray(frame)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):  # serve answers (a refusal, a CHALLENGE) or not, then closes
            pass
    return kind


def test_a_handshake_fuzz_leaves_serve_up_with_flat_memory(tmp_path):
    server = Server(env={"FABRICBENCH_TOKEN": TOKEN})
    rng = random.Random(20261201)
    hello = encode_hello(_plan(steps=[Step("tcp", "latency", [8, 64]), Step("tcp", "bw", [1024])]), None)
    try:
        for _ in range(300):  # warm up whatever serve allocates once
            _fuzz_case(server.port, rng, hello)
        before = _vm_rss_kib(server.proc.pid)
        started = time.monotonic()
        kinds = [_fuzz_case(server.port, rng, hello) for _ in range(5000)]
        elapsed = time.monotonic() - started
        after = _vm_rss_kib(server.proc.pid)
        assert server.proc.poll() is None
        assert set(kinds) == {"random", "truncated", "corrupted", "wrong token", "no token"}
        assert after - before < 2048, f"serve grew from {before} to {after} KiB over 5000 handshakes"
        assert elapsed < 120
        good = _peer_run(server.port, tmp_path / "good", *QUICK, "--token", TOKEN)
        assert good.returncode == 0, good.stderr
    finally:
        server.stop()
    log = "\n".join(server.lines)
    assert "Traceback" not in log and "internal error" not in log


def test_serve_binds_loopback_unless_told_and_refuses_an_empty_address():
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "serve", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        first = proc.stderr.readline()
        assert first.startswith(f"fabricbench serve: listening on 127.0.0.1:{port} (protocol {VERSION};"), first
        assert "this host only, no token" in first
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    empty = fabricbench("serve", "--address", "", "--port", str(port), timeout=30)
    assert empty.returncode == 2
    one_error_line(empty.stderr, "--address is empty")


def test_a_client_of_another_protocol_version_is_told_both_versions():
    server = Server()
    try:
        with _connect(server.port) as sock:
            sock.sendall(HEADER.pack(MAGIC, VERSION - 1, HELLO, 0))
            with pytest.raises(PeerError, match=f"version {VERSION - 1} and this side .* version {VERSION}"):
                recv_message(sock, CHALLENGE)
    finally:
        server.stop()


class FakeServer:
    """A loopback listener speaking the rendezvous format: it reads each client's HELLO and answers the next of
    REFUSALS in an ERROR message, as a hostile or busy serve would."""

    def __init__(self, refusals: list[str]):
        self.refusals = refusals
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(30)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with self.listener:
            for reason in self.refusals:
                sock, _ = self.listener.accept()
                with sock:
                    sock.settimeout(30)
                    recv_message(sock, HELLO)
                    send_message(sock, ERROR, Fields().text(reason).payload())


def test_a_servers_refusal_is_one_line_with_its_escapes_shown(tmp_path):
    fake = FakeServer(["x\x1b[31m\nfabricbench: error: forged"])
    run = _peer_run(fake.port, tmp_path / "refused", *QUICK)
    assert run.returncode == 3
    one_error_line(run.stderr, "refused the run: x\\x1b[31m\\nfabricbench: error: forged")
    assert "\x1b" not in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_a_client_evicted_then_told_busy_prints_one_line(tmp_path):
    fake = FakeServer([f"{EVICTED} 32 handshakes at once, and a newer client came; try again later", "busy: serving"])
    run = _peer_run(fake.port, tmp_path / "busy", *QUICK)
    assert run.returncode == 3
    one_error_line(run.stderr, "refused the run: busy: serving (after serve evicted 1 of our handshakes")
    assert run.stderr.count("\n") == 1, run.stderr


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 on loopback here (the refusal is tested instead)")
def test_serve_listens_on_ipv6_and_a_peer_run_reaches_it(tmp_path):
    server = Server("--address", "::1")
    try:
        assert f"listening on [::1]:{server.port} (" in server.lines[0]
        run = fabricbench("run", "--peer", f"[::1]:{server.port}", "--out", str(tmp_path / "v6"), *QUICK, timeout=120)
        assert run.returncode == 0, run.stderr
        rows, meta = read_rows(tmp_path / "v6")
        assert len(rows) == 4 and meta["peer"] == f"[::1]:{server.port}"
        assert "[::1]:" in server.wait_for("session done")
    finally:
        server.stop()
    both = Server("--address", "::")  # one dual-stack socket: IPv4 clients reach it too
    try:
        run = _peer_run(both.port, tmp_path / "v4", *QUICK)
        assert run.returncode == 0, run.stderr
        assert "::ffff:127.0.0.1]:" in both.wait_for("session done")
    finally:
        both.stop()


def test_serve_takes_an_ipv6_address_in_brackets_as_peer_does():
    """``--address [::1]`` was refused as "cannot listen on [[::1]]:PORT"."""
    port = free_port()
    if not _ipv6_loopback():
        refused = fabricbench("serve", "--address", "[::1]", "--port", str(port), timeout=30)
        one_error_line(refused.stderr, f"cannot listen on [::1]:{port}: IPv6 is unavailable")
        return
    server = Server("--address", "[::1]")
    try:
        assert f"listening on [::1]:{server.port} (" in server.lines[0]
        socket.create_connection(("::1", server.port), timeout=10).close()
    finally:
        server.stop()


@pytest.mark.skipif(_ipv6_loopback(), reason="IPv6 on loopback here (a real run over ::1 is tested instead)")
def test_serve_on_ipv6_without_it_says_so():
    refused = fabricbench("serve", "--address", "::1", "--port", str(free_port()), timeout=30)
    assert refused.returncode == 2
    one_error_line(refused.stderr, "IPv6")
