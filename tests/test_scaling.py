"""`run --ranks`: collectives on sub-communicators of 4 real mpiexec ranks (oversubscribed here), and the plot."""

from __future__ import annotations

import pytest

from support import fabricbench, mpiexec, one_error_line, read_rows

QUICK = ["-m", "4:64", "-i", "20", "-x", "2", "--format", "none", "--timeout", "60"]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """allreduce and barrier on the first 2, 3 and 4 of 4 ranks started by mpiexec, validated, twice over."""
    out = tmp_path_factory.mktemp("scaling") / "run"
    args = ["run", "-k", "allreduce,barrier,latency", "--ranks", "2,3,4", "--repeat", "2", "-c", "--out", str(out)]
    result = mpiexec(4, *args, *QUICK, timeout=180)
    assert result.returncode == 0, result.stderr
    return out


def test_collectives_give_a_row_per_rank_count_and_other_kernels_run_on_all(scaled):
    rows, meta = read_rows(scaled)
    assert meta["plan"]["ranks"] == [2, 3, 4] and meta["complete"] is True
    assert (rows["status"] == "ok").all() and (rows["validation"] == "pass").all()
    allreduce = rows[rows["kernel"] == "allreduce"]
    assert sorted(set(zip(allreduce["ranks"], allreduce["size_B"], allreduce["repeat"], strict=True))) == [
        (n, size, r) for n in (2, 3, 4) for size in (4, 8, 16, 32, 64) for r in (0, 1)
    ]
    assert sorted(rows[rows["kernel"] == "barrier"]["ranks"]) == [2, 2, 3, 3, 4, 4]
    assert set(rows[rows["kernel"] == "latency"]["ranks"]) == {4}
    # nccl-tests' bus factor follows the rank count: busbw = algbw * 2(n-1)/n.
    for n, group in allreduce.groupby("ranks"):
        assert (group["busbw_GBps"] / group["algbw_GBps"]).round(6).eq(round(2 * (n - 1) / n, 6)).all()


def test_compare_names_each_count_and_draws_the_scaling(scaled, tmp_path):
    result = fabricbench("compare", str(scaled), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    for n in (2, 3, 4):
        assert f"# allreduce on {n} ranks" in result.stdout
    plot = tmp_path / "scaling.png"
    assert plot.stat().st_size > 20_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-n", "2", "-k", "allreduce", "--ranks", "2,4"], "--ranks 4 is more than the 2 ranks launched"),
        (["-n", "2", "-k", "allreduce", "--ranks", "1,2"], "--ranks 1: kernel 'allreduce' needs at least 2 ranks"),
        (["-n", "2", "-k", "latency", "--ranks", "2"], "--ranks sizes the collectives; this run has none"),
        (["-n", "2", "-t", "tcp", "-k", "allreduce", "--ranks", "2"], "transport 'tcp' cannot run on a subset"),
    ],
)
def test_bad_rank_counts_are_refused_before_any_rank_starts(args, expected, tmp_path):
    out = tmp_path / "run"
    result = fabricbench("run", *args, "--out", str(out), timeout=30)
    assert result.returncode == 2
    one_error_line(result.stderr, expected)
    assert not out.exists()  # refused by the parent: no rank started, no folder made


def test_a_count_above_the_ranks_a_launcher_started_is_refused_by_rank_0(tmp_path):
    result = mpiexec(2, "run", "-k", "allreduce", "--ranks", "2,3", "--out", str(tmp_path / "run"), timeout=60)
    assert result.returncode == 2
    one_error_line(result.stderr, "--ranks 3 is more than the 2 ranks launched")
