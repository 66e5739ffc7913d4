"""The fan kernels (bw-fan-in, bw-fan-out: OSU's osu_bw_fan_in and osu_bw_fan_out) across namespace hosts.

Three hosts of scripts/netns-testbed.sh, MPI ranks started by hydra through the namespace launcher: one rank per
host (one parent, two children), two ranks on each of two hosts (two parents), and two ranks on one host and one on
the other, which the rows refuse. Every data byte is checked (-c), and each host's veth counts what it received.
Needs root.
"""

from __future__ import annotations

import subprocess

import pytest

from support import NETNS, PYTHON, TESTBED, clean_env, read_rows, run_testbed, rx_bytes

PREFIX, NET = "fbf", "10.213.32"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 4)]
SIZE, WINDOW, ITERATIONS = 1 << 20, 8, 20  # 1 MiB messages, 8 a window: 8 MiB per child per iteration
SWEEP = ["-m", f"{SIZE}:{SIZE}", "-W", str(WINDOW), "-i", str(ITERATIONS), "-x", "2", "-c", "--timeout", "60"]

pytestmark = NETNS


@pytest.fixture(scope="module")
def hosts():
    run_testbed(PREFIX, "up", str(len(HOSTS)), "--net", NET)
    yield HOSTS
    run_testbed(PREFIX, "down")


def fan_run(hosts: str, ranks: int, out, kernels: str = "bw-fan-in,bw-fan-out") -> subprocess.CompletedProcess:
    """``fabricbench run -t mpi -k KERNELS`` on ``ranks`` ranks placed as hydra's -hosts says (``h1:2,h2:2``)."""
    command = [TESTBED, "mpiexec", "--prefix", PREFIX, "-n", str(ranks), "-hosts", hosts]
    command += [PYTHON, "-m", "fabricbench", "run", "-t", "mpi", "-k", kernels, *SWEEP, "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=clean_env())


def test_one_parent_and_two_children_move_checked_windows_both_ways(hosts, tmp_path):
    before = {host: rx_bytes(host) for host in hosts}
    result = fan_run(",".join(f"{host}:1" for host in hosts), 3, tmp_path)
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path)[0].set_index("kernel")
    assert list(rows.index) == ["bw-fan-in", "bw-fan-out"]
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert (rows.pairs == 2).all() and (rows.window == WINDOW).all()
    assert rows.note.str.startswith("3 hosts x 1 ranks, the parent fbf1").all()
    # A parent's iteration moves a window with each of the two children: 16 messages of SIZE bytes, so the rows'
    # message rate is their bandwidth in messages.
    for kernel, row in rows.iterrows():
        assert row.bw_MBps > 0, kernel
        assert row.msgrate_per_s == pytest.approx(row.bw_MBps * 1e6 / SIZE, rel=1e-6)
    # Fan-in's windows all arrive at the parent, fbf1; fan-out's at the two children: each counts at least its
    # share of the run's warm-up, timed and checked iterations.
    received = {host: rx_bytes(host) - before[host] for host in hosts}
    at_least = (ITERATIONS + 2) * WINDOW * SIZE
    assert received["fbf1"] >= 2 * at_least
    assert received["fbf2"] >= at_least and received["fbf3"] >= at_least


def test_two_ranks_on_each_of_two_hosts_are_two_parents(hosts, tmp_path):
    result = fan_run(f"{hosts[0]}:2,{hosts[1]}:2", 4, tmp_path, "bw-fan-in")
    assert result.returncode == 0, result.stderr
    row = read_rows(tmp_path)[0].iloc[0]
    assert row.status == "ok" and row.validation == "pass" and row.pairs == 2
    assert row.note.startswith("2 hosts x 2 ranks, the parent fbf1")


def test_unequal_ranks_per_host_give_unsupported_rows_naming_the_counts(hosts, tmp_path):
    result = fan_run(f"{hosts[0]}:2,{hosts[1]}:1", 3, tmp_path, "bw-fan-out")
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path)[0]
    assert len(rows) == 1
    why = "unsupported: the fan kernels need the same number of ranks on every host, got fbf1: 2, fbf2: 1"
    assert rows.status.iloc[0] == why and rows.validation.iloc[0] == "off"
    assert "unsupported" in result.stdout


def test_one_host_gives_unsupported_rows_naming_it(hosts, tmp_path):
    result = fan_run(f"{hosts[0]}:2", 2, tmp_path)
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path)[0]
    assert len(rows) == 2
    assert (rows.status == "unsupported: the fan kernels need ranks on 2 or more hosts; all 2 ranks are on fbf1").all()
