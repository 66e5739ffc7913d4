"""Which MPI calls should be fabricbench's default: OSU's (blocking) or persistent requests, per MPI library?

Run it alone, on one machine with nothing else busy (it starts its own ranks, two of them):

    python benchmarks/method_choice.py [--launches N] [--rounds N] [--python VENV/bin/python]

Launches far apart in time cannot tell a few per cent apart on a machine whose speed changes between launches
(the same binary's small-message figures vary 2x from one launch to the next here), so the two methods are
compared inside each launch. Every launch (``mpiexec -n 2``, the mpiexec beside --python) loads fabricbench's own
C loop (``_mpiloop.c``, as a run does: mpi4py at fabricbench's thread level, the loop built with the MPI's
wrapper) and runs ROUNDS rounds; in each round every (kernel, size, method) runs one block of iterations, in an
order shuffled anew, the same on both ranks. A round's ratio is persistent over blocking at one kernel and size;
a launch's figure is the median of its rounds' ratios; the table gives the median over launches, with the
lowest and highest launch beside it.
- latency: ``fb_pingpong`` (blocking: MPI_Send then MPI_Recv; persistent: Send_init/Recv_init, one Startall and
  one Waitall a round trip), the mean round trip of a block;
- bw: ``fb_window`` (blocking: W MPI_Isend, Waitall, a 1-byte ack; persistent: the window and the ack's receive
  started with one Startall), bytes over the block's time.
A ratio above 1 means persistent requests took longer (latency) or moved more (bw).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from harness import child_env, tool

KERNELS = ("latency", "bw")
SIZES = (1, 8, 64, 1024)
WINDOW = 64  # fabricbench's -W default and osu_bw's
ITERATIONS = {"latency": 2000, "bw": 200}  # per block: a few milliseconds each
WARMUP_BLOCKS = 2  # whole rounds run and dropped first, so that connections and caches are warm
TIMEOUT_S = 300


def worker(rounds: int, seed: int) -> None:
    """One rank of a launch: every (kernel, size, method) once per round, shuffled alike on both ranks."""
    import numpy as np

    from fabricbench.control.mpi import import_mpi
    from fabricbench.transports.mpi.cloop import load, require_success
    from fabricbench.transports.mpi.transport import library_version

    mpi = import_mpi()
    comm = mpi.COMM_WORLD
    rank = comm.Get_rank()
    lib = load(library_version()).lib
    peer, initiator = 1 - rank, int(rank == 0)
    send = np.full(max(SIZES), 7, np.uint8)  # written before anything is timed
    recv, ack = np.full(max(SIZES), 1, np.uint8), np.zeros(1, np.uint8)
    times = np.zeros(max(ITERATIONS.values()), np.int64)
    blocks = [(k, s, m) for k in KERNELS for s in SIZES for m in ("blocking", "persistent")]
    order = random.Random(seed)
    figures: dict[str, list[float]] = {}
    for round_ in range(WARMUP_BLOCKS + rounds):
        for kernel, size, method in order.sample(blocks, len(blocks)):
            n, persistent = ITERATIONS[kernel], int(method == "persistent")
            comm.Barrier()
            if kernel == "latency":
                code = lib.fb_pingpong(
                    comm.py2f(), peer, initiator, persistent, send.ctypes.data, recv.ctypes.data, size, n,
                    times.ctypes.data,
                )  # fmt: skip
                figure = times[:n].sum() / n / 2e3  # one way, us
            else:
                code = lib.fb_window(
                    comm.py2f(), peer, initiator, 0, persistent, 0, send.ctypes.data, recv.ctypes.data,
                    ack.ctypes.data, size, WINDOW, n, times.ctypes.data,
                )  # fmt: skip
                figure = size * WINDOW * n / (times[:n].sum() / 1e9) / 1e6  # MB/s
            require_success(code, f"{method} {kernel} at {size} B")
            if round_ >= WARMUP_BLOCKS and rank == 0:
                figures.setdefault(f"{kernel} {size} {method}", []).append(float(figure))
    if rank == 0:
        print(json.dumps({"library": mpi.Get_library_version().splitlines()[0], "figures": figures}))


def launch(python: str, rounds: int, seed: int, env: dict) -> dict:
    mpiexec = Path(python).absolute().parent / "mpiexec"
    command = [str(mpiexec), "-n", "2", python, __file__, "--worker", str(rounds), str(seed)]
    return json.loads(tool(command, TIMEOUT_S, env).strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=6, help="launches (default 6)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per launch (default 15)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--python", default=sys.executable, help="the venv's Python whose MPI to use")
    args = parser.parse_args()
    env = child_env(mpi_as_root=True, checkout_path=True)
    per_launch: dict[tuple[str, int], list[float]] = {}
    medians: dict[tuple[str, int, str], list[float]] = {}
    library = ""
    for number in range(args.launches):
        found = launch(args.python, args.rounds, args.seed + number, env)
        library, figures = found["library"], found["figures"]
        for kernel in KERNELS:
            for size in SIZES:
                blocking, persistent = figures[f"{kernel} {size} blocking"], figures[f"{kernel} {size} persistent"]
                ratios = [p / b for p, b in zip(persistent, blocking, strict=True)]
                per_launch.setdefault((kernel, size), []).append(statistics.median(ratios))
                medians.setdefault((kernel, size, "blocking"), []).append(statistics.median(blocking))
                medians.setdefault((kernel, size, "persistent"), []).append(statistics.median(persistent))
    print(f"# {library}")
    print(f"# {args.launches} launches x {args.rounds} rounds; a launch's figure is the median of its rounds")
    print(f"{'kernel':<8}{'size':>6}  {'unit':<5}{'blocking':>10}{'persistent':>12}  persistent/blocking (range)")
    for (kernel, size), ratios in per_launch.items():
        unit = "us" if kernel == "latency" else "MB/s"
        blocking = statistics.median(medians[(kernel, size, "blocking")])
        persistent = statistics.median(medians[(kernel, size, "persistent")])
        print(
            f"{kernel:<8}{size:>5}B  {unit:<5}{blocking:>10.3f}{persistent:>12.3f}  "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
