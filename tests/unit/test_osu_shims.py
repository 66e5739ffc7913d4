"""OSU's command lines to fabricbench's, and the shim scripts, without starting a rank."""

from __future__ import annotations

import datetime
import os
import re
import shlex
import stat
from pathlib import Path

import pytest

from fabricbench.errors import UsageError
from fabricbench.launch.osu_programs import LONG_OPTIONS
from fabricbench.launch.osu_shims import (
    BENCHMARKS,
    HONOURED,
    NO_EFFECT,
    REFUSED,
    TREATMENTS,
    getopt,
    osu_datatype,
    parse,
    results_dir,
    results_root,
    run_argv,
    script,
    translate,
    usage,
    version_text,
    write_shims,
)
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.plan import kernel_sizes, parse_size_range


def _run(name: str, line: str) -> list[str]:
    return run_argv(parse(name, line.split()), "OUT")


def test_reframes_point_to_point_line_runs_host_buffers_with_validation():
    # hpctestlib's osu_run: `osu_latency -m 8 -x 10 -i 1000 -c D D`; a CPU build of OSU ignores D D, and OSU 7.4
    # skips the 0-byte size, which holds no MPI_CHAR: 1 to 8 B.
    assert _run("osu_latency", "-m 8 -x 10 -i 1000 -c D D") == [
        *("run", "-t", "mpi", "-k", "latency", "--format", "osu", "--label", "osu_latency"),
        *("-m", "1:8", "-i", "1000", "-x", "10", "-c", "--out", "OUT"),
    ]
    assert _run("osu_bw", "-m 4194304 -x 10 -i 1000 -c D D")[4:5] == ["bw"]


def test_reframes_gpu_lines_run_cuda_buffers():
    # hpctestlib with device_buffers = 'cuda': `-d cuda` after -c, and D D on the point-to-point tests.
    assert _run("osu_latency", "-m 8 -x 10 -i 1000 -c -d cuda D D") == [
        *("run", "-t", "mpi", "-k", "latency", "--format", "osu", "--label", "osu_latency"),
        *("-m", "1:8", "-i", "1000", "-x", "10", "-c", "--buffer", "cuda", "--out", "OUT"),
    ]
    assert _run("osu_allreduce", "-m 8 -x 10 -i 1000 -c -d cuda")[-4:] == ["--buffer", "cuda", "--out", "OUT"]


def test_reframes_collective_line():
    argv = _run("osu_alltoall", "-m 8 -x 10 -i 1000 -c")
    assert argv[:5] == ["run", "-t", "mpi", "-k", "alltoall"] and "-c" in argv and "--osu-full" not in argv


