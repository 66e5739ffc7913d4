"""The all-pairs matrix on a leaf-spine testbed: a slow uplink is named as the uplink, not as its hosts.

scripts/netns-testbed.sh builds three leaf switches of two hosts under a spine (leaf2 holds fbv3 and fbv4) and
shapes leaf2's trunk to the spine to 100 Mbit/s both ways. One pairs-bw run of 64 KiB messages over the six hosts
(one rank each, tcp over the veths, --topology the testbed's topology.conf) must: give every row its tier and
hops, name exactly leaf2's uplink, name none of its hosts or links, and find its intra-leaf pair normal. Needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import NETNS, PYTHON, fabricbench_on_hosts, read_rows, run_testbed

PREFIX, NET = "fbv", "10.213.22"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 7)]
LEAF2 = {"fbv3", "fbv4"}
SHAPED = ["100mbit", "--burst", "32kbit", "--latency", "400ms"]  # 12.5 MB/s at most
# One 64 KiB size, 4 in flight, about 0.2 s per pair (at most 20 windows): 30 pairs in a few seconds. Six hosts
# share two cores, so a pair is slow only when 50 % off its tier's median (tests/test_pairs.py says why).
SWEEP = ["-k", "pairs-bw", "-m", "64K:64K", "-W", "4", "-i", "20", "-x", "1", "--max-time", "0.2", "--timeout", "60"]
SWEEP += ["--per-node", "--outlier-floor", "50", "-t", "tcp", "--tcp-interface", "veth0"]

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


def test_a_shaped_uplink_is_named_and_not_its_hosts(slow_uplink, tmp_path):
    run = tmp_path / "run"
    result = fabricbench_on_hosts(PREFIX, HOSTS, "run", *SWEEP, "--topology", slow_uplink, "--out", str(run))
    assert result.returncode == 0, result.stderr
    found = json.loads((run / "verdict.json").read_text())
    rows, _ = read_rows(run)
    assert len(rows) == 30 and (rows.status == "ok").all()
    same = rows.src_host.map(lambda h: (int(h[3:]) + 1) // 2) == rows.dst_host.map(lambda h: (int(h[3:]) + 1) // 2)
    assert (rows.tier == same.map({True: "same-switch", False: "cross-switch"})).all()
    assert (rows.hops == same.map({True: 0, False: 2})).all()
    (uplink,) = found["slow_uplinks"]
    assert uplink["name"] == "leaf2's uplink" and (uplink["slow_links"], uplink["links"]) == (8, 8), uplink
    assert (uplink["intra_links"], uplink["slow_intra_links"]) == (1, 0)
    # Never above what the shaped trunk carries; the other leaves' cross-switch pairs are many times faster.
    assert uplink["value"] <= 12.5 and uplink["median"] > 10 * uplink["value"], uplink
    assert found["slow_hosts"] == [], found["slow_hosts"]
    assert not [link for link in found["slow_links"] if {link["src_host"], link["dst_host"]} & LEAF2], found
    assert "#   slow leaf2's uplink: 8 of 8 cross-switch links slow" in result.stdout
    print("\n".join(line for line in result.stdout.splitlines() if line.startswith("# tiers") or "slow" in line))
    drawn = subprocess.run(
        [PYTHON, "-m", "fabricbench", "compare", str(run), "--out", str(tmp_path / "plots")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert drawn.returncode == 0, drawn.stderr
    heatmap = tmp_path / "plots" / "heatmap_pairs-bw.png"
    assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("FABRICBENCH_KEEP_EXAMPLE")  # how results/examples/pairs-leaf-spine* were made
    if keep:
        shutil.copy(heatmap, f"{keep}.png")
        shutil.copytree(run, Path(keep), dirs_exist_ok=True)
