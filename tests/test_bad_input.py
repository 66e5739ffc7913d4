"""Bad input on the real command: one line, exit 2, no traceback, no output folder, no process left.

Every process a case starts carries a marker in its environment (launchers pass it on to the ranks), so
a rank or a launcher that outlived the command is found by it. What the argument parser alone refuses is
tested in more variants, without a process, in tests/unit/test_input_limits.py.
"""

from __future__ import annotations

import resource
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from support import clean_env, fabricbench, mpiexec

MARK = "BAD_INPUT_TEST_MARK"
EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "examples" / "default-sweep"

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
    # Found by a hostile-user trial: each was a traceback, an internal error, or silently ran something else.
    "8 GiB messages": (["-k", "allreduce", "-m", "8G:8G"], "a message is at most 1 GiB"),
    "ten billion iterations": (["-k", "latency", "-i", "10000000000"], "iterations must be at most 1000000000"),
    "ten billion warm-up": (["-k", "latency", "-x", "10000000000"], "warm-up must be at most 1000000000"),
    "superscript peer port": (["--peer", "127.0.0.1:\u00b2"], "a port of digits 0-9"),
    "300-character peer label": (["--peer", "a" * 300 + ":18600"], "1 to 63 characters"),
    "empty peer label": (["--peer", "a..b:18600"], "1 to 63 characters"),
    "empty peer": (["--peer", ""], "--peer is empty"),
    "infinite timeout": (["-k", "latency", "--timeout", "inf"], "--timeout must be a number of seconds, got 'inf'"),
    "timeout of 1e20 s": (["-k", "latency", "--timeout", "1e20"], "--timeout must be at most 86400 seconds"),
    "infinite max-time": (["-k", "latency", "--max-time", "inf"], "--max-time must be a number of seconds"),
    "infinite timeout over tcp": (["-t", "tcp", "-k", "latency", "--timeout", "inf"], "got 'inf'"),
    "infinite max-time over tcp": (["-t", "tcp", "-k", "latency", "--max-time", "inf"], "got 'inf'"),
    "empty kernel list": (["-k", ""], "no kernel given in ''"),
    "empty transport list": (["-t", ""], "no transport given in ''"),
    "a lone comma for transports": (["-t", ","], "no transport given in ','"),
    "sizes in other digits": (["-k", "latency", "-m", "\U0001d7d6:\U0001d7d4\U0001d7d2"], "bad message size"),
    "no size left for bw": (["-k", "bw", "-m", "0"], "-m 0 leaves bw no size"),
    "tcp ports past 65535": (["-t", "tcp", "-k", "latency", "--tcp-port", "65535"], "rank 1 would need 65536"),
    "tcp address of another host": (
        ["-t", "tcp", "-k", "latency", "--tcp-address", "8.8.8.8"],
        "--tcp-address 8.8.8.8 is not an address of this host",
    ),
    "no such tcp interface": (["-t", "tcp", "-k", "latency", "--tcp-interface", "nonexist"], "'nonexist'"),
    "plan over --max-memory": (["-k", "latency", "-m", "4M:4M", "--max-memory", "4M"], "--max-memory allows 4.0 MiB"),
    # Were "cannot resolve" and exit 3: a malformed --peer is a usage error.
    "two ports in --peer": (["--peer", "127.0.0.1:18600:1"], "one ':' before the port"),
    "an emoji for the peer host": (["--peer", "\U0001f642:80"], "is not a host name or IPv4 address"),
    "a timeout below its floor": (["-k", "latency", "--timeout", "1e-9"], "--timeout must be at least 1 s, got 1e-9"),
    # Were handed to mpiexec: a rank's line each, or hydra out of descriptors and still running a minute later.
    "100000 ranks": (["-k", "latency", "--np", "100000"], "--np 100000 is more local ranks than this host can start"),
    "ten million ranks oversubscribed": (
        ["-k", "latency", "--np", "10000000", "--oversubscribe"],
        "--np 10000000 is more local ranks than this host can start",
    ),
}


