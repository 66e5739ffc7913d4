"""fabricbench under a four-node Slurm: scripts/slurm-testbed.sh on a netns leaf-spine testbed of four hosts
(two leaves of two under a spine), whose topology.conf Slurm's topology/tree reads.

Each testbed host runs a real slurmd as that host (its namespace and hostname), the first one slurmctld too, and
one munged serves them all. The module's fixture builds the testbed and the cluster once and takes both down at
the end, checking that no daemon it started is left. Jobs are submitted from the controller's host
(``slurm-testbed.sh exec``), the only place that reaches slurmctld. UCX, left alone, would see one kernel and move
the ranks' bytes through shared memory: ``exec`` asks for its tcp transport on veth0 unless the caller chose, as
netns-testbed's mpiexec does, and the jobs here leave that to it. Needs root, iproute2, Slurm and munge (.ci/run
installs them).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import NETNS, PYTHON, REPO, clean_env, read_rows, run_testbed, rx_bytes

SLURM_TESTBED = str(REPO / "scripts" / "slurm-testbed.sh")
SBATCH = str(REPO / "scripts" / "slurm-two-nodes.sbatch")
PREFIX, NET = "fbs", "10.213.24"
HOSTS = [f"{PREFIX}{i}" for i in range(1, 5)]
TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")
JOB_S = 120.0  # one job: four ranks' MPI_Init over the veths and a 12-pair sweep of one size

pytestmark = [
    *NETNS,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in TOOLS),
        reason="Slurm or munge not installed (apt-get install slurm-wlm munge)",
    ),
]


def slurm_testbed(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """``slurm-testbed.sh ARGS --prefix fbs`` (``exec`` takes the prefix before its command)."""
    command, rest = args[0], args[1:]
    return subprocess.run(
        [SLURM_TESTBED, command, "--prefix", PREFIX, *rest],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
    )


def _daemons(state: Path) -> dict[int, str]:
    """Each daemon the cluster started (its pid files) and their children (slurmctld's slurmscriptd): pid, name."""
    files = [state / "munge" / "munged.pid", state / "slurmctld.pid", *state.glob("slurmd-*.pid")]
    found = {int(file.read_text().split()[0]): file.name for file in files}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = stat.read_text().rsplit(")", 1)
        except OSError:  # gone since the listing
            continue
        if int(fields.split()[1]) in found:
            found[int(stat.parent.name)] = name.split("(", 1)[1]
    return found


@pytest.fixture(scope="module")
def cluster():
    run_testbed(PREFIX, "up", "--topology", "leaf-spine", "2", "2", "--net", NET)
    pids: dict[int, str] = {}
    try:
        started = time.monotonic()
        up = slurm_testbed("up")
        assert up.returncode == 0, up.stderr
        print(f"cluster of {len(HOSTS)} nodes idle {time.monotonic() - started:.1f} s after `slurm-testbed.sh up`")
        state = Path(up.stdout.strip()).parent
        pids = _daemons(state)
        assert len(pids) >= 2 + len(HOSTS), pids
        yield state
    finally:
        down = slurm_testbed("down")
        run_testbed(PREFIX, "down")
    assert down.returncode == 0, down.stderr
    left = {pid: name for pid, name in pids.items() if Path(f"/proc/{pid}").exists()}
    assert not left, f"slurm-testbed.sh down left {left} running"


def job_env() -> dict:
    """This environment for a job, less any Slurm job's settings around this test and any UCX or libfabric
    choice of transport or device (slurm-testbed.sh's own are under test)."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env = {k: v for k, v in env.items() if k not in ("UCX_TLS", "UCX_NET_DEVICES", "FI_TCP_IFACE")}
    return {**env, "FABRICBENCH_VENV": sys.prefix}


def test_sinfo_places_every_node_under_its_testbed_switch(cluster):
    from fabricbench.measure.topology import parse_slurm, read_topology

    shown = slurm_testbed("exec", "scontrol", "show", "topology")
    assert shown.returncode == 0, shown.stderr
    assert parse_slurm(shown.stdout, "scontrol").switch == read_topology(str(cluster / "topology.conf")).switch
    nodes = slurm_testbed("exec", "sinfo", "-h", "-N", "-o", "%N %t")
    assert sorted(nodes.stdout.split()) == sorted([*HOSTS, *["idle"] * len(HOSTS)]), nodes.stdout


def test_sbatch_on_four_nodes_runs_pairs_across_every_host_placed_by_slurms_topology(cluster, tmp_path):
    """The batch script with a command line of its own: four ranks, one per node; the run's topology comes from
    ``scontrol show topology`` inside the job (no --topology), and matches the generated topology.conf."""
    from fabricbench.measure.topology import read_topology

    out, log = tmp_path / "run", tmp_path / "job.log"
    run = ["run", "-k", "pairs-latency", "--per-node", "-m", "8:8", "-i", "50", "-x", "5", "--format", "none"]
    submit = ["sbatch", "-N", "4", "--wait", "--output", str(log), SBATCH, *run, "--out", str(out)]
    result = slurm_testbed("exec", *submit, env=job_env(), timeout=JOB_S)
    assert result.returncode == 0, result.stderr + (log.read_text() if log.exists() else "")
    rows, meta = read_rows(out)
    assert set(zip(rows.src_host, rows.dst_host, strict=True)) == {(a, b) for a in HOSTS for b in HOSTS if a != b}
    assert len(rows) == 12 and (rows.status == "ok").all(), rows.to_dict("records")
    assert meta["launcher"] == "srun" and meta["slurm"]["tasks"] == 4 and meta["slurm"]["mpi_plugin"] == "pmi2"
    expected = read_topology(str(cluster / "topology.conf")).metadata(HOSTS)
    assert meta["topology"] == {**expected, "source": "scontrol show topology"}, meta["topology"]


def test_srun_on_four_nodes_sends_each_hosts_bytes_over_its_veth(cluster, tmp_path):
    """``srun -N 4 --mpi=pmi2`` from the controller's host, with UCX left to slurm-testbed.sh: every host receives,
    on its own veth, at least the bytes the pair rows say its peers sent it; the bisection's matchings cross the
    hosts, by Slurm's tiers. The four hosts share one kernel: the metadata and one warning line say so."""
    out = tmp_path / "run"
    run = ["run", "-k", "pairs-bw,bisection", "--per-node", "-m", "64K:64K", "-W", "4", "-i", "10", "-x", "1"]
    run += ["--bisection-rounds", "2"]
    before = {host: rx_bytes(host) for host in HOSTS}
    step = ["srun", "-N", "4", "-n", "4", "--mpi=pmi2", PYTHON, "-m", "fabricbench", *run, "--format", "none"]
    result = slurm_testbed("exec", *step, "--out", str(out), env=job_env(), timeout=JOB_S)
    assert result.returncode == 0, result.stderr
    received = {host: rx_bytes(host) - before[host] for host in HOSTS}
    table, meta = read_rows(out)
    assert meta["hosts"] == HOSTS and (table.status == "ok").all(), table.to_dict("records")
    assert meta["shared_kernel"] == [HOSTS], meta["shared_kernel"]
    shared = [line for line in result.stderr.splitlines() if "share one kernel" in line]
    assert len(shared) == 1 and f"warning: hosts {', '.join(HOSTS)} share one kernel" in shared[0], result.stderr
    bisection = table[table.kernel == "bisection"]
    assert "all" in set(bisection.tier) and set(bisection.tier) <= {"all", "same-switch", "cross-switch"}
    matched = {host for matching in meta["bisection"]["matchings"] for pair in matching["hosts"] for host in pair}
    assert matched == set(HOSTS), meta["bisection"]
    rows = table[table.kernel == "pairs-bw"]
    assert len(rows) == 12
    for host in HOSTS:
        into = rows[rows.dst_host == host]
        sent = int((into.size_B * into.window * (into.iterations + into.warmup)).sum())
        assert len(into) == 3 and received[host] >= sent, (host, received[host], sent)
