"""The control plane at scale: what start-up, the plan, the metadata and each phase cost as the ranks grow.

    python benchmarks/control_scale.py [--ranks 8,16,32,64,128] [--reps 30] [--python VENV/bin/python]

For each rank count it launches ``mpiexec -n N`` of this script's inner part (the venv's MPI, MPICH's progress
throttle on so that waiting ranks yield to the ones with work, as on an oversubscribed machine the test suite
runs), which times, on the control plane a run uses (control.mpi.MPIControl), each exchange a run makes:

- once a run: the plan's broadcast (a plan whose topology places N hosts under N/32 switches, its JSON as run
  sends it), the metadata gather (every rank's rank_info, as orchestrate gathers it), and the host list the
  patterns ask for (allgather_json; once a run now, once a size before);
- once a phase: the isolated schedule's agreement on each pair's warm-up estimate under --max-time, as it was
  (allgather_json: a JSON table of every rank's estimate that every rank decodes) and as it is (pass_on: each
  source sends its destination one number, a message a rank); and the phase's barrier, its allreduce (rank 0's
  failure to write, stop_if_failed) and the gather of every rank's 13-number summary to rank 0.

Each figure is the median over --reps of the slowest rank's time (the exchange ends for all when it ends for
the last), with the growth exponent k of time ~ N^k between successive rank counts. On 2 cores, 64 ranks take
turns on each core: the figures are what an oversubscribed machine gives, an upper bound on a cluster's, and
their growth is what the exchange's design gives.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import child_env

THROTTLE = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "100"}
TIMEOUT_S = 1800
OPERATIONS = (
    ("plan broadcast", "once"),
    ("metadata gather", "once"),
    ("host list", "once"),
    ("warm-up agreement, JSON (before)", "phase"),
    ("warm-up agreement, pair by pair (now)", "phase"),
    ("barrier + allreduce + summary gather", "phase"),
)


def inner(reps: int) -> None:
    """On every rank: time each exchange ``reps`` times; rank 0 prints the slowest rank's times as JSON."""
    import numpy as np

    from fabricbench.control import allgather_json
    from fabricbench.control.mpi import MPIControl, import_mpi
    from fabricbench.launch.metadata import rank_info
    from fabricbench.measure.plan import Plan, Step
    from fabricbench.measure.topology import parse_slurm

    MPI = import_mpi()
    ctrl = MPIControl(MPI.COMM_WORLD)
    size = ctrl.size
    hosts = [f"node{i:05d}" for i in range(size)]
    leaves = [f"SwitchName=leaf{k} Nodes={','.join(hosts[k * 32 : (k + 1) * 32])}" for k in range((size + 31) // 32)]
    topology = parse_slurm("\n".join(leaves), "t")
    plan = Plan(steps=[Step("mpi", "pairs-bw", [8])], topology=topology.to_dict(), run_id="control-scale")
    envelope = json.dumps({"plan": json.loads(plan.to_json())}).encode()
    summary = np.full(13, 1.5)
    # An isolated phase's pairs: rank r with r + N/2, the first half sending (an odd rank out sits idle).
    half = size // 2
    partners = (
        (ctrl.rank + half, None)
        if ctrl.rank < half
        else (None, ctrl.rank - half)
        if ctrl.rank < 2 * half
        else (None, None)
    )

    def timed(exchange) -> float:
        ctrl.barrier()
        started = time.perf_counter()
        exchange()
        return ctrl.allreduce_max(time.perf_counter() - started)

    exchanges = {
        "plan broadcast": lambda: ctrl.bcast_bytes(envelope if ctrl.rank == 0 else None),
        "metadata gather": lambda: ctrl.gather_json(rank_info()),
        "host list": lambda: allgather_json(ctrl, {"host": hosts[ctrl.rank]}, "host list"),
        "warm-up agreement, JSON (before)": lambda: allgather_json(ctrl, {"ns": 1234.5 * ctrl.rank}, "estimates"),
        "warm-up agreement, pair by pair (now)": lambda: ctrl.pass_on(1234.5, *partners),
        "barrier + allreduce + summary gather": lambda: (ctrl.barrier(), ctrl.allreduce_max(0.0), ctrl.gather(summary)),
    }
    found = {name: [timed(exchange) for _ in range(reps)] for name, exchange in exchanges.items()}
    if ctrl.rank == 0:
        print(json.dumps({"ranks": size, "plan_bytes": len(envelope), "seconds": found}))


def growth(counts: list[int], figures: list[float]) -> list[str]:
    out = ["-"]
    for (n1, a), (n2, b) in zip(
        zip(counts, figures, strict=True), zip(counts[1:], figures[1:], strict=True), strict=False
    ):
        out.append(f"{math.log(b / a) / math.log(n2 / n1):.2f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,16,32,64,128")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--python", default=sys.executable, help="the Python of the venv to measure")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args.reps)
        return 0
    counts = [int(n) for n in args.ranks.split(",")]
    mpiexec = str(Path(args.python).parent / "mpiexec")
    env = child_env(drop=("PMI_", "FABRICBENCH_LAUNCHED"), checkout_path=True) | THROTTLE
    results = {}
    for ranks in counts:
        command = [mpiexec, "-n", str(ranks), args.python, __file__, "--inner", "--reps", str(args.reps)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        if done.returncode != 0:
            raise SystemExit(f"control_scale: {ranks} ranks failed:\n{done.stderr[-3000:]}")
        results[ranks] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"# {ranks} ranks done, plan {results[ranks]['plan_bytes']:,} bytes", flush=True)
    print(
        f"# control_scale: {os.cpu_count()} cores, {args.reps} reps, MPICH's progress throttle on; "
        "medians of the slowest rank's time (us)"
    )
    print("| exchange | when | " + " | ".join(f"{n} ranks" for n in counts) + " | growth k (time ~ N^k) |")
    print("|---|---|" + "---|" * (len(counts) + 1))
    for name, when in OPERATIONS:
        medians = [statistics.median(results[n]["seconds"][name]) for n in counts]
        cells = " | ".join(f"{m * 1e6:,.0f}" for m in medians)
        print(f"| {name} | {when} | {cells} | {', '.join(growth(counts, medians))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
