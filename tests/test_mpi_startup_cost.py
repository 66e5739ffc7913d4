"""The start-up kernels (osu_init's and osu_hello's figures) on real ranks: each rank's MPI_Init, timed as it started,
across ranks in the tidy table and in OSU's lines."""

from __future__ import annotations

import re
import subprocess

from support import REPO, clean_env, fabricbench, read_rows

INIT_LINE = re.compile(r"^nprocs: (\d+), min: (\d+) ms, max: (\d+) ms, avg: (\d+) ms$", re.M)


def _check(out, ranks: int) -> None:
    rows, _ = read_rows(out)
    assert list(rows.kernel) == ["init", "hello"]
    assert (rows.status == "ok").all() and (rows.ranks == ranks).all() and (rows.iterations == 1).all()
    assert (rows.size_B == 0).all() and (rows.warmup == 0).all()
    # MPI_Init takes more than a microsecond and less than a minute on any machine; min <= avg <= max across ranks.
    assert (rows.lat_rank_min_us > 1).all() and (rows.lat_rank_max_us < 60e6).all()
    assert (rows.lat_rank_min_us <= rows.lat_rank_avg_us).all() and (rows.lat_rank_avg_us <= rows.lat_rank_max_us).all()
    assert rows.method.str.startswith("MPI_Init_thread(MPI_THREAD_SERIALIZED)").all()
    assert (rows.validation == "off").all()  # -c: nothing was sent, so nothing is said to pass


def test_init_and_hello_report_each_ranks_mpi_init_as_osu_prints_it(out):
    result = fabricbench(
        "run", "--np", "4", "-t", "mpi", "-k", "init,hello", "-c", "--format", "osu", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    _check(out, 4)
    assert "# OSU MPI Init Test v7.4\nnprocs: 4, min: " in result.stdout
    assert "# OSU MPI Hello World Test v7.4\nThis is a test with 4 processes\n" in result.stdout
    rows, _ = read_rows(out)
    low, high, mean = (int(x) for x in INIT_LINE.search(result.stdout).groups()[1:])
    assert low == int(rows.lat_rank_min_us[0] // 1000) and high == int(rows.lat_rank_max_us[0] // 1000)
    assert low <= mean <= high


def test_init_is_timed_under_pypis_open_mpi(open_mpi_venv, tmp_path):
    out = tmp_path / "run"
    env = clean_env(
        {
            "PYTHONPATH": str(REPO / "src"),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }
    )
    result = subprocess.run(
        [str(open_mpi_venv / "bin" / "python"), "-m", "fabricbench", "run", "-n", "2", "-t", "mpi", "-k",
         "init,hello", "--format", "none", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    _check(out, 2)
