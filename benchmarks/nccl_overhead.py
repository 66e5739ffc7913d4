"""How close does fabricbench's nccl allreduce come to a minimal cupy.cuda.nccl loop timed as nccl-tests times it?

Run it on a GPU host, with nothing else on the GPU (scripts/gpu-check.sh runs it):

    python benchmarks/nccl_overhead.py [--reps N] [--seed S] [--python VENV/bin/python] [--out DIR]

The reference is the loop nccl-tests' allreduce_perf times with one rank: a CUDA event, N allReduce calls
on one non-blocking stream, an event, the elapsed time over N. It runs in a child process of its own
(this script with --serve-minimal), which makes its NCCL communicator once and then measures on request,
so it pays CuPy's import and NCCL's set-up once. fabricbench is a launch of
``fabricbench run -t nccl -k allreduce --np 1 --format none --out DIR`` per group and rep, read back
from its table (harness.py; lat_mean_us: the loop's mean, as nccl-tests').

Two groups, each with its own counts and its own target (the median of the paired ratios):
- large, 64 MiB to 256 MiB, events around the loop: algbw of fabricbench over the minimal loop's, at
  least 0.97;
- small, 8 B, both loops captured in a CUDA graph (fabricbench --cuda-graph): fabricbench's time over
  the minimal loop's, at most 1.05.
Every rep runs each group's contenders back to back in a shuffled order (paired.py): fabricbench, the
minimal loop, and the minimal loop again (the A/A control: the resolution this GPU allows). Exit
status 1 when a target is missed by the median.
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
from dataclasses import dataclass
from pathlib import Path

from harness import fabricbench as run_fabricbench
from paired import MIN_REPS, Ratio, check_reps, missed, run_shuffled

MiB = 1024 * 1024
REFERENCE, CONTROL, OURS = "minimal loop", "A/A", "fabricbench"
LAUNCH_TIMEOUT_S = 300


@dataclass(frozen=True)
class Group:
    name: str
    sizes: tuple[int, ...]
    iterations: int
    warmup: int
    graph: bool
    target: float
    higher_is_better: bool  # algbw ratio (large) or time ratio (small)


GROUPS = (
    Group("large", (64 * MiB, 128 * MiB, 256 * MiB), 50, 10, False, 0.97, True),
    Group("small", (8,), 2000, 200, True, 1.05, False),
)


def serve_minimal() -> int:
    """The reference, as a child: reads "SIZE ITERATIONS WARMUP GRAPH" lines, answers µs per allreduce."""
    import cupy

    from fabricbench.transports.gpu.devices import preload_nccl

    preload_nccl()
    from cupy.cuda import nccl

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    stream = cupy.cuda.Stream(non_blocking=True)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    print("ready", flush=True)
    for line in sys.stdin:
        size, iterations, warmup, graph = (int(v) for v in line.split())
        count = size // 4
        send, recv = cupy.ones(count, cupy.float32), cupy.empty(count, cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()

        def launch(send_ptr=send.data.ptr, recv_ptr=recv.data.ptr, count=count):
            comm.allReduce(send_ptr, recv_ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)

        with stream:
            if graph:  # nccl-tests -G: the warm-up and the timed launches each captured once, then launched
                graphs = []
                for n in (warmup, iterations):
                    stream.begin_capture()
                    for _ in range(n):
                        launch()
                    graphs.append(stream.end_capture())
                graphs[0].launch(stream)
                start.record(stream)
                graphs[1].launch(stream)
                end.record(stream)
            else:
                for _ in range(warmup):
                    launch()
                start.record(stream)
                for _ in range(iterations):
                    launch()
                end.record(stream)
        end.synchronize()
        print(f"{cupy.cuda.get_elapsed_time(start, end) * 1e3 / iterations:.6f}", flush=True)
        del send, recv
    comm.destroy()
    return 0


class Minimal:
    """The reference child process, asked one size at a time."""

    def __init__(self, python: str):
        self.child = subprocess.Popen(
            [python, __file__, "--serve-minimal"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self.child.stdout.readline().strip() != "ready":
            raise SystemExit("the minimal cupy.cuda.nccl loop did not start (see its error above)")

    def measure(self, group: Group) -> dict[int, float]:
        found = {}
        for size in group.sizes:
            self.child.stdin.write(f"{size} {group.iterations} {group.warmup} {int(group.graph)}\n")
            self.child.stdin.flush()
            found[size] = float(self.child.stdout.readline())
        return found

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait(timeout=60)


def fabricbench(python: str, group: Group, folder: Path) -> dict[int, float]:
    """One launch of fabricbench's nccl allreduce over the group's sizes: µs per allreduce by size."""
    lo, hi = min(group.sizes), max(group.sizes)
    command = ["run", "-t", "nccl", "-k", "allreduce", "--np", "1", "-m", f"{lo}:{hi}"]
    command += ["-i", str(group.iterations), "-x", str(group.warmup)] + (["--cuda-graph"] if group.graph else [])
    table, _ = run_fabricbench(command, folder, LAUNCH_TIMEOUT_S, python)
    rows = table[table.status == "ok"].to_dict("records")
    return {int(r["size_B"]): float(r["lat_mean_us"]) for r in rows if int(r["size_B"]) in group.sizes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=MIN_REPS, help=f"repetitions (default {MIN_REPS})")
    parser.add_argument("--seed", type=int, default=1, help="seed of the order within each rep (default 1)")
    parser.add_argument("--python", default=sys.executable, help="the python that runs fabricbench and CuPy")
    parser.add_argument("--out", help="folder for ratios.json and the runs' tables (default: a temporary one)")
    parser.add_argument("--serve-minimal", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_minimal:
        return serve_minimal()
    check_reps(parser, args.reps)
    out = Path(args.out or tempfile.mkdtemp(prefix="nccl-overhead-"))
    out.mkdir(parents=True, exist_ok=True)
    order = random.Random(args.seed)
    minimal = Minimal(args.python)
    measured: dict[str, dict[str, list[dict[int, float]]]] = {g.name: {} for g in GROUPS}
    try:
        for rep in range(args.reps):
            for group in GROUPS:
                slot = {
                    OURS: lambda g=group, r=rep: fabricbench(args.python, g, out / f"{g.name}-{r}"),
                    REFERENCE: lambda g=group: minimal.measure(g),
                    CONTROL: lambda g=group: minimal.measure(g),
                }
                for who, found in run_shuffled(order, slot).items():
                    measured[group.name].setdefault(who, []).append(found)
    finally:
        minimal.close()
    report, failed = {}, False
    print(f"# nccl allreduce, 1 rank, {args.reps} reps: fabricbench against a minimal cupy.cuda.nccl loop")
    for group in GROUPS:
        runs = measured[group.name]
        for size in group.sizes:
            ref = [r[size] for r in runs[REFERENCE]]
            ours, control = [r[size] for r in runs[OURS]], [r[size] for r in runs[CONTROL]]
            # algbw is S/t: fabricbench's over the reference's is the reference's time over fabricbench's.
            flip = (lambda a, b: (b, a)) if group.higher_is_better else (lambda a, b: (a, b))
            ratio, aa = Ratio.of(*flip(ref, ours)), Ratio.of(*flip(ref, control))
            judged = ratio.verdict(group.target, group.higher_is_better)
            failed |= missed(judged)
            what = "algbw ratio" if group.higher_is_better else "time ratio" + (", graphs" if group.graph else "")
            print(
                f"{size:>10} B  fabricbench {statistics.median(ours):10.2f} us  minimal {statistics.median(ref):10.2f}"
                f" us  {what} {ratio.median:.3f} [{ratio.interval}]  A/A {aa.median:.3f} [{aa.interval}]"
                f"  target {'>=' if group.higher_is_better else '<='} {group.target}: {judged}"
            )
            report[f"{group.name} {size}"] = {
                "fabricbench_us": ours,
                "minimal_us": ref,
                "control_us": control,
                "ratio": ratio.median,
                "interval": [ratio.low, ratio.high],
                "control_ratio": aa.median,
                "target": group.target,
                "verdict": judged,
            }
    (out / "ratios.json").write_text(json.dumps(report, indent=2))
    print(f"# ratios and tables in {out}", file=sys.stderr)
    return int(failed)


if __name__ == "__main__":
    os.environ.setdefault("FABRICBENCH_PROGRESS", "0")
    sys.exit(main())
