"""--format nccl prints nccl-tests' layout, line by line; in-place collectives (MPI_IN_PLACE) check out on real ranks;
#wrong counts a corrupted element."""

from __future__ import annotations

import re

import pytest

from fabricbench.collectives import COLLECTIVES
from support import fabricbench, mpiexec, read_rows

# --- nccl-tests 2.13's own layout, from its printf formats (common.cu) ---------------------------------------------
HEADER_TITLES = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
HEADER_NAMES = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
HEADER_UNITS = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
PARAMETERS = "%12li  %12li  %8s  %6s  %6s"
RESULT = "  %7s  %6.2f  %6.2f  %5g"
NO_CHECK = "  %7s  %6.2f  %6.2f  %5s"
SETTINGS = (
    "# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: %d "
    "validation: %d graph: %d"
)
OUT_OF_BOUNDS = "# Out of bounds values : %d %s"
AVG_BUS_BW = "# Avg bus bandwidth    : %g %s"


def printf(form: str, *args) -> str:
    """C's printf of ``form``: Python's % reads C's conversions ("%li" and "%ld" as "%i" and "%d")."""
    return form.replace("%li", "%i").replace("%ld", "%d") % args


def time_str(us: float) -> str:
    """nccl-tests' timeStr: %7.0f from 10000 us, %7.1f from 100 us, else %7.2f."""
    return printf("%7.0f" if us >= 10000.0 else "%7.1f" if us >= 100.0 else "%7.2f", us)


FIGURES = re.compile(r"\d+\.?\d*")  # a block's time, algbw and busbw


def masked(line: str) -> str:
    """A data line with its three measured figures in each block replaced, width kept."""
    blocks = [line[52 + 32 * i : 52 + 32 * (i + 1)] for i in range(2)]
    return line[:52] + "".join(block[:2] + re.sub(r"[\d.]", "#", block[2:25]) + block[25:] for block in blocks)


def figures(line: str) -> list[str]:
    """The time, algbw and busbw of both blocks, as printed."""
    return [v for i in range(2) for v in FIGURES.findall(line[52 + 32 * i + 2 : 52 + 32 * i + 25])]


def same_figures(mine: list[str], theirs: list[str]) -> bool:
    """Each printed figure within one unit of its last printed place of the expected one. The console prints the
    measured float, the expectation the table's 9 digits of it: a figure on a rounding edge (52.69499.. printed
    52.69, stored 52.695 and printed 52.70; a time from 100 us printed to 0.1, from 10 ms to 1) is one unit apart."""
    if len(mine) != len(theirs):
        return False
    for a, b in zip(mine, theirs, strict=True):
        places = len(b.partition(".")[2])
        if abs(float(a) - float(b)) > 1.01 * 10.0**-places:
            return False
    return True


def expected_lines(kernel: str, rows: list[dict], ranks: int, validate: bool, sizes: list[int]) -> list[str]:
    """What nccl-tests would print for these rows, from its formats alone (figures from the table)."""
    spec = COLLECTIVES[kernel]
    nccl_sizes = [spec.algbw_bytes(s, ranks) for s in sizes]
    lines = [
        printf(SETTINGS, 1, 1, min(nccl_sizes), max(nccl_sizes), 2, "factor", 2, 20, 1, int(validate), 0),
        "#",
        printf(HEADER_TITLES, "", "", "", "", ""),
        printf(HEADER_NAMES, "size", "count", "type", "redop", "root", *("time", "algbw", "busbw", "#wrong") * 2),
        printf(
            HEADER_UNITS,
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
        ),
    ]
    errors, busbw = 0, []
    for size in sizes:
        placed = {r["placement"]: r for r in rows if r["size_B"] == size}
        root = printf("%6i", spec.root if spec.root is not None else -1)
        line = printf(
            PARAMETERS, spec.algbw_bytes(size, ranks), size // spec.elem_bytes, spec.element.nccl_type, spec.redop, root
        )
        for placement in ("out-of-place", "in-place"):
            row = placed[placement]
            figures = (time_str(row["lat_rank_avg_us"]), row["algbw_GBps"], row["busbw_GBps"])
            line += printf(RESULT, *figures, row["wrong_elements"]) if validate else printf(NO_CHECK, *figures, "N/A")
            errors += bool(validate and row["wrong_elements"])
            busbw.append(row["busbw_GBps"])
        lines.append(line)
    lines += [
        printf(OUT_OF_BOUNDS, errors, "FAILED" if errors else "OK"),
        printf(AVG_BUS_BW, sum(busbw) / len(busbw), ""),
        "#",
        "",
    ]
    return lines


