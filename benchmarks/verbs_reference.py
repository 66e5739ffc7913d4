"""How close is fabricbench's verbs transport to perftest on the same RDMA device?

Run it where a device is; on a kernel without rdma_rxe, inside the SoftRoCE VM with 2 vCPUs (with one,
two busy-polling perftest processes share it and report the scheduler's tick):

    FABRICBENCH_VM_CPUS=2 FABRICBENCH_VM_MEMORY=2G FABRICBENCH_VM_TIMEOUT=5400 \
        scripts/softroce-vm.sh -- python benchmarks/verbs_reference.py --raw /tmp/run.json

Contenders, each a fabricbench run of its own (``mpiexec -n 2``) reading its rows back:
- ``c``: fabricbench ``--loop c`` (``-t verbs,verbs-send``): the C loop;
- ``python``: fabricbench ``--loop python``: the pyverbs loop, the figures before the C loop existed;
- ``perftest`` and ``perftest again``: ``-t perftest,perftest-send``: ib_write_lat, ib_send_lat, ib_read_lat,
  ib_atomic_lat, ib_write_bw and ib_send_bw on the same device with the same counts, tx depth (-t = -W) and
  CQ moderation (-Q); the second is the A/A control, the resolution this machine allows.
Two groups of kernels run per rep: latency (WRITE, SEND, READ and fetch-and-add at 8 B; fabricbench's p50
against perftest's t_typical, both one way for WRITE and SEND and a full round trip for READ and atomics)
and bandwidth (WRITE and SEND streams from 64 KiB to 4 MiB; bw_MBps against perftest's average, both in
10^6 B/s). In every rep each group runs on every contender back to back, in an order shuffled anew, and a
rep's ratio is a contender over that rep's perftest (benchmarks/paired.py).

The VM switches between speed modes from one launch to the next (ib_write_lat read about 11 µs in some
runs and 18-22 µs in others), so a median of paired ratios mixes the modes whenever a rep's contenders
land in different ones. Besides the median the script prints best against best (each contender's fastest
rep, which is what each reaches undisturbed) and the ratios within each mode, a rep's mode taken from
its perftest A/A pair: "fast" when both perftest runs read below the median of all perftest runs.

Then the cost of one post+poll round outside the network, in C and in Python, on two queue pairs of this
process joined to each other: the post, a poll that finds its completion waiting, a poll of an empty CQ.

Targets: latency at most 1.05x perftest's, bandwidth at least 0.97x. Printed, with the misses stated;
exit status 1 when a target is missed by the median.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import fabricbench as run_fabricbench
from paired import Ratio, check_reps, missed, run_shuffled

LATENCY = [  # (fabricbench transport, kernel, perftest's tool, what the sample is)
    ("verbs", "latency", "ib_write_lat", "WRITE latency 8 B, one way"),
    ("verbs-send", "latency", "ib_send_lat", "SEND latency 8 B, one way"),
    ("verbs", "get", "ib_read_lat", "READ latency 8 B, round trip"),
    ("verbs", "fop", "ib_atomic_lat", "fetch-and-add latency, round trip"),
]
BANDWIDTH = [("verbs", "bw", "ib_write_bw", "WRITE bw"), ("verbs-send", "bw", "ib_send_bw", "SEND bw")]
LAT_TARGET, BW_TARGET = 1.05, 0.97
REFERENCE = {"verbs": "perftest", "verbs-send": "perftest-send"}


def run(transports: str, kernels: str, sizes: str, extra: list[str], out: Path) -> dict:
    """One fabricbench run; its measured figures by (transport, kernel, size)."""
    command = ["run", "-t", transports, "-k", kernels, "-m", sizes, *extra, "--timeout", "600"]
    rows, _ = run_fabricbench(command, out, 3600)
    rows = rows[rows.status == "ok"]
    return {(r.transport, r.kernel, int(r.size_B)): (r.lat_p50_us, r.bw_MBps) for r in rows.itertuples()}


def group(name: str, args, work: Path, counter: list[int]) -> dict:
    """The contenders of one group, each a callable that runs it once."""
    if name == "latency":
        kernels, sizes = ",".join(sorted({k for _, k, _, _ in LATENCY})), "8:8"
        counts = ["-i", str(args.lat_iterations), "-x", "100"]
    else:
        kernels, sizes = "bw", args.bw_sizes
        counts = ["-i", str(args.bw_iterations), "-x", "2", "-W", str(args.window)]

    def contender(transports: str, extra: list[str]):
        def once():
            counter[0] += 1
            return run(transports, kernels, sizes, counts + extra, work / f"run{counter[0]}")

        return once

    ours = "verbs,verbs-send"
    reference = contender("perftest,perftest-send", [])
    slot = {"c": contender(ours, ["--loop", "c"]), "perftest": reference, "perftest again": reference}
    if name == "latency" or args.python_bw:
        slot["python"] = contender(ours, ["--loop", "python"])
    return slot


def figure(result: dict, transport: str, kernel: str, size: int, bandwidth: bool) -> float:
    lat, bw = result.get((transport, kernel, size), (math.nan, math.nan))
    return float(bw if bandwidth else lat)


def best(values: list[float], bandwidth: bool) -> float:
    finite = [v for v in values if math.isfinite(v) and v > 0]
    return (max(finite) if bandwidth else min(finite)) if finite else math.nan


def judge(c: list[float], python: list[float], perftest: list[float], again: list[float], bandwidth: bool) -> dict:
    """One measure's figures from its reps (NaN where a run gave none): medians, paired ratios, best against best,
    and the C loop's ratio within each speed mode; None when fewer than two reps have both figures."""
    usable = [i for i in range(len(c)) if all(math.isfinite(v[i]) and v[i] > 0 for v in (c, perftest))]
    if len(usable) < 2:
        return {"reps": len(usable)}
    ours, theirs = [c[i] for i in usable], [perftest[i] for i in usable]
    controls = [again[i] for i in usable if math.isfinite(again[i])]
    python_ratios = [python[i] / perftest[i] for i in usable if math.isfinite(python[i])]
    # A rep is "fast" when both of its perftest runs beat the median perftest run.
    middle = statistics.median(theirs + controls)

    def faster(value: float) -> bool:
        return value > middle if bandwidth else value < middle

    fast = [i for i in usable if faster(perftest[i]) and math.isfinite(again[i]) and faster(again[i])]
    slow = [i for i in usable if i not in fast]

    def within(chosen: list[int]) -> float:
        return statistics.median(c[i] / perftest[i] for i in chosen) if chosen else math.nan

    return {
        "reps": len(usable),
        "fast_reps": len(fast),
        "c": statistics.median(ours),
        "perftest": statistics.median(theirs),
        "ratio": Ratio.of(theirs, ours),
        "python": statistics.median(python_ratios) if python_ratios else math.nan,
        "control": Ratio.of([perftest[i] for i in usable if math.isfinite(again[i])], controls).median
        if len(controls) >= 2
        else math.nan,
        "best": best(ours, bandwidth) / best(theirs + controls, bandwidth),
        "fast": within(fast),
        "slow": within(slow),
    }


