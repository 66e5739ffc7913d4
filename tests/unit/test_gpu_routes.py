"""The GPU-pair matrix (cuda-copy ``peer``) without a GPU: its routes, its rows' columns, the console line, the
name ``check`` gives a row, and the heatmap ``compare --out`` draws from a schema-4 table of such rows."""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest

from fabricbench.analysis.compare import compare
from fabricbench.analysis.load import split_series
from fabricbench.analysis.thresholds import is_gpu_route, is_pair, row_name
from fabricbench.errors import PeerError
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.schema import COLUMNS, INTEGER, SCHEMA_VERSION
from fabricbench.report import console
from fabricbench.run.patterns import GpuRoutes
from fabricbench.transports.gpu.cuda_copy import gpu_routes, peer_gpu_count

HOST = "gpunode1"


def test_routes_are_every_ordered_pair_source_major():
    assert gpu_routes(1) == []
    assert gpu_routes(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert len(gpu_routes(8)) == 56  # an 8-GPU node: nvbandwidth's 8 x 8 matrix less its diagonal


class OneWay:
    """A control plane whose broadcast hands back fixed bytes: what rank 1 would receive from rank 0."""

    rank = 1

    def __init__(self, data: bytes):
        self.data = data

    def bcast_bytes(self, data):
        return self.data


@pytest.mark.parametrize("data", [b"-1", b"two", b"99999", b"", "８".encode()])
def test_a_bad_gpu_count_from_rank_0_is_refused(data):
    with pytest.raises(PeerError, match="bad GPU count"):
        peer_gpu_count(OneWay(data), None)


def test_a_gpu_count_from_rank_0_is_taken():
    assert peer_gpu_count(OneWay(b"4"), None) == 4


def test_the_schema_holds_the_gpu_pair_columns():
    assert SCHEMA_VERSION >= 4  # the GPU pair's columns came with schema 4
    assert {"src_gpu", "dst_gpu"} <= set(COLUMNS) and {"src_gpu", "dst_gpu"} <= INTEGER
    assert get_kernel("peer").pattern == "gpu-routes" and get_kernel("peer").min_ranks == 1


def peer_row(src: int, dst: int, bw: float, size: int = 64 << 20) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    per_copy_us = size / bw  # MB/s = bytes per µs
    row.update(
        run_id="r1",
        label="peer run",
        repeat=0,
        transport="cuda-copy",
        kernel="peer",
        method="cudaMemcpyPeerAsync, events, peer access",
        buffer="host",
        size_B=size,
        ranks=1,
        pairs=1,
        src_gpu=src,
        dst_gpu=dst,
        src_host=HOST,
        dst_host=HOST,
        window=1,
        iterations=20,
        warmup=2,
        sample="op (loop mean)",
        lat_p50_us=per_copy_us,
        lat_mean_us=per_copy_us,
        bw_MBps=bw,
        validation="pass",
        status="ok",
    )
    return row


def test_a_gpu_pair_row_is_named_by_its_gpus():
    row = peer_row(2, 3, 150_000.0)
    assert is_gpu_route(row) and not is_pair(row)
    assert row_name(row) == f"cuda-copy peer 64 MiB {HOST} GPU 2 -> GPU 3"
    assert not is_gpu_route(row | {"src_gpu": ""})


def test_the_console_line_leads_with_the_gpus():
    row = peer_row(1, 0, 150_000.0)
    head = console.header("cuda-copy", "peer", 1, "", GpuRoutes.columns)
    assert head.splitlines()[1].split()[:4] == ["#src", "GPU", "dst", "GPU"]
    fields = console.line(row).split()
    assert fields[:3] == ["1", "0", str(64 << 20)]
    assert float(fields[4]) == pytest.approx(150_000.0)


def test_compare_draws_the_gpu_matrix_and_leaves_it_out_of_the_size_table(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows = [peer_row(s, d, 40_000.0 if 3 in (s, d) else 150_000.0) for s, d in gpu_routes(4)]
    with open(run / "results.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    meta = {"schema_version": SCHEMA_VERSION, "label": "peer run", "run_id": "r1", "hosts": [HOST]}
    (run / "metadata.json").write_text(json.dumps(meta))
    plots = tmp_path / "plots"
    assert compare([str(run)], out=str(plots)) == 0
    if keep := os.environ.get("FABRICBENCH_KEEP_HEATMAP"):
        shutil.copy(plots / "heatmap_peer.png", keep)
    heatmap = plots / "heatmap_peer.png"
    assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr()
    assert "heatmap_peer.png" in printed.err
    assert "peer" not in printed.out  # drawn as a matrix, not compared size by size
    series, table, notes = split_series([str(run)])
    assert len(table) == 12 and not notes  # twelve pairs at one size are not repeats of one row
