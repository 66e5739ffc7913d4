"""The all-pairs matrix on a leaf-spine testbed: a slow uplink is named as the uplink, not as its hosts.

scripts/netns-testbed.sh builds three leaf switches of two hosts under a spine (leaf2 holds fbv3 and fbv4) and
shapes leaf2's trunk to the spine to 100 Mbit/s both ways. One pairs-bw run of 64 KiB messages over the six hosts
(one rank each, tcp over the veths, --topology the testbed's topology.conf) must: give every row its tier and
hops, name exactly leaf2's uplink, name none of its hosts or links, and find its intra-leaf pair not slowed as its
cross-switch pairs are (in one of up to three runs: six hosts share two cores). Needs root.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support import NETNS, fabricbench, fabricbench_on_hosts, read_rows, run_testbed

PREFIX, NET = "fbv", "10.213.22"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 7)]
LEAF2 = {"fbv3", "fbv4"}
SHAPED = ["100mbit", "--burst", "32kbit", "--latency", "400ms"]  # 12.5 MB/s at most
# One 64 KiB size, 4 in flight, about 0.2 s per pair (at most 20 windows): 30 pairs in a few seconds. Six hosts
# share two cores, so a pair is slow only when 50 % off its tier's median (tests/test_pairs.py says why).
SWEEP = ["-k", "pairs-bw", "-m", "64K:64K", "-W", "4", "-i", "20", "-x", "1", "--max-time", "0.2", "--timeout", "60"]
SWEEP += ["--per-node", "--outlier-floor", "50", "-t", "tcp", "--tcp-interface", "veth0"]

ATTEMPTS = 3  # runs the verdict may take to name the uplink alone through the shared cores

pytestmark = NETNS


def bed(*args: str) -> str:
    return run_testbed(PREFIX, *args)


@pytest.fixture(scope="module")
def slow_uplink():
    bed("up", "--topology", "leaf-spine", "3", "2", "--net", NET)
    try:
        bed("shape-uplink", "leaf2", *SHAPED)
        yield bed("topology-file").strip()
    finally:
        bed("down")


def uplink_verdict(found: dict, stdout: str) -> str:
    """What is wrong with a run's verdict on the shaped uplink: '' where it names leaf2's uplink alone."""
    uplinks = found["slow_uplinks"]
    if len(uplinks) != 1:
        return f"slow uplinks {uplinks}"
    uplink = uplinks[0]
    if uplink["name"] != "leaf2's uplink" or (uplink["slow_links"], uplink["links"]) != (8, 8):
        return f"uplink {uplink}"
    if (uplink["intra_links"], uplink["alike_intra_links"]) != (1, 0):  # load may slow it, never 100x
        return f"intra-leaf links {uplink}"
    if found["slow_hosts"]:
        return f"slow hosts {found['slow_hosts']}"
    if [link for link in found["slow_links"] if {link["src_host"], link["dst_host"]} & LEAF2]:
        return f"slow links of leaf2 {found['slow_links']}"
    if "#   slow leaf2's uplink: 8 of 8 cross-switch links slow" not in stdout:
        return "no uplink line in the summary"
    return ""


def test_a_shaped_uplink_is_named_and_not_its_hosts(slow_uplink, tmp_path):
    # Six hosts share two cores: a healthy link that dips beside the shaped ones can make one of its hosts look
    # slow, so the run is made again, up to ATTEMPTS runs, until the verdict names the uplink alone (as
    # tests/test_pairs.py does for a shaped pair). What no load can change is asserted on every run.
    wrong = []
    for attempt in range(ATTEMPTS):
        run = tmp_path / f"run{attempt}"
        result = fabricbench_on_hosts(PREFIX, HOSTS, "run", *SWEEP, "--topology", slow_uplink, "--out", str(run))
        assert result.returncode == 0, result.stderr
        found = json.loads((run / "verdict.json").read_text())
        rows, _ = read_rows(run)
        assert len(rows) == 30 and (rows.status == "ok").all()
        same = rows.src_host.map(lambda h: (int(h[3:]) + 1) // 2) == rows.dst_host.map(lambda h: (int(h[3:]) + 1) // 2)
        assert (rows.tier == same.map({True: "same-switch", False: "cross-switch"})).all()
        assert (rows.hops == same.map({True: 0, False: 2})).all()
        for uplink in found["slow_uplinks"]:
            # Never above what the shaped trunk carries; the other leaves' cross-switch pairs are many times faster
            # (over 30x on a quiet host; 5x is asserted, as six hosts on two cores can slow every veth on a run).
            assert uplink["value"] <= 12.5 and uplink["median"] > 5 * uplink["value"], uplink
        print("\n".join(line for line in result.stdout.splitlines() if line.startswith("# tiers") or "slow" in line))
        wrong.append(uplink_verdict(found, result.stdout))
        if not wrong[-1]:
            break
    else:
        pytest.fail(f"leaf2's uplink not named alone in {ATTEMPTS} runs: {wrong}")
    drawn = fabricbench("compare", str(run), "--out", str(tmp_path / "plots"), timeout=60)
    assert drawn.returncode == 0, drawn.stderr
    heatmap = tmp_path / "plots" / "heatmap_pairs-bw.png"
    assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("FABRICBENCH_KEEP_EXAMPLE")  # how results/examples/pairs-leaf-spine* were made
    if keep:
        shutil.copy(heatmap, f"{keep}.png")
        shutil.copytree(run, Path(keep), dirs_exist_ok=True)
