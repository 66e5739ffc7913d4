"""The all-pairs matrix across four namespace hosts: one shaped pair, or one shaped host, is named.

Four hosts of scripts/netns-testbed.sh on multi-Gbit veths. ``shape-pair`` slows only the traffic
between two of them (an htb class and a u32 filter on each one's egress send the other's address
through a tbf); ``shape-link`` slows both directions of one host's link. Every run spans the four
namespaces under hydra (one rank each), on tcp and on mpi (UCX's tcp over the veths). Needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import NETNS, PYTHON, REPO, fabricbench_on_hosts, read_rows, run_testbed

THRESHOLDS = str(REPO / "examples" / "thresholds" / "netns-testbed.toml")
PREFIX, NET = "fbp", "10.213.8"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 5)]
SHAPED = "100mbit"  # 12.5 MB/s at most, against hundreds to thousands of MB/s on a plain veth
SHAPE = ["--burst", "32kbit", "--latency", "400ms"]
# 1 MiB messages, 4 in flight, one warm-up window, then about 0.25 s of windows per pair (--max-time, at most
# 40): a fast pair gets tens of windows, so a moment of load on this small machine is not a slow link, and a
# shaped one (0.35 s a window) gets one.
SWEEP = ["-k", "pairs-bw", "-m", "1M:1M", "-W", "4", "-i", "40", "-x", "1", "--max-time", "0.25", "--timeout", "60"]
# Four hosts share two cores, so a healthy pair's figure scatters far more than on a fabric (README, "The all-pairs
# matrix"): a pair is slow only when 50 % off (and beyond the MAD's reach); the shaped pairs are 25 to 100 times off.
SWEEP += ["--outlier-floor", "50"]
ATTEMPTS = 3  # runs a shaped-pair test may make before one must name the shaped pair alone (see the first test)

pytestmark = NETNS


def bed(*args: str) -> str:
    return run_testbed(PREFIX, *args)


@pytest.fixture(scope="module")
def hosts():
    bed("up", "4", "--net", NET)
    yield HOSTS
    bed("down")


@pytest.fixture
def slow_pair(hosts):
    bed("shape-pair", "fbp2", "fbp3", SHAPED, *SHAPE)
    yield "fbp2", "fbp3"
    bed("unshape", "all")


@pytest.fixture
def slow_host(hosts):
    bed("shape-link", "fbp4", SHAPED, *SHAPE)
    yield "fbp4"
    bed("unshape", "all")


def across_hosts(*args: str) -> subprocess.CompletedProcess:
    """``fabricbench ARGS`` on one rank per namespace host, started by hydra through the namespace launcher."""
    return fabricbench_on_hosts(PREFIX, HOSTS, *args)


def pairs_bw(out: Path, transport: str) -> dict:
    """A pairs-bw run on ``transport``: the verdict it printed (--json), checked against verdict.json and the rows."""
    extra = ["--tcp-interface", "veth0"] if transport == "tcp" else []
    result = across_hosts("run", "-t", transport, *SWEEP, *extra, "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == json.loads((out / "verdict.json").read_text())
    rows, _ = read_rows(out)
    assert len(rows) == 12 and (rows.status == "ok").all() and (rows.schedule == "isolated").all()
    assert set(zip(rows.src_host, rows.dst_host, strict=True)) == {(a, b) for a in HOSTS for b in HOSTS if a != b}
    return printed


def _figures(found: dict, entry: dict) -> str:
    return f"{entry['value']:.1f} MB/s against the median {entry['median']:.1f} MB/s"


@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_a_shaped_pair_is_the_one_slow_link_and_no_host_is_slow(slow_pair, transport, tmp_path):
    # The shaped pair is named in every run. A healthy link that a moment of load (the SoftRoCE VM's beside, on
    # these two cores) put 50 % under the median is named too now and then (CI once named one); where that link
    # has an end in the shaped pair, its host has 2 of 3 links slow and is named instead, the shaped link with it
    # (seen on a slower machine). So a run that names anything more is made again, up to 3 runs, and one must
    # name the shaped pair alone.
    for attempt in range(ATTEMPTS):
        found = pairs_bw(tmp_path / f"run{attempt}", transport)
        named = [{link["src_host"], link["dst_host"]} for link in found["slow_links"]]
        hosts = {host["host"] for host in found["slow_hosts"]}
        assert set(slow_pair) in named or hosts & set(slow_pair), found
        if named == [set(slow_pair)] and not hosts:
            break
    assert found["slow_hosts"] == [], found
    assert named == [set(slow_pair)], found
    (link,) = found["slow_links"]
    assert len(link["directions"]) == 2  # shaped both ways, flagged both ways
    assert link["value"] <= 12.5 and link["median"] > 10 * link["value"], _figures(found, link)
    print(f"{transport}: slow link {slow_pair}: {_figures(found, link)}")


@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_a_shaped_host_is_named_and_not_its_links(slow_host, transport, tmp_path):
    found = pairs_bw(tmp_path / "run", transport)
    assert [host["host"] for host in found["slow_hosts"]] == [slow_host], found
    (host,) = found["slow_hosts"]
    assert (host["slow_links"], host["links"]) == (3, 3)
    # Its links are in the host, not listed as links. A link between two healthy hosts that dipped on these busy
    # cores may be listed as a link (the verdict's rule, tests/unit/test_pairs_verdict.py), never as a host.
    assert not [link for link in found["slow_links"] if slow_host in (link["src_host"], link["dst_host"])], found
    print(f"{transport}: slow host {slow_host}: {_figures(found, host)}; other slow links: {found['slow_links']}")


def test_check_passes_the_plain_testbed_and_fails_the_shaped_pair_by_name(hosts, tmp_path):
    plain = tmp_path / "plain"
    assert across_hosts("run", "-t", "tcp", *SWEEP, "--tcp-interface", "veth0", "--out", str(plain)).returncode == 0
    passed = subprocess.run(
        [PYTHON, "-m", "fabricbench", "check", THRESHOLDS, str(plain)], capture_output=True, text=True, timeout=60
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    bed("shape-pair", "fbp1", "fbp3", SHAPED, *SHAPE)
    try:
        shaped = tmp_path / "shaped"
        run = across_hosts("run", "-t", "tcp", *SWEEP, "--tcp-interface", "veth0", "--out", str(shaped))
        assert run.returncode == 0, run.stderr
    finally:
        bed("unshape", "all")
    failed = subprocess.run(
        [PYTHON, "-m", "fabricbench", "check", THRESHOLDS, str(shaped)], capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    failing = [line for line in failed.stdout.splitlines() if "FAIL" in line and "->" in line]
    assert failing and all({"fbp1", "fbp3"} <= set(line.replace("->", " ").split()) for line in failing), failed.stdout


def test_the_heatmap_of_a_shaped_pair(slow_pair, tmp_path):
    """compare --out draws the matrix: results/examples/netns-pairs-heatmap/ holds one made this way."""
    # As in the first test, a healthy link of fbp2 or fbp3 that a moment of load put 50 % under the median makes
    # that host read as slow instead (CI once saw "slow host fbp2 (rank 1): 2 of 3 links slow"): another run.
    named = "slow link fbp2 (rank 1) <-> fbp3 (rank 2) (both ways)"
    for attempt in range(ATTEMPTS):
        run = tmp_path / f"run{attempt}"
        args = ["-t", "tcp", *SWEEP, "--tcp-interface", "veth0", "--out", str(run), "--label", "netns"]
        result = across_hosts("run", *args)
        assert result.returncode == 0, result.stderr
        if named in result.stdout:
            break
    assert named in result.stdout, result.stdout
    drawn = subprocess.run(
        [PYTHON, "-m", "fabricbench", "compare", str(run), "--out", str(tmp_path / "plots")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert drawn.returncode == 0, drawn.stderr
    heatmap = tmp_path / "plots" / "heatmap_pairs-bw.png"
    assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("FABRICBENCH_KEEP_HEATMAP"):  # how the example in results/examples/ was made
        shutil.copy(heatmap, os.environ["FABRICBENCH_KEEP_HEATMAP"])
