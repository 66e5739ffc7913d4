"""How close is fabricbench's tcp transport to the tools TCP users trust?

Run it alone, on one machine (Debian: apt-get install sockperf iperf3):

    python benchmarks/tcp_reference.py [--reps 5] [--seconds 3] [--pin CLIENT_CPU,SERVER_CPU]

On loopback, rep by rep, it alternates:
- sockperf ping-pong over TCP at 64 B (its latency is one way: RTT/2, as fabricbench's rows are),
  then fabricbench ``tcp latency`` at 64 B: four one-second pairs per rep;
- iperf3, one stream, for T seconds with writes of the message size (-l S), S = 64 KiB, 256 KiB, 1 MiB
  (1 MiB is the largest write iperf3 takes);
- fabricbench ``tcp bw`` at the same sizes (window 64, a 1-byte ack per window, as osu_bw).

fabricbench runs as ``fabricbench serve`` and ``fabricbench run --peer``, a server and a client
like the two tools, with no MPI. Each reference measurement is followed at once by fabricbench's;
the medians, the median of the paired ratios and their range are printed.
Targets: latency at 64 B at most 1.10x sockperf's; bandwidth from 64 KiB at least 0.95x iperf3's.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAT_SIZE = 64
BW_SIZES = [64 * 1024, 256 * 1024, 1024 * 1024]  # iperf3 writes at most 1 MiB at a time
LAT_TURNS = 4  # latency pairs per rep, LAT_TURN_SECONDS each (sockperf takes whole seconds)
LAT_TURN_SECONDS = 1
LAT_TARGET = 1.10
BW_TARGET = 0.95
FABRICBENCH = [sys.executable, "-m", "fabricbench"]
PIN = {"client": [], "server": []}  # taskset prefixes from --pin: every tool gets the same placement


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


def run(command: list[str], timeout: float, retries: int = 0) -> str:
    """A tool's stdout; a failure ends the benchmark with the tool's own words."""
    for attempt in range(retries + 1):
        done = subprocess.run([*PIN["client"], *command], capture_output=True, text=True, timeout=timeout)
        if done.returncode == 0:
            return done.stdout
        if attempt < retries:
            time.sleep(1.0)  # iperf3's server refuses a test while it winds the last one down
    raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def sockperf_latency(port: int, seconds: int) -> dict:
    """sockperf ping-pong at 64 B: one-way latency in µs (p50 and mean)."""
    sockperf = ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", str(LAT_SIZE)]
    out = run([*sockperf, "-t", str(seconds)], timeout=seconds + 30)
    p50 = re.search(r"percentile 50\.000 =\s*([\d.]+)", out)
    mean = re.search(r"avg-latency=([\d.]+)", out)
    if not (p50 and mean):
        raise SystemExit(f"cannot read sockperf's output:\n{out}")
    return {"p50": float(p50.group(1)), "mean": float(mean.group(1))}


def iperf3_bandwidth(port: int, size: int, seconds: int) -> float:
    """iperf3, one stream, writes of ``size`` bytes: what the receiver got, in MB/s (10^6 B)."""
    iperf3 = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-l", str(size), "-J"]
    out = run(iperf3, timeout=seconds + 30, retries=3)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6


def fabricbench_rows(port: int, out_dir: Path, kernel: str, sizes: str, *args: str) -> list[dict]:
    peer = [*FABRICBENCH, "run", "--peer", f"127.0.0.1:{port}", "-t", "tcp", "-k", kernel, "-m", sizes]
    run([*peer, "--out", str(out_dir), "--format", "none", *args], timeout=300)
    with open(out_dir / "results.csv") as table:
        return [row for row in csv.DictReader(table) if row["status"] == "ok"]


def fabricbench_latency(port: int, out_dir: Path, seconds: int) -> dict:
    rows = fabricbench_rows(
        port, out_dir, "latency", f"{LAT_SIZE}:{LAT_SIZE}", "-i", "1000000", "-x", "2000", "--max-time", str(seconds)
    )
    return {"p50": float(rows[0]["lat_p50_us"]), "mean": float(rows[0]["lat_mean_us"])}


def fabricbench_bandwidth(port: int, out_dir: Path, seconds: int) -> dict[int, float]:
    """fabricbench tcp bw, ``seconds`` per size as iperf3 gets: MB/s (10^6 B) per size."""
    sizes = f"{BW_SIZES[0]}:{BW_SIZES[-1]}"
    rows = fabricbench_rows(port, out_dir, "bw", sizes, "-i", "100000", "-x", "5", "--max-time", str(seconds))
    return {int(row["size_B"]): float(row["bw_MBps"]) for row in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="alternating repetitions (default 5)")
    parser.add_argument("--seconds", type=int, default=3, help="seconds per bandwidth measurement (default 3)")
    parser.add_argument(
        "--pin",
        metavar="CLIENT_CPU,SERVER_CPU",
        help="pin every client to one CPU and every server to another (taskset); default: the scheduler's choice",
    )
    args = parser.parse_args()
    if args.pin:
        client_cpu, server_cpu = args.pin.split(",")
        PIN.update(client=["taskset", "-c", client_cpu], server=["taskset", "-c", server_cpu])
    for tool in ("sockperf", "iperf3"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install -y sockperf iperf3)")

    ports = {name: free_port() for name in ("sockperf", "iperf3", "fabricbench")}
    servers = [
        subprocess.Popen(
            [*PIN["server"], "sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(ports["sockperf"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [*PIN["server"], "iperf3", "-s", "-B", "127.0.0.1", "-p", str(ports["iperf3"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [*PIN["server"], *FABRICBENCH, "serve", "--address", "127.0.0.1", "--port", str(ports["fabricbench"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    # Paired samples: each reference measurement is followed at once by fabricbench's, and each pair
    # gives a ratio. The median of the paired ratios is robust to the bursts of load a shared machine has.
    pairs: dict[str, list[tuple[float, float]]] = {}

    def pair(name: str, reference: float, ours: float) -> None:
        pairs.setdefault(name, []).append((reference, ours))

    try:
        for port in ports.values():
            wait_listening(port)
        time.sleep(0.5)  # the probes above were clients too; let the servers settle
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.reps):
                print(f"# rep {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                for turn in range(LAT_TURNS):
                    ref = sockperf_latency(ports["sockperf"], LAT_TURN_SECONDS)
                    ours = fabricbench_latency(ports["fabricbench"], Path(tmp, f"lat{rep}-{turn}"), LAT_TURN_SECONDS)
                    for stat in ("p50", "mean"):
                        pair(f"latency {LAT_SIZE} B {stat} (us)", ref[stat], ours[stat])
                ref_bw = {size: iperf3_bandwidth(ports["iperf3"], size, args.seconds) for size in BW_SIZES}
                our_bw = fabricbench_bandwidth(ports["fabricbench"], Path(tmp, f"bw{rep}"), args.seconds)
                for size in BW_SIZES:
                    pair(f"bw {size // 1024} KiB (MB/s)", ref_bw[size], our_bw[size])
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)

    print(f"# tcp on loopback: {args.reps} reps, {args.reps * LAT_TURNS} latency pairs; medians, and paired ratios")
    print(f"{'measure':<26}{'reference':>11}{'fabricbench':>13}{'ratio':>8}{'ratio range':>15}  target")
    ok = True
    for name, samples in pairs.items():
        ref = statistics.median(r for r, _ in samples)
        ours = statistics.median(o for _, o in samples)
        ratios = [o / r for r, o in samples]
        ratio = statistics.median(ratios)
        if name.startswith("bw"):
            target, met = f">= {BW_TARGET}", ratio >= BW_TARGET
        elif "p50" in name:
            target, met = f"<= {LAT_TARGET}", ratio <= LAT_TARGET
        else:
            target, met = "", True
        ok &= met
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{name:<26}{ref:>11.2f}{ours:>13.2f}{ratio:>8.3f}{spread:>15}  {target}")
    print("# latency: sockperf ping-pong one-way (RTT/2); bandwidth: iperf3 -l SIZE, one stream, receiver side")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
