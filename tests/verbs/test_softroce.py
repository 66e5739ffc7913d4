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

from fabricbench.launch.doctor import report
from fabricbench.transports.reference_tool import listening
from fabricbench.transports.verbs.rdma import BAD_RKEY_HOOK
from support import NEEDS_RDMA_DEVICE, PYTHON, RDMA_DEVICES, clean_env, mpiexec, read_rows

DEVICES = RDMA_DEVICES
pytestmark = NEEDS_RDMA_DEVICE
RUN_TIMEOUT = 600  # seconds for one fabricbench run under emulation
CLEAR_ERRORS = ("completion failed", "peer closed the connection", "made no progress", "connection lost")


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fabricbench: error:")]


def test_every_kernel_moves_intact_data_and_perftest_rows_sit_beside_it(out):
    atomics = {"fop", "cas", "fop-rate", "cas-rate"}
    result = mpiexec(
        2, "run", "-t", "verbs,verbs-send,perftest,perftest-send",
        "-k", "latency,bw,bibw,get,fop,cas,fop-rate,cas-rate", "-m", "4K:8K", "-i", "10", "-x", "2", "-W", "16",
        "-c", "--timeout", "300", "--out", str(out), "--format", "none", timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    measured = rows[rows.status == "ok"]
    kernels = {"latency", "bw", "bibw", "get"}
    expected = {("verbs", k) for k in kernels} | {("verbs-send", k) for k in kernels - {"get"}}
    expected |= {("perftest", k) for k in kernels} | {("perftest-send", k) for k in kernels - {"get"}}
    sized = measured[~measured.kernel.isin(atomics)]
    assert set(zip(sized.transport, sized.kernel, strict=True)) == expected
    assert len(sized) == 2 * len(expected) and set(sized.size_B) == {4096, 8192}
    # The atomics' one size is 8 B, whatever -m says; perftest's ib_atomic_* rows sit beside them.
    fetched = measured[measured.kernel.isin(atomics)]
    assert set(zip(fetched.transport, fetched.kernel, fetched.size_B, strict=True)) == {
        (t, k, 8) for t in ("verbs", "perftest") for k in atomics
    }
    # 8 KiB is two 4 KiB packets: the last-byte spin and validation see a multi-packet WRITE. An atomic's
    # validation checks the value it fetched: the target's count before the operation.
    reference = measured.transport.str.startswith("perftest")
    ours = measured[~reference]
    assert (ours.validation == "pass").all()
    assert ours.method.str.startswith("c loop, ").all(), set(ours.method)
    assert (measured[reference].validation == "off").all()
    unsupported = rows[rows.status != "ok"]
    assert set(zip(unsupported.transport, unsupported.kernel, strict=True)) == {
        (t, k) for t in ("verbs-send", "perftest-send") for k in atomics | {"get"}
    }
    # Under emulation perftest's estimate of its clock may fail (it warns, then prints inf and 0.00): those rows
    # carry no figures and say so; the other rows are checked below.
    clock_failed = measured.note.str.startswith("no figures: perftest's CPU clock", na=False)
    assert measured[clock_failed].lat_p50_us.isna().all() and measured[clock_failed].bw_MBps.isna().all()
    assert not clock_failed.all()
    measured = measured[~clock_failed]
    rates = _rows_by(ours, "verbs", "fop-rate")
    assert (rates.msgrate_per_s > 0).all() and (rates.window == 16).all()

    latency = measured[measured.kernel.isin(["latency", "get"])]
    assert (latency.lat_p50_us > 0).all() and (latency.lat_min_us <= latency.lat_p50_us).all()
    streams = measured[measured.kernel.isin(["bw", "bibw"])]
    assert (streams.bw_MBps > 0).all() and (streams.msgrate_per_s > 0).all()
    # A drained one-way window holds its bytes' transit, so its peak is a rate; a bibw window need not hold the
    # peer's, so fabricbench gives it none (perftest still prints its own).
    perftest_rows = streams.transport.str.startswith("perftest")
    one_way = streams[(streams.kernel == "bw") | perftest_rows]
    assert (one_way.bw_peak_MBps >= one_way.bw_MBps * 0.999).all()
    assert streams[(streams.kernel == "bibw") & ~perftest_rows].bw_peak_MBps.isna().all()
    assert (streams.window == 16).all()
    # fabricbench's rows name the rxe port and its payload rate, a software device's nominal one: a share of it,
    # twice it for bibw's two directions, and nothing refused by it.
    mine = streams[~perftest_rows]
    assert mine.link.str.fullmatch(r"rxe\d+ port \d+, \d+X \w+, software").all(), set(mine.link)
    both = mine.kernel.map({"bw": 1, "bibw": 2})
    share = 100 * mine.bw_MBps / both / mine.link_MBps
    assert (mine.link_MBps > 0).all() and ((mine.link_pct - share).abs() < 1e-6).all()

    def method(transport, kernel):
        return set(measured[(measured.transport == transport) & (measured.kernel == kernel)].method)

    yielding = ", yield" if len(os.sched_getaffinity(0)) < 2 else ""  # --spin auto: 2 ranks on fewer CPUs
    assert method("verbs", "latency") == {f"c loop, write{yielding}"}
    assert method("verbs", "get") == {f"c loop, read{yielding}"}
    assert method("verbs-send", "bw") == {f"c loop, send, signal 1/4{yielding}"}
    assert method("perftest", "latency") <= {"ib_write_lat, inline 0[B]"}
    assert method("perftest", "bibw") <= {"ib_write_bw -b -t 16 -Q 4, inline 0[B]"}
    assert method("perftest", "fop") <= {"ib_atomic_lat -A FETCH_AND_ADD"}
    assert method("perftest", "cas-rate") <= {"ib_atomic_bw -A CMP_AND_SWAP -t 16 -Q 4"}
    assert method("perftest-send", "bw") <= {"ib_send_bw -t 16 -Q 4, inline 0[B]"}  # rxe: perftest knows no inline
    assert method("verbs", "fop") == {f"c loop, fop{yielding}"}
    assert method("verbs", "cas-rate") == {f"c loop, cas, signal 1/4{yielding}"}

    device = meta["transports"]["verbs"]
    assert device["device"].startswith("rxe") and device["link_layer"] == "Ethernet"
    assert device["gid_type"] == "RoCE v2" and ":ffff:" in device["gid"]  # perftest's pick: IPv4-mapped
    assert device["grh"] is True and device["path_mtu_B"] == device["active_mtu_B"]
    assert meta["transports"]["perftest"]["tools"]["ib_write_lat"]
    assert device["timed_loop"] == "c loop" and device["provider"] == "rxe"
    assert device["libibverbs"].startswith("libibverbs ") and device["c_loop_library"].endswith(".so")


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
    assert inline > 0 and rows[rows.size_B <= inline].method.str.startswith("c loop, write inline").all()
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
    # The table is report() of this same record (one launch fewer under emulation: about 20 s); plain ``doctor``
    # printing report(diagnose()) and exiting 0 is tests/test_doctor.py's, on the host.
    table = report(json.loads(result.stdout))
    verbs_line = [line for line in table.splitlines() if line.split()[:1] == ["verbs"]]
    assert "rxe0" in table and verbs_line and verbs_line[0].rstrip().endswith(" ok"), table


def _rows_by(rows, transport: str, kernel: str):
    return rows[(rows.transport == transport) & (rows.kernel == kernel)]


def test_perftest_rows_on_ud_with_events_and_a_post_list(out):
    """-c UD -e -l 4: SEND runs up to the path MTU; what perftest refuses is an unsupported row in its words."""
    result = mpiexec(
        2, "run", "-t", "perftest,perftest-send", "-k", "latency,bw,fop", "-m", "4K:8K", "--qp-type", "ud",
        "--events", "--post-list", "4", "-i", "10", "-W", "16", "--timeout", "300", "--out", str(out),
        "--format", "none", timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    mtu = meta["transports"]["perftest-send"]["path_mtu_B"]
    assert mtu == 4096  # rxe0 on lo
    measured = rows[rows.status == "ok"]
    assert set(zip(measured.transport, measured.kernel, measured.size_B, strict=True)) == {
        ("perftest-send", "latency", 4096),
        ("perftest-send", "bw", 4096),
    }
    timed = measured[~measured.note.str.startswith("no figures")]  # perftest's clock estimate failed: no figures
    assert (_rows_by(timed, "perftest-send", "latency").lat_p50_us > 0).all()
    assert (_rows_by(timed, "perftest-send", "bw").bw_MBps > 0).all()
    assert set(measured.method) == {
        "ib_send_lat -c UD -e, inline 0[B]",
        "ib_send_bw -c UD -t 16 -Q 4 -l 4 -e, inline 0[B]",
    }

    refused = dict(zip(zip(rows.transport, rows.kernel, rows.size_B, strict=True), rows.status, strict=True))
    words = "UD connection only possible in SEND verb"
    for kernel, tool in (("latency", "ib_write_lat"), ("bw", "ib_write_bw")):
        for size in (4096, 8192):
            assert refused["perftest", kernel, size] == f"unsupported: perftest refuses {tool} -c UD: {words}"
    assert refused["perftest", "fop", 8] == f"unsupported: perftest refuses ib_atomic_lat -c UD: {words}"
    for kernel, tool in (("latency", "ib_send_lat"), ("bw", "ib_send_bw")):
        assert refused["perftest-send", kernel, 8192] == (
            f"unsupported: perftest refuses {tool} -c UD -s 8192: Max message size in UD cannot be greater than MTU "
            f"({mtu} B)"
        )
