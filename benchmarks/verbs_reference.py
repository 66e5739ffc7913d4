"""How close is fabricbench's verbs transport to perftest on the same RDMA device?

Run it where a device is; on a kernel without rdma_rxe, inside the SoftRoCE VM:

    scripts/softroce-vm.sh -- python benchmarks/verbs_reference.py
    FABRICBENCH_VM_CPUS=2 scripts/softroce-vm.sh -- python benchmarks/verbs_reference.py

1. Two fabricbench runs, each with ``-t verbs,perftest`` so both tools measure the same device in the same
   run: ``latency`` at 8 B (verbs: RDMA WRITE ping-pong spinning on the last byte; perftest: ib_write_lat,
   its t_typical) and ``bw`` from 64 KiB (streamed RDMA WRITEs against ib_write_bw's average, with
   the same tx depth and CQ moderation). Ratios: verbs p50 / ib_write_lat typical, verbs bw / ib_write_bw.
2. The cost of one post+poll round in the Python loop, outside the network: on two queue pairs of this
   process joined to each other, the post_send call, a poll that finds a completion waiting, and a poll of
   an empty CQ; beside them, the whole loopback round including the device's own processing.

Targets (the issue's): latency within 2x of perftest's, bandwidth at least 0.9x from 64 KiB. They are
printed, never asserted: under emulation both tools share one or two emulated CPUs and the figures are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAT_SIZES = "8:8"
LAT_TARGET = 2.0
BW_TARGET = 0.9
FABRICBENCH = [sys.executable, "-m", "fabricbench"]


def run_pair(kernel: str, sizes: str, iterations: int, window: int, spin: str, out: Path) -> list[dict]:
    """One fabricbench run of ``kernel`` over verbs and perftest; the measured rows."""
    from fabricbench.results import read_table

    command = [
        *FABRICBENCH, "run", "-t", "verbs,perftest", "-k", kernel, "-m", sizes, "-i", str(iterations),
        "-x", "10", "-W", str(window), "--spin", spin, "--timeout", "600", "--out", str(out), "--format", "none",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"fabricbench failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    rows, _ = read_table(out)
    return rows[rows.status == "ok"].to_dict("records")


def compare(rows: list[dict], column: str, reference: str) -> list[tuple[int, float, float, float]]:
    """(size, verbs, perftest, verbs/perftest) for every size both measured."""
    ours = {r["size_B"]: r[column] for r in rows if r["transport"] == "verbs"}
    theirs = {r["size_B"]: r[column] for r in rows if r["transport"] == reference}
    return [(size, ours[size], theirs[size], ours[size] / theirs[size]) for size in sorted(ours) if size in theirs]


def methods(rows: list[dict]) -> str:
    """How each tool ran, e.g. ``verbs: write inline; perftest: ib_write_lat, inline 0[B]``."""
    by_tool = {r["transport"]: r["method"] for r in rows}
    return "; ".join(f"{tool}: {method}" for tool, method in by_tool.items())


def loop_costs(rounds: int) -> dict[str, float]:
    """Nanoseconds per call in the Python loop, on two QPs of this process joined to each other."""
    from fabricbench.transports.rdma import load_pyverbs
    from fabricbench.transports.verbs_link import Link

    verbs = load_pyverbs()
    a, b = Link(verbs, {}, 4096, 16, 1), Link(verbs, {}, 4096, 16, 1)
    try:
        a.connect(b.endpoint())
        b.connect(a.endpoint())
        wr = a.send_wr(verbs.e.IBV_WR_RDMA_WRITE, 8, signaled=True, inline=True)
        post, poll, clock = a.qp.post_send, a.send_cq.poll, time.perf_counter_ns
        clock_cost = statistics.median(-clock() + clock() for _ in range(rounds))
        posting, finding, empty, whole = [], [], [], []
        for _ in range(rounds):
            start = clock()
            post(wr)
            posting.append(clock() - start)
            time.sleep(0.0002)  # the completion arrives; then time the poll that finds it
            start = clock()
            found = poll(1)
            finding.append(clock() - start)
            assert found == 1, "the loopback WRITE did not complete"
            start = clock()
            poll(1)
            empty.append(clock() - start)
        for _ in range(rounds):
            start = clock()
            post(wr)
            while not poll(1):
                pass
            whole.append(clock() - start)
    finally:
        a.close()
        b.close()
    cost = {
        "post_send": statistics.median(posting) - clock_cost,
        "poll, completion waiting": statistics.median(finding) - clock_cost,
        "poll, empty CQ": statistics.median(empty) - clock_cost,
        "loopback round incl. device": statistics.median(whole) - clock_cost,
    }
    cost["post+poll round (Python loop)"] = cost["post_send"] + cost["poll, completion waiting"]
    return cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lat-iterations", type=int, default=2000)
    parser.add_argument("--bw-iterations", type=int, default=10, help="windows per size")
    parser.add_argument("--bw-sizes", default="64K:256K", help="bandwidth sizes, [MIN:]MAX as -m")
    parser.add_argument("--window", type=int, default=64, help="tx depth, for both tools")
    parser.add_argument("--spin", default="auto", choices=["auto", "busy", "yield"], help="fabricbench's waiting")
    parser.add_argument("--rounds", type=int, default=2000, help="rounds of the loop-cost measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        lat = run_pair("latency", LAT_SIZES, args.lat_iterations, args.window, args.spin, Path(tmp) / "lat")
        bw = run_pair("bw", args.bw_sizes, args.bw_iterations, args.window, args.spin, Path(tmp) / "bw")
    print("# verbs against perftest: same device, same run; each tool's method as its rows say")
    print(f"# latency: one-way (half a round trip), p50 against ib_write_lat's t_typical; {methods(lat)}")
    print(f"#{'size':>9} {'verbs us':>10} {'perftest us':>12} {'ratio':>7}  (target <= {LAT_TARGET:g})")
    for size, ours, theirs, ratio in compare(lat, "lat_p50_us", "perftest"):
        print(f"{size:>10} {ours:>10.2f} {theirs:>12.2f} {ratio:>7.2f}")
    print(f"# bandwidth: MB/s (10^6 B/s), average over the run, against ib_write_bw's average; {methods(bw)}")
    print(f"#{'size':>9} {'verbs':>10} {'perftest':>12} {'ratio':>7}  (target >= {BW_TARGET:g})")
    for size, ours, theirs, ratio in compare(bw, "bw_MBps", "perftest"):
        print(f"{size:>10} {ours:>10.1f} {theirs:>12.1f} {ratio:>7.2f}")
    print("# the Python loop, outside the network: median ns per call (clock cost subtracted)")
    for name, ns in loop_costs(args.rounds).items():
        print(f"{name:>32}: {ns:>10.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
