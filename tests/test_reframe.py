"""ReFrame's own OSU tests (hpctestlib's ``osu_run``, unmodified) against the OSU stand-ins.

HPC centres run OSU in CI through ReFrame's test library: ``osu_run`` finds
``osu_latency``, ``osu_bw``, ``osu_allreduce`` and ``osu_alltoall`` on PATH,
runs them under the partition's launcher and reads their text back
(sanity ``^{size}.*Pass``, performance ``^{size}\\s+(\\S+)``). Here that is
``mpiexec -n 2`` on this host, with ``fabricbench osu-shims`` on PATH. Each
test must pass sanity and performance, and the figure ReFrame extracted must
be the tidy table's, rounded as OSU prints it.

reframe-hpc 4.9.3 (the last wheels that carry hpctestlib) goes into a venv
of its own, once per session; without PyPI the module skips, saying so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import BIN, clean_env, fabricbench, read_rows

REFRAME = "reframe-hpc==4.9.3"
# ReFrame's own names: benchmark_info's first element, the metric it extracts, and the table column behind it.
BENCHMARKS = {
    "osu_latency": ("mpi.pt2pt.osu_latency", "latency", "lat_mean_us", 8),
    "osu_bw": ("mpi.pt2pt.osu_bw", "bandwidth", "bw_MBps", 4194304),
    "osu_allreduce": ("mpi.collective.osu_allreduce", "latency", "lat_rank_avg_us", 8),
    "osu_alltoall": ("mpi.collective.osu_alltoall", "latency", "lat_rank_avg_us", 8),
}

SITE_CONFIG = """
site_configuration = {
    "systems": [
        {
            "name": "local",
            "descr": "this host: fabricbench's OSU stand-ins under mpiexec",
            "hostnames": [".*"],
            "partitions": [
                {
                    "name": "default",
                    "scheduler": "local",
                    "launcher": "mpiexec",
                    "environs": ["builtin"],
                    "max_jobs": 1,
                }
            ],
        }
    ],
    "environments": [{"name": "builtin", "cc": "cc", "cxx": "", "ftn": ""}],
}
"""

# The library's documented use: a subclass that says where it may run. Everything else is osu_run's own.
CHECK = """
import reframe as rfm
from hpctestlib.microbenchmarks.mpi.osu import osu_run


@rfm.simple_test
class fabricbench_osu(osu_run):
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    num_tasks = 2  # osu_run leaves it to the site for collectives; its point-to-point tests set 2 themselves

    @run_after("init")
    def fewer_bandwidth_iterations(self):
        # osu_bw sweeps 1 B to 4 MiB: 1000 windows of 64 x 4 MiB alone are 268 GB of copies, minutes on a
        # small CI host. num_iters is osu_benchmark's documented knob; ReFrame then passes -i 100.
        if self.benchmark_info[1] == "bandwidth":
            self.num_iters = 100
"""


@pytest.fixture(scope="session")
def reframe(tmp_path_factory) -> Path:
    """bin/reframe of a venv with reframe-hpc 4.9.3, made once per session; skip when PyPI cannot be reached."""
    venv = tmp_path_factory.mktemp("reframe-venv")
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot make a venv for ReFrame: {made.stderr.strip().splitlines()[-1:]}")
    try:
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", REFRAME],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip install {REFRAME} took over 10 minutes (no PyPI?)")
    if pip.returncode:
        last = (pip.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"pip install {REFRAME} failed, PyPI unreachable? {last}")
    return venv / "bin" / "reframe"


def _figures(report: dict) -> dict[str, tuple[str, float | None, str]]:
    """Per benchmark (osu_latency, ...): ReFrame's result, the figure it extracted, and why it failed if it did."""
    found = {}
    for case in report["runs"][-1]["testcases"]:
        bench = case["executable"]
        values = list((case.get("perfvalues") or {}).values())
        figure = values[0][0] if values else None
        found[bench] = (case["result"], figure, f"{case.get('fail_phase')}: {case.get('fail_reason')}")
    return found


def test_reframe_osu_run_passes_on_the_stand_ins_with_the_tables_figures(reframe, tmp_path):
    shims, results = tmp_path / "shims", tmp_path / "tables"
    made = fabricbench("osu-shims", str(shims))
    assert made.returncode == 0, made.stderr
    (tmp_path / "config.py").write_text(SITE_CONFIG)
    (tmp_path / "check.py").write_text(textwrap.dedent(CHECK))
    env = clean_env({"PATH": f"{shims}:{BIN}:/usr/local/bin:/usr/bin:/bin"})
    env["FABRICBENCH_OSU_RESULTS"] = str(results)  # ReFrame removes a passing test's stage folder, the table's home
    env.pop("PYTHONPATH", None)
    report_file = tmp_path / "report.json"
    names = "|".join(info[0].rsplit(".", 1)[1] for info in BENCHMARKS.values())
    run = subprocess.run(
        [
            str(reframe),
            *("-C", str(tmp_path / "config.py"), "-c", str(tmp_path / "check.py")),
            *("--system", "local", "--exec-policy", "serial", "--prefix", str(tmp_path / "rfm")),
            *("--report-file", str(report_file), "-n", f"({names})$", "-r"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert report_file.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    found = _figures(json.loads(report_file.read_text()))
    assert set(found) == set(BENCHMARKS), run.stdout[-3000:]
    outcome = {}
    for bench, (_, metric, column, size) in BENCHMARKS.items():
        result, figure, why = found[bench]
        folders = sorted(results.glob(f"fabricbench-osu-{bench}-*"))
        assert len(folders) == 1, (bench, folders)
        table = read_rows(folders[0])[0].set_index("size_B")
        outcome[bench] = (result, metric, figure, float(table[column][size]))
    print("\nReFrame osu_run on fabricbench's stand-ins (result, metric, ReFrame's figure, the table's value):")
    for bench, line in outcome.items():
        print(f"  {bench}: {line}")
    for bench, (result, metric, figure, value) in outcome.items():
        assert result == "pass", (bench, found[bench], run.stdout[-3000:])
        assert figure is not None and abs(figure - value) <= 0.005 + 1e-9, (bench, metric, figure, value)
    assert run.returncode == 0, run.stdout[-3000:]