@pytest.mark.parametrize(
    ("name", "line", "expected"),
    [
        ("osu_alltoall", "-f", ["--osu-full"]),
        ("osu_alltoall", "-z", ["--osu-percentiles", "50,90,99"]),  # OSU's default list
        ("osu_alltoall", "-z50,99", ["--osu-percentiles", "50,99"]),  # getopt's attached optional value
        ("osu_alltoall", "-z 50,99", ["--osu-percentiles", "50,90,99"]),  # "-z 50,99": -z, then OSU stops
        ("osu_alltoall", "-z 50,99 -c -f", ["--osu-percentiles", "50,90,99"]),  # -c and -f left unread, as OSU
        ("osu_bw", "-z50", ["--osu-percentiles", "50"]),  # its windows' bandwidths
        ("osu_put_bw", "-z", ["--osu-percentiles", "50,90,99"]),
        # OSU's tail bandwidths of both directions, of every pair, of every parent (rows.tail_window_bytes)
        ("osu_bibw", "-z", ["--osu-percentiles", "50,90,99"]),
        ("osu_bibw_persistent", "-z50,99", ["--osu-percentiles", "50,99", "--method", "persistent"]),
        ("osu_put_bibw", "-z", ["--osu-percentiles", "50,90,99"]),
        ("osu_mbw_mr", "-z", ["--osu-percentiles", "50,90,99"]),
        ("osu_bw_fan_in", "-z", ["--osu-percentiles", "50,90,99"]),
        ("osu_multi_lat", "-z", []),  # OSU 7.4 reads -z there and prints the latency alone
        ("osu_multi_lat", "-z75", []),  # and so keeps no percentile of its own to refuse
        ("osu_alltoall", "--tail-lat=99.9", ["--osu-percentiles", "99"]),  # OSU's atoi: P99
        ("osu_alltoall", "--tail=90", ["--osu-percentiles", "90"]),  # getopt_long: an unambiguous prefix
        ("osu_allreduce", "", ["--osu-datatype", "MPI_CHAR"]),  # OSU 7.4's default: a reduction sums MPI_CHAR
        ("osu_reduce", "-f", ["--osu-full", "--osu-datatype", "MPI_CHAR"]),
        ("osu_reduce_scatter", "", ["--osu-datatype", "MPI_CHAR"]),
        ("osu_allreduce", "-T mpi_float", ["--osu-datatype", "MPI_FLOAT"]),
        ("osu_allreduce", "-T mpi_int", ["--osu-datatype", "MPI_INT"]),
        ("osu_allgather", "", []),  # moves MPI_CHAR on its own
        ("osu_bcast", "-T MPI_CHAR", ["--osu-datatype", "MPI_CHAR"]),
        ("osu_bw", "-W 16", ["-W", "16"]),
        ("osu_bw", "--window-size=16", ["-W", "16"]),
        ("osu_latency", "-m4:64 -i100", ["-m", "4:64", "-i", "100"]),
        ("osu_alltoall", "-fc", ["-c", "--osu-full"]),  # clustered flags, as getopt takes them
        ("osu_alltoall", "-cf", ["-c"]),  # -c's optional value is the rest: "f", which OSU ignores
        ("osu_bibw", "H H", []),
        ("osu_bibw", "D D -W 8", []),  # "+": OSU stops at D, and -W 8 is left unread
        ("osu_mbw_mr", "D D -W 8", ["-W", "8"]),  # osu_mbw_mr's string has no "+": GNU getopt reads on
        ("osu_allreduce", "D D", ["--osu-datatype", "MPI_CHAR"]),  # a CPU build ignores what follows the options
        ("osu_latency", "-T mpi_int", ["--osu-datatype", "MPI_INT"]),  # bytes of ints
        ("osu_latency", "-T MPI_INTEGER", ["--osu-datatype", "MPI_INT"]),  # OSU compares the first 7 letters
        ("osu_bw", "-t 4 -b single -u 3", []),  # accepted, and without effect, as in OSU 7.4
        ("osu_alltoall", "-a 8", []),
        ("osu_reduce", "-k fixed:0", ["--osu-datatype", "MPI_CHAR"]),
        ("osu_mbw_mr", "-R 1", []),
        ("osu_mbw_mr", "-R 0", ["--osu-no-rate"]),  # MB/s alone
        ("osu_barrier", "-m 8 -f", ["--osu-full"]),  # OSU reads -m here and ignores it
        ("osu_bibw", "D D", []),
        ("osu_bibw", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_bibw", "-d cuda H H", []),  # OSU's -d cuda H H: both buffers in host memory
        ("osu_bw", "-dcuda D D", ["--buffer", "cuda"]),
        ("osu_bw", "-d CUDA D D", ["--buffer", "cuda"]),  # OSU's strncasecmp
        ("osu_bibw", "--accelerator=cuda D D", ["--buffer", "cuda"]),
        ("osu_mbw_mr", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_multi_lat", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_allgather", "-d cuda", ["--buffer", "cuda"]),  # a collective: every buffer on the GPU
        ("osu_allgather", "-d cuda D D", ["--buffer", "cuda"]),  # OSU's accelerator build ignores them there
        ("osu_reduce_scatter", "-d cuda", ["--osu-datatype", "MPI_CHAR", "--buffer", "cuda"]),
        ("osu_barrier", "-d cuda", ["--buffer", "cuda"]),
        ("osu_put_latency", "-w allocate -s flush", ["--rma-window", "allocate", "--rma-sync", "flush"]),
        ("osu_acc_latency", "-w DYNAMIC -s lock_all -c", ["--rma-window", "dynamic", "--rma-sync", "lock_all", "-c"]),
        ("osu_put_bibw", "-s fence -W 8", ["--rma-sync", "fence", "-W", "8"]),
        ("osu_latency_mt", "-t 2:3 -m 8", ["--mpi-threads", "2:3", "-m", "1:8"]),
        ("osu_latency_mp", "-t 1:3 -c", ["--mpi-processes", "1:3", "-m", "1:4194304", "-c"]),  # OSU skips 0 B
    ],
)
def test_each_osu_option_becomes_its_run_option(name, line, expected):
    argv = _run(name, line)
    extra = argv[argv.index(name) + 1 : argv.index("--out")]
    assert extra == expected


# (benchmark, OSU options, the -m fabricbench is given: None for its default sweep, which is then OSU's)
SWEEPS = [
    ("osu_latency", "", "1:4194304"),  # OSU 7.4 starts at 0 and skips it: no element in 0 B
    ("osu_latency", "-m 8", "1:8"),
    ("osu_latency", "-m 0:8", "1:8"),
    ("osu_latency", "-m :8", "1:8"),
    ("osu_latency", "-m 2:8", "2:8"),
    ("osu_latency", "-m 16:", "16:4194304"),  # OSU's MIN: with the default maximum
    ("osu_multi_lat", "-m 8", "8"),  # osu_multi_lat sends its 0-byte size
    ("osu_bw", "-m 4194304", "4194304"),  # from OSU's 1 B, as fabricbench's own sweep
    ("osu_bw", "-m 0:16", "1:16"),  # a minimum of 0 is refused by OSU, which keeps its 1
    ("osu_bw", "", None),
    ("osu_put_latency", "-m 0:8", "1:8"),
    ("osu_allreduce", "", None),  # MPI_CHAR, from 1 B
    ("osu_allreduce", "-m 8", "8"),
    ("osu_allreduce", "-T mpi_float", None),  # from 4 B: one float
    ("osu_allreduce", "-T mpi_float -m 1:16", "4:16"),  # 1 and 2 B hold no float: OSU skips them
    ("osu_reduce", "-T mpi_int -m 3:32", "6:32"),  # doubling from 3: 3 is skipped, 6 holds one int
    ("osu_alltoall", "-m 0:8", "1:8"),
    ("osu_barrier", "", None),
]


@pytest.mark.parametrize(("name", "line", "expected"), SWEEPS)
def test_sizes_are_osus_sweep_less_those_holding_no_element(name, line, expected):
    argv = _run(name, line)
    assert (argv[argv.index("-m") + 1] if "-m" in argv else None) == expected


@pytest.mark.parametrize(
    ("name", "line", "printed"),
    [
        ("osu_latency", "-m 8", [1, 2, 4, 8]),
        ("osu_latency", "", [1 << p for p in range(23)]),
        ("osu_allreduce", "-m 8", [1, 2, 4, 8]),
        ("osu_allreduce", "", [1 << p for p in range(21)]),
        ("osu_allreduce", "-T mpi_float -m 16", [4, 8, 16]),
        ("osu_reduce_scatter", "-m 0:4", [1, 2, 4]),
        ("osu_multi_lat", "-m 4", [0, 1, 2, 4]),
    ],
)
def test_the_run_sweeps_the_sizes_osu_prints(name, line, printed):
    # What ``fabricbench run`` makes of the translated -m and datatype: the sizes OSU 7.4 prints for the line.
    argv = _run(name, line)
    bench = BENCHMARKS[name]
    kernel = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, parse(name, line.split()).values) or "")
    size_range = parse_size_range(argv[argv.index("-m") + 1]) if "-m" in argv else None
    assert kernel_sizes(kernel, size_range) == printed


