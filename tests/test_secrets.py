"""The shared secret of ``serve`` / ``run --peer`` never reaches disk or the console, in any spelling.

A real ``serve`` on loopback holds the token; real ``run --peer`` processes give it as ``--token X``,
``--token=X`` and $FABRICBENCH_TOKEN (each runs), or under an abbreviation of ``--token`` (each refused with
one line and exit 2, since argparse would otherwise take ``--tok X`` for ``--token X`` and the spelling-based
mask would miss it). Every file written, the captured stdout and stderr of every process, and serve's log are
then searched for the secret: raw bytes, and Parquet's rows and schema metadata decoded, in case a codec hid it.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from fabricbench.argtypes import MASK, TOKEN_VAR
from support import Server, fabricbench, one_error_line, read_rows

SECRET = f"s3cret-{uuid.uuid4().hex}"  # unique: any match is a leak, never a coincidence
QUICK = ["-k", "latency", "-m", "8:64", "-i", "20", "-x", "2", "--format", "table", "--timeout", "20"]
PREFIXES = ["--t", "--to", "--tok", "--toke"]  # every abbreviation argparse took for --token on run


def _peer_run(port: int, out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return fabricbench("run", "--peer", f"127.0.0.1:{port}", "--out", str(out), *QUICK, *args, timeout=120, env=env)


def _leaks(root: Path, *results: subprocess.CompletedProcess) -> list[str]:
    """Where the secret was found: files under ROOT (bytes, and Parquet decoded), and the processes' output."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if SECRET.encode() in path.read_bytes():
            found.append(str(path))
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            decoded = str(table.to_pylist()) + str(table.schema.metadata)
            if SECRET in decoded:
                found.append(f"{path} (decoded)")
    for result in results:
        for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if SECRET in text:
                found.append(f"{' '.join(map(str, result.args[3:6]))}... {stream}")
    return found


def test_no_spelling_of_the_token_reaches_a_file_or_the_console(tmp_path):
    root = tmp_path / "runs"
    server = Server(env={TOKEN_VAR: SECRET})
    results = []
    try:
        assert "a token is required" in server.wait_for("listening on")
        spellings = {"--token X": ["--token", SECRET], "--token=X": [f"--token={SECRET}"], TOKEN_VAR: []}
        for i, (name, args) in enumerate(spellings.items()):
            out = root / f"accepted-{i}"
            result = _peer_run(server.port, out, *args, env=None if args else {TOKEN_VAR: SECRET})
            results.append(result)
            assert result.returncode == 0, (name, result.stderr)
            assert "latency" in result.stdout  # the console table was printed, and searched below
            rows, meta = read_rows(out)
            assert len(rows) == 4 and meta["token"] is True, name
            if args:  # where the command line held it, a mask stands in its place
                assert any(MASK in word for word in meta["command_line"]), meta["command_line"]
            server.wait_for("session done", count=i + 1)
        for prefix in PREFIXES:
            for args in ([prefix, SECRET], [f"{prefix}={SECRET}"]):
                out = root / f"refused{prefix}{len(args)}"
                result = _peer_run(server.port, out, *args)
                results.append(result)
                assert result.returncode == 2, (args, result.stderr)
                one_error_line(result.stderr, f"unrecognized arguments: {prefix} (options are not abbreviated:")
                assert not out.exists(), f"{out} was left behind"
        # serve and check's `-- run` refuse an abbreviation without quoting the value either.
        for command in (["serve", "--tok", SECRET], ["serve", f"--toke={SECRET}"]):
            result = fabricbench(*command, timeout=60)
            results.append(result)
            assert result.returncode == 2
            one_error_line(result.stderr, "(options are not abbreviated: --token)")
        thresholds = tmp_path / "thresholds.toml"
        thresholds.write_text('[[threshold]]\ntransport = "tcp"\nkernel = "latency"\nmax_lat_p50_us = 1000000\n')
        args = ["check", str(thresholds), "--", "run", "--peer", f"127.0.0.1:{server.port}", "--tok", SECRET]
        result = fabricbench(*args, "--out", str(root / "checked"), timeout=60)
        results.append(result)
        assert result.returncode == 2
        one_error_line(result.stderr, "unrecognized arguments for run: --tok (options are not abbreviated: --token)")
    finally:
        server.stop()
    assert len(list(root.iterdir())) == len(spellings)  # only the accepted runs wrote anything
    assert not _leaks(root, *results)
    assert not [line for line in server.lines if SECRET in line]


# A token, and the refused command line that quoted it back before it was masked: (the command, what the one
# line still says). The address is a word no resolver knows, given as the token too.
TOKENS = {"plain": SECRET, "a backslash": f"s3\\cret-{uuid.uuid4().hex}", "a tab": f"s3\tcret-{uuid.uuid4().hex}"}
REFUSALS = {
    "serve --address T": (["serve", "--address", "TOKEN", "--port", "1"], "cannot listen on "),
    "a stray word equal to T": (["serve", "--token", "TOKEN", "TOKEN"], "unrecognized arguments: "),
    "run -m T": (["run", "-m", "TOKEN", "--peer", "127.0.0.1:1"], "bad message size "),
}


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refusal_never_quotes_the_token_in_any_spelling(token, refusal):
    value = TOKENS[token]
    args, said = REFUSALS[refusal]
    result = fabricbench(*[value if a == "TOKEN" else a for a in args], "--token", value, timeout=60)
    assert result.returncode == 2
    one_error_line(result.stderr, said)
    spellings = {value, repr(value)[1:-1], value.encode("unicode_escape").decode()}
    assert not [s for s in spellings if s in result.stderr], result.stderr
    assert MASK in result.stderr, result.stderr
