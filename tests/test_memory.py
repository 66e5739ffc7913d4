"""Bounded memory on the real command: plans a host cannot hold are refused before any rank starts,
the estimate holds a real rank's peak, and compare never reads without end."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from fabricbench.measure.kernels import get_kernel
from support import PYTHON, Server, clean_env, fabricbench, read_rows
from test_bad_input import EXAMPLE, refused_cleanly

QUICK = ["-i", "5", "-x", "1", "--format", "none"]


def test_8_gib_messages_are_refused_before_anything_is_allocated(out):
    refused_cleanly("run", "-k", "allreduce", "-m", "8G:8G", "--out", str(out), expected="at most 1 GiB", out=out)


def test_a_plan_no_host_holds_is_refused_naming_the_size_and_the_figure(out):
    # alltoall at 1 GiB on 64 ranks holds 64 GiB twice over (send and receive) on every rank.
    args = ["-k", "alltoall", "-m", "1G:1G", "--np", "64", "--oversubscribe", "--out", str(out), *QUICK]
    words = "mpi alltoall at 1.0 GiB on 64 ranks needs about 128.0 GiB per rank, most of it buffers for alltoall"
    line = refused_cleanly("run", *args, expected=words, out=out)
    assert line.endswith("for each of 64 ranks (--max-memory sets another limit)"), line


def test_iterations_are_capped_by_what_their_samples_need(out):
    args = ["-k", "latency", "-i", "10000000000", "--out", str(out)]
    refused_cleanly("run", *args, expected="iterations must be at most 1000000000", out=out)
    args = ["-k", "latency", "-m", "8", "-i", "1000000000", "-x", "1000000000", "--np", "8", "--out", str(out)]
    refused_cleanly("run", *args, expected="most of it samples of 1000000000 iterations (-i, -x)", out=out)


def test_max_memory_refuses_a_modest_plan_and_admits_it_when_raised(tmp_path):
    args = ["-k", "latency", "-m", "4M:4M", *QUICK]
    refused = tmp_path / "refused"
    words = "needs about 8.0 MiB per rank, most of it buffers for latency at 4.0 MiB (-m); --max-memory allows 4.0 MiB"
    refused_cleanly("run", *args, "--max-memory", "4M", "--out", str(refused), expected=words, out=refused)
    admitted = tmp_path / "admitted"
    result = fabricbench("run", *args, "--max-memory", "64M", "--out", str(admitted), timeout=120)
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(admitted)
    assert list(rows.size_B) == [4 << 20] and (rows.status == "ok").all()


def _peak_rss(*args: str) -> int:
    """The largest resident set, in bytes, of any process of ``fabricbench run ARGS`` (a rank)."""
    code = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "assert done.returncode == 0, done.stderr\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
    )
    command = [PYTHON, "-c", code, PYTHON, "-m", "fabricbench", "run", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=clean_env())
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.parametrize(
    "kernel,size", [("latency", 64 << 20), ("bw", 64 << 20), ("allgather", 32 << 20), ("allreduce", 32 << 20)]
)
def test_the_estimate_holds_a_real_ranks_peak(tmp_path, kernel, size):
    """What a rank adds at SIZE over the same run at 4 B stays under the estimate, and not far under it."""
    common = ["-k", kernel, "-i", "3", "-x", "1", "-W", "16", "-c", "--format", "none"]
    small = _peak_rss(*common, "-m", "4:4", "--out", str(tmp_path / "small"))
    large = _peak_rss(*common, "-m", f"{size}:{size}", "--out", str(tmp_path / "large"))
    estimate = get_kernel(kernel).held_bytes(size, 2)
    assert 0.5 * estimate < large - small <= estimate, (large - small) / size


def test_a_bw_window_reuses_one_send_and_one_receive_buffer(tmp_path):
    """osu_bw posts every Isend of a window from one s_buf and every Irecv into one r_buf: a rank of a 64 MiB bw
    run at -W 16 holds a few messages (send, receive and, with -c, validation's copy and mask), not 16 of them,
    and the receive buffer is still checked after the window (a valid row)."""
    size, window = 64 << 20, 16
    common = ["-k", "bw", "-W", str(window), "-i", "2", "-x", "1", "--format", "none"]
    small = _peak_rss(*common, "-m", "4:4", "--out", str(tmp_path / "small"))
    for loop in ("c", "python"):
        out = tmp_path / loop
        large = _peak_rss(*common, "-m", f"{size}:{size}", "-c", "--loop", loop, "--out", str(out))
        assert large - small < 5 * size, f"{loop} loop: {(large - small) / size:.1f} x the message"
        rows, _ = read_rows(out)
        assert list(rows.status) == ["ok"] and list(rows.validation) == ["pass"], rows.to_dict("records")
        assert rows.method.iloc[0].startswith(f"{loop} loop"), rows.method.iloc[0]


def test_bw_from_0_gives_the_same_rows_alone_and_against_a_server(tmp_path):
    """-m holds alike in run and under serve: 0 B is an unsupported row on a byte stream, on both sides."""
    alone, peer = tmp_path / "alone", tmp_path / "peer"
    args = ["-t", "tcp", "-k", "bw", "-m", "0:8", *QUICK, "-W", "4", "--timeout", "30"]
    result = fabricbench("run", *args, "--out", str(alone), timeout=120)
    assert result.returncode == 0, result.stderr
    server = Server()
    try:
        result = fabricbench("run", "--peer", f"127.0.0.1:{server.port}", *args, "--out", str(peer), timeout=120)
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    tables = [read_rows(out)[0] for out in (alone, peer)]
    assert [list(rows.size_B) for rows in tables] == [[0, 1, 2, 4, 8]] * 2
    assert [list(rows.status.str.startswith("ok")) for rows in tables] == [[False, True, True, True, True]] * 2
    assert json.loads((peer / "metadata.json").read_text())["mode"] == "peer"


def test_compare_refuses_a_device_and_a_fifo_instead_of_reading_for_ever(tmp_path):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    refused_cleanly("compare", str(EXAMPLE), "/dev/zero", expected="'/dev/zero' is not a regular file", timeout=60)
    refused_cleanly("compare", str(EXAMPLE), str(fifo), expected="fifo.csv' is not a regular file", timeout=60)