# fop and cas refuse -T: their one element is the 8-byte MPI_INT64_T of an RDMA atomic (see their treatment).
MOVES_MPI_CHAR = [name for name, b in BENCHMARKS.items() if "T" in b.letters and b.treatment("T").kind != REFUSED]


@pytest.mark.parametrize("name", MOVES_MPI_CHAR)
def test_without_minus_T_every_shim_moves_osus_mpi_char(name):
    bench = BENCHMARKS[name]
    kernel = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, {}) or "")
    assert kernel.osu_datatype == "MPI_CHAR" and kernel.elem_bytes == 1
    if kernel.collective:
        assert kernel.min_size == 1  # OSU's collectives start at 1 B
    with_int = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, {"T": "mpi_int"}))
    if kernel.collective_spec and kernel.collective_spec.elements:  # a reduction sums what -T names
        assert (with_int.osu_datatype, with_int.elem_bytes, with_int.min_size) == ("MPI_INT", 4, 4)
    else:  # the others move the bytes of ints: whole ints, from 4 B
        assert (with_int.osu_datatype, with_int.elem_bytes) == ("MPI_INT", 4) and with_int.min_size >= 4
        assert with_int.collective_spec == kernel.collective_spec  # the same bytes, moved as bytes


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("osu_latency", "-d rocm D D", "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        ("osu_allreduce", "-d rocm", "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d openacc D D", "-d openacc: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d managed", "-d managed: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d cpu", "-d cpu: not one of OSU's accelerator kinds"),  # OSU: Invalid Accel Type
        ("osu_latency", "-d tpu", "-d tpu: not one of OSU's accelerator kinds"),
        ("osu_latency", "-d cuda", "-d cuda without buffer locations means H H"),
        ("osu_latency", "-d cuda D", "-d cuda takes two buffer locations"),
        ("osu_bw", "-d cuda H D", "-d cuda H D: fabricbench puts both buffers in one place"),
        ("osu_latency", "-d cuda M M", "-d cuda M M: fabricbench has no managed"),
        ("osu_latency", "-d cuda X Y", "buffer locations are two of H, D, M"),
        ("osu_put_latency", "-d cuda D D", "-d cuda: fabricbench's mpi-rma buffers are host memory only"),
        ("osu_get_bw", "-d cuda", "-d cuda: fabricbench's mpi-rma buffers are host memory only"),
        ("osu_latency", "-f", "invalid option -f"),  # OSU's osu_latency has no -f
        ("osu_latency", "-W 8", "invalid option -W"),
        ("osu_put_latency", "-c", "invalid option -c"),  # no show_validation: no -c in its string
        ("osu_put_latency", "-T mpi_int", "invalid option -T"),
        ("osu_barrier", "-c", "invalid option -c"),
        ("osu_latency", "--graph=tty", "-G: graphs of per-iteration values"),
        ("osu_latency", "--nonesuch", "invalid option --nonesuch"),
        ("osu_bw", "--w=8", "ambiguous option --w"),  # --window-size, --warmup
        ("osu_latency", "-G tty", "-G: graphs"),
        ("osu_latency", "-P cycles", "-P: PAPI"),
        ("osu_latency", "-D cont", "-D: derived datatypes"),
        ("osu_latency", "-I", "-I: MPI sessions"),
        ("osu_allreduce", "-l", "-l: MPI_IN_PLACE"),
        ("osu_mbw_mr", "-V", "-V: a sweep of window sizes"),
        ("osu_mbw_mr", "-R 2", "-R 2: OSU takes 0 or 1"),
        ("osu_mbw_mr", "-p 3", "-p 3: fabricbench pairs every rank"),
        ("osu_bw", "-b multiple", "-b multiple: fabricbench's loops reuse one buffer"),
        ("osu_reduce", "-k rotate", "-k rotate: fabricbench's root is rank 0"),
        ("osu_reduce", "-k fixed:1", "-k fixed:1: fabricbench's root is rank 0"),
        ("osu_latency", "-z75", "-z75: fabricbench's table keeps the P50, P90, P99 columns only"),
        ("osu_latency", "-z101", "-z101: OSU's percentiles are 0 to 100"),
        ("osu_latency", "-T all", "OSU runs each in turn; fabricbench runs one datatype per run"),
        ("osu_latency", "-T mpi_int -T mpi_float", "fabricbench runs one datatype per run"),
        ("osu_allreduce", "-T mpi_double", "-T mpi_double: OSU 7.4 knows mpi_char, mpi_int, mpi_float and all"),
        ("osu_latency", "-u 11", "-u 11: OSU takes 0 to 10"),
        ("osu_alltoall", "-a 0", "-a 0: OSU's array size is at least 1"),
        ("osu_latency", "-clog:/tmp/x", "fabricbench keeps each size's validation in its table"),
        ("osu_latency", "-m", "-m needs a value"),
        ("osu_latency", "--validation=yes -G x", "-G: graphs"),  # --validation's optional value is OSU's to read
        ("osu_latency", "--full", "invalid option --full"),
        ("osu_put_latency", "-w shared", "-w shared: OSU's osu_put_latency takes create, allocate, dynamic"),
        ("osu_put_bibw", "-s flush", "-s flush: OSU's osu_put_bibw takes pscw, fence"),
        ("osu_get_acc_latency", "-c", "invalid option -c"),  # OSU's get_acc has no show_validation
        ("osu_latency_mt", "-c -t 1:2", "Number of sender and receiver threads must be same"),
        ("osu_latency_mt", "-t 0:2", "-t '0:2': SENDERS:RECEIVERS"),
        ("osu_init", "-m 8", "invalid option -m"),
        ("osu_bw_fan_out", "-c", "invalid option -c"),  # OSU's congestion programs have no show_validation
        ("osu_nonesuch", "", "no OSU benchmark 'osu_nonesuch'"),
    ],
)
def test_what_fabricbench_cannot_honour_is_one_usage_error_naming_it(name, line, problem):
    with pytest.raises(UsageError, match=problem.replace("(", r"\(").replace("+", r"\+")) as caught:
        parse(name, line.split())
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("name", "line", "read", "rest"),
    [
        ("osu_latency", "-m 8 D D -i 5", [("m", "8")], ["D", "D", "-i", "5"]),  # "+": the first argument ends them
        ("osu_mbw_mr", "-m 8 D D -i 5", [("m", "8"), ("i", "5")], ["D", "D"]),  # no "+": GNU getopt reads on
        ("osu_latency", "-z 50,99 -c", [("z", None)], ["50,99", "-c"]),  # an optional value only attached
        ("osu_latency", "-z50,99 -c", [("z", "50,99"), ("c", None)], []),
        ("osu_latency", "-cz", [("c", "z")], []),  # -c's optional value is the rest of the argument: "z"
        ("osu_latency", "-m8 -- -i 5", [("m", "8")], ["-i", "5"]),
        ("osu_latency", "-i5 -x 2", [("i", "5"), ("x", "2")], []),
        ("osu_latency", "--message-size 8 --iter=5", [("m", "8"), ("i", "5")], []),
        ("osu_latency", "--tail-lat 90", [("z", None)], ["90"]),  # long optional values only with "="
        ("osu_latency", "-h -G x", [("h", None)], []),  # OSU answers -h before reading on
        ("osu_latency", "-v", [("v", None)], []),
    ],
)
def test_getopt_reads_as_osus_option_string(name, line, read, rest):
    assert getopt(BENCHMARKS[name], line.split()) == (read, rest)