def leftovers(mark: str) -> list[int]:
    """Processes still running (not zombies) whose environment carries MARK=mark."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0") and _running(proc):
                found.append(int(proc.name))
        except OSError:  # it ended while we looked, or is not ours to read
            continue
    return found


def _running(proc: Path) -> bool:
    return (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _one_clean_line(stderr: str, expected: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fabricbench: error: ") and expected in lines[0], lines[0]


def refused_cleanly(*args: str, expected: str, ranks: int = 0, out: Path | None = None, timeout: float = 120) -> str:
    """``fabricbench ARGS`` (under mpiexec when RANKS) gives one line, exit 2, leaves no OUT and no process;
    returns the line."""
    mark = uuid.uuid4().hex
    env = {MARK: mark}
    result = mpiexec(ranks, *args, timeout=timeout, env=env) if ranks else fabricbench(*args, timeout=timeout, env=env)
    assert result.returncode == 2, result.stderr
    _one_clean_line(result.stderr, expected)
    assert out is None or not out.exists(), f"{out} was left behind"
    end = time.monotonic() + 10  # a launcher's children may take a moment to be reaped
    while leftovers(mark) and time.monotonic() < end:
        time.sleep(0.1)
    assert not leftovers(mark), f"processes left behind: {leftovers(mark)}"
    return result.stderr.strip()


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_started_alone(name, out):
    args, expected = CASES[name]
    if "--out" not in args:
        args = [*args, "--out", str(out)]
    if "-i" not in args:
        args = [*args, "-i", "5"]
    refused_cleanly("run", *args, expected=expected, out=out, timeout=60)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("SwitchName=leaf1 Nodes=fbx[1-\n", "line 1: bad host list 'fbx[1-'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "line 1: switch 'a' is in a cycle of switches"),
        ("SwitchName=leaf1 Nodes=elsewhere[1-2]\n", "does not place host(s)"),
    ],
)
def test_a_bad_topology_file_is_one_line_before_any_rank(tmp_path, out, text, expected):
    """Malformed, cyclic, or not placing this host (where every rank runs): refused while planning."""
    topology = tmp_path / "topology.conf"
    topology.write_text(text)
    refused_cleanly("run", "-k", "latency", "-i", "5", "--topology", str(topology), "--out", str(out),
                    expected=expected, out=out, timeout=60)  # fmt: skip


@pytest.mark.parametrize(
    "ranks,args,expected",
    [
        (2, ["-k", "pingpong"], "unknown kernel"),
        (1, ["-k", "latency"], "needs at least 2 ranks, got 1"),
        (3, ["-k", "multi-latency"], "needs an even rank count, got 3"),
        (2, ["-k", "latency", "-m", "1:x"], "bad message size"),
        (2, ["-k", "latency", "-i", "10000000000"], "iterations must be at most 1000000000"),
        (2, ["-k", "latency", "--timeout", "inf"], "--timeout must be a number of seconds"),
        (2, ["-t", "tcp", "-k", "latency", "--tcp-port", "65535"], "rank 1 would need 65536"),
        (2, ["-t", "tcp", "-k", "latency", "--tcp-interface", "nonexist"], "'nonexist'"),
        (2, ["-k", "latency", "-m", "4M:4M", "--max-memory", "4M"], "--max-memory allows 4.0 MiB"),
    ],
)
def test_bad_input_under_mpiexec_ends_every_rank(ranks, args, expected, out):
    refused_cleanly("run", *args, "--out", str(out), expected=expected, ranks=ranks, out=out, timeout=60)


def test_too_few_descriptors_for_the_ranks_is_one_line_before_mpiexec(out):
    """Under ``ulimit -n 12`` hydra printed five lines of its own and exited 255."""
    result = subprocess.run(
        [sys.executable, "-m", "fabricbench", "run", "-k", "latency", "-i", "5", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (12, 12)),
    )
    assert result.returncode == 2, result.stderr
    # No --np was given: the refusal names none.
    _one_clean_line(result.stderr, "error: this host cannot start local ranks (ulimit -n is 12 open files")
    assert not out.exists()


@pytest.mark.parametrize(
    "cap,value,expected",
    [
        ("--max-bytes", "0", "--max-bytes must be at least 1 B"),
        ("--max-timeout", "0", "--max-timeout must be above 0 seconds"),
        ("--max-iterations", "0", "--max-iterations must be at least 1"),
        ("--max-warmup", "0", "--max-warmup must be at least 1"),
        ("--max-window", "0", "--max-window must be at least 1"),
        ("--max-session", "0", "--max-session must be above 0 seconds"),
    ],
)
def test_serve_refuses_a_cap_of_0_before_it_listens(cap, value, expected):
    # A cap that was taken would start a server that refuses every run, and this call would time out.
    refused_cleanly("serve", "--address", "127.0.0.1", "--port", "0", cap, value, expected=expected, timeout=30)


def _held_port() -> socket.socket:
    """A listening socket on a port whose lower neighbour is free: --tcp-port of that neighbour gives rank 1
    this port."""
    while True:
        held = socket.socket()
        held.bind(("0.0.0.0", 0))
        held.listen()
        with socket.socket() as below:
            try:
                below.bind(("0.0.0.0", held.getsockname()[1] - 1))
                return held
            except OSError:
                held.close()


@pytest.mark.parametrize("ranks", [0, 2])
def test_a_tcp_port_in_use_is_one_line_before_any_rank_or_folder(ranks, out):
    # Rank r listens on --tcp-port + r; rank 1's port is held by a real listener. Was rank 1's line, then
    # MPICH's "Abort(2) on node 1" banner, and a results folder with its metadata.
    with _held_port() as held:
        port = held.getsockname()[1]
        args = ["run", "-t", "tcp", "-k", "latency", "-m", "8", "-i", "5", "--tcp-port", str(port - 1)]
        expected = f"--tcp-port {port - 1}: rank 1 listens on {port - 1}+1, and cannot listen on 0.0.0.0:{port}: "
        line = refused_cleanly(*args, "--out", str(out), expected=expected, ranks=ranks, out=out, timeout=60)
    assert line.endswith("address already in use; give another --tcp-port, or none (any free port)"), line


def test_unwritable_output_under_mpiexec_ends_every_rank():
    args = ["-k", "latency", "--out", "/proc/fabricbench"]
    refused_cleanly("run", *args, expected="is not writable", ranks=2, timeout=60)


def _table(tmp_path: Path, name: str, metadata: str | None = None, size_B: str | None = None) -> str:
    """A copy of the example run, with its metadata or its second row's size_B replaced."""
    copy = tmp_path / name
    shutil.copytree(EXAMPLE, copy)
    (copy / "results.parquet").unlink(missing_ok=True)
    if metadata is not None:
        (copy / "metadata.json").write_text(metadata)
    if size_B is not None:
        lines = (copy / "results.csv").read_text().splitlines()
        cells = lines[2].split(",")
        cells[lines[0].split(",").index("size_B")] = size_B
        lines[2] = ",".join(cells)
        (copy / "results.csv").write_text("\n".join(lines) + "\n")
    return str(copy)


