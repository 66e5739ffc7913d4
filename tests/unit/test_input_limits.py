"""Bad command lines refused by the argument types and the plan checks, and the memory estimate, without a process."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from fabricbench import argtypes, cli
from fabricbench.analysis import load
from fabricbench.argtypes import MASK, TOKEN_VAR, masked_command_line
from fabricbench.cli import build_parser
from fabricbench.control.rendezvous import ProtocolError
from fabricbench.errors import UsageError
from fabricbench.launch.peer import decode_hello, encode_hello
from fabricbench.measure import memory
from fabricbench.measure.kernels import SLOW_BYTES_PER_S, get_kernel
from fabricbench.measure.plan import MAX_MESSAGE_SIZE, Plan, Step, size_limits
from fabricbench.run.planner import build_plan
from fabricbench.run.runner import Watchdog

MiB = 1 << 20
EXAMPLE = Path(__file__).resolve().parents[2] / "results" / "examples" / "default-sweep"

# Refused while the command line is parsed: (argv, words of the one-line error).
PARSE_ERRORS = {
    "empty kernel list": (["run", "-k", ""], "no kernel given in ''"),
    "empty transport list": (["run", "-t", ""], "no transport given in ''"),
    "a lone comma": (["run", "-t", ","], "no transport given in ','"),
    "empty metric list": (["compare", "a", "--metric", ""], "no metric given in ''"),
    "empty peer": (["run", "--peer", ""], "--peer is empty: give HOST:PORT"),
    "no port": (["run", "--peer", "hostA"], "--peer must be HOST:PORT with a port of digits 0-9, got 'hostA'"),
    "superscript port": (["run", "--peer", "127.0.0.1:\u00b2"], "a port of digits 0-9"),
    "mathematical bold port": (["run", "--peer", "127.0.0.1:\U0001d7d6"], "a port of digits 0-9"),
    "port 0": (["run", "--peer", "127.0.0.1:0"], "--peer port must be at least 1, got 0"),
    "port past 65535": (["run", "--peer", "127.0.0.1:65536"], "--peer port must be at most 65535"),
    "no host": (["run", "--peer", ":18600"], "--peer host is empty"),
    "300-character label": (["run", "--peer", "a" * 300 + ":18600"], "1 to 63 characters"),
    "empty label": (["run", "--peer", "a..b:18600"], "1 to 63 characters"),
    "name past 253": (["run", "--peer", ".".join(["a" * 60] * 5) + ":1"], "a host name has at most 253"),
    "fullwidth digits in the host": (["run", "--peer", "\uff11\uff12\uff17.0.0.1:1"], "digits other than 0-9"),
    "timeout inf": (["run", "--timeout", "inf"], "--timeout must be a number of seconds, got 'inf'"),
    "timeout nan": (["run", "--timeout", "nan"], "--timeout must be a number of seconds, got 'nan'"),
    "timeout 1e20": (["run", "--timeout", "1e20"], "--timeout must be at most 86400 seconds"),
    "timeout in other digits": (["run", "--timeout", "\U0001d7d6"], "--timeout must be a number of seconds"),
    "max-time inf": (["run", "--max-time", "inf"], "--max-time must be a number of seconds, got 'inf'"),
    "max-time past a day": (["run", "--max-time", "86401"], "--max-time must be at most 86400 seconds"),
    "ten billion iterations": (["run", "-i", "10000000000"], "iterations must be at most 1000000000"),
    "ten billion warm-up": (["run", "-x", "10000000000"], "warm-up must be at most 1000000000"),
    "iterations in other digits": (["run", "-i", "\U0001d7d6"], "iterations must be a whole number"),
    "iterations with underscores": (["run", "-i", "1_000"], "iterations must be a whole number"),
    "sizes in other digits": (["run", "-m", "\U0001d7d6:\U0001d7d4\U0001d7d2"], "bad message size"),
    "size past 1 GiB": (["run", "-m", "8G:8G"], "a message is at most 1 GiB"),
    "size of 21 digits": (["run", "-m", "1" * 21], "bad message size"),
    "tcp port in other digits": (["run", "--tcp-port", "\u00b2"], "port must be a whole number"),
    "tcp port past 65535": (["run", "--tcp-port", "70000"], "port must be at most 65535"),
    "max-memory garbage": (["run", "--max-memory", "lots"], "bad --max-memory 'lots'"),
    "max-input garbage": (["compare", "a", "--max-input", "1T"], "bad --max-input '1T'"),
    # A malformed --peer is a usage error (exit 2), not a name the resolver failed to find (exit 3).
    "two ports": (["run", "--peer", "127.0.0.1:18600:1"], "one ':' before the port (an IPv6 address goes in"),
    "bare IPv6": (["run", "--peer", "::1:18600"], "an IPv6 address goes in brackets: [::1]:PORT"),
    "no IPv6 in brackets": (["run", "--peer", "[zz]:18600"], "[zz] is not an IPv6 address in brackets"),
    "empty brackets": (["run", "--peer", "[]:18600"], "--peer host is empty"),
    "emoji host": (["run", "--peer", "\U0001f642:80"], "is not a host name or IPv4 address: it holds '\U0001f642'"),
    "space in the host": (["run", "--peer", "a b:80"], "it holds ' '"),
    "IPv4 past 255": (["run", "--peer", "999.1.1.1:80"], "'999.1.1.1' is not an IPv4 address"),
    "port of letters": (["run", "--peer", "127.0.0.1:http"], "a port of digits 0-9"),
    # Counts have bounds: 400 digits reached the memory planner and overflowed a float there.
    "window of 400 digits": (["run", "-k", "bw", "-W", "9" * 400], "window must be at most 65536, got a number of 400"),
    "window past the wire": (["run", "-W", "70000"], "window must be at most 65536, got 70000"),
    "max-window of 400 digits": (["serve", "--max-window", "9" * 400], "--max-window must be at most 65536"),
    "max-iterations past 10^9": (["serve", "--max-iterations", "1" * 12], "--max-iterations must be at most"),
    "percentile with an underscore": (["run", "--format", "osu", "--osu-percentiles", "5_0"], "'5_0' is not a number"),
    "percentile in other digits": (["run", "--format", "osu", "--osu-percentiles", "\u0665\u0660"], "is not a number"),
    "osu-shims into ''": (["osu-shims", ""], "osu-shims DIR is empty"),
    "empty osu datatype": (["run", "--osu-datatype", ""], "--osu-datatype is empty"),
    # --timeout has a floor: below it a busy host's pauses read as a dead peer.
    "timeout 1e-9": (["run", "--timeout", "1e-9"], "--timeout must be at least 1 s, got 1e-9"),
    "timeout 0.5": (["run", "--timeout", "0.5"], "--timeout must be at least 1 s, got 0.5"),
    # A serve cap of 0 would start a server that refuses every run.
    "max-bytes 0": (["serve", "--max-bytes", "0"], "--max-bytes must be at least 1 B, got '0'"),
    "max-timeout 0": (["serve", "--max-timeout", "0"], "--max-timeout must be above 0 seconds"),
    "max-timeout under the floor": (["serve", "--max-timeout", "0.5"], "--max-timeout must be at least 1 s"),
    "max-iterations 0": (["serve", "--max-iterations", "0"], "--max-iterations must be at least 1, got 0"),
    "max-warmup 0": (["serve", "--max-warmup", "0"], "--max-warmup must be at least 1, got 0"),
    "max-window 0": (["serve", "--max-window", "0"], "--max-window must be at least 1, got 0"),
    "max-session 0": (["serve", "--max-session", "0"], "--max-session must be above 0 seconds"),
    # No option is abbreviated (--tok X was --token X), and the words after one are not quoted back.
    "abbreviated token": (["run", "--tok", "v4lue"], "unrecognized arguments: --tok (options are not abbreviated"),
    "abbreviated token=": (["serve", "--toke=v4lue"], "--toke (options are not abbreviated: --token)"),
    "abbreviated cap": (["serve", "--max-b", "0"], "--max-b (options are not abbreviated: --max-bytes)"),
    "abbreviated out": (["compare", "a", "--ou", "d"], "--ou (options are not abbreviated: --out)"),
}

# Refused by build_plan before any rank starts: (run's arguments, words of the error).
PLAN_ERRORS = {
    "no size left for bw": (["-k", "bw", "-m", "0"], "-m 0 leaves bw no size: without a minimum it starts at 1 B"),
    "buffers over --max-memory": (
        ["-k", "latency", "-m", "4M:4M", "-c", "--max-memory", "8M"],
        "mpi latency at 4.0 MiB on 2 ranks needs about 16.0 MiB per rank, most of it buffers for latency at "
        "4.0 MiB (-m); --max-memory allows 8.0 MiB",
    ),
    "samples over --max-memory": (
        ["-k", "latency", "-m", "8", "-i", "100000000", "--max-memory", "1G"],
        "most of it samples of 100000000 iterations (-i, -x)",
    ),
    "window over --max-memory": (["-k", "bw", "-m", "8", "-W", "65536", "--max-memory", "16M"], "window of 65536"),
    "tcp port range": (["-t", "tcp", "-k", "latency", "--tcp-port", "65535"], "rank 1 would need 65536"),
    "foreign tcp address": (["-t", "tcp", "-k", "latency", "--tcp-address", "8.8.8.8"], "not an address of this host"),
    "empty tcp address": (["-t", "tcp", "-k", "latency", "--tcp-address", ""], "--tcp-address is empty"),
    "missing interface": (["-t", "tcp", "-k", "latency", "--tcp-interface", "nonexist"], "--tcp-interface 'nonexist'"),
}


@pytest.mark.parametrize("name", list(PARSE_ERRORS))
def test_bad_arguments_are_refused_while_parsing(name):
    argv, words = PARSE_ERRORS[name]
    with pytest.raises(UsageError) as refused:
        build_parser().parse_args(argv)
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--peer", "[::1]:18600"],
        ["run", "--peer", "[fe80::1%eth0]:1"],
        ["run", "--peer", "node-01_a.example.org:65535"],
        ["run", "--peer", "b\u00fccher.example:80"],  # IDNA: letters of other scripts
        ["run", "--timeout", "1"],
        ["serve", "--max-bytes", "1", "--max-warmup", "1", "--max-timeout", "1"],
    ],
)
def test_the_least_good_values_are_accepted(argv):
    build_parser().parse_args(argv)


def test_no_value_after_a_refused_option_is_quoted_back():
    with pytest.raises(UsageError) as refused:
        build_parser().parse_args(["run", "--tok", "v4lue", "--toke=v4lue"])
    assert "v4lue" not in str(refused.value) and "--tok " in str(refused.value)


def test_the_command_line_is_masked_from_the_tokens_value_not_its_spelling(monkeypatch):
    monkeypatch.setattr(argtypes, "_secrets", set())
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    build_parser().parse_args(["run", "--peer", "h:1", "--token", "tok3n"])  # the parsed value is remembered
    argv = ["fabricbench", "run", "--label", "tok3n", "--out=/r/tok3n", "-k", "latency", "--token", "tok3n"]
    masked = masked_command_line(argv)
    assert masked == ["fabricbench", "run", "--label", MASK, f"--out={MASK}", "-k", "latency", "--token", MASK]
    monkeypatch.setenv(TOKEN_VAR, "env-s3cret")  # never given on the command line, still masked where it shows
    assert masked_command_line(["x", "--label=env-s3cret", "--env-s3cret=1"]) == ["x", f"--label={MASK}", MASK]
    said = argtypes.masked_text("wrong tok3n: got 'tok3n', \"x env-s3cret\" and 'a:tok3n:b'")
    assert said == f"wrong tok3n: got '{MASK}', \"x {MASK}\" and 'a:{MASK}:b'"  # quoted input only


def test_an_error_line_never_quotes_the_token(monkeypatch, capsys):
    monkeypatch.setattr(argtypes, "_secrets", set())
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    assert cli.main(["run", "--peer", "127.0.0.1:1", "--token", "k3rnel", "-k", "k3rnel"]) == 2
    assert cli.main(["run", "--peer", "127.0.0.1:1", "--tok", "v4lue"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fabricbench: error: unknown kernel '{MASK}'; known: latency"), err
    assert len(err.splitlines()) == 2 and "k3rnel" not in err and "v4lue" not in err


def _plan(*run_args: str, ranks: int = 2) -> Plan:
    return build_plan(build_parser().parse_args(["run", *run_args]), ranks)


@pytest.mark.parametrize("name", list(PLAN_ERRORS))
def test_bad_plans_are_refused_before_any_rank(name):
    args, words = PLAN_ERRORS[name]
    with pytest.raises(UsageError) as refused:
        _plan(*args)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_peer_accepts_the_sizes_run_sweeps_and_refuses_the_ones_run_refuses():
    plan = _plan("-t", "tcp", "-k", "latency,bw,allreduce", "-m", "0:8")
    assert [s.sizes for s in plan.steps] == [[0, 1, 2, 4, 8]] * 3  # 0 B on tcp, 1 B of float32: unsupported rows
    decoded, _, _ = decode_hello(encode_hello(plan, None), {})
    assert [(s.kernel, s.sizes) for s in decoded.steps] == [(s.kernel, s.sizes) for s in plan.steps]
    assert size_limits(get_kernel("bw")) == (0, MAX_MESSAGE_SIZE) and size_limits(get_kernel("barrier")) == (0, 0)
    too_large = Plan(steps=[Step("tcp", "bw", [MAX_MESSAGE_SIZE * 2])], run_id="r1")
    with pytest.raises(ProtocolError, match="bw size 2147483648 B is outside 0..1073741824 B"):
        decode_hello(encode_hello(too_large, None), {})
    assert _plan("-k", "bw", "-m", "8").steps[0].sizes == [1, 2, 4, 8]  # no minimum: the default sweep's start


def test_the_last_port_a_run_can_use_is_accepted():
    assert _plan("-t", "tcp", "-k", "latency", "--tcp-port", "65534").transport_options["tcp"]["port"] == 65534


@pytest.mark.parametrize(
    "kernel,ranks,factor,unchecked",
    [
        ("latency", 2, 4, 2),  # one send and one receive buffer; -c: the expected copy and the comparison's mask
        ("bw", 2, 4, 2),  # the window reuses one buffer each way (osu_bw's s_buf and r_buf): no W in the figure
        ("bibw", 2, 4, 2),
        ("put", 2, 4, 2),
        ("allreduce", 8, 7, 2),  # -c: the float32 sum's closed form holds 16 bytes of int64 per 4-byte element
        ("reduce_scatter", 4, 28, 8),  # the float vector of every rank's block
        ("allgather", 4, 16, 8),  # S x ranks held
        ("alltoall", 4, 16, 8),
        ("barrier", 4, 0, 0),
    ],
)
def test_a_cases_peak_follows_how_it_allocates(kernel, ranks, factor, unchecked):
    size = 0 if kernel == "barrier" else MiB
    assert get_kernel(kernel).held_bytes(size, ranks) == factor * size
    assert get_kernel(kernel).held_bytes(size, ranks, validate=False) == unchecked * size


def test_a_256_mib_bw_rank_is_planned_at_a_few_messages_not_a_window_of_them():
    for window in (1, 16, 64):
        plan = Plan(steps=[Step("mpi", "bw", [256 * MiB])], iterations=2, warmup=1, window=window)
        need = memory.plan_need(plan, 2)
        assert need.buffers == 2 * 256 * MiB and need.total < 513 * MiB, (window, need)
        plan = Plan(steps=[Step("mpi", "bw", [256 * MiB])], iterations=2, warmup=1, window=window, validate=True)
        assert memory.plan_need(plan, 2).buffers == 4 * 256 * MiB


def test_the_samples_count_warm_up_and_rank_0s_copies():
    assert memory.sample_bytes(1000, 10) == 8 * 1000 + 32 * 1000
    assert memory.sample_bytes(1, 5000) == 8 * 5000 + 32


def test_the_costliest_size_is_named():
    plan = Plan(steps=[Step("mpi", "latency", [8, 4 * MiB]), Step("mpi", "allreduce", [1 * MiB])])
    need = memory.plan_need(plan, 2)
    assert (need.kernel, need.size, need.buffers) == ("latency", 4 * MiB, 8 * MiB)
    assert memory.describe(need).startswith("mpi latency at 4.0 MiB on 2 ranks needs about 8.0 MiB per rank")
    assert memory.plan_need(Plan(steps=[]), 2) is None


def test_the_hosts_memory_is_shared_among_its_ranks(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8388608 kB\nMemAvailable: 2097152 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", str(meminfo))
    assert memory.available_bytes() == 2 << 30
    plan = Plan(steps=[Step("mpi", "latency", [512 * MiB])], iterations=10)
    memory.check_memory(plan, 2, 1, None)  # 1.0 GiB (a send and a receive buffer) of 2 GiB
    with pytest.raises(UsageError, match=r"this host has 2\.0 GiB available, 1\.0 GiB for each of 2 ranks"):
        memory.check_memory(plan, 2, 2, None)
    memory.check_memory(plan, 2, 2, 2 << 30)  # --max-memory is the limit when given
    meminfo.write_text("MemTotal: 8388608 kB\n")
    assert memory.available_bytes() is None
    memory.check_memory(plan, 2, 64, None)  # nothing known, nothing refused


def test_the_launchers_local_rank_count_is_used(monkeypatch):
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert memory.local_rank_count(16) == 16
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "\U0001d7d6")
    assert memory.local_rank_count(16) == 16
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")
    assert memory.local_rank_count(16) == 4


def test_one_iteration_moves_a_round_trip_a_window_or_a_collectives_buffers():
    assert get_kernel("latency").iteration_bytes(100, 2, 64) == 200
    assert get_kernel("bw").iteration_bytes(100, 2, 64) == 6400
    assert get_kernel("bibw").iteration_bytes(100, 2, 64) == 12800
    assert get_kernel("get").iteration_bytes(100, 2, 64) == 100
    assert get_kernel("allgather").iteration_bytes(100, 4, 64) == 800
    assert get_kernel("barrier").iteration_bytes(0, 4, 64) == 0


def test_without_a_warm_up_the_watchdog_gives_a_large_size_its_bytes_at_a_slow_rate():
    plan = Plan(steps=[], timeout=5.0)
    big = Watchdog.guess(plan, get_kernel("latency"), 256 * MiB, 2, 1)
    assert big == pytest.approx(4 * (4 + 2) * 256 * MiB / SLOW_BYTES_PER_S)  # building it, one round trip
    assert Watchdog.guess(plan, get_kernel("latency"), 8, 2, 1) < 1e-5
    window = Watchdog.guess(Plan(steps=[], window=100000), get_kernel("bw"), MiB, 2, 1)
    assert window > 1000  # 100000 messages of 1 MiB at 100 MB/s


def test_an_allowance_past_what_a_timer_takes_waits_instead_of_failing():
    watchdog = Watchdog(0, abort=lambda code: None)
    watchdog.arm(86400.0, "mpi latency at 8 B", expected_s=1e30, guessed=True)
    time.sleep(0.2)
    try:
        assert watchdog._timer.is_alive()  # an OverflowError would have ended the timer's thread
    finally:
        watchdog.disarm()


# ---- compare's inputs ------------------------------------------------------------------------------


def _example(tmp_path: Path, name: str = "run") -> Path:
    copy = tmp_path / name
    shutil.copytree(EXAMPLE, copy)
    (copy / "results.parquet").unlink(missing_ok=True)
    return copy


def _refused(path, words: str) -> None:
    with pytest.raises(UsageError) as refused:
        load.split_series([str(path)])
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_compare_reads_only_regular_files(tmp_path):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    _refused("/dev/zero", "'/dev/zero' is not a regular file")
    _refused(fifo, "fifo.csv' is not a regular file")
    run = _example(tmp_path)
    (run / "results.csv").unlink()
    os.mkfifo(run / "results.csv")
    _refused(run, "results.csv' is not a regular file")
    _refused(tmp_path, f"no results.csv or results.parquet in '{tmp_path}'")


def test_compare_refuses_a_file_over_its_cap(tmp_path, monkeypatch):
    run = _example(tmp_path)
    monkeypatch.setattr(load, "max_input_bytes", 1024)
    _refused(run, "metadata.json' holds 7.8 KiB; compare reads up to 1.0 KiB (--max-input raises it)")


def test_compare_refuses_deeply_nested_metadata(tmp_path):
    run = _example(tmp_path)
    (run / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)
    _refused(run, "its JSON is nested too deeply")


def test_compare_refuses_text_no_terminal_can_print(tmp_path):
    run = _example(tmp_path)
    (run / "metadata.json").write_text('{"label": "\\ud800"}')
    _refused(run, "has metadata field 'label' = '\\ud800', with characters no text can hold")


@pytest.mark.parametrize("size", ["1.5", "1e30", str(10**30), "-4", "inf"])
def test_compare_refuses_sizes_that_are_no_byte_count(tmp_path, size):
    run = _example(tmp_path)
    lines = (run / "results.csv").read_text().splitlines()
    column = lines[0].split(",").index("size_B")
    cells = lines[2].split(",")
    cells[column] = size
    lines[2] = ",".join(cells)
    (run / "results.csv").write_text("\n".join(lines) + "\n")
    _refused(run, "has size_B = ")
    _refused(run, "(row 2): not a whole number of bytes from 0 to 1125899906842624 (1 PiB)")
