"""How much does fabricbench's harness cost over a minimal loop and over C?

Run it alone (it launches its own ranks):

    python benchmarks/mpi_overhead.py [--reps 5] [--no-c]

In one run on the same MPI it alternates, rep by rep:
- a minimal hand-written mpi4py ping-pong and window-bandwidth loop (plain Send/Recv and Isend
  with one timer around the whole loop: what a user would write);
- fabricbench's own `latency` and `bw` kernels through the real runner, with both methods;
- an OSU-style C loop built with the mpicc that ships with the MPI (skipped without mpicc).

It prints the medians and the ratios. Targets: latency at 8 B within 5 % of the minimal loop and
within 0.2 µs of C; bandwidth from 64 KiB at least 0.97x the minimal loop, and at least 0.9x C's
from 1 KiB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAT_SIZE = 8
BW_SIZES = [1024, 8192, 65536, 262144, 1048576, 4194304]
WINDOW = 64
LAT_ITERS = 20000
BW_ITERS = {1024: 2000, 8192: 1000, 65536: 300, 262144: 100, 1048576: 40, 4194304: 20}

C_SOURCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* OSU-style loops: written, page-aligned buffers; one timer around the loop. */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int peer = 1 - rank, lat_iters = atoi(argv[1]), window = atoi(argv[2]);
    char *s, *r, ack = 1;
    posix_memalign((void **)&s, 4096, 1 << 22); posix_memalign((void **)&r, 4096, 1 << 22);
    memset(s, 'a', 1 << 22); memset(r, 'b', 1 << 22);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < lat_iters; i++) {
        if (rank == 0) { MPI_Send(s, %(lat)d, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                         MPI_Recv(r, %(lat)d, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(r, %(lat)d, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
               MPI_Send(s, %(lat)d, MPI_CHAR, peer, 1, MPI_COMM_WORLD); }
    }
    t = MPI_Wtime() - t;
    if (!rank) printf("{\"impl\": \"C\", \"kernel\": \"latency\", \"size\": %(lat)d, \"us\": %%.4f}\n",
                      t / lat_iters / 2 * 1e6);
    MPI_Request req[1024];
    for (int a = 3; a < argc; a += 2) {
        int size = atoi(argv[a]), iters = atoi(argv[a + 1]);
        for (int pass = 0; pass < 2; pass++) {  /* pass 0 warms up */
            int n = pass ? iters : iters / 10 + 1;
            MPI_Barrier(MPI_COMM_WORLD);
            t = MPI_Wtime();
            for (int i = 0; i < n; i++) {
                for (int w = 0; w < window; w++) {
                    if (rank == 0) MPI_Isend(s, size, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
                    else MPI_Irecv(r, size, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
                }
                MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
                if (rank == 0) MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
            }
            t = MPI_Wtime() - t;
        }
        if (!rank) printf("{\"impl\": \"C\", \"kernel\": \"bw\", \"size\": %%d, \"MBps\": %%.4f}\n",
                          size, (double)size * window * iters / t / 1e6);
    }
    MPI_Finalize();
    return 0;
}
"""