def test_every_shim_takes_its_osu_programs_letters_and_d():
    for bench in BENCHMARKS.values():
        assert set(bench.program.letters) <= set(bench.letters) <= set(bench.program.letters + "d")
        for letter in bench.letters:  # every letter has a treatment, and a refused one says why
            treatment = bench.treatment(letter)
            assert treatment.kind in (HONOURED, NO_EFFECT, REFUSED) and treatment.text


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@pytest.mark.parametrize("letter", sorted(set(TREATMENTS)))
def test_every_option_osu_accepts_is_honoured_or_refused_in_one_line(name, letter):
    bench = BENCHMARKS[name]
    kind = bench.takes(letter)
    if kind is None:
        with pytest.raises(UsageError, match=f"invalid option -{letter}"):
            parse(name, [f"-{letter}"])
        return
    treatment = bench.treatment(letter)
    value = {"required": [SAMPLE_VALUES.get(letter, "1")], "optional": [], "": []}[kind]
    if letter == "d":
        value += ["D", "D"] if bench.buffers else []
    if treatment.kind == REFUSED:
        with pytest.raises(UsageError) as caught:
            parse(name, [f"-{letter}", *value])
        assert str(caught.value) == f"{name}: -{letter}: {treatment.text}"
    elif letter == "d" and not bench.gpu_buffers:
        with pytest.raises(UsageError, match="host memory only"):
            parse(name, [f"-{letter}", *value])
    elif letter == "p":
        with pytest.raises(UsageError, match="N/2 pairs on N ranks"):  # no launcher here: no rank count
            parse(name, [f"-{letter}", *value])
    else:
        request = parse(name, [f"-{letter}", *value])
        assert request.action == {"h": "help", "v": "version"}.get(letter, "run")


