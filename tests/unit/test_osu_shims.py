"""OSU's command lines to fabricbench's, and the shim scripts, without starting a rank."""

from __future__ import annotations

import datetime
import os
import stat

import pytest

from fabricbench.errors import UsageError
from fabricbench.launch.osu_shims import (
    BENCHMARKS,
    osu_datatype,
    parse,
    results_dir,
    results_root,
    run_argv,
    script,
    usage,
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
        ("osu_bw", "-z 90", ["--osu-percentiles", "90"]),
        ("osu_bw", "--tail-lat=99.9", ["--osu-percentiles", "99.9"]),
        ("osu_allreduce", "", ["--osu-datatype", "MPI_CHAR"]),  # OSU 7.4's default: a reduction sums MPI_CHAR
        ("osu_reduce", "-f", ["--osu-full", "--osu-datatype", "MPI_CHAR"]),
        ("osu_reduce_scatter", "", ["--osu-datatype", "MPI_CHAR"]),
        ("osu_allreduce", "-T mpi_float", ["--osu-datatype", "mpi_float"]),
        ("osu_allreduce", "-T mpi_int", ["--osu-datatype", "mpi_int"]),
        ("osu_allgather", "", []),  # moves MPI_CHAR on its own
        ("osu_bcast", "-T MPI_CHAR", ["--osu-datatype", "MPI_CHAR"]),
        ("osu_bw", "-W 16", ["-W", "16"]),
        ("osu_bw", "--window-size=16", ["-W", "16"]),
        ("osu_latency", "-m4:64 -i100", ["-m", "4:64", "-i", "100"]),
        ("osu_alltoall", "-cf", ["-c", "--osu-full"]),  # clustered flags, as getopt takes them
        ("osu_bibw", "-d cpu H H", []),
        ("osu_bibw", "-d cpu D D", []),  # positionals without -d cuda: host, as a CPU build of OSU
        ("osu_bibw", "D D", []),
        ("osu_bibw", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_bibw", "-d cuda H H", []),  # OSU's -d cuda H H: both buffers in host memory
        ("osu_bw", "-dcuda D D", ["--buffer", "cuda"]),
        ("osu_bibw", "--accelerator=cuda D D", ["--buffer", "cuda"]),
        ("osu_mbw_mr", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_multi_lat", "-d cuda D D", ["--buffer", "cuda"]),
        ("osu_allgather", "-d cuda", ["--buffer", "cuda"]),  # a collective: every buffer on the GPU
        ("osu_reduce_scatter", "-d cuda", ["--osu-datatype", "MPI_CHAR", "--buffer", "cuda"]),
        ("osu_barrier", "-d cuda", ["--buffer", "cuda"]),
        ("osu_put_latency", "-w allocate -s flush", []),
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


@pytest.mark.parametrize("name", [name for name, bench in BENCHMARKS.items() if "T" in bench.letters])
def test_without_minus_T_every_shim_moves_osus_mpi_char(name):
    bench = BENCHMARKS[name]
    kernel = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, {}) or "")
    assert kernel.osu_datatype == "MPI_CHAR" and kernel.elem_bytes == 1
    if kernel.collective:
        assert kernel.min_size == 1  # OSU's collectives start at 1 B
    with_int = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, {"T": "mpi_int"}))
    if kernel.collective_spec and kernel.collective_spec.elements:  # a reduction sums what -T names
        assert (with_int.osu_datatype, with_int.elem_bytes, with_int.min_size) == ("MPI_INT", 4, 4)
    else:  # the others move bytes only, and -T mpi_int is refused (check_columns) rather than run as bytes
        assert with_int.osu_datatype == "MPI_CHAR"


@pytest.mark.parametrize(
    ("name", "line", "problem"),
    [
        ("osu_latency", "-d rocm D D", "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        ("osu_allreduce", "-d rocm", "-d rocm: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d openacc D D", "-d openacc: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d managed", "-d managed: fabricbench's GPU buffers are CUDA's only"),
        ("osu_latency", "-d tpu", "-d 'tpu': not a buffer kind"),
        ("osu_latency", "-d cuda", "-d cuda without buffer locations means H H"),
        ("osu_bw", "-d cuda H D", "-d cuda H D: fabricbench puts both buffers in one place"),
        ("osu_latency", "-d cuda M M", "-d cuda M M: fabricbench has no managed"),
        ("osu_put_latency", "-d cuda D D", "-d cuda: fabricbench's one-sided windows are host memory only"),
        ("osu_get_bw", "-d cuda", "-d cuda: fabricbench's one-sided windows are host memory only"),
        ("osu_allreduce", "-d cuda D D", "unexpected argument 'D'"),
        ("osu_latency", "-f", "cannot honour option -f"),  # OSU's osu_latency has no -f
        ("osu_latency", "-W 8", "cannot honour option -W"),
        ("osu_latency", "-G", "cannot honour option -G"),
        ("osu_latency", "--graph", "cannot honour option --graph"),
        ("osu_latency", "D", "two of H, D, M"),
        ("osu_latency", "X Y", "two of H, D, M"),
        ("osu_allreduce", "D D", "unexpected argument 'D'"),
        ("osu_latency", "-m", "-m needs a value"),
        ("osu_latency", "--validation=yes", "--validation takes no value"),
        ("osu_put_latency", "-w create", "-w create: fabricbench uses MPI_Win_allocate windows only"),
        ("osu_get_bw", "-s fence", "-s fence: fabricbench uses lock/flush synchronisation only"),
        ("osu_barrier", "-m 8", "cannot honour option -m"),
        ("osu_nonesuch", "", "no OSU benchmark 'osu_nonesuch'"),
    ],
)
def test_what_fabricbench_cannot_honour_is_one_usage_error_naming_it(name, line, problem):
    with pytest.raises(UsageError, match=problem.replace("(", r"\(")) as caught:
        parse(name, line.split())
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


def test_help_and_version_are_answered_before_anything_is_checked():
    assert parse("osu_latency", ["-d", "cuda", "-h"]).action == "help"
    assert parse("osu_latency", ["--version"]).action == "version"
    text = usage(BENCHMARKS["osu_bw"])
    assert text.startswith("Usage: osu_bw [options] [H|D|M H|D|M]")
    assert "-W, --window-size" in text and "-f, --full" not in text
    assert "-f, --full" in usage(BENCHMARKS["osu_allreduce"])


def test_every_osu_name_maps_to_a_kernel_its_transport_has():
    from fabricbench.transports import transport_class

    assert len(BENCHMARKS) == 16 + 17  # and the 17 osu_i* and neighbourhood programs of fabricbench's kernels
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