WHO = ("c", "python", "perftest", "perftest again")  # judge's arguments, in order


def series(reps: list[dict], who: str, transport: str, kernel: str, size: int, bandwidth: bool) -> list[float]:
    """One contender's figure in every rep (NaN where it has none); perftest's rows are its own transports'."""
    name = REFERENCE[transport] if who.startswith("perftest") else transport
    return [figure(rep[who], name, kernel, size, bandwidth) if who in rep else math.nan for rep in reps]


def report(reps: list[dict], measures: list[tuple], sizes: list[int], bandwidth: bool) -> bool:
    """A line per measure and size: the medians, the paired ratios, best/best and per mode; True if one missed."""
    target = BW_TARGET if bandwidth else LAT_TARGET
    unit = "MB/s" if bandwidth else "us"
    any_missed = False
    print(
        f"#{'measure':>34} {'size':>8} {'c':>9} {'perftest':>9} | {'c/pt':>5} {'95% CI':>10} {'py/pt':>5} "
        f"{'A/A':>5} | {'best/best':>9} {'fast':>5} {'slow':>5}  verdict (target {target:g}; {unit})"
    )
    for transport, kernel, _, words in measures:
        for size in sizes:
            got = judge(
                *(series(reps, who, transport, kernel, size, bandwidth) for who in WHO),
                bandwidth,
            )
            if "ratio" not in got:
                print(f" {words:>34} {size:>8}  too few reps with both figures ({got['reps']})")
                continue
            ratio = got["ratio"]
            verdict = ratio.verdict(target, higher_is_better=bandwidth)
            any_missed |= missed(verdict)
            print(
                f" {words:>34} {size:>8} {got['c']:>9.2f} {got['perftest']:>9.2f} | {ratio.median:>5.2f} "
                f"{ratio.interval:>10} {got['python']:>5.2f} {got['control']:>5.2f} | {got['best']:>9.2f} "
                f"{got['fast']:>5.2f} {got['slow']:>5.2f}  {verdict} ({got['reps']} reps, {got['fast_reps']} fast)"
            )
    return any_missed


