"""One thresholds file, each tier of the topology held to its own share of the link: min_link_pct with ``tier`` on
a real all-pairs run. Needs root (ip netns, tc).

scripts/netns-testbed.sh builds two leaf switches of two hosts under a spine. Every host's link is shaped to
100 Mbit/s (its egress, which each rank sees as its link, and its switch port), and both leaves' trunks to the
spine to 50 Mbit/s: a pair within a leaf can carry its whole link, a pair across leaves half of it at most, and
less where another pair shares its trunk. So within a leaf, pairs of tcp pairs-bw read near 100 % of their link;
across leaves at most 50.1 % (the shaper's 4 KB burst over a window of 256 KiB adds under 2 %).
"""

from __future__ import annotations

from pathlib import Path

from support import NETNS, fabricbench, fabricbench_on_hosts, read_rows, run_testbed

PREFIX, NET = "fbj", "10.213.35"  # a testbed of this module's own: other modules' may be up meanwhile
HOSTS = [f"{PREFIX}{i}" for i in range(1, 5)]
SHAPE = ("--burst", "32kbit", "--latency", "400ms")
# One 64 KiB size, 4 in flight; 12 ordered pairs, about 0.3 s each at the shaped rates.
SWEEP = ["-k", "pairs-bw", "-m", "64K:64K", "-W", "4", "-i", "20", "-x", "1", "--max-time", "0.3", "--timeout", "60"]
SWEEP += ["--per-node", "-t", "tcp", "--tcp-interface", "veth0"]
ATTEMPTS = 3  # four ranks share two cores: load pulls a within-leaf pair down now and then, never a figure up


def threshold(name: str, floor: float, tier: str = "") -> str:
    """A [[threshold]] on tcp pairs-bw's link_pct, of one tier's pairs or (no tier) of every pair."""
    where = f'tier = "{tier}"\n' if tier else ""
    return f'[[threshold]]\nname = "{name}"\ntransport = "tcp"\nkernel = "pairs-bw"\n{where}min_link_pct = {floor}\n'


# Within a leaf near the link (a floor that leaves room for the shared cores), across leaves a floor only a
# broken trunk misses; and without a tier, the within-leaf floor, which every cross-leaf pair fails.
THRESHOLDS = threshold("within a leaf", 60, "same-switch") + "\n" + threshold("across leaves", 5, "cross-switch")
UNTIERED = threshold("every pair", 60)

pytestmark = NETNS


def bed(*args: str) -> str:
    return run_testbed(PREFIX, *args)


def check(tmp_path: Path, text: str, run: Path):
    thresholds = tmp_path / ("tiered.toml" if "tier =" in text else "untiered.toml")
    thresholds.write_text(text)
    return fabricbench("check", str(thresholds), str(run))


def test_each_tier_is_held_to_its_own_share_of_the_link(tmp_path):
    bed("up", "--topology", "leaf-spine", "2", "2", "--net", NET)
    try:
        bed("shape-link", "all", "100mbit", *SHAPE)
        for leaf in ("leaf1", "leaf2"):
            bed("shape-uplink", leaf, "50mbit", *SHAPE)
        topology = bed("topology-file").strip()
        seen = []
        for attempt in range(ATTEMPTS):
            run = tmp_path / f"run{attempt}"
            result = fabricbench_on_hosts(PREFIX, HOSTS, "run", *SWEEP, "--topology", topology, "--out", str(run))
            assert result.returncode == 0, result.stderr
            rows, _ = read_rows(run)
            # Each pair's source's link: its shaped veth0, 100 Mbit/s of 1514-byte frames (a pair row has no label).
            assert len(rows) == 12 and (abs(rows.link_MBps / (12.5 * 1448 / 1514) - 1) < 1e-6).all(), set(
                rows.link_MBps
            )
            shares = rows.groupby("tier").link_pct.agg(["min", "max"]).round(1)
            seen.append(shares.to_dict("index"))
            print(seen[-1])  # each tier's least and most link_pct, for the log
            assert shares.loc["cross-switch", "max"] <= 51, seen  # the trunk's half, its burst aside: never above
            tiered = check(tmp_path, THRESHOLDS, run)
            if tiered.returncode == 0:
                break
        else:
            raise AssertionError(f"no run held its within-leaf pairs to 60 % of their link: {seen}\n{tiered.stdout}")
    finally:
        bed("down")
    assert "ok   within a leaf (threshold 1, line 1): tcp pairs-bw every size same-switch pairs, min_link_pct 60: " in (
        tiered.stdout
    )
    assert "ok   across leaves (threshold 2, line 8): tcp pairs-bw every size cross-switch pairs, min_link_pct 5" in (
        tiered.stdout
    )
    untiered = check(tmp_path, UNTIERED, run)
    print(tiered.stdout, untiered.stdout, sep="")  # check's lines, for the log
    assert untiered.returncode == 1, untiered.stdout
    assert "FAIL every pair (threshold 1, line 1): tcp pairs-bw every size, min_link_pct 60: " in untiered.stdout
