"""What the command line imports before it does anything: none of the libraries a run's ranks or rank 0's
writers load only when used (numpy, pandas, pyarrow, matplotlib, tqdm, mpi4py, CuPy, importlib.metadata).

Every rank of a job parses the command line, so whatever this path imports, thousands of ranks import from a
shared file system; ``--help`` and the self-launching parent (which plans and starts mpiexec) import nothing
else. Timing it would be flaky on a busy machine; the module set is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# What no command line parse needs: a rank loads numpy for its buffers and samples and mpi4py when MPI starts,
# rank 0 pandas and pyarrow for the table at the end, the plots matplotlib, progress tqdm, the GPU places CuPy,
# doctor importlib.metadata.
NOT_AT_PARSE = ("numpy", "pandas", "pyarrow", "matplotlib", "tqdm", "mpi4py", "cupy", "importlib.metadata")
# The congestion kernel's loops: only a run of that kernel opens them.
CONGESTION_LOOPS = ("fabricbench.transports.tcp.congestion", "fabricbench.transports.mpi.congestion")


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


def test_help_loads_no_heavy_library():
    code = "import contextlib, io\nfrom fabricbench.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
    code += "    with contextlib.suppress(SystemExit):\n        main(['run', '--help'])"
    assert heavy(imported_by(code)) == []


def test_the_self_launching_parent_plans_without_a_heavy_library():
    """What the parent does before it starts mpiexec: parse, find the launcher and mpiexec, build the plan."""
    code = "\n".join(
        [
            "from fabricbench.cli import build_parser",
            "from fabricbench.launch import launcher, orchestrate",
            "from fabricbench.run.planner import build_plan",
            "args = build_parser().parse_args(['run', '-n', '8', '-k', 'barrier', '-i', '10'])",
            "build_plan(args, 8)",
        ]
    )
    assert heavy(imported_by(code)) == []


def test_rank_0s_verdict_at_the_end_of_an_all_pairs_run_reads_the_table_without_pandas():
    """Every all-pairs run ends with rank 0 reading its pairs back (measure/pair_table.py) for the verdict: from
    the CSV on a small run, from Parquet on a large one. pyarrow's to_numpy and fill_null import pandas, 50 MB of
    rank 0's memory that nothing there uses."""
    example = Path(__file__).resolve().parents[2] / "results" / "examples" / "pairs-leaf-spine"
    code = "\n".join(
        [
            "from pathlib import Path",
            "from fabricbench.measure.pair_table import PairTable",
            "from fabricbench.measure.verdict import verdict",
            "from fabricbench.transports import TRANSPORTS",
            "for name in ('results.csv', 'results.parquet'):",
            f"    groups = list(PairTable([Path('{example}') / name], TRANSPORTS).groups())",
            "    assert len(groups) == 1 and groups[0].values.shape == (6, 6), groups",
            "    verdict(groups)",
        ]
    )
    modules = imported_by(code)
    assert "pyarrow" in modules and heavy(modules, ("pandas",)) == []