# A value each option takes that fabricbench honours (the refused values are the table above).
SAMPLE_VALUES = {"m": "8", "W": "8", "d": "cuda", "w": "allocate", "s": "pscw", "T": "mpi_char", "k": "fixed:0"}
SAMPLE_VALUES |= {"b": "single", "R": "1", "M": "1048576", "t": "2:2"}


def test_help_and_version_are_answered_before_anything_is_checked():
    assert parse("osu_latency", ["-d", "cuda", "-h"]).action == "help"
    assert parse("osu_latency", ["--version"]).action == "version"
    text = usage(BENCHMARKS["osu_bw"])
    assert text.startswith("Usage: osu_bw [options] [H|D|M H|D|M]")
    assert "-W, --window-size" in text and "-f, --full" not in text
    assert "-f, --full" in usage(BENCHMARKS["osu_allreduce"])


def test_the_persistent_and_start_up_programs_run_their_calls_and_kernels():
    for name, kernel, options in (
        ("osu_latency_persistent", "latency", "-m 8 -c"),
        ("osu_bibw_persistent", "bibw", ""),
    ):
        argv = _run(name, options)
        assert argv[:5] == ["run", "-t", "mpi", "-k", kernel] and argv[argv.index("--method") + 1] == "persistent"
    assert _run("osu_init", "") == [
        *("run", "-t", "mpi", "-k", "init", "--format", "osu", "--label", "osu_init", "--out", "OUT"),
    ]
    assert _run("osu_hello", "")[4] == "hello"
    assert _run("osu_bw_fan_in", "-W 8")[4] == "bw-fan-in" and _run("osu_bw_fan_out", "")[4] == "bw-fan-out"
    assert _run("osu_fop_latency", "-m 1:1024")[4] == "fop" and "-m" not in _run("osu_fop_latency", "-m 1:1024")


