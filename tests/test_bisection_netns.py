"""The bisection kernel on the 2x3 leaf-spine testbed of scripts/netns-testbed.sh, one rank per host, full and
with leaf1's uplink shaped to 100 Mbit/s. Needs root.

Shaped, the pairs of a matching that cross the uplink share it each way: each runs at about the uplink's payload
rate over their count, never above the uplink. A wide floor, since six ranks share two cores.
"""

from __future__ import annotations

import subprocess

import pytest

from support import NETNS, PYTHON, TESTBED, clean_env, read_rows, run_testbed
from test_bisection import SMALL

PREFIX, NET = "fbb", "10.213.23"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 7)]  # leaf1: fbb1-3, leaf2: fbb4-6
UPLINK_MBPS = 100e6 * 1448 / 1514 / 8 / 1e6  # tbf counts whole frames: the payload a 100 Mbit/s trunk carries

pytestmark = NETNS


@pytest.fixture(scope="module")
def leaf_spine():
    run_testbed(PREFIX, "up", "--topology", "leaf-spine", "2", "3", "--net", NET)
    yield run_testbed(PREFIX, "topology-file").strip()
    run_testbed(PREFIX, "down")


def bisection_run(out, topology: str) -> tuple:
    command = [TESTBED, "mpiexec", "--prefix", PREFIX, "-n", "6", "-ppn", "1", "-hosts", ",".join(HOSTS)]
    args = ["run", "-t", "tcp", "--tcp-interface", "veth0", *SMALL, "--per-node", "--topology", topology]
    args += ["--out", str(out), "--timeout", "60"]
    result = subprocess.run(
        [*command, PYTHON, "-m", "fabricbench", *args], capture_output=True, text=True, timeout=180, env=clean_env()
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows, meta = read_rows(out)
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    return rows.set_index("tier"), meta["bisection"]["matchings"]


@pytest.mark.parametrize("shaped", [False, True], ids=["full", "shaped"])
def test_cross_switch_pairs_share_a_shaped_uplink_and_never_pass_it(leaf_spine, shaped, tmp_path):
    if shaped:
        run_testbed(PREFIX, "shape-uplink", "leaf1", "100mbit", "--burst", "32kbit", "--latency", "400ms")
    try:
        rows, matchings = bisection_run(tmp_path, leaf_spine)
    finally:
        run_testbed(PREFIX, "unshape", "all")
    assert set(rows.index) <= {"all", "same-switch", "cross-switch"} and "cross-switch" in rows.index
    crossing = [sum((a in HOSTS[:3]) != (b in HOSTS[:3]) for a, b in m["hosts"]) for m in matchings]
    assert rows.loc["cross-switch", "tier_pairs"] == sum(crossing) and (rows.pairs == 3).all()
    cross = rows.loc["cross-switch"]
    if not shaped:
        assert cross.bw_MBps > 3 * UPLINK_MBPS  # the veths carry far more than the shaped trunk would
        return
    if "same-switch" in rows.index:  # pairs within a leaf never touch the trunk
        assert rows.loc["same-switch", "bw_MBps"] > 3 * UPLINK_MBPS
    # Each matching's crossing pairs share the trunk each way: a pair's rate is about the trunk's over their count.
    expected = len(matchings) * UPLINK_MBPS / sum(crossing)
    summary = f"cross-switch {cross.bw_MBps:.2f} MB/s, expected about {expected:.2f} (crossing {crossing})"
    assert 0.5 * expected < cross.bw_MBps <= UPLINK_MBPS, summary
    assert cross.bw_peak_MBps <= UPLINK_MBPS * 1.02, summary  # no window faster than the trunk (its burst aside)
    # Both directions of one trunk, its burst aside as for the peak: each way the token bucket lets 32 kbit through
    # at the veth's rate on top of its rate (a run of about a second: 0.03 %, as 23.92 against 23.91 MB/s read once).
    assert cross.aggregate_MBps <= 2 * UPLINK_MBPS * 1.02, summary
