"""The bisection kernel end to end on local ranks (mpi and tcp): small, a few seconds each."""

from __future__ import annotations

import pytest

from support import fabricbench, read_rows

SMALL = ["-k", "bisection", "-m", "64K:64K", "-W", "8", "-i", "6", "-x", "1", "-c", "--format", "none"]


@pytest.mark.parametrize("transport", ["mpi", "tcp"])
def test_local_ranks_give_a_valid_all_row(transport, tmp_path):
    """Four local ranks, no topology: one row per size, tier all, two pairs at once, validated."""
    result = fabricbench("run", "-t", transport, *SMALL, "--np", "4", "--bisection-rounds", "3", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    rows, meta = read_rows(tmp_path)
    assert rows.tier.tolist() == ["all"] and (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert (rows.pairs == 2).all() and (rows.tier_pairs == 6).all() and (rows.bw_MBps > 0).all()
    assert len(meta["bisection"]["matchings"]) == 3
