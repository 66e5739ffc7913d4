"""The tcp transport and the MPI-free serve/peer mode, on real loopback sockets.

Kernels run on real mpiexec ranks and between real ``fabricbench serve`` and
``fabricbench run --peer`` processes; every fault is a real one (a killed
server, a listener that never answers, a busy port, a closed port, garbage on
the wire). Every subprocess has a timeout, so a hang fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from fabricbench.control.rendezvous import (
    HEADER,
    HELLO,
    MAGIC,
    VERSION,
    recv_message,
)
from fabricbench.errors import PeerError
from fabricbench.launch.peer import encode_hello
from fabricbench.measure.plan import Plan, Step
from support import (
    BIN,
    PYTHON,
    Server,
    clean_env,
    fabricbench,
    free_port,
    listening_above_a_free_port,
    mpiexec,
    one_error_line,
    read_rows,
    run_until_first_row,
)

QUICK = ["-i", "20", "-x", "2", "-W", "8", "--format", "none", "--timeout", "20"]
P2P = ["latency", "bw", "bibw", "msgrate"]
RINGS = ["allreduce", "allgather"]


@pytest.fixture
def server():
    started = Server()
    yield started
    started.stop()


def _peer_run(port: int, out, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return fabricbench("run", "--peer", f"127.0.0.1:{port}", "--out", str(out), *args, timeout=timeout)


# ---- kernels on mpiexec ranks --------------------------------------------------------------------


def test_tcp_kernels_on_two_ranks_validate_with_sane_units(out):
    kernels = ",".join(P2P + RINGS)
    result = fabricbench("run", "-t", "tcp", "-k", kernels, "-m", "0:64K", "-c", "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    assert meta["launcher"] != "none" and meta["complete"] is True
    assert set(rows.kernel) == set(P2P + RINGS) and (rows.transport == "tcp").all()
    measured = rows[rows.status == "ok"]
    assert (measured.validation == "pass").all()
    # A byte stream has no zero-byte message: said so, never faked; allreduce needs whole floats.
    skipped = rows[rows.status != "ok"]
    partial_floats = {("allreduce", 1), ("allreduce", 2)}
    assert set(zip(skipped.kernel, skipped.size_B, strict=True)) == {(k, 0) for k in P2P} | partial_floats
    assert skipped[skipped.kernel == "latency"].status.iloc[0].startswith("unsupported: a TCP byte stream")
    latency = measured[measured.kernel == "latency"]
    assert (latency.lat_p50_us > 0).all() and (latency.lat_p50_us < 1e5).all()
    for kernel in ("bw", "bibw", "msgrate"):
        series = measured[measured.kernel == kernel].set_index("size_B")
        assert (series.window == 8).all() and (series.bw_MBps > 0).all()
        assert series.bw_MBps[65536] > 100 * series.bw_MBps[1]  # MB/s grows with the message by orders
    rings = measured[measured.kernel.isin(RINGS) & (measured.size_B > 0)]
    factor = rings.kernel.map({"allreduce": 1.0, "allgather": 0.5})  # nccl-tests' factors on 2 ranks
    assert (rings.algbw_GBps > 0).all() and np.allclose(rings.busbw_GBps, rings.algbw_GBps * factor, rtol=1e-3)


@pytest.mark.parametrize(
    "ranks,kernels,where",
    [
        (4, "allreduce,allgather,reduce,msgrate,latency", []),
        (3, "allreduce,allgather,reduce", ["--tcp-interface", "lo"]),
    ],
)
def test_tcp_rings_and_pairs_on_more_ranks(tmp_path, ranks, kernels, where):
    out = tmp_path / "run"
    args = ["-t", "tcp", "-k", kernels, "-m", "4:16K", "-c", "--out", str(out), *where, *QUICK]
    result = mpiexec(ranks, "run", *args)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert (rows.status == "ok").all() and (rows.validation == "pass").all() and (rows.ranks == ranks).all()
    assert set(rows.kernel) == set(kernels.split(","))
    if ranks == 4:
        assert (rows[rows.kernel == "msgrate"].pairs == 2).all()


def test_busy_data_port_ends_every_rank_with_one_line(out):
    busy, port = listening_above_a_free_port()  # rank 1 listens on --tcp-port + 1
    with busy:
        result = mpiexec(2, "run", "-t", "tcp", "-k", "latency", "-m", "8", "--tcp-port", str(port), "--out", str(out))
    assert result.returncode != 0
    one_error_line(result.stderr, f"cannot listen on 0.0.0.0:{port + 1}: address already in use")


def test_c_and_python_loops_validate_and_each_row_says_which_ran(tmp_path):
    for loop in ("c", "python"):
        out = tmp_path / loop
        args = ["-t", "tcp", "-k", "latency,bw,msgrate,bibw", "-m", "1:1M", "-c", "--tcp-loop", loop]
        result = fabricbench("run", *args, "--out", str(out), *QUICK)
        assert result.returncode == 0, result.stderr
        rows, meta = read_rows(out)
        measured = rows[rows.status == "ok"]
        assert len(measured) == 4 * 21 and (measured.validation == "pass").all()
        methods = measured.groupby("kernel").method.agg(set).to_dict()
        timed = f"{loop} loop"
        assert methods == {"latency": {timed}, "bw": {timed}, "msgrate": {timed}, "bibw": {"python loop"}}
        found = meta["transports"]["tcp"]
        assert found["tcp_c_loop"] is (loop == "c") and found["timed_loop"] == timed
        if loop == "c":  # built on first use (or found in the cache) by fabricbench.transports.cbuild
            assert Path(found["c_loop_library"]).is_file() and found["c_loop_compiler"]
        else:
            assert found["c_loop_unavailable"] == "not asked for"
        series = measured[measured.kernel == "bw"].set_index("size_B").bw_MBps
        assert series[1 << 20] > 100 * series[1]


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fabricbench: notice:")]


@pytest.mark.parametrize(
    "without,said",
    [
        ({"PATH": str(BIN)}, "no C compiler found (install gcc, or set CC)"),  # no cc, gcc or clang on PATH
        ({"CC": "/nonexistent/cc"}, "cannot run /nonexistent/cc: No such file or directory (set CC to a C compiler)"),
    ],
)
def test_without_a_compiler_tcp_falls_back_with_one_notice_and_refuses_loop_c(tmp_path, without, said):
    env = without | {"FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")}  # an empty cache: a build is needed
    out = tmp_path / "run"
    args = ["-t", "tcp", "-k", "latency,bw", "-m", "64:128", "-c", "--out", str(out), *QUICK]
    result = fabricbench("run", *args, env=env)
    assert result.returncode == 0, result.stderr
    assert _notices(result.stderr) == [f"fabricbench: notice: tcp kernels are timed in Python (python loop): {said}"]
    assert "Traceback" not in result.stderr
    rows, meta = read_rows(out)
    found = meta["transports"]["tcp"]
    assert (rows.method == "python loop").all() and (rows.validation == "pass").all()
    assert found["tcp_c_loop"] is False and found["timed_loop"] == "python loop" and found["c_loop_unavailable"] == said
    refused_out = tmp_path / "refused"
    refused = fabricbench("run", "-t", "tcp", "-k", "latency", "--loop", "c", "--out", str(refused_out), env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    one_error_line(refused.stderr, f"--loop c: {said}")
    assert not refused_out.exists()


def test_a_server_without_a_compiler_refuses_loop_c_and_times_auto_in_python(tmp_path):
    served = Server(env={"CC": "/nonexistent/cc", "FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")})
    try:
        refused = _peer_run(served.port, tmp_path / "c", "-k", "latency", "-m", "8", "--loop", "c", *QUICK)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        one_error_line(refused.stderr, "--loop c: on rank 1: cannot run /nonexistent/cc")
        result = _peer_run(served.port, tmp_path / "auto", "-k", "latency", "-m", "8:64", "-c", *QUICK)
        assert result.returncode == 0, result.stderr
        [notice] = _notices(result.stderr)
        assert notice.endswith(
            "(python loop): on rank 1: cannot run /nonexistent/cc: No such file or directory (set CC to a C compiler)"
        )
        rows, _ = read_rows(tmp_path / "auto")
        assert (rows.method == "python loop").all() and (rows.validation == "pass").all()
    finally:
        served.stop()


@pytest.mark.parametrize("kernel", ["latency", "bw"])
def test_ctrl_c_ends_a_run_inside_the_c_loop(server, out, kernel):
    """The C loop runs without the GIL; a signal must still reach Python's handler, and soon."""
    run = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{server.port}", "-k", kernel, "-m", "8"]
        + ["-i", "1000000", "--timeout", "60", "--format", "none", "--out", str(out)],  # tens of seconds of work
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    server.wait_for("running tcp")
    time.sleep(1.5)  # well inside the timed loop
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 130 and stderr.strip() == "fabricbench: interrupted", stderr
    server.wait_for("still serving")


