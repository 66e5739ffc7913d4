"""The C loops' shared parts, read from their sources: one clock and one per-iteration stamp across every loop
(fb_runtime.h's), and the numeric codes Python passes each loop read from the header the loop includes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricbench.collectives import neighbor
from fabricbench.transports import cbuild
from fabricbench.transports.cbuild import read_codes
from fabricbench.transports.mpi import cloop as mpi_cloop
from fabricbench.transports.mpi import transport as mpi_transport
from fabricbench.transports.ofi import cloop as ofi_cloop
from fabricbench.transports.ofi.options import ENDPOINTS
from fabricbench.transports.verbs import cloop as verbs_cloop
from fabricbench.transports.verbs.rdma import QP_TYPES

TRANSPORTS = cbuild.RUNTIME_HEADER.parent

# What only the runtime header may hold: a function that reads the monotonic clock, a *now_ns() definition, and a
# per-iteration stamp (a clock difference stored into an array at a loop's index, not at a fixed one).
SINGLE = {
    "clock": re.compile(r"clock_gettime\s*\(\s*CLOCK_MONOTONIC"),
    "now_ns": re.compile(r"\b\w*now_ns\s*\(\s*void\s*\)\s*\{"),
    "stamp": re.compile(r"\b\w+\s*\[\s*[A-Za-z_]\w*\s*\]\s*=[^;=]*\bnow\w*\b[^;]*-"),
}


def definitions(texts: dict[str, str]) -> dict[str, list[str]]:
    """For each of SINGLE's kinds, the files (by name) where it occurs, once per occurrence."""
    return {
        kind: [name for name, text in texts.items() for _ in pattern.finditer(text)] for kind, pattern in SINGLE.items()
    }


def _c_texts() -> dict[str, str]:
    return {
        str(p.relative_to(TRANSPORTS)): p.read_text()
        for p in sorted([*TRANSPORTS.rglob("*.c"), *TRANSPORTS.rglob("*.h")])
    }


def test_the_clock_and_the_stamp_are_defined_once_in_the_runtime_header():
    texts = _c_texts()
    assert {"mpi/_mpiloop.c", "tcp/_tcploop.c", "verbs/_verbsloop.c", "ofi/_ofiloop.c"} <= set(texts)
    assert definitions(texts) == {kind: ["fb_runtime.h"] for kind in SINGLE}


def test_every_loop_includes_the_runtime_header_and_uses_its_stamp():
    for name in ("mpi/_mpiloop.c", "tcp/_tcploop.c", "verbs/_verbsloop.c", "ofi/_ofiloop.c"):
        text = (TRANSPORTS / name).read_text()
        assert '#include "fb_runtime.h"' in text and "fb_stamp(" in text, name


def test_the_checker_finds_a_second_clock_and_a_second_stamp():
    copy = """
static inline long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
void loop(long long *times, long long n)
{
    long long last = now_ns();
    for (long long i = 0; i < n; i++) {
        long long now = now_ns();
        times[i] = now - last;
        last = now;
        samples[k] = now_ns() - start;
    }
    stats[1] = now_ns() - started;  /* a span at a fixed index: no per-iteration stamp */
}
"""
    texts = {"fb_runtime.h": (TRANSPORTS / "fb_runtime.h").read_text(), "copy.c": copy}
    assert definitions(texts) == {
        "clock": ["fb_runtime.h", "copy.c"],
        "now_ns": ["fb_runtime.h", "copy.c"],
        "stamp": ["fb_runtime.h", "copy.c", "copy.c"],
    }


def test_the_python_codes_are_the_headers_each_loop_includes():
    """Read from the very header the C source includes; and covering what Python passes."""
    for loop, codes in ((mpi_cloop, "_mpicodes.h"), (verbs_cloop, "_verbscodes.h"), (ofi_cloop, "_oficodes.h")):
        assert loop.CODES.name == codes and f'#include "{codes}"' in loop.SOURCE.read_text()
    assert mpi_cloop.C_OPS == {
        "allreduce": 0, "allgather": 1, "alltoall": 2, "bcast": 3, "reduce": 4, "reduce_scatter": 5, "barrier": 6,
        "gather": 20, "gatherv": 21, "scatter": 22, "scatterv": 23, "allgatherv": 24, "alltoallv": 25,
        "alltoallw": 26, "reduce_scatter_block": 27,
        "neighbor_allgather": 40, "neighbor_allgatherv": 41, "neighbor_alltoall": 42, "neighbor_alltoallv": 43,
        "neighbor_alltoallw": 44,
    }  # fmt: skip
    # every collective the Python loop runs; the neighbourhood ones are C only
    assert set(mpi_cloop.C_OPS) - neighbor.NAMES == set(mpi_transport.MPI_CALLS)
    assert mpi_transport.C_OPS is mpi_cloop.C_OPS
    assert verbs_cloop.QP_CODES == {"rc": 0, "uc": 1, "ud": 2} and set(QP_TYPES) == set(verbs_cloop.QP_CODES)
    assert verbs_cloop.OP_CODES == {"write": 0, "send": 1, "read": 2, "fop": 3, "cas": 4}
    assert {name: code for code, name in enumerate(ENDPOINTS)} == ofi_cloop.ENDPOINT_CODES
    assert ofi_cloop.RMA_CODES == {"put": 0, "get": 1, "put-bw": 0, "get-bw": 1}


def test_no_loop_numbers_its_codes_in_an_enum_of_its_own():
    for loop in (mpi_cloop, verbs_cloop, ofi_cloop):
        text = loop.SOURCE.read_text()
        for name in cbuild._defines(loop.CODES):
            assert not re.search(rf"\benum\b[^;]*\b{name}\b", text), (loop.SOURCE.name, name)


def _header(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "_probecodes.h"
    path.write_text(text)
    return path


def test_a_codes_header_is_read_with_its_comments(tmp_path):
    header = _header(
        tmp_path,
        "/* What fb_probe takes.\n * Two lines of comment. */\n\n#define OP_PING_PONG 0\n#define OP_BW 1 /* osu_bw */\n"
        "#define QP_RC 0\n",
    )
    assert read_codes(header, "OP_") == {"ping_pong": 0, "bw": 1}
    assert read_codes(header, "QP_") == {"rc": 0}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "#define OP_A 0\nenum { OP_B };\n",
            r"_probecodes\.h:2: not a new '#define NAME number' line: 'enum \{ OP_B \};'",
        ),
        ("/* one\n two */\n#define OP_A 0x1\n", r"_probecodes\.h:3: .*'#define OP_A 0x1'"),
        ("#define OP_A 0\n#define OP_A 1\n", r"_probecodes\.h:2: "),
        ("#define OP_A 0\n#define OP_B 0\n", r"the OP_\* codes must exist and differ"),
        ("#define QP_A 0\n", r"the OP_\* codes must exist and differ"),
    ],
)
def test_a_malformed_codes_header_is_an_error_not_a_skip(tmp_path, text, said):
    with pytest.raises(ValueError, match=said):
        read_codes(_header(tmp_path, text), "OP_")
