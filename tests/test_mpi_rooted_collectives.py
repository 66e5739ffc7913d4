"""gather, gatherv, scatter, scatterv, allgatherv, alltoallv, alltoallw and reduce_scatter_block on real mpiexec
ranks: one launch per rank count runs every one of them in the C loop with validation (-c), and each row carries
nccl-tests' figures. Open MPI's wheel runs them in test_mpi_loops.py (its second venv)."""

from __future__ import annotations

import pytest

from support import fabricbench, read_rows

ROOTED_AND_V = ["gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw"]
NEW = [*ROOTED_AND_V, "reduce_scatter_block"]
QUICK = ["-m", "1:256", "-i", "5", "-x", "1", "-c", "--loop", "c", "--format", "none"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_rooted_and_v_collective_validates_in_the_c_loop(tmp_path, ranks):
    out = tmp_path / "run"
    result = fabricbench("run", "-t", "mpi", "-k", ",".join(NEW), "--np", str(ranks), "--out", str(out), *QUICK)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    ok = rows[rows.status == "ok"]
    assert set(ok.kernel) == set(NEW) and (ok.ranks == ranks).all()
    assert (ok.validation == "pass").all() and (ok.method == "c loop, blocking").all()
    moving = ok[ok.kernel.isin(ROOTED_AND_V)]
    assert sorted(set(moving.size_B)) == [2**k for k in range(9)]  # OSU's sweep from 1 B
    # nccl-tests: S bytes a rank over n ranks, algbw over S·n, busbw (n-1)/n of it
    seconds = moving.lat_rank_avg_us * 1e-6
    algbw = moving.algbw_GBps.to_numpy()
    assert algbw == pytest.approx((moving.size_B * ranks / seconds / 1e9).to_numpy(), rel=1e-3)
    assert moving.busbw_GBps.to_numpy() == pytest.approx(algbw * (ranks - 1) / ranks, rel=1e-6)
    # OSU's reduce_scatter_block: S is the float32 vector, each rank keeps S/4/n elements; sizes from one float32
    block = ok[ok.kernel == "reduce_scatter_block"]
    assert list(block.size_B) == [4, 8, 16, 32, 64, 128, 256]
    summed = block.size_B // 4 // ranks * ranks * 4
    expected = (summed / (block.lat_rank_avg_us * 1e-6) / 1e9).to_numpy()
    assert block.algbw_GBps.to_numpy() == pytest.approx(expected, rel=1e-3)
    refused = rows[(rows.kernel == "reduce_scatter_block") & (rows.status != "ok")]
    assert set(refused.size_B) == {1, 2} and refused.status.str.startswith("unsupported").all()
