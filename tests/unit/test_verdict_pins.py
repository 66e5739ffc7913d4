"""The all-pairs verdict against verdicts pinned before it became array work.

``data/verdict-pins.json.gz`` holds 444 verdicts made by the verdict of commit 55cf06b (dicts and loops over
pairs): every call the unit tests made, the leaf-spine example of results/examples/, and 400 random matrices of 2
to 70 ranks, flat and under leaf-spine, fat-tree and dragonfly topologies (uneven switches, ranks sharing hosts,
missing, zero and repeated pairs, failed rows), with slow hosts, links, one-way pairs, uplinks and global links
at several depths under five kinds of noise. Each case keeps its rows as one N x N table per (transport, kernel,
schedule, size, repeat), rows that do not fit one beside them, and the verdict. Every figure must agree to 1e-12
(numpy's log and math.log may differ in the last bit), everything else exactly.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from fabricbench.measure.topology import Topology, parse_slurm, parse_toml
from fabricbench.measure.verdict import verdict

PINS = Path(__file__).parent / "data" / "verdict-pins.json.gz"


def _cases() -> list[dict]:
    with gzip.open(PINS, "rt") as pins:
        return json.load(pins)


def _rows(case: dict) -> list[dict]:
    hosts = case["hosts"]
    count = len(hosts)
    rows = []
    for (transport, kernel, schedule, size, repeat), table in case["tables"]:
        metric = "bw_MBps" if kernel == "pairs-bw" else "lat_p50_us"
        for at, value in enumerate(table):
            if value is not None:
                src, dst = divmod(at, count)
                rows.append(
                    {
                        "transport": transport,
                        "kernel": kernel,
                        "schedule": schedule,
                        "size_B": size,
                        "repeat": repeat,
                        "src_rank": src,
                        "dst_rank": dst,
                        "src_host": hosts[src],
                        "dst_host": hosts[dst],
                        "status": "ok",
                        "validation": "off",
                        metric: value,
                    }
                )
    return rows + case["odd_rows"]


def _topology(pinned) -> Topology | None:
    if pinned is None:
        return None
    if isinstance(pinned, dict):
        return Topology.from_dict(pinned)
    text, kind = pinned
    return parse_slurm(text, "t.conf") if kind == "slurm" else parse_toml(text, "t.toml")


ADDED = {"outlier_z_used"}  # keys a verdict has gained since it was pinned: what they say is tested elsewhere


def _difference(got, want, path: str = "") -> str | None:
    """Where ``got`` differs from ``want`` (figures to 1e-12), or None."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) - ADDED != set(want):
            return f"{path}: keys {sorted((set(got or {}) - ADDED) ^ set(want))}"
        return next((d for k in want if (d := _difference(got[k], want[k], f"{path}.{k}"))), None)
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: {len(got or [])} items, pinned {len(want)}"
        return next(
            (d for i, (g, w) in enumerate(zip(got, want, strict=True)) if (d := _difference(g, w, f"{path}[{i}]"))),
            None,
        )
    if isinstance(want, float) and isinstance(got, float):
        return None if math.isclose(got, want, rel_tol=1e-12) else f"{path}: {got!r}, pinned {want!r}"
    return None if got == want and type(got) is type(want) else f"{path}: {got!r}, pinned {want!r}"


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['name']}" for i, c in enumerate(CASES)])
def test_the_verdict_is_the_pinned_one(case):
    found = verdict(_rows(case), case["z"], "", case["floor"], _topology(case["topology"]))
    assert _difference(json.loads(json.dumps(found)), case["verdict"]) is None


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_pairs_read_back_from_a_table_file_give_the_pinned_verdicts(tmp_path, suffix, monkeypatch):
    """What analysis reads (analysis.load.read_pairs: only PAIR_COLUMNS, a batch of rows at a time, each group's
    matrix filled from them) judges as the rows do."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from fabricbench.analysis import load
    from fabricbench.measure import pair_table
    from fabricbench.measure.verdict import PAIR_COLUMNS

    monkeypatch.setattr(pair_table, "PAIR_BATCH_ROWS", 97)  # several batches, groups split across them
    kinds = {"bw_MBps": pa.float64(), "lat_p50_us": pa.float64(), "size_B": pa.int64()}
    kinds |= {"src_rank": pa.int64(), "dst_rank": pa.int64()}
    for number, case in enumerate(CASES[::10]):
        rows = _rows(case)
        table = pa.table(
            {c: pa.array([row.get(c) for row in rows], type=kinds.get(c, pa.string())) for c in PAIR_COLUMNS}
        )
        path = tmp_path / f"case{number}{suffix}"
        if suffix == ".parquet":
            pq.write_table(table, path, row_group_size=150)
        else:
            pacsv.write_csv(table, path)
        run = load.read_pairs(path)
        found = verdict(run.table.groups(), case["z"], "", case["floor"], _topology(case["topology"]))
        assert _difference(json.loads(json.dumps(found)), case["verdict"]) is None, case["name"]
