"""fabricbench under a real Slurm ``srun``: one single-node cluster from Debian's packages, started here;
and fabricbench started alone inside an allocation, whose environment is simulated (no allocation can be made
without a cluster).

The session fixture starts munged, slurmctld and slurmd as root, each in the
foreground as a child of this process, with everything (config, state, logs,
munge socket) in a temporary folder and ports of their own, so nothing of a
system Slurm is touched. It waits for the node to be idle and, at the end,
cancels what is left and stops the three daemons it started, even when a test
or the start failed. It skips with the reason where it cannot run: not root,
or Slurm and munge not installed (``.ci/run`` installs them with apt).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fabricbench.hostinfo import usable_cpus
from fabricbench.launch.launcher import YIELD_SETTINGS
from support import PYTHON, clean_env, executable_stub, fabricbench, free_port, one_error_line, read_rows

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sinfo", "squeue", "scancel")
START_S = 90.0  # the node must be idle this soon after the daemons start
STEP_S = 180.0  # one srun step, ranks' MPI_Init and a short sweep included
ADVICE_PMI2 = "this MPICH speaks PMI-2; run srun --mpi=pmi2 ... (or set SLURM_MPI_TYPE=pmi2)"


PMIX_UNLOADABLE = "can not load PMIx library"  # what Slurm's mpi/pmix plugin says where libpmix.so cannot load


def _missing() -> str | None:
    """Why this host cannot start the cluster, or None."""
    if os.geteuid() != 0:
        return "the single-node Slurm cluster runs slurmctld, slurmd and munged as root; not root here"
    absent = [name for name in (*DAEMONS, *CLIENTS) if not shutil.which(name)]
    if absent:
        return f"Slurm or munge not installed ({', '.join(absent)}): apt-get install slurm-wlm munge (.ci/run does)"
    return None


class Cluster:
    """munged + slurmctld + slurmd in ROOT; ``run`` starts srun against them."""

    def __init__(self, root: Path):
        self.root = root
        self.daemons: list[subprocess.Popen] = []
        self.conf = root / "slurm.conf"
        self.env = clean_env({"SLURM_CONF": str(self.conf)})
        for var in [var for var in self.env if var.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMIX_"))]:
            if var != "SLURM_CONF":  # a test run inside a Slurm job must not pass that job's settings on
                del self.env[var]

    def start(self) -> None:
        self._start_munge()
        self.node = self._write_conf()
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.root / f"{daemon}.out", "w")  # noqa: SIM115 - open while the daemon runs
            self.daemons.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", str(self.conf)], stdout=log, stderr=subprocess.STDOUT, env=self.env
                )
            )
        self._wait_idle()

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = munge / "munge.socket"
        self.daemons.append(
            subprocess.Popen(
                [
                    "munged",
                    "--foreground",
                    "--force",  # the key and socket sit in a pytest temp folder, not /etc/munge, /run/munge
                    f"--key-file={key}",
                    f"--socket={self.socket}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={munge / 'munged.log'}",
                    f"--seed-file={munge / 'munged.seed'}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(munge / "munged.out", "w"),  # noqa: SIM115 - open while munged runs
            )
        )
        self._wait(lambda: self.socket.exists(), 20, "munged never made its socket")

    def _write_conf(self) -> str:
        """slurm.conf for this host, as `slurmd -C` describes it; returns the node's name."""
        found = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
        node_line = next(line for line in found.splitlines() if line.startswith("NodeName="))
        fields = dict(field.split("=", 1) for field in node_line.split())
        fields.pop("RealMemory", None)  # what is free at start varies; Slurm drains a node with less than stated
        node = fields.pop("NodeName")
        state = self.root / "state"
        spool = self.root / "spool"
        state.mkdir()
        spool.mkdir()
        settings = {
            "ClusterName": "fabricbench",
            "SlurmctldHost": f"{node}(127.0.0.1)",
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "SlurmctldPort": free_port(),
            "SlurmdPort": free_port(),
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            "AuthInfo": f"socket={self.socket}",
            "StateSaveLocation": state,
            "SlurmdSpoolDir": spool,
            "SlurmctldPidFile": self.root / "slurmctld.pid",
            "SlurmdPidFile": self.root / "slurmd.pid",
            "SlurmctldLogFile": self.root / "slurmctld.log",
            "SlurmdLogFile": self.root / "slurmd.log",
            # No cgroups in a sandbox: processes tracked through /proc, tasks not bound.
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_CPU",
            "SchedulerType": "sched/builtin",
            "MpiDefault": "none",  # a common site default: the test names its plugin each time
            "ReturnToService": 2,
            "SlurmdTimeout": 300,
            "KillWait": 5,
            "PlugStackConfig": self.root / "plugstack.conf",  # not /etc/slurm's
        }
        (self.root / "plugstack.conf").write_text("")
        lines = [f"{key}={value}" for key, value in settings.items()]
        lines.append(" ".join([f"NodeName={node}", "NodeAddr=127.0.0.1", *(f"{k}={v}" for k, v in fields.items())]))
        lines.append(f"PartitionName=local Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES")
        self.conf.write_text("\n".join(lines) + "\n")
        return node

    def _wait(self, ready, timeout: float, why: str) -> None:
        end = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self.daemons if p.poll() is not None]
            if dead or time.monotonic() > end:
                raise RuntimeError(f"{why}{' (' + ', '.join(dead) + ' exited)' if dead else ''}: {self.logs()}")
            time.sleep(0.5)

    def _wait_idle(self) -> None:
        def idle() -> bool:
            found = self.command("sinfo", "-h", "-N", "-o", "%t", "-n", self.node)
            return found.returncode == 0 and found.stdout.strip() in ("idle", "mix", "alloc")

        self._wait(idle, START_S, f"node {self.node} never became idle")

    def command(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(list(args), 124, "", f"timed out after {exc.timeout} s")

    def srun(
        self, mpi: str, ranks: int, *args: str, env: dict | None = None, overcommit: bool = False
    ) -> subprocess.CompletedProcess:
        """``srun --mpi=MPI -n RANKS python -m fabricbench ARGS`` (``--overcommit``: more tasks than the node has
        CPUs); a step that overruns STEP_S is cancelled."""
        command = ["srun", f"--mpi={mpi}", "-N", "1", "-n", str(ranks), "--job-name", "fabricbench-test"]
        command += ["--overcommit"] if overcommit else []
        command += [PYTHON, "-m", "fabricbench", *args]
        try:
            return subprocess.run(
                command, capture_output=True, text=True, timeout=STEP_S, env={**self.env, **(env or {})}
            )
        except subprocess.TimeoutExpired:
            self.command("scancel", "--name", "fabricbench-test")
            raise

    def plugins(self) -> list[str]:
        """srun --mpi=list: one plugin a line, indented (22.05: "MPI plugin types are...", then "\tpmix")."""
        found = self.command("srun", "--mpi=list")
        return [line.strip() for line in found.stdout.splitlines() if line[:1].isspace() and line.strip()]

    def logs(self) -> str:
        """The daemons' last lines, for a failure's message."""
        tails = []
        for name in ("munge/munged.log", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            path = self.root / name
            if path.exists():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(tails)

    def stop(self) -> None:
        """Cancel what runs, then stop each daemon this cluster started (SIGTERM, then SIGKILL after 15 s)."""
        if len(self.daemons) == len(DAEMONS):
            self.command("scancel", "--name", "fabricbench-test")
            end = time.monotonic() + 30
            while time.monotonic() < end and self.command("squeue", "-h").stdout.strip():
                time.sleep(0.5)
        for daemon in reversed(self.daemons):
            with contextlib.suppress(ProcessLookupError):
                daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=15)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    why = _missing()
    if why:
        pytest.skip(why)
    running = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        try:
            running.start()
        except RuntimeError:
            # slurmd loads every MPI plugin as it starts, and may end there where pmix's cannot load its library:
            # the host lacks what these tests need, said as a skip, as srun's own refusal is (the pmix test).
            if PMIX_UNLOADABLE not in running.logs():
                raise
            pytest.skip(
                f"this host's slurmd cannot start: its mpi/pmix plugin cannot load the PMIx library ({PMIX_UNLOADABLE})"
            )
        yield running
    finally:
        running.stop()


def _advice(result: subprocess.CompletedProcess, expected: str) -> None:
    """srun passed the tasks' exit code 2 on; the one line appears once in everything srun printed."""
    combined = result.stdout + result.stderr
    assert result.returncode == 2, combined
    one_error_line(result.stderr, expected)
    assert combined.count("srun started") == 1, combined
    assert "needs at least 2 ranks" not in combined and "Traceback" not in combined, combined


def test_pmi2_one_world_of_two_ranks_labelled_srun(cluster, tmp_path):
    out = tmp_path / "run"
    run = ["run", "-k", "latency", "-m", "1:64", "-i", "50", "-x", "5", "--format", "none", "--out", str(out)]
    result = cluster.srun("pmi2", 2, *run)
    assert result.returncode == 0, result.stdout + result.stderr
    rows, meta = read_rows(out)
    assert (rows.ranks == 2).all() and len(rows) == 7
    assert meta["launcher"] == "srun"
    slurm = meta["slurm"]
    assert slurm["mpi_plugin"] == "pmi2" and slurm["tasks"] == 2, slurm
    assert slurm["job_id"].isdigit() and slurm["step_id"].isdigit(), slurm
    assert json.loads((out / "metadata.json").read_text())["slurm"] == slurm


def test_more_tasks_than_cpus_read_from_the_step_are_said_and_recorded(cluster, tmp_path):
    """srun with one task more than the node's CPUs (tasks not bound: task/none): each task reads its node's count
    from SLURM_STEP_TASKS_PER_NODE before MPI_Init; the suite's yield settings are in the step's environment
    (conftest.py), so they stay as set and are recorded so."""
    out, tasks = tmp_path / "run", usable_cpus() + 1
    run = ["run", "-k", "barrier", "-i", "10", "-x", "2", "--format", "none", "--out", str(out)]
    result = cluster.srun("pmi2", tasks, *run, overcommit=True)
    assert result.returncode == 0, result.stdout + result.stderr
    crowded = read_rows(out)[1]["oversubscribed"]
    assert list(crowded.values()) == [
        {"ranks": tasks, "cpus": tasks - 1, "yield_applied": {}, "yield_kept": YIELD_SETTINGS["this MPICH"]}
    ], crowded
    assert result.stderr.count("fabricbench: warning: oversubscribed") == 1, result.stderr


def test_none_gives_one_line_and_exit_2(cluster):
    result = cluster.srun("none", 2, "run", "-k", "latency", "-m", "8", "-i", "10", "--format", "none")
    _advice(result, f"srun started 2 tasks but MPI formed 1-rank worlds (--mpi=none): {ADVICE_PMI2}")


def _pmix_step_fails(cluster) -> str | None:
    """srun's own first line where a one-task step with --mpi=pmix cannot start on this host's Slurm (Debian's
    mpi_pmix plugin dlopens libpmix.so, which libpmix-dev holds: without it, "can not load PMIx library"); else
    None."""
    found = cluster.command("srun", "--mpi=pmix", "-N", "1", "-n", "1", "--job-name", "fabricbench-test", "true")
    if found.returncode == 0:
        return None
    lines = [line.strip() for line in found.stderr.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line), lines[0] if lines else f"exit {found.returncode}")