@pytest.mark.parametrize(
    "name,change,expected",
    [
        ("a label of the wrong type", {"metadata": '{"label": 5}'}, "has metadata field 'label' = 5, not a string"),
        ("hosts of the wrong type", {"metadata": '{"hosts": "h1"}'}, "field 'hosts' = 'h1', not a list of strings"),
        ("a lone surrogate", {"metadata": '{"mpi_vendor": "\\udc00"}'}, "with characters no text can hold"),
        ("100,000-deep JSON", {"metadata": "[" * 100_000 + "]" * 100_000}, "its JSON is nested too deeply"),
        ("a fractional size", {"size_B": "1.5"}, "has size_B = 1.5 (row 2): not a whole number of bytes"),
        ("a huge size", {"size_B": "1e30"}, "has size_B = 1e+30 (row 2): not a whole number of bytes"),
    ],
)
def test_compare_refuses_a_bad_table_in_one_line(tmp_path, name, change, expected):
    bad = _table(tmp_path, "bad", **change)
    refused_cleanly("compare", str(EXAMPLE), bad, expected=expected, timeout=120)


# A launcher's variables inherited by a shell, with no launcher: (what they are, the words the one line must hold).
INHERITED = {
    "PMIX_RANK of a PMIx launcher": ({"PMIX_RANK": "0"}, "PMIX_RANK='0' is set, a PMIx launcher's"),
    "Open MPI's OMPI_COMM_WORLD_*": (
        {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
        "OMPI_COMM_WORLD_RANK='0', OMPI_COMM_WORLD_SIZE='1' are set, Open MPI's mpirun's",
    ),
}


@pytest.mark.parametrize("name", INHERITED)
def test_an_inherited_launcher_variable_this_mpi_cannot_be_started_by_is_named_in_one_line(name, out):
    """PMIX_RANK=0 ended in MPICH's 'launcher not compatible with PMI1 client' (6 lines, exit 15); Open MPI's
    variables added mpi4py's 4-line 'suspicious MPI execution environment' warning."""
    variables, said = INHERITED[name]
    result = fabricbench("run", "-k", "latency", "-i", "5", "--out", str(out), env=variables, timeout=60)
    assert result.returncode == 2, result.stderr
    _one_clean_line(result.stderr, said)
    assert f"`unset {' '.join(variables)}`" in result.stderr and "suspicious" not in result.stderr
    assert not out.exists()