# ---- serve / run --peer ------------------------------------------------------------------------


def test_console_reader_going_away_keeps_every_row(server, out):
    """`fabricbench run --peer ... | head`: this process owns the pipe; the console is only a view of the table, so
    the run finishes the table and ends silently with 141, as a tool killed by SIGPIPE does."""
    # --max-time: the whole table, without 3000 iterations of the largest sizes (seconds each).
    args = ["--peer", f"127.0.0.1:{server.port}", "--timeout", "20", "--max-time", "0.2", "--out", str(out)]
    run = run_until_first_row(*args)
    run.stdout.close()  # the next row meets a closed pipe
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 141, stderr
    assert "fabricbench: error" not in stderr and "Traceback" not in stderr, stderr
    rows, meta = read_rows(out)
    assert len(rows) == 23 and (rows.status == "ok").all() and meta["complete"] is True
    server.wait_for("session done")  # the session ran whole


def test_serve_and_peer_round_trip_without_mpi(out):
    served = Server(importtime=True)
    try:
        result = subprocess.run(
            [PYTHON, "-X", "importtime", "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{served.port}"]
            + ["-k", "latency,bw,bibw,allreduce,allgather", "-m", "4:4K", "-c", "--out", str(out), *QUICK],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
        assert result.returncode == 0, result.stderr
        served.wait_for("session done")
    finally:
        served.stop()
    assert " mpi4py" not in result.stderr and " mpi4py" not in "\n".join(served.lines)
    assert "import time:" in result.stderr  # the check above looked at a real import log
    rows, meta = read_rows(out)
    assert (rows.status == "ok").all() and (rows.validation == "pass").all() and (rows.ranks == 2).all()
    assert meta["mode"] == "peer" and meta["peer"] == f"127.0.0.1:{served.port}" and meta["launcher"] == "none"
    assert len(meta["ranks"]) == 2 and meta["ranks"][1]["pid"] != meta["ranks"][0]["pid"]
    assert "mpi_vendor" not in meta


def _raw_reply(port: int, data: bytes) -> str:
    """Send raw bytes to serve; return the text of its ERROR reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        with pytest.raises(PeerError) as refused:
            recv_message(sock, HELLO)
    return str(refused.value)


def test_garbage_handshakes_are_refused_and_serve_keeps_serving(server, out):
    bad_kernel = Plan(steps=[Step("tcp", "teleport", [8])], run_id="r1", timeout=5)
    huge_size = Plan(steps=[Step("tcp", "latency", [1 << 40])], run_id="r2", timeout=5)
    cases = {
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n": "not a fabricbench peer: bad magic b'GET '",
        HEADER.pack(MAGIC, VERSION + 8, HELLO, 0): f"the peer speaks rendezvous protocol version {VERSION + 8}",
        HEADER.pack(MAGIC, VERSION, HELLO, 1 << 31): "HELLO message of 2147483648 B is over the 65536 B limit",
        HEADER.pack(MAGIC, VERSION, HELLO, 3) + b"\x00\x09a": "malformed HELLO message: truncated",
        HEADER.pack(MAGIC, VERSION, HELLO, 0): "malformed HELLO message: truncated",
    }
    for plan, expected in ((bad_kernel, "unknown kernel 'teleport'"), (huge_size, "latency size 1099511627776 B")):
        payload = encode_hello(plan, None)
        cases[HEADER.pack(MAGIC, VERSION, HELLO, len(payload)) + payload] = expected
    for data, expected in cases.items():
        assert expected in _raw_reply(server.port, data)
    server.wait_for("still serving", count=len(cases))
    refusals = [line for line in server.log() if "still serving" in line]
    assert len(refusals) == len(cases) and all(": refused: " in line for line in refusals)
    # A client that connects and goes away costs one line too.
    socket.create_connection(("127.0.0.1", server.port)).close()
    server.wait_for("still serving", count=len(cases) + 1)
    result = _peer_run(server.port, out, "-k", "latency", "-m", "8:64", "-c", *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert (rows.validation == "pass").all() and len(rows) == 4


def _long_peer_run(port: int, out, timeout: str, kernel: str = "latency", sizes: str = "1:4M") -> subprocess.Popen:
    """A sweep that runs long enough to be interrupted (and fits serve's default caps)."""
    return subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{port}", "-k", kernel, "-m", sizes]
        + ["-i", "5000", "-x", "10", "--timeout", timeout, "--format", "none", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def _session_pid_after_rows(run: subprocess.Popen, out, rows: int) -> int:
    """Wait until the table holds ``rows`` rows; return the server's session process (rank 1)."""
    csv = out / "results.csv"
    end = time.monotonic() + 60
    while not (csv.exists() and len(csv.read_text().splitlines()) > rows):
        assert time.monotonic() < end and run.poll() is None, "no rows appeared"
        time.sleep(0.02)
    return json.loads((out / "metadata.json").read_text())["ranks"][1]["pid"]


def test_peer_closing_mid_run_keeps_rows_and_serve_goes_on(server, tmp_path):
    out = tmp_path / "run"
    run = _long_peer_run(server.port, out, "20")
    os.kill(_session_pid_after_rows(run, out, 3), signal.SIGKILL)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 3
    one_error_line(stderr, "peer closed the connection")
    rows, meta = read_rows(out)
    assert 3 <= len(rows) < 23 and (rows.status == "ok").all() and meta["complete"] is False
    server.wait_for("session ended with exit code -9; still serving")
    again = _peer_run(server.port, tmp_path / "again", "-k", "bw", "-m", "1K", *QUICK)
    assert again.returncode == 0, again.stderr


def test_a_client_option_that_cannot_work_is_refused_before_it_reaches_serve(server, tmp_path):
    bad = _peer_run(server.port, tmp_path / "bad", "-k", "latency", "-m", "8", "--tcp-interface", "nope0", *QUICK)
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    one_error_line(bad.stderr, "--tcp-interface 'nope0': no IPv4 address")
    good = _peer_run(server.port, tmp_path / "good", "-k", "latency", "-m", "8:8", *QUICK)
    assert good.returncode == 0, good.stderr


# the C ping-pong blocks in recv; the C window waits in poll
@pytest.mark.parametrize(("kernel", "sizes"), [("latency", "1:4M"), ("bw", "1:64K")])
def test_peer_frozen_mid_run_times_out_and_keeps_rows(server, out, kernel, sizes):
    run = _long_peer_run(server.port, out, "2", kernel, sizes)
    session = _session_pid_after_rows(run, out, 2)
    os.kill(session, signal.SIGSTOP)  # alive, connected, silent
    try:
        _, stderr = run.communicate(timeout=30)
    finally:
        os.kill(session, signal.SIGKILL)
    assert run.returncode == 3
    lines = [line for line in stderr.splitlines() if line.startswith("fabricbench: error:")]
    assert len(lines) == 1 and ("made no progress for 2 s" in lines[0] or "timed out after 2 s" in lines[0]), stderr
    rows, _ = read_rows(out)
    assert len(rows) >= 2 and (rows.status == "ok").all()


def test_peer_that_never_answers_times_out(out):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete in the backlog; nobody ever reads or replies
        started = time.monotonic()
        result = _peer_run(silent.getsockname()[1], out, "-k", "latency", "-m", "8", "--timeout", "2", timeout=30)
    assert result.returncode == 3 and time.monotonic() - started < 20
    one_error_line(result.stderr, "timed out after 2 s waiting for the peer's CHALLENGE")


def test_unreachable_peer_is_one_line(out):
    port = free_port()  # bound a moment ago and closed: nothing listens there
    result = _peer_run(port, out, "-k", "latency", "-m", "8", timeout=30)
    assert result.returncode == 3
    one_error_line(result.stderr, f"cannot reach 127.0.0.1:{port}: connection refused")


def test_an_unreachable_peer_leaves_no_results_root_behind(tmp_path):
    # Without --out the run's folder is results/<run id>/ under the working directory: both are removed.
    port = free_port()
    result = fabricbench("run", "--peer", f"127.0.0.1:{port}", "-k", "latency", "-m", "8", timeout=30, cwd=tmp_path)
    assert result.returncode == 3
    one_error_line(result.stderr, f"cannot reach 127.0.0.1:{port}: connection refused")
    assert not any(tmp_path.iterdir())


def test_serve_on_a_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = fabricbench("serve", "--address", "127.0.0.1", "--port", str(port), timeout=30)
    assert result.returncode == 2
    one_error_line(result.stderr, f"cannot listen on 127.0.0.1:{port}: address already in use")


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--peer", "127.0.0.1:1", "-t", "mpi", "-k", "latency"], "transport 'mpi' needs MPI and a launcher"),
        (["--peer", "nohost", "-k", "latency"], "--peer must be HOST:PORT with a port of digits 0-9, got 'nohost'"),
        (["--peer", "127.0.0.1:1", "-k", "latency", "--tcp-port", "70000"], "port must be at most 65535"),
    ],
)
def test_bad_peer_input(args, expected, out):
    result = fabricbench("run", *args, "--out", str(out), timeout=30)
    assert result.returncode == 2
    one_error_line(result.stderr, expected)