def test_pmix_refused_before_mpi_init(cluster):
    if "pmix" not in cluster.plugins():
        pytest.skip(f"this Slurm has no pmix plugin (srun --mpi=list: {', '.join(cluster.plugins())})")
    failed = _pmix_step_fails(cluster)
    if failed:  # srun's own failure (exit 1) would hide the line this test is about
        pytest.skip(f"this Slurm cannot start a --mpi=pmix step ({failed})")
    result = cluster.srun("pmix", 2, "run", "-k", "latency", "-m", "8", "-i", "10", "--format", "none")
    _advice(result, f"srun started 2 tasks with --mpi=pmix, but {ADVICE_PMI2}")
    assert "unsupported PMI version" not in result.stderr  # MPICH's own abort in MPI_Init never came


def _pmix_library_folder(plugin_dir: Path) -> str | None:
    """The folder this Slurm's mpi_pmix plugin dlopens libpmix.so from, as built into it (Debian's:
    /usr/lib/x86_64-linux-gnu/pmix2/lib); None where no plugin or no such path is found."""
    for plugin in sorted(plugin_dir.glob("mpi_pmix*.so")):
        found = re.search(rb"\0(/[\w./+-]*pmix[\w./+-]*/lib)\0", plugin.read_bytes())
        if found and Path(found.group(1).decode()).is_dir():
            return found.group(1).decode()
    return None


