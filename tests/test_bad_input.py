"""Bad input: one line, exit 2, no traceback, and every rank exits."""

from __future__ import annotations

import pytest

from support import fabricbench, mpiexec

CASES = {
    "unknown kernel": (["-k", "pingpong"], "unknown kernel 'pingpong'"),
    "unknown transport": (["-t", "carrier-pigeon"], "unknown transport 'carrier-pigeon'"),
    "inverted size range": (["-k", "latency", "-m", "64:8"], "bad size range '64:8'"),
    "garbage size": (["-k", "latency", "-m", "lots"], "bad message size 'lots'"),
    "negative iterations": (["-k", "latency", "-i", "-5"], "iterations must be at least 1, got -5"),
    "negative warm-up": (["-k", "latency", "-x", "-1"], "warm-up must be at least 0, got -1"),
    "zero window": (["-k", "bw", "-W", "0"], "window must be at least 1, got 0"),
    "latency on one rank": (["-k", "latency", "--np", "1"], "needs at least 2 ranks, got 1"),
    "odd ranks for pairs": (["-k", "msgrate", "--np", "3"], "needs an even rank count, got 3"),
    "unwritable output": (["-k", "latency", "--out", "/proc/fabricbench"], "output directory '/proc/fabricbench'"),
    "unknown method": (["-k", "latency", "--method", "magic"], "invalid choice: 'magic'"),
    "unknown loop": (["-k", "latency", "--loop", "assembly"], "invalid choice: 'assembly'"),
}


def _one_clean_line(stderr: str, expected: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fabricbench: error: ") and expected in lines[0], lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_started_alone(name, out):
    args, expected = CASES[name]
    if "--out" not in args:
        args = [*args, "--out", str(out)]
    result = (
        fabricbench("run", *args, "-i", "5", timeout=60)
        if name != "negative iterations"
        else fabricbench("run", *args, timeout=60)
    )
    assert result.returncode == 2
    _one_clean_line(result.stderr, expected)


@pytest.mark.parametrize(
    "ranks,args,expected",
    [
        (2, ["-k", "pingpong"], "unknown kernel"),
        (1, ["-k", "latency"], "needs at least 2 ranks, got 1"),
        (3, ["-k", "multi-latency"], "needs an even rank count, got 3"),
        (2, ["-k", "latency", "--out", "/proc/fabricbench"], "is not writable"),
        (2, ["-k", "latency", "-m", "1:x"], "bad message size"),
    ],
)
def test_bad_input_under_mpiexec_ends_every_rank(ranks, args, expected):
    result = mpiexec(ranks, "run", *args, timeout=60)
    assert result.returncode == 2
    _one_clean_line(result.stderr, expected)