def worker() -> None:
    """One rep inside mpiexec: the minimal loops, then fabricbench's runner, on the same ranks."""
    import numpy as np
    from mpi4py import MPI

    from fabricbench.control.mpi import MPIControl
    from fabricbench.kernels import get_kernel
    from fabricbench.plan import Plan
    from fabricbench.runner import Watchdog, measure
    from fabricbench.transports.mpi import MPITransport

    comm = MPI.COMM_WORLD
    rank, peer = comm.Get_rank(), 1 - comm.Get_rank()
    out: list[dict] = []
    ack = np.ones(1, dtype=np.uint8)

    # Minimal ping-pong, as anyone would write it: written buffers of the message size.
    s, r = np.full(LAT_SIZE, 7, dtype=np.uint8), np.full(LAT_SIZE, 9, dtype=np.uint8)
    for n in (LAT_ITERS // 10, LAT_ITERS):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(n):
            if rank == 0:
                comm.Send(s, peer, 1)
                comm.Recv(r, peer, 1)
            else:
                comm.Recv(r, peer, 1)
                comm.Send(s, peer, 1)
        elapsed = time.perf_counter() - start
    out.append({"impl": "minimal", "kernel": "latency", "size": LAT_SIZE, "us": elapsed / LAT_ITERS / 2 * 1e6})

    # Minimal window bandwidth.
    for size in BW_SIZES:
        s, r = np.full(size, 7, dtype=np.uint8), np.full(size, 9, dtype=np.uint8)
        iters = BW_ITERS[size]
        for n in (iters // 10 + 1, iters):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                if rank == 0:
                    MPI.Request.Waitall([comm.Isend(s, peer, 2) for _ in range(WINDOW)])
                    comm.Recv(ack, peer, 3)
                else:
                    MPI.Request.Waitall([comm.Irecv(r, peer, 2) for _ in range(WINDOW)])
                    comm.Send(ack, peer, 3)
            elapsed = time.perf_counter() - start
        out.append({"impl": "minimal", "kernel": "bw", "size": size, "MBps": size * WINDOW * iters / elapsed / 1e6})

    # fabricbench, through the runner that `fabricbench run` uses.
    ctrl = MPIControl(comm)
    watchdog = Watchdog(rank, ctrl.abort)
    for method in ("persistent", "blocking"):
        plan = Plan(
            steps=[],
            window=WINDOW,
            iterations=LAT_ITERS,
            warmup=LAT_ITERS // 10,
            transport_options={"mpi": {"method": method}},
        )
        transport = MPITransport(ctrl, plan)
        row = measure(ctrl, transport, get_kernel("latency"), LAT_SIZE, plan, watchdog)
        if row:
            out.append(
                {"impl": f"fabricbench-{method}", "kernel": "latency", "size": LAT_SIZE, "us": row["lat_mean_us"]}
            )
        for size in BW_SIZES:
            plan.iterations, plan.warmup = BW_ITERS[size], BW_ITERS[size] // 10 + 1
            row = measure(ctrl, transport, get_kernel("bw"), size, plan, watchdog)
            if row:
                out.append({"impl": f"fabricbench-{method}", "kernel": "bw", "size": size, "MBps": row["bw_MBps"]})
        transport.close()
    if rank == 0:
        for item in out:
            print(json.dumps(item), flush=True)


def _build_c(workdir: Path) -> Path | None:
    mpicc = Path(sys.executable).parent / "mpicc"
    if not mpicc.exists():
        return None
    source = workdir / "pingpong.c"
    source.write_text(C_SOURCE % {"lat": LAT_SIZE})
    binary = workdir / "pingpong"
    subprocess.run([str(mpicc), "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def _launch(command: list[str], hugepages: bool) -> list[dict]:
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    # numpy madvises huge pages for arrays of 4 MiB and more; C's malloc gets none in THP's madvise
    # mode. Off by default so that Python and C move data through the same kind of pages.
    env = dict(os.environ, NUMPY_MADVISE_HUGEPAGE="1" if hugepages else "0")
    result = subprocess.run(
        [mpiexec, "-n", "2", *command], capture_output=True, text=True, timeout=600, check=True, env=env
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-c", action="store_true", help="skip the C reference")
    parser.add_argument("--hugepages", action="store_true", help="let numpy madvise huge pages (unfair to C)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    results: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = None if args.no_c else _build_c(Path(tmp))
        c_args = [str(LAT_ITERS), str(WINDOW)] + [str(x) for s in BW_SIZES for x in (s, BW_ITERS[s])]
        for rep in range(args.reps):
            items = _launch([sys.executable, __file__, "--worker"], args.hugepages)
            if binary:
                items += _launch([str(binary), *c_args], args.hugepages)
            for item in items:
                key = (item["impl"], item["kernel"], item["size"])
                results.setdefault(key, []).append(item.get("us", item.get("MBps")))
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    median = {k: statistics.median(v) for k, v in results.items()}
    impls = ["minimal", "fabricbench-persistent", "fabricbench-blocking"] + (["C"] if binary else [])

    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print(
        f"# Python {sys.version.split()[0]}, medians of {args.reps} reps; numpy huge pages "
        f"{'on' if args.hugepages else 'off'}; THP: {thp.read_text().strip() if thp.exists() else 'n/a'}"
    )
    print(f"# latency {LAT_SIZE} B (µs, RTT/2)")
    base = median[("minimal", "latency", LAT_SIZE)]
    for impl in impls:
        value = median[(impl, "latency", LAT_SIZE)]
        extra = ""
        if binary and impl != "C":
            extra = f"  {value - median[('C', 'latency', LAT_SIZE)]:+.3f} µs vs C"
        print(f"{impl:>24}: {value:8.3f} µs  x{value / base:.3f} of minimal{extra}")
    print("# bandwidth (MB/s, MB = 10^6 B), window 64")
    header = (
        f"{'size':>9}"
        + "".join(f"{i:>24}" for i in impls)
        + "   persistent/minimal"
        + ("   persistent/C" if binary else "")
    )
    print(header)
    for size in BW_SIZES:
        values = [median[(i, "bw", size)] for i in impls]
        line = f"{size:>9}" + "".join(f"{v:24.1f}" for v in values)
        line += f"{values[1] / values[0]:>21.3f}"
        if binary:
            line += f"{values[1] / values[-1]:>15.3f}"
        print(line)


if __name__ == "__main__":
    main()
