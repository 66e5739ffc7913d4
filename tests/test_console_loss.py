"""The console is a view of the table: stdout failing never costs a row.

Each case runs a small self-launched sweep (4 rows) whose stdout fails one way; every row, the Parquet copy and
metadata.json saying complete must be on disk, and stderr holds one line at most. A reader gone (``| head -1``)
ends silently with 141, as a Unix tool killed by SIGPIPE; a full disk or a closed stdout says so in one line and
exits 1, as cat does on a write error.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from support import PYTHON, REPO, clean_env, read_rows

SWEEP = ["run", "-k", "latency", "-m", "1:8", "-i", "20", "-x", "2", "--format", "table"]

# What the shell does to stdout, the exit code, and the words of the one stderr line that is an error (None: none).
CASES = {
    "a reader that goes away": ("| head -1", 141, None),
    "a full disk": ("> /dev/full", 1, "cannot write to stdout: No space left on device; the run finished: 4 rows"),
    "a closed stdout": (">&-", 1, "cannot write to stdout: Bad file descriptor; the run finished: 4 rows"),
}


@pytest.mark.parametrize("case", CASES)
def test_stdout_failing_keeps_every_row(case, out):
    redirect, code, words = CASES[case]
    command = shlex.join([PYTHON, "-m", "fabricbench", *SWEEP, "--out", str(out)])
    script = f"{command} {redirect}; exit ${{PIPESTATUS[0]}}" if redirect.startswith("|") else f"{command} {redirect}"
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, env=clean_env(), stdin=subprocess.DEVNULL
    )
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 1 and "Traceback" not in result.stderr, result.stderr
    if words:
        assert lines[0].startswith("fabricbench: error: ") and words in lines[0], lines
    else:
        assert not lines or lines[0].startswith("# 4 rows in"), lines
    table, meta = read_rows(out)
    assert len(table) == 4
    assert meta["complete"] is True and meta["rows"] == 4
    assert (out / "results.parquet").exists()


def test_a_failing_jobs_lines_are_one_line(capfd):
    """Every rank's own error line and the launcher's (hydra's, MPI_Abort's) come out as the first rank's line:
    --np 64 on 2 cores printed 34 lines, one a rank."""
    from fabricbench.launch.launcher import _Relay

    lines = [f"fabricbench: error: rank {rank}: latency at 8 B made no progress for 130 s\n" for rank in range(34)]
    lines += ["Abort(3) on node 0 (rank 0 in comm 0): application called MPI_Abort\n", "=" * 80 + "\n"]
    job = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stderr.write({''.join(lines)!r}); sys.exit(3)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    relay = _Relay(job)
    assert relay.finish(job.wait(), 0) == 3
    assert capfd.readouterr().err == lines[0]


def test_a_failing_job_with_only_the_launchers_lines_says_so_in_one(capfd):
    from fabricbench.launch.launcher import _Relay

    hydra = "[mpiexec@vm] HYDU_sock_write (sock.c:250): write error (No space left on device)\n" * 6
    job = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stderr.write({hydra!r}); sys.exit(255)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert _Relay(job).finish(job.wait(), 0) == 255
    assert capfd.readouterr().err == (
        "fabricbench: error: the job ended with exit 255: [mpiexec@vm] HYDU_sock_write (sock.c:250): "
        "write error (No space left on device)\n"
    )


@pytest.mark.parametrize("console", ["table", "none"])
def test_a_closed_stderr_loses_no_run(console, out):
    """``2>&-``: Python starts with sys.stderr None; the run goes on, its lines go nowhere, and every row is kept."""
    command = shlex.join([PYTHON, "-m", "fabricbench", *SWEEP[:-1], console, "--out", str(out)])
    result = subprocess.run(
        ["bash", "-c", f"{command} 2>&-"], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert result.returncode == 0, result.stdout
    table, meta = read_rows(out)
    assert len(table) == 4 and meta["complete"] is True


EXAMPLE = REPO / "results" / "examples" / "default-sweep"
THRESHOLDS = '[[threshold]]\ntransport = "mpi"\nkernel = "latency"\nmax_lat_p50_us = 1000000\n'
# A report's command, with FOLDER for its --out, and the files it must write there whatever stdout does.
REPORTS = {
    "compare": (["compare", str(EXAMPLE), "--out", "FOLDER"], ["comparison.csv"]),
    "model": (["model", str(EXAMPLE), "--out", "FOLDER"], ["model.csv", "projection.csv"]),
    "check": (["check", "THRESHOLDS", str(EXAMPLE)], []),
    "doctor": (["doctor"], []),
}


@pytest.mark.parametrize("command", REPORTS)
def test_a_report_to_a_full_stdout_writes_its_files_and_says_so_in_one_line(command, tmp_path):
    args, files = REPORTS[command]
    folder, thresholds = tmp_path / "out", tmp_path / "thresholds.toml"
    thresholds.write_text(THRESHOLDS)
    args = [str(folder) if a == "FOLDER" else str(thresholds) if a == "THRESHOLDS" else a for a in args]
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [PYTHON, "-m", "fabricbench", *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert result.returncode == 1
    lines = result.stderr.splitlines()  # besides compare's "# wrote FILES in DIR/", the one error line
    assert "Traceback" not in result.stderr and [line for line in lines if not line.startswith("# wrote")] == [
        "fabricbench: error: cannot write to stdout: No space left on device"
    ], result.stderr
    assert all((folder / name).is_file() for name in files), sorted(p.name for p in tmp_path.rglob("*"))


def test_a_label_no_font_has_a_glyph_for_draws_without_a_word_on_the_terminal(tmp_path):
    """compare --out of a run labelled with ESC, BEL and a CJK character: matplotlib warned 'Glyph 27 (^[)
    missing from font(s)' with the raw byte and a source path, once a glyph and plot."""
    run = tmp_path / "labelled"
    shutil.copytree(EXAMPLE, run)
    (run / "results.parquet").unlink()  # the label is read from metadata.json
    meta = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps(meta | {"label": "x\x1b[31m\u4e2d\x07"}))
    result = subprocess.run(
        [PYTHON, "-m", "fabricbench", "compare", str(run), str(EXAMPLE), "--out", str(tmp_path / "out")],
        capture_output=True,
        timeout=120,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    assert b"\x1b" not in result.stderr + result.stdout and b"\x07" not in result.stderr + result.stdout
    assert b"Glyph" not in result.stderr and b".py:" not in result.stderr, result.stderr
