"""What the command line imports before it does anything: none of the heavy libraries a run's ranks or rank 0's
writers load only when used (pandas, pyarrow, matplotlib, tqdm, mpi4py, CuPy, importlib.metadata).

Every rank of a job parses the command line, so whatever this path imports, thousands of ranks import from a
shared file system. Timing it would be flaky on a busy machine; the module set is not.
"""

from __future__ import annotations

import json
import subprocess
import sys

# What no command line parse needs: rank 0 loads pandas and pyarrow for the table at the end, the plots
# matplotlib, progress tqdm, a rank mpi4py when MPI starts, the GPU places CuPy, doctor importlib.metadata.
NOT_AT_PARSE = ("pandas", "pyarrow", "matplotlib", "tqdm", "mpi4py", "cupy", "importlib.metadata")
# The congestion kernel's loops: only a run of that kernel opens them.
CONGESTION_LOOPS = ("fabricbench.transports.tcp_congestion", "fabricbench.transports.mpi_congestion")


def imported_by(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    said = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(said.splitlines()[-1]))


def heavy(modules: set[str], names=NOT_AT_PARSE) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in names))


def test_importing_the_cli_and_building_its_parser_loads_no_heavy_library():
    modules = imported_by("from fabricbench.cli import build_parser\nbuild_parser()")
    assert heavy(modules) == []
    assert heavy(modules, CONGESTION_LOOPS) == []


def test_parsing_a_run_command_line_loads_no_heavy_library():
    code = "from fabricbench.cli import build_parser\nbuild_parser().parse_args(['run', '-k', 'barrier', '-i', '10'])"
    assert heavy(imported_by(code)) == []