def test_a_slurm_that_cannot_load_pmix_skips_the_pmix_test_saying_why(cluster, tmp_path):
    """Where this host's Slurm cannot load the PMIx library, srun --mpi=pmix fails on its own before any task
    starts (exit 1, "can not load PMIx library"): test_pmix_refused_before_mpi_init skips, naming srun's line, and
    does not fail. Such a host is made here: pytest runs that test in a mount namespace of its own, where the folder
    the plugin loads libpmix.so from is an empty tmpfs, for the cluster it starts in there too."""
    if "pmix" not in cluster.plugins():
        pytest.skip(f"this Slurm has no pmix plugin (srun --mpi=list: {', '.join(cluster.plugins())})")
    config = cluster.command("scontrol", "show", "config").stdout
    plugin_dir = re.search(r"^PluginDir\s*=\s*(\S+)", config, re.MULTILINE)
    folder = _pmix_library_folder(Path(plugin_dir.group(1))) if plugin_dir else None
    if folder is None or not shutil.which("unshare"):
        pytest.skip("no PMIx library folder found in this Slurm's mpi_pmix plugin, or no unshare to hide it")
    test = f"{Path(__file__).resolve()}::test_pmix_refused_before_mpi_init"
    hide = 'mount -t tmpfs fabricbench-no-pmix "$0" && exec "$@"'
    pytest_args = [PYTHON, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t")]
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, folder, *pytest_args, test],
        capture_output=True,
        text=True,
        timeout=2 * STEP_S,
        env=clean_env(),
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0 and "1 skipped" in result.stdout, result.stdout + result.stderr
    # srun refuses the step, or slurmd itself will not start without the plugin's library: a skip either way.
    said = ("cannot start a --mpi=pmix step", "cannot load the PMIx library")
    assert any(text in result.stdout for text in said), result.stdout