def loop_costs(rounds: int) -> dict[str, float]:
    """Nanoseconds per call, C against Python, on two QPs of this process joined to each other (rxe loopback)."""
    import numpy as np

    from fabricbench.transports.verbs import cloop as verbs_cloop
    from fabricbench.transports.verbs.link import Link
    from fabricbench.transports.verbs.rdma import load_pyverbs

    verbs = load_pyverbs()
    clock = time.perf_counter_ns
    clock_cost = statistics.median(-clock() + clock() for _ in range(rounds))
    cost = {}
    a, b = Link(verbs, {}, 4096, 16, 1), Link(verbs, {}, 4096, 16, 1)
    try:
        a.connect(b.endpoint())
        b.connect(a.endpoint())
        wr = a.send_wr(verbs.e.IBV_WR_RDMA_WRITE, 8, signaled=True, inline=True)
        post, poll = a.qp.post_send, a.send_cq.poll
        posting, finding, empty = [], [], []
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
        cost["python: post_send"] = statistics.median(posting) - clock_cost
        cost["python: poll, completion waiting"] = statistics.median(finding) - clock_cost
        cost["python: poll, empty CQ"] = statistics.median(empty) - clock_cost
    finally:
        a.close()
        b.close()
    loop = verbs_cloop.load()
    a = verbs_cloop.CLink(verbs, loop, {}, 4096, 16, 1, 60)
    b = verbs_cloop.CLink(verbs, loop, {}, 4096, 16, 1, 60)
    try:
        a.connect(b.endpoint())
        b.connect(a.endpoint())
        arrays = [np.zeros(rounds, dtype=np.int64) for _ in range(3)]
        a.check(loop.lib.fb_loop_cost(a.handle, rounds, *(x.ctypes.data_as(ctypes.c_void_p) for x in arrays)))
        for name, values in zip(("post_send", "poll, completion waiting", "poll, empty CQ"), arrays, strict=True):
            cost[f"c: {name}"] = float(np.median(values))  # C's clock cost is a few tens of ns: not subtracted
    finally:
        a.close()
        b.close()
    for loop_name in ("python", "c"):
        cost[f"{loop_name}: post+poll round"] = (
            cost[f"{loop_name}: post_send"] + cost[f"{loop_name}: poll, completion waiting"]
        )
    return cost


def encode(figures: dict) -> list:
    return [[*key, *(None if math.isnan(v) else float(v) for v in values)] for key, values in figures.items()]


def decode(rows: list) -> dict:
    return {(t, k, int(size)): tuple(math.nan if v is None else v for v in values) for t, k, size, *values in rows}


def measure(args) -> dict[str, list[dict]]:
    """Every rep: both groups in a shuffled order, every contender of a group back to back in a shuffled order."""
    order = random.Random(args.seed)
    by_group: dict[str, list[dict]] = {name: [] for name in args.groups}
    counter = [0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name in order.sample(list(by_group), len(by_group)):
                slot = group(name, args, Path(tmp), counter)
                by_group[name].append(run_shuffled(order, slot, before=lambda: time.sleep(0.5)))
            print(f"# rep {rep + 1} of {args.reps} done, {time.monotonic() - started:.0f} s", file=sys.stderr)
            if args.raw:
                raw = {name: [{who: encode(f) for who, f in r.items()} for r in got] for name, got in by_group.items()}
                args.raw.write_text(json.dumps(raw))
    return by_group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--lat-iterations", type=int, default=2000)
    parser.add_argument("--bw-iterations", type=int, default=5, help="windows per size")
    parser.add_argument("--bw-sizes", default="64K:4M", help="bandwidth sizes, [MIN:]MAX as -m")
    parser.add_argument("--window", type=int, default=16, help="tx depth (-W, perftest's -t), for every tool")
    parser.add_argument("--python-bw", action="store_true", help="also time the pyverbs loop's bandwidth")
    parser.add_argument("--rounds", type=int, default=2000, help="rounds of the loop-cost measurement")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--groups",
        type=lambda text: [name for name in text.split(",") if name],
        default=["latency", "bandwidth"],
        help="which groups to run: latency,bandwidth (default both)",
    )
    parser.add_argument("--raw", type=Path, help="write every rep's figures here as JSON, after each rep")
    parser.add_argument("--report", type=Path, help="only print the report of a --raw file")
    args = parser.parse_args()
    check_reps(parser, args.reps)
    if not args.groups or set(args.groups) - {"latency", "bandwidth"}:
        parser.error("--groups: a comma-separated list of latency and bandwidth")

    from fabricbench.measure.plan import parse_size_range, sizes_between

    lo, hi = parse_size_range(args.bw_sizes)
    bw_sizes = sizes_between(lo if lo >= 0 else 65536, hi)
    if args.report:
        by_group = {name: [{who: decode(figures) for who, figures in rep.items()} for rep in reps]
                    for name, reps in json.loads(args.report.read_text()).items()}  # fmt: skip
    else:
        by_group = measure(args)
    print("# verbs against perftest on one device, paired and shuffled reps; MB = 10^6 B")
    print("# c/pt: median of the paired ratios of the C loop over perftest, with its 95% interval; py/pt: the")
    print("# pyverbs loop's; A/A: perftest over perftest; best/best: each one's best rep; fast/slow: per mode")
    latency_missed = "latency" in by_group and report(by_group["latency"], LATENCY, [8], bandwidth=False)
    bandwidth_missed = "bandwidth" in by_group and report(by_group["bandwidth"], BANDWIDTH, bw_sizes, bandwidth=True)
    if not args.report:
        print("# one post+poll round outside the network: median ns per call (Python: clock cost subtracted)")
        for name, ns in loop_costs(args.rounds).items():
            print(f"{name:>40}: {ns:>10.0f} ns")
    return 1 if latency_missed or bandwidth_missed else 0


if __name__ == "__main__":
    sys.exit(main())
