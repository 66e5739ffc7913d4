"""The verbs transports on a real RDMA device: SoftRoCE's rxe0, inside the VM scripts/softroce-vm.sh boots.

Kept to a few runs on purpose: under software emulation Python starts in
about 2 s, pyverbs imports in 4 s, and one fabricbench run costs about 45 s
before it measures anything. Iteration counts are tiny and timeouts wide;
the numbers themselves mean nothing here, only pass or fail.

On a host with its own RDMA device these run directly (``pytest tests/verbs``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fabricbench.transports.perftest import listening
from fabricbench.transports.rdma import BAD_RKEY_HOOK
from support import PYTHON, clean_env, mpiexec, read_rows

DEVICES = Path("/sys/class/infiniband")
pytestmark = [
    pytest.mark.verbs,
    pytest.mark.skipif(
        not (DEVICES.is_dir() and any(DEVICES.iterdir())),
        reason="needs an RDMA device; tests/test_softroce_vm.py runs these inside the SoftRoCE VM",
    ),
]
RUN_TIMEOUT = 600  # seconds for one fabricbench run under emulation
CLEAR_ERRORS = ("completion failed", "peer closed the connection", "made no progress", "connection lost")


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fabricbench: error:")]


def test_every_kernel_moves_intact_data_and_perftest_rows_sit_beside_it(out):
    result = mpiexec(
        2, "run", "-t", "verbs,verbs-send,perftest", "-k", "latency,bw,bibw,get", "-m", "4K:8K",
        "-i", "10", "-x", "2", "-W", "16", "-c", "--timeout", "300", "--out", str(out), "--format", "none",
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    measured = rows[rows.status == "ok"]
    kernels = {"latency", "bw", "bibw", "get"}
    expected = {("verbs", k) for k in kernels} | {("verbs-send", k) for k in kernels - {"get"}}
    expected |= {("perftest", k) for k in kernels}
    assert set(zip(measured.transport, measured.kernel, strict=True)) == expected
    assert len(measured) == 2 * len(expected) and set(measured.size_B) == {4096, 8192}
    # 8 KiB is two 4 KiB packets: the last-byte spin and validation see a multi-packet WRITE.
    ours = measured[measured.transport != "perftest"]
    assert (ours.validation == "pass").all()
    assert (measured[measured.transport == "perftest"].validation == "off").all()
    unsupported = rows[rows.status != "ok"]
    assert list(zip(unsupported.transport, unsupported.kernel, strict=True)) == [("verbs-send", "get")]

    latency = measured[measured.kernel.isin(["latency", "get"])]
    assert (latency.lat_p50_us > 0).all() and (latency.lat_min_us <= latency.lat_p50_us).all()
    streams = measured[measured.kernel.isin(["bw", "bibw"])]
    assert (streams.bw_MBps > 0).all() and (streams.msgrate_per_s > 0).all()
    assert (streams.bw_peak_MBps >= streams.bw_MBps * 0.999).all()
    assert (streams.window == 16).all()

    def method(transport, kernel):
        return set(measured[(measured.transport == transport) & (measured.kernel == kernel)].method)

    yielding = ", yield" if len(os.sched_getaffinity(0)) < 2 else ""  # --spin auto: 2 ranks on fewer CPUs
    assert method("verbs", "latency") == {f"write{yielding}"}
    assert method("verbs", "get") == {f"read{yielding}"}
    assert method("verbs-send", "bw") == {f"send, signal 1/4{yielding}"}
    assert method("perftest", "latency") == {"ib_write_lat, inline 0[B]"}
    assert method("perftest", "bibw") == {"ib_write_bw -b -t 16 -Q 4, inline 0[B]"}

    device = meta["transports"]["verbs"]
    assert device["device"].startswith("rxe") and device["link_layer"] == "Ethernet"
    assert device["gid_type"] == "RoCE v2" and ":ffff:" in device["gid"]  # perftest's pick: IPv4-mapped
    assert device["grh"] is True and device["path_mtu_B"] == device["active_mtu_B"]
    assert meta["transports"]["perftest"]["tools"]["ib_write_lat"]


def test_bad_rkey_is_a_clear_error_and_keeps_the_rows(out):
    # The hook corrupts the rkey received in the exchange: the device itself refuses the WRITE.
    result = mpiexec(
        2, "run", "-t", "verbs-send,verbs", "-k", "latency", "-m", "8:8", "-i", "5", "-x", "1",
        "--timeout", "120", "--out", str(out), "--format", "none",
        env={BAD_RKEY_HOOK: "1"}, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    errors = _error_lines(result.stderr)
    assert errors == ["fabricbench: error: rank 0: RDMA WRITE completion failed: remote access error "
                      "(status 10, vendor error 0x0)"], result.stderr  # fmt: skip
    rows, meta = read_rows(out)
    # SEND/RECV never uses the rkey, so its row was measured before the WRITE failed.
    assert list(zip(rows.transport, rows.status, rows.size_B, strict=True)) == [("verbs-send", "ok", 8)]
    assert meta["complete"] is False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_rows(out: Path, rows: int, process: subprocess.Popen, deadline: float) -> dict:
    csv = out / "results.csv"
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            pytest.fail(f"the run ended early ({process.returncode}): {process.stderr.read()}")
        if csv.exists() and len(csv.read_text().splitlines()) > rows:
            return json.loads((out / "metadata.json").read_text())
        time.sleep(0.2)
    pytest.fail(f"no {rows} rows within {deadline} s")


def _device() -> str:
    return sorted(path.name for path in DEVICES.iterdir())[0]


def test_serve_opens_the_device_it_is_told_and_names_a_wrong_one(out, tmp_path):
    """serve --device is the server's own choice: a device this host lacks fails there, in words."""
    port = _free_port()
    env = clean_env()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", "serve", "--address", "127.0.0.1", "--port", str(port), "--timeout", "60",
             "--device", "nosuch0"],
            stdout=log, stderr=log, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not listening(port):
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        client = subprocess.run(
            [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{port}", "-t", "verbs", "-k", "latency",
             "-m", "8:8", "-i", "10", "-x", "2", "--timeout", "60", "--out", str(out), "--format", "none"],
            capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "session ended" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.poll() is None, log_path.read_text()  # the server goes on serving
    finally:
        server.kill()
        server.wait()
    assert client.returncode != 0 and len(_error_lines(client.stderr)) == 1, client.stderr
    assert "Traceback" not in client.stderr
    assert f"no RDMA device 'nosuch0'; found: {_device()}" in log_path.read_text()


def test_killed_peer_without_mpi_is_a_clear_error_and_keeps_the_rows(out, tmp_path):
    """``serve`` / ``run --peer`` (the TCP rendezvous, no MPI): the server's session is killed mid-sweep."""
    port = _free_port()
    env = clean_env()
    with open(tmp_path / "serve.log", "w") as log:
        server = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", "serve", "--address", "127.0.0.1", "--port", str(port), "--timeout", "60",
             "--device", _device()],
            stdout=log, stderr=log, env=env,
        )  # fmt: skip
    client = None
    try:
        deadline = time.monotonic() + 120
        while not listening(port):
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        client = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{port}", "-t", "verbs", "-k", "latency",
             "-m", "1:1M", "-c", "-i", "100", "-x", "2", "--timeout", "20", "--out", str(out), "--format", "none"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        meta = _wait_for_rows(out, 4, client, deadline=300)
        session = meta["ranks"][1]["pid"]  # the server's forked session: rank 1
        os.kill(session, signal.SIGKILL)
        _, stderr = client.communicate(timeout=180)
    finally:
        for process in (client, server):
            if process and process.poll() is None:
                process.kill()
                process.wait()
    assert client.returncode == 3, stderr
    errors = _error_lines(stderr)
    assert len(errors) == 1 and any(words in errors[0] for words in CLEAR_ERRORS), stderr
    rows, meta = read_rows(out)
    assert 4 <= len(rows) < 21 and meta["complete"] is False
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    # Small messages go inline (the default asks for 220 B, rxe grants it), larger ones by DMA.
    inline = min(220, meta["transports"]["verbs"]["max_inline_B"])
    assert inline > 0 and rows[rows.size_B <= inline].method.str.startswith("write inline").all()
    assert not rows[rows.size_B > inline].method.str.contains("inline").any()


def test_doctor_lists_the_rxe_device_with_its_active_port():
    result = subprocess.run(
        [PYTHON, "-m", "fabricbench", "doctor", "--json"], capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)["transports"]
    assert verdicts["verbs"]["available"] and verdicts["verbs-send"]["available"], verdicts["verbs"]
    devices = {device["device"]: device for device in verdicts["verbs"]["details"]["devices"]}
    port = devices["rxe0"]["ports"][0]
    assert "active" in port["state"].lower() and port["link_layer"] == "Ethernet", port
    assert port["active_mtu_B"] in (1024, 2048, 4096) and "RoCE v2" in port["gid"], port
    table = subprocess.run([PYTHON, "-m", "fabricbench", "doctor"], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert table.returncode == 0 and "rxe0" in table.stdout, table.stdout