def test_self_launch_inside_a_pmix_allocation_starts_local_ranks_without_srun(tmp_path):
    """``salloc -n 2`` then ``fabricbench run`` at a site whose MpiDefault is pmix: simulated, since no allocation
    can be made here, by the variables salloc and srun's pmix plugin leave in the shell, and an ``srun`` on PATH
    that records its call and starts what it is given as one task of a step, as srun would (MPICH's hydra, seeing
    the job, starts its proxy through srun; its ranks, seeing PMIx beside hydra's PMI, abort in MPI_Init, rc 16)."""
    calls = tmp_path / "srun-calls"
    srun = executable_stub(tmp_path / "bin", "srun")
    srun.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        "export SLURM_PROCID=0 SLURM_NODEID=0 SLURM_LOCALID=0 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=1\n"
        'while [ $# -gt 0 ] && [ "${1##*/}" != hydra_pmi_proxy ]; do shift; done\n'
        'exec "$@"\n'
    )
    host = os.uname().nodename
    allocation = {
        "PATH": f"{srun.parent}:{os.environ['PATH']}",
        **{var: "4242" for var in ("SLURM_JOB_ID", "SLURM_JOBID")},
        **{var: host for var in ("SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURMD_NODENAME")},
        **{var: "1" for var in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES")},
        **{var: "2" for var in ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE")},
        "SLURM_MPI_TYPE": "pmix",
        "PMIX_NAMESPACE": "slurm.pmix.4242.0",
        "PMIX_SERVER_URI41": "pmix-server.1234;tcp4://127.0.0.1:40000",
        "PMIX_SERVER_TMPDIR": str(tmp_path),
        "PMIX_MCA_gds": "hash",  # PMIx's own setting, not a wire-up
        "SLURM_PMIXP_ABORT_AGENT_PORT": "40001",
    }
    out = tmp_path / "run"
    run = ["run", "-k", "latency", "-m", "1:8", "-i", "20", "-x", "2", "--format", "none", "--out", str(out)]
    result = fabricbench(*run, env=allocation, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not calls.exists(), f"srun was called: {calls.read_text()}"
    assert "Traceback" not in result.stderr and "Abort" not in result.stderr, result.stderr
    rows, meta = read_rows(out)
    assert len(rows) == 4 and (rows.ranks == 2).all() and (rows.status == "ok").all(), rows.to_dict("records")
    assert meta["launcher"] == "mpiexec (started by fabricbench)"
    assert meta["slurm"] == {"mpi_plugin": "none (not started by srun)", "job_id": "4242", "step_id": "none"}
