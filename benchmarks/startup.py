"""What a whole short run costs: fabricbench's start-up against a C program's, at a few rank counts.

Run it alone, on one machine with nothing else busy:

    python benchmarks/startup.py [--ranks 2,4,8] [--rounds N] [--python VENV/bin/python]

For each rank count and round, back to back in a shuffled order:
- ``fabricbench run -n N -k barrier -i 10``, started alone as a user starts it (it launches its own ranks
  through mpiexec), its table printed to a pipe; the whole run's wall time, and from its ranks
  (``FABRICBENCH_TEST_STAMPS``) the time from the launch to the first timed sample, and how many modules a
  rank had imported by then;
- ``barrier_reference.c`` beside this script, built at start with the wrapper next to --python: the least a C
  program does for the same figure (MPI_Init, 100 warm-up and 10 timed barriers, MPI_Finalize), launched with
  the same mpiexec.
Then once: ``import fabricbench.cli`` in a fresh interpreter (python -X importtime's total, and the modules it
adds to a bare interpreter's), as a ``--help`` or the self-launching parent pays it.

Each figure is the median over the rounds, with the lowest and highest beside it; the ratio is the median
of each round's fabricbench run over the C program's run of that round. The target is a whole 8-rank run
within 1.5 times the C program's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import child_env, tool

SOURCE = Path(__file__).with_name("barrier_reference.c")
ITERATIONS, WARMUP = 10, 100  # fabricbench's -i 10, and its warm-up for a small collective (OSU's)
TARGET = 1.5
TIMEOUT_S = 300


def spread(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    scaled = [v * scale for v in values]
    return f"{statistics.median(scaled):.3f} {unit} ({min(scaled):.3f}-{max(scaled):.3f})"


def timed_run(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    tool(command, TIMEOUT_S, env)
    return time.perf_counter() - started


def fabricbench_run(python: str, ranks: int, work: Path, env: dict) -> tuple[float, float, list[int]]:
    """(whole run s, launch to the first timed sample s, modules each rank had imported)."""
    stamps = Path(tempfile.mkdtemp(dir=work))
    out = stamps / "out"
    launched_ns = time.time_ns()
    command = [python, "-m", "fabricbench", "run", "-n", str(ranks), "-k", "barrier", "-i", str(ITERATIONS)]
    whole = timed_run([*command, "--out", str(out)], env | {"FABRICBENCH_TEST_STAMPS": str(stamps)})
    found = [json.loads(path.read_text()) for path in sorted(stamps.glob("rank*.json"))]
    first = min(stamp["first_sample_ns"] for stamp in found)
    return whole, (first - launched_ns) / 1e9, [len(stamp["modules"]) for stamp in found]


def cli_import(python: str, env: dict) -> tuple[float, int]:
    """(s to import fabricbench.cli, modules it adds to a bare interpreter's)."""
    said = subprocess.run(
        [python, "-X", "importtime", "-c", "import fabricbench.cli"], env=env, capture_output=True, text=True
    ).stderr
    total_us = int(said.strip().splitlines()[-1].split("|")[1])
    count = "import sys; before = len(sys.modules); import fabricbench.cli; print(len(sys.modules) - before)"
    added = int(subprocess.run([python, "-c", count], env=env, capture_output=True, text=True).stdout)
    return total_us / 1e6, added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4,8", help="comma list of rank counts (default 2,4,8)")
    parser.add_argument("--rounds", type=int, default=7, help="launches of each contender per rank count")
    parser.add_argument("--python", default=sys.executable, help="the Python of the venv to measure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = [int(n) for n in args.ranks.split(",")]
    bin_dir = Path(args.python).parent
    mpiexec, mpicc = str(bin_dir / "mpiexec"), str(bin_dir / "mpicc")
    env = child_env(drop=("PMI_", "FABRICBENCH_LAUNCHED"))
    env |= {"HYDRA_LAUNCHER": "fork", "HYDRA_RMK": "user"}  # as fabricbench starts its own ranks
    shuffle = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fabricbench-startup-") as folder:
        work = Path(folder)
        program = str(work / "barrier_reference")
        subprocess.run([mpicc, "-O2", "-Wall", "-o", program, str(SOURCE)], check=True)
        results: dict[int, dict[str, list]] = {n: {"fb": [], "c": [], "first": [], "modules": []} for n in counts}
        for _ in range(args.rounds):
            for ranks in shuffle.sample(counts, len(counts)):
                order = shuffle.sample(["fb", "c"], 2)
                for who in order:
                    if who == "c":
                        command = [mpiexec, "-n", str(ranks), program, str(ITERATIONS), str(WARMUP)]
                        results[ranks]["c"].append(timed_run(command, env))
                    else:
                        whole, first, modules = fabricbench_run(args.python, ranks, work, env)
                        results[ranks]["fb"].append(whole)
                        results[ranks]["first"].append(first)
                        results[ranks]["modules"] += modules
        imports = [cli_import(args.python, env) for _ in range(args.rounds)]
    print(f"# {args.rounds} rounds, medians (lowest-highest); {os.cpu_count()} cores")
    print(f"import fabricbench.cli: {spread([s for s, _ in imports], 'ms', 1e3)}, {imports[0][1]} modules added")
    worst = 0.0
    for ranks in counts:
        found = results[ranks]
        ratios = [fb / c for fb, c in zip(found["fb"], found["c"], strict=True)]
        ratio = statistics.median(ratios)
        worst = max(worst, ratio) if ranks == max(counts) else worst
        print(
            f"{ranks} ranks: fabricbench {spread(found['fb'])}, C program {spread(found['c'])}, "
            f"ratio {ratio:.2f} ({min(ratios):.2f}-{max(ratios):.2f}); launch to first sample "
            f"{spread(found['first'])}; modules on a rank {min(found['modules'])}-{max(found['modules'])}"
        )
    met = worst <= TARGET
    print(f"target: a whole {max(counts)}-rank run at most {TARGET}x the C program's: {'met' if met else 'missed'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
