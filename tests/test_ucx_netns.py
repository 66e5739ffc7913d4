"""The ucx transport across a real network: two namespace hosts joined by veth and a bridge, shaped with tbf.

UCX's tcp transport on the hosts' veth0 (UCX_TLS=tcp, UCX_NET_DEVICES=veth0, as the testbed's mpiexec sets them),
between ``serve`` on host 2 and ``run --peer`` on host 1: the rows name tcp/veth0, and a 100 Mbit/s link's
payload rate is what UCX measures on it, never more. Needs root (ip netns, tc).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support import NETNS, PYTHON, TESTBED, clean_env, read_rows, run_testbed

PREFIX, NET = "fbu", "10.213.30"
SERVER = f"{NET}.2"
PORT = 18790
UCX_ON_VETH = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0"}
# tbf counts whole 1514-byte frames on the wire for 1448 bytes of TCP payload; a busy host only pulls the figure
# below the cap (the floor is test_netns.py's), never above it.
SHAPED_PAYLOAD_MBIT = 100 * 1448 / 1514
SHAPED_FLOOR, SHAPED_CEILING = 0.6 * SHAPED_PAYLOAD_MBIT, 1.05 * SHAPED_PAYLOAD_MBIT

pytestmark = NETNS


def _ucx() -> str:
    from fabricbench.transports.ucx import cloop as ucx_cloop
    from fabricbench.transports.ucx.options import UCXUnavailable

    try:
        ucx_cloop.load()
    except UCXUnavailable as exc:
        return str(exc)
    return ""


MISSING = _ucx()


@pytest.fixture(scope="module")
def hosts():
    if MISSING:
        pytest.skip(f"no UCX to build against: {MISSING}")
    run_testbed(PREFIX, "up", "2", "--net", NET)
    yield [f"{PREFIX}1", f"{PREFIX}2"]
    run_testbed(PREFIX, "down")


@pytest.fixture
def server(hosts):
    """`fabricbench serve` on host 2, without MPI, with UCX on its veth."""
    proc = subprocess.Popen(
        [TESTBED, "exec", hosts[1], PYTHON, "-m", "fabricbench", "serve", "--address", SERVER, "--port", str(PORT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=clean_env(UCX_ON_VETH),
    )
    end = time.monotonic() + 30
    while f":{PORT} " not in subprocess.run(["ip", "netns", "exec", hosts[1], "ss", "-ltn"], capture_output=True,
                                            text=True).stdout:  # fmt: skip
        assert time.monotonic() < end, "serve never listened"
        time.sleep(0.1)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def peer_run(out: Path, *args: str):
    result = subprocess.run(
        [TESTBED, "exec", f"{PREFIX}1", PYTHON, "-m", "fabricbench", "run", "--peer", f"{SERVER}:{PORT}", "-t", "ucx",
         *args, "--out", str(out), "--format", "none"],
        capture_output=True, text=True, timeout=300, env=clean_env(UCX_ON_VETH),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return read_rows(out)


def test_ucx_spans_two_hosts_over_tcp_on_veth0_with_checked_data(server, tmp_path):
    rows, meta = peer_run(tmp_path, "-k", "latency,bw,put,get", "-m", "8:64K", "-i", "10", "-x", "1", "-c",
                          "--ucx-progress", "wait", "--timeout", "30")  # fmt: skip
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert rows.method.str.contains("tcp/veth0").all(), set(rows.method)
    info = meta["transports"]["ucx"]
    assert info["transports_by_rank"] == {"0": "tcp/veth0", "1": "tcp/veth0"}
    assert info["ucx_environment"] == UCX_ON_VETH


def test_ucx_bandwidth_on_a_100mbit_link_is_the_physical_payload_rate(server, hosts, tmp_path):
    run_testbed(PREFIX, "shape", "all", "100mbit", "--burst", "32kbit", "--latency", "400ms")
    try:
        # Completions waited for: two spinning ranks would compete with the kernel that moves the veth's packets.
        rows, _ = peer_run(tmp_path, "-k", "bw", "-m", "1M:1M", "-W", "4", "-i", "6", "-x", "1",
                           "--ucx-progress", "wait")  # fmt: skip
    finally:
        run_testbed(PREFIX, "unshape", "all")
    measured = float(rows.bw_MBps.iloc[0]) * 8  # MB/s (10^6 B) to Mbit/s
    assert SHAPED_FLOOR <= measured <= SHAPED_CEILING, measured
    assert "tcp/veth0" in rows.method.iloc[0]
    # The row names the shaped link its one bandwidth lane crosses, and its share of that link's TCP payload.
    row = rows.iloc[0]
    print(f"ucx bw 1 MiB on veth0 tbf 100 Mb/s: {row.bw_MBps:.2f} MB/s, link_pct {row.link_pct:.1f}")
    assert (row.link, row.link_MBps) == ("veth0 tbf 100 Mb/s", pytest.approx(SHAPED_PAYLOAD_MBIT / 8)), row.link
    assert row.link_pct == pytest.approx(100 * row.bw_MBps / row.link_MBps)