def _steps(stdout: str) -> dict[str, list[str]]:
    """Each collective's lines after fabricbench's own first line (the one line nccl-tests does not print)."""
    found, name = {}, None
    for line in stdout.splitlines():
        made = re.match(
            r"# fabricbench \S+ made this table of mpi (\w+) on \d+ ranks, in the text layout of nccl-tests 2\.13$",
            line,
        )
        if made:
            name = made.group(1)
            found[name] = []
        elif name:
            found[name].append(line)
    return found


@pytest.mark.parametrize("validate", [True, False])
def test_nccl_text_is_nccl_tests_printf_layout_line_by_line(tmp_path, validate):
    sizes = [4, 8, 16, 32, 64]
    kernels = ["allreduce", "allgather", "reduce", "scatter"]
    args = ["run", "-k", ",".join(kernels), "-m", "4:64", "-i", "20", "-x", "2", "--format", "nccl"]
    done = mpiexec(3, *args, *(["-c"] if validate else []), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    table, _ = read_rows(tmp_path / "run")
    steps = _steps(done.stdout)
    assert list(steps) == kernels
    for kernel in kernels:
        rows = table[table["kernel"] == kernel].to_dict("records")
        want = expected_lines(kernel, rows, 3, validate, sizes)
        got = steps[kernel]
        assert len(got) == len(want)
        for mine, theirs in zip(got, want, strict=True):
            if mine.startswith("# Avg bus bandwidth"):  # the mean of the printed figures, not of the rounded ones
                assert float(mine.split(":")[1]) == pytest.approx(float(theirs.split(":")[1]), rel=1e-5)
                assert mine.endswith(" ") and theirs.endswith(" ")
            elif not mine.startswith("#") and mine:
                assert masked(mine) == masked(theirs)
                assert same_figures(figures(mine), figures(theirs)), (mine, theirs)
            else:
                assert mine == theirs


def test_a_corrupted_element_is_counted_in_wrong_and_out_of_bounds(tmp_path):
    args = ["run", "-k", "allreduce", "-m", "64:64", "-i", "5", "-x", "1", "-c", "--format", "nccl"]
    done = fabricbench(*args, "--out", str(tmp_path / "run"), env={"FABRICBENCH_TEST_CORRUPT": "allreduce"})
    assert done.returncode == 1 and "fabricbench: validation failed in 2 rows" in done.stderr, done.stderr
    line = next(text for text in done.stdout.splitlines() if text.startswith(" ") and text.split()[0] == "64")
    blocks = [line[52:84], line[84:116]]
    assert [float(block.split()[-1]) for block in blocks] == [2, 2]  # one element on each of the 2 ranks, each block
    assert "# Out of bounds values : 2 FAILED" in done.stdout.splitlines()
    table, _ = read_rows(tmp_path / "run")
    assert table["wrong_elements"].tolist() == [2, 2] and set(table["validation"]) == {"fail"}


def test_every_in_place_collective_checks_out_on_real_ranks(tmp_path):
    names = ["allreduce", "reduce", "reduce_scatter", "reduce_scatter_block", "allgather", "allgatherv", "alltoall"]
    names += ["alltoallv", "alltoallw", "gather", "gatherv", "scatter", "scatterv", "bcast"]
    for loop in ("c", "python"):
        args = ["run", "-k", ",".join(names), "-m", "4:256", "-i", "3", "-x", "1", "-c", "--placement", "in-place"]
        done = mpiexec(3, *args, "--loop", loop, "--out", str(tmp_path / loop))
        assert done.returncode == 0, done.stderr
        table, _ = read_rows(tmp_path / loop)
        assert set(table["placement"]) == {"in-place"}
        measured = table[table["status"] == "ok"]
        assert set(measured["kernel"]) == set(names) - {"bcast"}
        assert set(measured["validation"]) == {"pass"} and set(measured["wrong_elements"]) == {0}
        assert set(table[table["kernel"] == "bcast"]["status"]) == {
            "unsupported: MPI_Bcast has no MPI_IN_PLACE: its one buffer is sent at the root and received elsewhere"
        }


def test_nccl_text_refuses_a_kernel_that_is_not_a_collective():
    done = fabricbench("run", "-k", "latency", "--format", "nccl")
    assert done.returncode == 2
    assert "--format nccl prints the collectives" in done.stderr and "latency is not one" in done.stderr
