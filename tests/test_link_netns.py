"""How close a figure came to its link: link_MBps and link_pct on a tbf-shaped veth between namespace hosts, beside
iperf3 on the same link in the same run, and ``check``'s min_link_pct passing there and failing where the path is
slower than the link the host sees. Needs root (ip netns, tc) and iperf3.

tbf caps the link: a busy host can pull a figure below the cap, never above it. 100 Mbit/s carries 11.96 MB/s of
TCP payload (1448 bytes a 1514-byte frame), and a window of 16 messages of 64 KiB or more takes 85 ms or more at
that rate, so the ack that ends each window and the shaper's 4 KB burst move the figure by well under 1 %: the
range asked, 90 to 100.5 %, holds the burst above and, below, the drag of a loaded host (93 % was seen beside the
SoftRoCE VM), which comes and goes, so the test takes the best of three attempts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support import NETNS, PYTHON, TESTBED, clean_env, fabricbench, read_rows, run_testbed

PREFIX, NET = "fbk", "10.213.34"  # a testbed of this module's own: other modules' may be up meanwhile
SERVER, PORT, IPERF_PORT = f"{NET}.2", 18790, 18791
SHAPE = ("--burst", "32kbit", "--latency", "400ms")
PAYLOAD_MBPS = 100e6 / 8 * 1448 / 1514 / 1e6  # link_payload's tbf formula: 100 Mbit/s, MTU 1500, timestamps
FLOOR, CEILING = 90.0, 100.5
# One thresholds file for every node: tcp's bw within 90 % of whatever link it crossed.
THRESHOLDS = """[[threshold]]
name = "tcp streams near its link"
transport = "tcp"
kernel = "bw"
size = "64K:"
min_link_pct = 90
"""

pytestmark = [*NETNS, pytest.mark.skipif(not shutil.which("iperf3"), reason="needs iperf3 (.ci/run installs it)")]


def bed(*args: str) -> str:
    return run_testbed(PREFIX, *args)


def in_host(host: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TESTBED, "exec", host, *command], capture_output=True, text=True, timeout=timeout, env=clean_env()
    )


def background(host: str, *command: str) -> subprocess.Popen:
    return subprocess.Popen(
        [TESTBED, "exec", host, *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=clean_env(),
    )


def wait_listening(port: int) -> None:
    """Until something in host 2 listens on PORT (ss -H: no header line; at most 30 s, then the test fails)."""
    for _ in range(300):
        listening = in_host(f"{PREFIX}2", "ss", "-Hltn", f"sport = :{port}")
        if listening.stdout.strip():
            return
        time.sleep(0.1)
    pytest.fail(f"nothing listens on {SERVER}:{port}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture
def testbed():
    """Two namespace hosts (every egress shaped to 100 Mbit/s) and ``fabricbench serve`` on the second."""
    bed("up", "2", "--net", NET, "--rate", "100mbit", *SHAPE)
    server = background(f"{PREFIX}2", PYTHON, "-m", "fabricbench", "serve", "--address", SERVER, "--port", str(PORT))
    try:
        wait_listening(PORT)
        yield
    finally:
        stop(server)
        bed("down")


def tcp_bw(out: Path, sizes: str) -> tuple[list[dict], str]:
    """tcp bw from host 1 to the server on host 2: its rows and its console text."""
    run = ["run", "--peer", f"{SERVER}:{PORT}", "-t", "tcp", "-k", "bw", "-m", sizes, "-W", "16", "-i", "4", "-x", "1"]
    result = in_host(f"{PREFIX}1", PYTHON, "-m", "fabricbench", *run, "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    return rows.to_dict("records"), result.stdout


def iperf3_MBps() -> float:
    """iperf3's payload rate from host 1 to host 2 over 3 s, as its receiver counted it, MB/s."""
    server = background(f"{PREFIX}2", "iperf3", "-s", "-1", "-B", SERVER, "-p", str(IPERF_PORT))
    try:
        wait_listening(IPERF_PORT)
        client = in_host(f"{PREFIX}1", "iperf3", "-c", SERVER, "-p", str(IPERF_PORT), "-t", "3", "-J")
        assert client.returncode == 0, client.stdout + client.stderr
    finally:
        stop(server)
    return json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"] / 8e6


def check(tmp_path: Path, run: Path) -> subprocess.CompletedProcess:
    thresholds = tmp_path / "link.toml"
    thresholds.write_text(THRESHOLDS)
    return fabricbench("check", str(thresholds), str(run))


def test_tcp_bw_on_a_shaped_link_is_90_to_100_percent_of_it_as_iperf3_is(testbed, tmp_path):
    # Load beside the test (the SoftRoCE VM boots beside the host tests in CI) can only pull a figure down, and it
    # comes and goes: up to three attempts, each fabricbench's sizes and then iperf3 on the same link.
    summaries = []
    for attempt in range(3):
        out = tmp_path / f"run{attempt}"
        rows, console = tcp_bw(out, "64K:1M")
        reference = iperf3_MBps()  # the same link, right after
        shares = [row["link_pct"] for row in rows] + [100 * reference / PAYLOAD_MBPS]
        summary = [(row["size_B"], round(row["bw_MBps"], 2), round(row["link_pct"], 1)) for row in rows]
        summaries.append([*summary, ("iperf3", round(reference, 2), round(shares[-1], 1))])
        print(summaries[-1])  # (size, MB/s, link_pct) and iperf3's, for the log
        assert len(rows) == 5 and max(shares) <= CEILING, summaries  # above the shaper's cap on no attempt
        for row in rows:
            # The rate this host's shaper is set to, less the frames' headers: a reference, not a bound (its burst).
            assert (row["link"], row["link_MBps"]) == ("veth0 tbf 100 Mb/s", pytest.approx(PAYLOAD_MBPS)), summaries
        assert console.count(" % of veth0 tbf 100 Mb/s") == 5, console  # the console says it on every row
        if min(shares) >= FLOOR:
            break
    else:
        pytest.fail(f"no attempt had every figure within {FLOOR}-{CEILING} % of the link: {summaries}")
    passed = check(tmp_path, out)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    ok = "ok   tcp streams near its link (threshold 1, line 1): tcp bw 64 KiB and up, min_link_pct 90: 5 rows pass"
    assert ok in passed.stdout, passed.stdout


def test_check_fails_a_path_slower_than_the_link_its_host_sees(testbed, tmp_path):
    # Host 1's egress at 200 Mbit/s, host 2's link (its switch port too) at 100: the path carries half what host 1's
    # link does, so no figure can pass 50.1 % of it (the burst aside).
    bed("unshape", "all")
    bed("shape", f"{PREFIX}1", "200mbit", *SHAPE)
    bed("shape-link", f"{PREFIX}2", "100mbit", *SHAPE)
    rows, _ = tcp_bw(tmp_path / "run", "1M:1M")
    (row,) = rows
    assert row["link"] == "veth0 tbf 200 Mb/s" and row["link_pct"] <= 50.5, row
    failed = check(tmp_path, tmp_path / "run")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"  FAIL tcp bw 1 MiB: link_pct {row['link_pct']:.4g}, expected >= 90" in failed.stdout, failed.stdout
