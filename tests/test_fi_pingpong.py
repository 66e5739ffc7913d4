"""The fi-pingpong transport end to end: libfabric's fi_pingpong between two real MPI ranks on this host.

The real runs need libfabric-bin (fi_pingpong, fi_info) and skip without it. Without fi_pingpong on PATH a run
stops before any rank starts; a fake fi_pingpong on PATH shows how a client's corrupt data and a server that
never listens end a run.
"""

from __future__ import annotations

import json
import math
import shutil
import stat
from pathlib import Path

import pytest

from support import BIN, PYTHON, Server, fabricbench, mpiexec, one_error_line, read_rows

HAVE_FI_PINGPONG = shutil.which("fi_pingpong") is not None and shutil.which("fi_info") is not None
NEEDS_FI_PINGPONG = pytest.mark.skipif(
    not HAVE_FI_PINGPONG, reason="needs libfabric-bin (fi_pingpong, fi_info): apt-get install libfabric-bin"
)
QUICK = ["-t", "fi-pingpong", "-k", "latency", "-m", "8:32", "-i", "100", "--timeout", "30", "--format", "none"]


@NEEDS_FI_PINGPONG
@pytest.mark.parametrize(("provider", "opened"), [("tcp", "tcp;ofi_rxm"), ("shm", "shm")])
def test_fi_pingpong_measures_each_size_between_two_ranks(out, provider, opened):
    result = mpiexec(2, "run", *QUICK, "--ofi-provider", provider, "-c", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table, meta = read_rows(out)
    assert list(table["size_B"]) == [8, 16, 32] and (table["status"] == "ok").all()
    assert (table["lat_mean_us"] > 0).all() and table["lat_mean_us"].map(math.isfinite).all()
    assert table["lat_p50_us"].isna().all()  # fi_pingpong prints a mean only
    assert (table["method"] == f"fi_pingpong -p {provider} -e rdm -m tagged -c, provider {opened}").all()
    assert (table["validation"] == "pass").all() and (table["iterations"] == 100).all() and (table["warmup"] == 0).all()
    assert table["note"].str.startswith("fi_pingpong's mean, half a round trip").all()
    found = meta["transports"]["fi-pingpong"]
    assert found["provider_asked"] == provider and found["client_endpoint"]["provider"] == opened
    assert found["libfabric"] != "unknown" and found["tool"].endswith("fi_pingpong")


@NEEDS_FI_PINGPONG
def test_serve_runs_the_server_side_with_the_clients_provider(out):
    """Without MPI: serve has no --ofi-provider; the client's travels in the HELLO, so both open shm."""
    server = Server()
    try:
        result = fabricbench("run", "--peer", f"127.0.0.1:{server.port}", *QUICK, "-m", "8", "--ofi-provider", "shm",
                             "--out", str(out))  # fmt: skip
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    table, meta = read_rows(out)
    assert table["status"][0] == "ok" and table["lat_mean_us"][0] > 0
    assert meta["transports"]["fi-pingpong"]["server_endpoint"]["provider"] == "shm"


@NEEDS_FI_PINGPONG
def test_a_blocking_wait_is_unsupported_in_fi_pingpongs_terms(out):
    result = mpiexec(2, "run", *QUICK, "--ofi-provider", "shm", "--ofi-progress", "wait", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table, _ = read_rows(out)
    assert len(table) == 1 and table["status"][0] == (
        "unsupported: fi_pingpong always busy-polls fi_cq_read: it has no blocking wait (--ofi-progress wait)"
    )


@NEEDS_FI_PINGPONG
def test_a_provider_libfabric_lacks_stops_the_run_before_any_rank(out):
    result = fabricbench("run", *QUICK, "--ofi-provider", "shm", "--ofi-endpoint", "msg", "--out", str(out))
    assert result.returncode == 2
    one_error_line(result.stderr, "libfabric has no msg endpoint with tagged messages from provider 'shm' here")
    assert not out.exists()


def test_without_fi_pingpong_the_run_stops_in_one_line_and_doctor_says_how_to_get_it(out):
    """PATH holds only the venv: python and mpiexec, no fi_pingpong."""
    result = fabricbench("run", *QUICK, "--out", str(out), env={"PATH": str(BIN)})
    assert result.returncode == 2
    one_error_line(result.stderr, "fi_pingpong is not installed (Debian/Ubuntu: apt-get install libfabric-bin")
    assert not out.exists()
    verdict = json.loads(fabricbench("doctor", "--json", env={"PATH": str(BIN)}).stdout)["transports"]["fi-pingpong"]
    assert not verdict["available"] and "apt-get install libfabric-bin" in verdict["reason"]


@NEEDS_FI_PINGPONG
def test_doctor_names_the_tool_and_libfabrics_version():
    verdict = json.loads(fabricbench("doctor", "--json").stdout)["transports"]["fi-pingpong"]
    assert verdict["available"], verdict
    assert verdict["details"]["tool"] == shutil.which("fi_pingpong") and verdict["details"]["libfabric"][0].isdigit()


# --- a fake fi_pingpong: how failures end a run -----------------------------------------------------------------------

FAKE = """#!{python}
# A fake fi_pingpong: the server (-B PORT) listens unless FAKE_NO_LISTEN is set, takes one client and prints
# the real table; the client (-P PORT) connects and prints what -c prints on corrupt data, then exits 255.
import os, socket, sys, time
args = sys.argv[1:]
if "-B" in args:
    if os.environ.get("FAKE_NO_LISTEN"):
        time.sleep(60)
    with socket.create_server(("", int(args[args.index("-B") + 1]))) as server:
        server.accept()[0].recv(1)
    print("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec")
    print("8       100     =100     1.5k        0.01s      0.13      63.06       0.02")
else:
    socket.create_connection(("127.0.0.1", int(args[args.index("-P") + 1]))).close()
    print("Error at iteration=3 size=8 byte=0")
    sys.exit(255)
"""


@pytest.fixture
def fake_fi_pingpong(tmp_path: Path) -> dict:
    """PATH with a fake fi_pingpong first; fi_info, where installed, stays the real one (it is only asked)."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    fake = bin_dir / "fi_pingpong"
    fake.write_text(FAKE.format(python=PYTHON))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}:{BIN}:/usr/bin:/bin"}


def test_corrupt_data_ends_the_run_in_fi_pingpongs_words(out, fake_fi_pingpong):
    result = mpiexec(2, "run", *QUICK, "-m", "8", "-c", "--out", str(out), env=fake_fi_pingpong, timeout=60)
    assert result.returncode == 3
    one_error_line(result.stderr, "fi_pingpong client failed (255): -c found corrupt data: Error at iteration=3")


def test_a_server_that_never_listens_is_one_error_line(out, fake_fi_pingpong):
    env = fake_fi_pingpong | {"FAKE_NO_LISTEN": "1"}
    result = mpiexec(2, "run", *QUICK, "-m", "8", "--timeout", "5", "--out", str(out), env=env, timeout=60)
    assert result.returncode == 3
    one_error_line(result.stderr, "fi_pingpong server did not listen on port")