def test_every_osu_name_maps_to_a_kernel_its_transport_has():
    from fabricbench.transports import transport_class

    assert (
        len(BENCHMARKS) == 52 + 25
    )  # 16, 8 rooted and v-variants, 14 persistent, 12 pt2pt/one-sided/start-up, 2 congestion, 25 osu_i* and
    # neighbourhood
    for bench in BENCHMARKS.values():
        assert bench.kernel in transport_class(bench.transport).kernels, bench.name


def test_results_folder_is_new_and_named_after_the_benchmark_under_the_results_root(monkeypatch, tmp_path):
    monkeypatch.delenv("FABRICBENCH_OSU_RESULTS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    when = datetime.datetime(2025, 1, 2, 3, 4, 5)
    first, second = results_dir("osu_bw", when), results_dir("osu_bw", when)
    assert first.startswith(f"{tmp_path}/data/fabricbench/osu/fabricbench-osu-osu_bw-20250102-030405-")
    assert first != second
    monkeypatch.setenv("FABRICBENCH_OSU_RESULTS", "/data/runs")
    assert results_dir("osu_bw", when).startswith("/data/runs/fabricbench-osu-osu_bw-")


@pytest.mark.parametrize(
    ("env", "root"),
    [
        ({"FABRICBENCH_OSU_RESULTS": "/scratch/osu", "XDG_DATA_HOME": "/xdg", "HOME": "/home/u"}, "/scratch/osu"),
        ({"XDG_DATA_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/fabricbench/osu"),
        ({"HOME": "/home/u"}, "/home/u/.local/share/fabricbench/osu"),
        ({"XDG_DATA_HOME": "relative", "HOME": "/home/u"}, "/home/u/.local/share/fabricbench/osu"),  # XDG: ignored
        ({"FABRICBENCH_OSU_RESULTS": "", "HOME": "/home/u"}, "/home/u/.local/share/fabricbench/osu"),
    ],
)
def test_results_root_is_the_variable_else_the_per_user_data_directory_never_the_cwd(monkeypatch, env, root):
    monkeypatch.setenv("HOME", env["HOME"])  # what expanduser("~") reads
    assert results_root(env) == root
    assert not results_root(env).startswith(".")


def test_script_execs_this_python_by_absolute_path_with_every_argument():
    text = script("osu_latency", "/opt/my env/bin/python")
    assert text.startswith("#!/bin/sh\n")
    assert text.rstrip().endswith("""exec '/opt/my env/bin/python' -m fabricbench osu osu_latency "$@\"""")


def test_write_shims_makes_executables_and_keeps_a_real_osu_binary(tmp_path):
    written = write_shims(str(tmp_path / "bin"), "/usr/bin/python3")
    assert sorted(p.name for p in written) == sorted(BENCHMARKS)
    for path in written:
        assert path.stat().st_mode & stat.S_IXUSR and os.access(path, os.X_OK)
    write_shims(str(tmp_path / "bin"), "/usr/bin/python3")  # ours: rewritten
    (tmp_path / "osu" / "osu_bw").parent.mkdir()
    (tmp_path / "osu" / "osu_bw").write_bytes(b"\x7fELF real OSU")
    with pytest.raises(UsageError, match="not a fabricbench shim"):
        write_shims(str(tmp_path / "osu"))
    assert (tmp_path / "osu" / "osu_bw").read_bytes() == b"\x7fELF real OSU"
    assert not (tmp_path / "osu" / "osu_latency").exists()  # nothing written when one is refused


@pytest.mark.parametrize("name", sorted(name for name, bench in BENCHMARKS.items() if "v" in bench.letters))
def test_minus_v_is_osus_version_line_alone(name, capsys, monkeypatch):
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    bench = BENCHMARKS[name]
    assert translate([name, "-v"]) is None
    printed = capsys.readouterr().out
    assert printed == version_text(bench) + "\n" and re.fullmatch(r"# OSU MPI[ _]\S.* Test v7\.4\n", printed)
    assert "fabricbench" not in printed
    assert translate([name, "--vers"]) is None and capsys.readouterr().out == printed  # getopt_long's prefix
    if bench.gpu_buffers:  # OSU's print_version_message after -d cuda: "-CUDA" after the library's name
        translate([name, "-d", "cuda", "-v"])
        assert capsys.readouterr().out == printed.replace("# OSU MPI", "# OSU MPI-CUDA", 1)


def test_help_lists_each_option_of_the_program_with_what_it_becomes():
    text = usage(BENCHMARKS["osu_barrier"])
    assert "  -m, --message-size        no effect: there are no sizes to sweep" in text
    assert "  -G, --graph               refused: graphs" in text
    assert "-c, --validation" not in text and "-T, --type" not in text  # osu_barrier's string has neither
    assert [line.split(",")[0].strip() for line in text.splitlines() if line.startswith("  -")] == [
        f"-{letter}" for letter in BENCHMARKS["osu_barrier"].letters
    ]


def test_the_manifest_holds_osus_77_programs_by_family():
    from fabricbench.launch.osu_programs import FAMILY_SIZES, PROGRAMS

    counts = {}
    for program in PROGRAMS.values():
        counts[program.family] = counts.get(program.family, 0) + 1
        assert program.optstring == "" or set(program.letters) <= {letter for letter, _ in LONG_OPTIONS.values()}
    assert counts == FAMILY_SIZES and len(PROGRAMS) == 77
    assert set(BENCHMARKS) <= set(PROGRAMS)  # every shim is one of OSU's programs
    assert PROGRAMS["osu_latency"].takes("z") == "optional" and PROGRAMS["osu_latency"].takes("m") == "required"
    assert PROGRAMS["osu_latency"].takes("h") == "" and PROGRAMS["osu_latency"].takes("f") is None
    assert PROGRAMS["osu_mbw_mr"].permutes and not PROGRAMS["osu_bw"].permutes


@pytest.mark.parametrize("limit", [1_000_000, 65_536, 4096])
def test_minus_M_keeps_the_sizes_whose_buffers_fit_on_a_rank(monkeypatch, limit):
    monkeypatch.setenv("PMI_SIZE", "4")
    argv = _run("osu_alltoall", f"-M {limit} -m 1:1048576")
    lo, hi = parse_size_range(argv[argv.index("-m") + 1])
    kernel = get_kernel("alltoall")
    assert lo == 1 and kernel.held_bytes(hi, 4, False) <= limit < kernel.held_bytes(2 * hi, 4, False)


def test_minus_p_is_honoured_when_it_pairs_every_rank(monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "4")
    assert parse("osu_mbw_mr", ["-p", "2"]).action == "run"
    with pytest.raises(UsageError, match="-p 1: fabricbench pairs every rank r with r \\+ N/2.*4 ranks here"):
        parse("osu_mbw_mr", ["-p", "1"])


PERSISTENT_COLLECTIVES = sorted(
    name
    for name in BENCHMARKS
    if name.endswith("_persistent") and BENCHMARKS[name].kernel not in ("latency", "bw", "bibw")
)


def test_osus_14_persistent_collectives_run_their_kernel_with_mpi_4s_persistent_calls():
    assert len(PERSISTENT_COLLECTIVES) == 14
    for name in PERSISTENT_COLLECTIVES:
        bench = BENCHMARKS[name]
        assert bench.kernel == name.removeprefix("osu_").removesuffix("_persistent") and bench.method == "persistent"
        argv = run_argv(parse(name, []), "OUT")
        assert argv[argv.index("--method") + 1] == "persistent"
        assert " Persistent Latency Test v7.4" in version_text(bench)
        blocking = BENCHMARKS[name.removesuffix("_persistent")]  # the blocking program: OSU's own calls
        assert "--method" not in run_argv(parse(blocking.name, []), "OUT")
        assert "Persistent" not in version_text(blocking)


def test_cas_refuses_osus_float_before_any_rank_starts_and_fop_takes_it():
    with pytest.raises(UsageError, match=r"osu_cas_latency: -T MPI_FLOAT: fabricbench's cas takes MPI_CHAR, MPI_INT"):
        parse("osu_cas_latency", ["-T", "mpi_float"])
    assert parse("osu_fop_latency", ["-T", "mpi_float"]).values["T"] == "MPI_FLOAT"
    assert osu_datatype(BENCHMARKS["osu_cas_latency"], {}) == "MPI_CHAR"  # OSU's default


DOCS = Path(__file__).resolve().parents[2] / "docs" / "osu.md"


def _documented_command_lines() -> list[tuple[str, list[str]]]:
    """Every OSU command line in docs/osu.md's shell blocks: (program, its arguments)."""
    found = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            at = next((i for i, word in enumerate(words) if word in BENCHMARKS), None)
            if at is not None:
                found.append((words[at], words[at + 1 :]))
    return found


def test_every_osu_command_line_in_the_docs_is_read_to_its_end():
    # OSU 7.4's getopt stops at the first argument that is not an option: an option after one is left unread, by
    # OSU and by the shim alike, so a line the docs show must not put one there (-z's list attached: -z50,99).
    lines = _documented_command_lines()
    assert {"osu_latency", "osu_allreduce", "osu_bw"} <= {name for name, _ in lines}
    for name, argv in lines:
        _, rest = getopt(BENCHMARKS[name], argv)
        assert [word for word in rest if word.startswith("-")] == [], f"{name} {' '.join(argv)} leaves {rest} unread"


def test_the_osu_report_asks_each_transport_what_its_options_make_of_the_layout(monkeypatch):
    # report/osu.py names no transport: each declares (Transport.osu_nonblocking) whether its options make it time
    # the collectives' non-blocking forms (OSU's osu_i* layout), and the report asks them all.
    from fabricbench.report import osu
    from fabricbench.transports import transport_class

    def overlapped(cls, transport_options: dict) -> bool:
        return transport_options.get("tcp", {}).get("overlap", False)

    monkeypatch.setattr(transport_class("tcp"), "osu_nonblocking", classmethod(overlapped))
    assert osu.Columns(transport_options={"tcp": {"overlap": True}}).nonblocking
    assert not osu.Columns(transport_options={"tcp": {}}).nonblocking
    assert osu.Columns(transport_options={"mpi": {"method": "nonblocking"}}).nonblocking
    assert not osu.Columns(transport_options={"mpi": {"method": "persistent"}}).nonblocking
    assert '"mpi"' not in Path(osu.__file__).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("kernel", "children", "ranks", "initiators", "window_bytes"),
    [
        ("bw", 0, 2, 1, 64 * 1000),  # osu_bw: rank 0's window, one way
        ("bibw", 0, 2, 1, 2 * 64 * 1000),  # osu_bibw: both directions' messages over rank 0's window
        ("put-bibw", 0, 2, 1, 2 * 64 * 1000),  # osu_put_bibw likewise
        ("msgrate", 0, 4, 2, 2 * 64 * 1000),  # osu_mbw_mr: rank 0's window times the pairs
        # osu_bw_fan_in on 3 hosts of 2 ranks (patterns.fan: a window with each of 2 child hosts), times the parents
        ("bw-fan-in", 2, 6, 2, 2 * 64 * 1000 * 2),
    ],
)
def test_tail_bandwidths_are_rank_0s_windows_as_osu_counts_them(kernel, children, ranks, initiators, window_bytes):
    # OSU 7.4's -z on a bandwidth test: each of rank 0's windows' bytes over its time, smallest first, by the
    # nearest rank. Rank 0 times windows of 1 to 10 ms here; the peer's window need not begin with rank 0's.
    from dataclasses import replace
    from types import SimpleNamespace

    import numpy as np

    from fabricbench.measure.plan import Plan
    from fabricbench.measure.rows import measured_row, rank_summary

    windows = np.arange(1, 11, dtype=np.int64) * 1_000_000
    summaries = [rank_summary(rank < initiators, 10, windows, -1) for rank in range(ranks)]
    spec = get_kernel(kernel)
    one_way = spec.directions == 1  # as mpi's window cases say: a two-way window holds no transit
    spec = replace(spec, directions=children) if children else spec
    case = SimpleNamespace(method="c loop", pairs=initiators, window=64, window_holds_transit=one_way)
    plan = Plan(steps=[], run_id="run", label="osu")
    row = measured_row(plan, "mpi", spec, 1000, case, 1, windows, np.stack(summaries))
    rates = sorted(window_bytes / (windows / 1e9) / 1e6)  # MB/s, 10^6 B
    assert (row["bw_win_p50_MBps"], row["bw_win_p90_MBps"], row["bw_win_p99_MBps"]) == pytest.approx(
        (rates[4], rates[8], rates[9])
    )
