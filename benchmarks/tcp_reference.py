"""How close is fabricbench's tcp transport to the tools TCP users trust?

Run it alone, on one machine (Debian: apt-get install sockperf iperf3):

    python benchmarks/tcp_reference.py [--reps 30] [--seconds 0.5] [--bw-sizes 64,256,1024] [--pin C,S]

On loopback, rep by rep, it alternates short measurements:
- latency at 64 B: sockperf ping-pong over TCP (one way: RTT/2, as fabricbench's rows are) and
  fabricbench ``tcp latency``;
- bandwidth at 64 KiB, 256 KiB and 1 MiB: iperf3, one stream, writes of the message size (-l S;
  1 MiB is the largest write iperf3 takes), and fabricbench ``tcp bw`` at that size (window 64,
  a 1-byte ack per window, as osu_bw).
fabricbench runs twice in every rep: with its default C timed loop, which the targets are for,
and with ``--tcp-loop python``, which shows what timing the same system calls from the
interpreter costs (what a Python MPI benchmark such as OMB-Py pays as well).

fabricbench runs as ``fabricbench serve`` and ``fabricbench run --peer``, a server and a client like
the two tools, with no MPI; ``--tcp-loop`` holds on both sides.

Why it is built this way: loopback throughput on a small shared VM drifts by a factor of two over
seconds (iperf3 alone, back to back, 0.1 s each: 2.0 to 4.5 GB/s at 256 KiB, in slow and fast
spells several runs long). A ratio is only trustworthy if both sides of it see the same drift and
the same place in the order, so each rep runs fabricbench, the reference tool and the reference
tool once more (the A/A control) back to back, in an order shuffled anew every rep, each after a
moment to settle; a rep's ratio is fabricbench over the reference of that same rep. Runs are short
(--seconds, 0.5 by default; iperf3, whose -t takes whole seconds, then sends as many bytes as its
last run at that size moved in that time), so that many reps fit. The ratios are summarised by
their median, with the median's 95 % confidence interval (distribution-free, from order statistics)
next to it. The A/A control's ratio to the reference should be 1; its interval is the resolution
this machine allows. (Comparing each run with the reference runs just before and after it instead,
as an earlier version did, put the reference always at the edge of the group: that position alone
moved iperf3 against itself by up to 20 %.) A target is "met, clearly" when fabricbench's whole
interval is on the right side of it.
Interference on a shared machine only ever slows a run down: loopback bandwidth here falls into a
slow mode (about half speed, when both ends share a CPU or the host takes one) now and then, for
any tool. A paired median then partly measures which tool met more slow spells. So each bandwidth
measure also prints the ratio of the tools' upper quartiles over all reps: the speed each reaches
when undisturbed. It is printed beside the target, not used for the verdict.
Targets: latency at 64 B at most 1.10x sockperf's; bandwidth from 64 KiB at least 0.95x iperf3's.
Exit status 1 when a target is missed by the median.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from harness import fabricbench, tool
from paired import Ratio, check_reps, missed, run_shuffled

LAT_SIZE = 64
LAT_WARMUP = 2000
LOOPS = {"fabricbench": "c", "python loop": "python"}  # series name: --tcp-loop
BW_SIZES = [64 * 1024, 256 * 1024, 1024 * 1024]  # iperf3 writes at most 1 MiB at a time
LAT_SECONDS = 1  # sockperf takes whole seconds
LAT_TARGET = 1.10
BW_TARGET = 0.95
SETTLE_SECONDS = 0.3
PIN = {"client": [], "server": []}  # taskset prefixes from --pin: every tool gets the same placement


def settle() -> None:
    """Let the last tool's server finish its teardown (iperf3 sums up, a fabricbench session exits)."""
    time.sleep(SETTLE_SECONDS)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, deadline: float = 10.0) -> None:
    """Wait until something accepts on the port (a server started too early is refused, not slow)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


# --- one measurement of each tool ----------------------------------------------------------------


def sockperf_latency(port: int) -> dict:
    """sockperf ping-pong at 64 B: one-way latency in µs (p50 and mean)."""
    sockperf = ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", str(LAT_SIZE)]
    out = tool([*PIN["client"], *sockperf, "-t", str(LAT_SECONDS)], timeout=LAT_SECONDS + 30)
    p50 = re.search(r"percentile 50\.000 =\s*([\d.]+)", out)
    mean = re.search(r"avg-latency=([\d.]+)", out)
    if not (p50 and mean):
        raise SystemExit(f"cannot read sockperf's output:\n{out}")
    return {"p50": float(p50.group(1)), "mean": float(mean.group(1))}


IPERF3_RATE: dict[int, float] = {}  # MB/s of the last iperf3 run at each size


def iperf3_bandwidth(port: int, size: int, seconds: float) -> float:
    """iperf3, one stream, writes of ``size`` bytes: what the receiver got, in MB/s (10^6 B).

    iperf3's -t takes whole seconds; a shorter run sends -n bytes instead, as many as the last run
    at this size moved in ``seconds`` (the very first run at a size lasts one second).
    """
    rate = IPERF3_RATE.get(size)
    if rate is None or seconds.is_integer():
        length = ["-t", str(max(1, round(seconds)))]
    else:
        length = ["-n", str(max(16, round(rate * 1e6 * seconds / size)) * size)]
    iperf3 = ["iperf3", "-c", "127.0.0.1", "-p", str(port), *length, "-l", str(size), "-J"]
    out = tool([*PIN["client"], *iperf3], timeout=seconds + 30, retries=3)  # a server winding down refuses
    IPERF3_RATE[size] = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
    return IPERF3_RATE[size]


def fabricbench_rows(port: int, out_dir: Path, kernel: str, size: int, *args: str) -> list[dict]:
    peer = ["run", "--peer", f"127.0.0.1:{port}", "-t", "tcp", "-k", kernel, "-m", f"{size}:{size}", *args]
    rows, _ = fabricbench(peer, out_dir, timeout=300, launcher=PIN["client"])
    return rows[rows.status == "ok"].to_dict("records")


def fabricbench_latency(port: int, out_dir: Path, loop: str) -> dict:
    args = ("-i", "1000000", "-x", str(LAT_WARMUP), "--max-time", str(LAT_SECONDS), "--tcp-loop", loop)
    row = fabricbench_rows(port, out_dir, "latency", LAT_SIZE, *args)[0]
    return {"p50": float(row["lat_p50_us"]), "mean": float(row["lat_mean_us"])}


def fabricbench_bandwidth(port: int, out_dir: Path, loop: str, size: int, seconds: float) -> float:
    """fabricbench tcp bw at one size for ``seconds``, as iperf3 gets: MB/s (10^6 B)."""
    args = ("-i", "100000", "-x", "5", "--max-time", str(seconds), "--tcp-loop", loop)
    row = fabricbench_rows(port, out_dir, "bw", size, *args)[0]
    return float(row["bw_MBps"])


def summary_line(name: str, reference: list[float], samples: list[float], note: str) -> tuple[str, Ratio]:
    ratio = Ratio.of(reference, samples)
    line = (
        f"{name:<24}{statistics.median(reference):>10.2f}{statistics.median(samples):>12.2f}{ratio.median:>7.3f}"
        f"{ratio.interval:>11}  {note}"
    )
    return line, ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="alternating repetitions (default 30)")
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per bandwidth measurement (default 0.5)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the order within each rep (default 1)")
    parser.add_argument(
        "--bw-sizes",
        default=",".join(str(size // 1024) for size in BW_SIZES),
        help="bandwidth sizes in KiB, 64 to 1024 (default 64,256,1024): fewer sizes, more reps in the same time",
    )
    parser.add_argument(
        "--pin",
        metavar="CLIENT_CPU,SERVER_CPU",
        help="pin every client to one CPU and every server to another (taskset); default: the scheduler's choice",
    )
    args = parser.parse_args()
    check_reps(parser, args.reps)
    if not 0 < args.seconds <= 60:
        parser.error("--seconds must be above 0 and at most 60")
    try:
        sizes = [int(kib) * 1024 for kib in args.bw_sizes.split(",")]
    except ValueError:
        parser.error(f"--bw-sizes must be KiB numbers separated by commas, got {args.bw_sizes!r}")
    if not all(64 * 1024 <= size <= 1024 * 1024 for size in sizes):
        parser.error("--bw-sizes: each size must be 64 to 1024 KiB (iperf3 writes at most 1 MiB)")
    if args.pin:
        client_cpu, server_cpu = args.pin.split(",")
        PIN.update(client=["taskset", "-c", client_cpu], server=["taskset", "-c", server_cpu])
    for name in ("sockperf", "iperf3"):
        if not shutil.which(name):
            raise SystemExit(f"{name} is not installed (Debian: apt-get install -y sockperf iperf3)")

    ports = {name: free_port() for name in ("sockperf", "iperf3", "fabricbench")}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    servers = [
        subprocess.Popen(
            [*PIN["server"], "sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(ports["sockperf"])], **quiet
        ),
        subprocess.Popen([*PIN["server"], "iperf3", "-s", "-B", "127.0.0.1", "-p", str(ports["iperf3"])], **quiet),
        subprocess.Popen(
            [
                *PIN["server"],
                sys.executable,
                "-m",
                "fabricbench",
                "serve",
                "--address",
                "127.0.0.1",
                "--port",
                str(ports["fabricbench"]),
            ],
            **quiet,
        ),
    ]
    # Per measure and tool, one value per rep: fabricbench, the reference, the reference once more
    # (its A/A control: how well this machine repeats a measurement at all), and fabricbench's
    # Python loop.
    series: dict[str, dict[str, list[float]]] = {}
    lat_names = {stat: f"latency {LAT_SIZE} B {stat} (us)" for stat in ("p50", "mean")}
    bw_names = {size: f"bw {size // 1024} KiB (MB/s)" for size in sizes}

    order = random.Random(args.seed)

    def add(name: str, who: str, value: float) -> None:
        series.setdefault(name, {}).setdefault(who, []).append(value)

    def latency(who: str, measured: dict) -> None:
        for stat, name in lat_names.items():
            add(name, who, measured[stat])

    try:
        for port in ports.values():
            wait_listening(port)
        time.sleep(0.5)  # the probes above were clients too; let the servers settle
        with tempfile.TemporaryDirectory() as tmp:
            for size in sizes:  # unrecorded: a first rate, so that short iperf3 runs can be sized
                iperf3_bandwidth(ports["iperf3"], size, args.seconds)
            for rep in range(args.reps):
                print(f"# rep {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                slot = {
                    who: partial(fabricbench_latency, ports["fabricbench"], Path(tmp, f"lat{rep}-{loop}"), loop)
                    for who, loop in LOOPS.items()
                }
                slot["reference"] = slot["control"] = partial(sockperf_latency, ports["sockperf"])
                for who, measured in run_shuffled(order, slot, before=settle).items():  # no tool always runs first
                    latency(who, measured)
                for size in sizes:
                    name = bw_names[size]
                    ours = partial(fabricbench_bandwidth, ports["fabricbench"])
                    slot = {
                        who: partial(ours, Path(tmp, f"bw{rep}-{size}-{loop}"), loop, size, args.seconds)
                        for who, loop in LOOPS.items()
                    }
                    slot["reference"] = slot["control"] = partial(iperf3_bandwidth, ports["iperf3"], size, args.seconds)
                    for who, measured in run_shuffled(order, slot, before=settle).items():
                        add(name, who, measured)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)

    print(f"# tcp on loopback, {args.reps} reps: medians, and the median of the paired ratios with its 95% CI")
    print(f"{'measure':<24}{'reference':>10}{'measured':>12}{'ratio':>7}{'95% CI':>11}  what")
    ok = True
    for name, by in series.items():
        bandwidth, p50 = name.startswith("bw"), "p50" in name
        tool = "iperf3" if bandwidth else "sockperf"
        if bandwidth or p50:
            target = BW_TARGET if bandwidth else LAT_TARGET
            line, ratio = summary_line(name, by["reference"], by["fabricbench"], "")
            judged = ratio.verdict(target, higher_is_better=bandwidth)
            ok &= not missed(judged)
            print(f"{line}fabricbench; target {'>=' if bandwidth else '<='} {target}: {judged}")
        else:
            print(summary_line(name, by["reference"], by["fabricbench"], "fabricbench")[0])
        print(summary_line("", by["reference"], by["control"], f"{tool} against itself (A/A)")[0])
        if bandwidth:
            upper = {who: statistics.quantiles(values, n=4)[2] for who, values in by.items()}
            print(
                f"{'':<24}{'':>10}{'':>12}{upper['fabricbench'] / upper['reference']:>7.3f}{'':>11}  upper quartiles: "
                f"fabricbench / iperf3 (A/A {upper['control'] / upper['reference']:.3f}, "
                f"python loop {upper['python loop'] / upper['reference']:.3f})"
            )
        gain = statistics.median(o / p for o, p in zip(by["fabricbench"], by["python loop"], strict=True))
        note = f"fabricbench --tcp-loop python; C loop / it = {gain:.3f}"
        print(summary_line("", by["reference"], by["python loop"], note)[0])
    print("# latency: sockperf ping-pong, one way (RTT/2); bandwidth: iperf3 -l SIZE, one stream, receiver side")
    print("# A/A: the reference measured again in the same rep; its spread is the resolution of every ratio above")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
