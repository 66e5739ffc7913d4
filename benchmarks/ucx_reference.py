"""How close is fabricbench's ucx transport to a minimal C program making the same UCP calls, and to ucx_perftest?

Run it alone, on one machine (Debian: apt-get install libucx-dev ucx-utils), from any directory:

    PYTHONPATH=src python benchmarks/ucx_reference.py [--transports shm,tcp] [--reps 8] [--raw RUN.json]

The reference is ucx_reference.c, beside this script: the smallest program that makes _ucxloop.c's UCP calls
with the same parameters (--ucx-api tag, --ucx-progress spin: ucp_tag_recv_nbx posted before ucp_tag_send_nbx,
busy ucp_worker_progress, or with --progress yield sched_yield where a progress call found nothing, fabricbench's
--ucx-progress yield and the C program's -Y; bw: a window of sends and a 4-byte tagged acknowledgement), in one
process that forks two (the child executing the program anew, as a launcher's rank is an exec: a forked child
stays on its parent's CPU, and on a loaded 2-core host the two busy-polling processes then took turns on one CPU,
which read as fabricbench 1.6-3x faster than the same calls in a first run), with no MPI, Python, ctypes or
dlmopen. It is built at start with ``cc -O2 ... -lucp -lucs`` into a temporary directory. The UCX transports are
chosen by UCX_TLS, the same for every contender: ``shm`` is
UCX_TLS=sm,self, ``tcp`` UCX_TLS=tcp, ``rc_verbs`` UCX_TLS=rc_verbs,sm,self with the caller's UCX_NET_DEVICES and
UCX_IB_GID_INDEX (in the SoftRoCE VM: --sockaddr, so that rdma_cm wires it up; --no-ucx-perftest, whose endpoints
wire up over ud_verbs). Contenders, per transport and group, each a launch of its own:
- ``fabricbench``: ``run -t ucx`` (2 ranks, its own mpiexec), reading its rows back;
- ``c`` and ``c again``: the C program, twice; the second is the A/A control, the resolution this machine allows;
- ``ucx_perftest``: tag_lat (latency) and tag_bw (bandwidth), a server and a client on 127.0.0.1, one launch per
  reported size, with -n the same iterations (times the window for tag_bw) and -w the warm-up. Its own timing
  rules: latency is its 50th percentile of half round trips; bandwidth its overall average, with no
  acknowledgement per window (the sender streams -n messages and waits for their completion), converted from
  its 2^20 B MB to 10^6 B. Printed beside, never judged.
Both fabricbench and the C program sweep the same sizes (latency 8 B-4 KiB, bandwidth 64 KiB-4 MiB, doubling)
with the same counts and window. The compared statistics: latency, the nearest-rank median one way
(fabricbench's lat_p50_us); bandwidth, all windows' bytes over their whole time (fabricbench's bw_MBps).

In every rep each transport's groups run in a shuffled order, and each group's contenders back to back in an
order shuffled anew, each after a moment to settle; a rep's ratio is fabricbench over the C program run of that
same rep and group, and each measure is the median of its paired ratios with a distribution-free 95 % interval
(benchmarks/paired.py). ``--report RUN.json [...]`` prints the report of runs saved with --raw, reps pooled.

Targets: fabricbench's latency at most 1.05x the C program's (8 B-4 KiB); bandwidth at least 0.97x (64 KiB-4
MiB). Exit status 1 when a target is missed by the median.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import child_env, tool
from harness import fabricbench as run_fabricbench
from paired import Ratio, check_reps, missed, run_shuffled

SOURCE = Path(__file__).with_name("ucx_reference.c")
LAT_TARGET, BW_TARGET = 1.05, 0.97
KiB, MiB = 1024, 1024 * 1024
SETTLE_S = 0.3
TIMEOUT_S = 300
GROUPS = ("latency", "bandwidth")
# --transports: UCX_TLS for every contender. rc_verbs keeps sm and self for the MPI's own UCX (MPICH's ch4:ucx reads
# the same variables); with --sockaddr its client-server endpoints leave shared memory out of their lanes.
TLS = {"shm": "sm,self", "tcp": "tcp", "rc_verbs": "rc_verbs,sm,self"}
KEPT_UCX = ("UCX_NET_DEVICES", "UCX_IB_GID_INDEX")  # the caller's choice of device and GID, kept for every contender
MIB_TO_MB = MiB / 1e6
PERFTEST_HEADER = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"


def settle() -> None:
    time.sleep(SETTLE_S)


def sizes_between(lo: int, hi: int) -> list[int]:
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def size_words(size: int) -> str:
    return f"{size // MiB} MiB" if size >= MiB else f"{size // KiB} KiB" if size >= KiB else f"{size} B"


def ucx_env(transport: str) -> dict[str, str]:
    env = child_env(drop=("PMI_", "UCX_"))
    env["UCX_TLS"] = TLS[transport]
    env |= {name: os.environ[name] for name in KEPT_UCX if name in os.environ}
    return env


def build(work: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise SystemExit("no C compiler (apt-get install gcc)")
    flags = ["-lucp", "-lucs"]
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags", "--libs", "ucx"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            flags = found.stdout.split()
    program = work / "ucx_reference"
    tool([compiler, "-O2", "-o", str(program), str(SOURCE), *flags], TIMEOUT_S)
    return program


def group_settings(args, group: str) -> tuple[str, list[int], tuple[int, int]]:
    if group == "latency":
        return "latency", args.lat_sweep, args.lat_counts
    return "bw", args.bw_sweep, args.bw_counts


def fabricbench(args, transport: str, group: str, out: Path, facts: dict) -> dict[int, float]:
    kernel, sweep, counts = group_settings(args, group)
    command = ["run", "-t", "ucx", "-k", kernel, "-m", f"{sweep[0]}:{sweep[-1]}", "-i", str(counts[0])]
    command += ["-x", str(counts[1]), "-W", str(args.window), "--hugepages", "off", "--timeout", "120"]
    command += ["--ucx-sockaddr", args.sockaddr] if args.sockaddr else []
    command += ["--ucx-progress", args.progress]  # named, never auto's choice: the C program is told the same
    table, metadata = run_fabricbench(command, out, TIMEOUT_S, env=ucx_env(transport))
    if not facts:
        ucx = metadata["transports"]["ucx"]
        facts.update({key: ucx.get(key) for key in ("ucx", "ucx_library", "transports_by_rank", "ucx_apart_from")})
    shutil.rmtree(out)
    figures = {}
    for row in table.to_dict("records"):
        if row["status"] != "ok":
            raise SystemExit(f"fabricbench ucx {kernel} {row['size_B']:g} B: {row['status']} {row['note']}")
        figures[int(row["size_B"])] = float(row["lat_p50_us"] if group == "latency" else row["bw_MBps"])
    return figures


def c_program(args, program: Path, transport: str, group: str, facts: dict) -> dict[int, float]:
    kind, sizes, counts = group_settings(args, group)
    out = tool(
        [str(program), "-k", kind, "-s", ",".join(map(str, sizes)), "-i", str(counts[0]), "-x", str(counts[1]),
         "-w", str(args.window), *(["-S", args.sockaddr] if args.sockaddr else []),
         *(["-Y"] if args.progress == "yield" else [])],
        TIMEOUT_S, env=ucx_env(transport),
    )  # fmt: skip
    figures = {}
    for line in out.splitlines():
        if line.startswith("#"):
            facts.setdefault("c", line.lstrip("# "))
            continue
        _, size, _, compared, _, cpu, other = line.split("\t")
        figures[int(size)] = float(compared)
        facts["shared_cpu"] = facts.get("shared_cpu", 0) + int(cpu == other)
        facts["loops"] = facts.get("loops", 0) + 1
    return figures


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def perftest_server(env: dict, listening) -> tuple[subprocess.Popen, int]:
    """A ucx_perftest server listening on a free port. A server that exits before it listens (its port taken
    between the probe and its bind: seen here) is started again on another, up to 5 times."""
    said = ""
    for _ in range(5):
        port = free_port()
        with tempfile.TemporaryFile() as errors:
            server = subprocess.Popen(
                ["ucx_perftest", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=errors, env=env
            )
            deadline = time.monotonic() + 30
            while not listening(port) and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if listening(port):
                return server, port
            if server.poll() is None:
                server.kill()
            server.wait()
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            said = said[0]
    raise SystemExit(f"ucx_perftest's server never listened, 5 ports tried (the last said: {said})")


def ucx_perftest(args, transport: str, group: str) -> dict[int, float]:
    """ucx_perftest at each reported size: its p50 latency (us) or its overall bandwidth (10^6 B/s)."""
    from fabricbench.transports.reference_tool import listening

    kind, _, (iterations, warmup) = group_settings(args, group)
    env = ucx_env(transport)
    figures = {}
    for size in args.lat_sizes if group == "latency" else args.bw_sizes:
        test = "tag_lat" if group == "latency" else "tag_bw"
        count = iterations if group == "latency" else iterations * args.window
        flags = ["-t", test, "-s", str(size), "-n", str(count), "-w", str(max(warmup, 1)), "-f", "-v"]
        server, port = perftest_server(env, listening)
        try:
            out = tool(["ucx_perftest", "127.0.0.1", "-p", str(port), *flags], TIMEOUT_S, env=env)
            server.wait(timeout=TIMEOUT_S)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        lines = [line.strip() for line in out.splitlines()]
        values = lines[lines.index(PERFTEST_HEADER) + 1].split(",")
        figures[size] = float(values[1]) if group == "latency" else float(values[5]) * MIB_TO_MB
    return figures


def measure(args, program: Path) -> dict:
    order = random.Random(args.seed)
    reps: dict = {t: {g: [] for g in args.groups} for t in args.transports}
    facts: dict = {t: {} for t in args.transports}
    counter = [0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for transport in order.sample(args.transports, len(args.transports)):
                for group in order.sample(args.groups, len(args.groups)):

                    def ours(transport=transport, group=group):
                        counter[0] += 1
                        where = Path(tmp) / f"run{counter[0]}"
                        return fabricbench(args, transport, group, where, facts[transport].setdefault("fb", {}))

                    def reference(transport=transport, group=group):
                        return c_program(args, program, transport, group, facts[transport])

                    contenders = {"fabricbench": ours, "c": reference, "c again": reference}
                    if not args.no_ucx_perftest:
                        contenders["ucx_perftest"] = lambda t=transport, g=group: ucx_perftest(args, t, g)
                    reps[transport][group].append(run_shuffled(order, contenders, before=settle))
            print(f"# rep {rep + 1} of {args.reps} done, {time.monotonic() - started:.0f} s", file=sys.stderr)
            if args.raw:
                args.raw.write_text(json.dumps(encode(args, reps, facts, time.monotonic() - started)))
    return {"reps": reps, "facts": facts, "seconds": time.monotonic() - started}


def encode(args, reps: dict, facts: dict, seconds: float) -> dict:
    settings = {key: getattr(args, key) for key in ("lat_counts", "bw_counts", "window", "lat_sweep", "bw_sweep")}
    settings |= {"reps": args.reps, "seed": args.seed, "lat_sizes": args.lat_sizes, "bw_sizes": args.bw_sizes}
    settings |= {"sockaddr": args.sockaddr, "progress": args.progress}
    return {"settings": settings, "facts": facts, "seconds": seconds, "reps": reps, "load": os.getloadavg()}


def decode(raw: dict) -> dict:
    reps = {
        transport: {
            group: [{who: {int(s): v for s, v in got.items()} for who, got in rep.items()} for rep in runs]
            for group, runs in groups.items()
        }
        for transport, groups in raw["reps"].items()
    }
    return {"reps": reps, "facts": raw["facts"], "seconds": raw.get("seconds", math.nan)}


def series(runs: list[dict], who: str, size: int) -> list[float]:
    return [rep[who][size] if who in rep and size in rep[who] else math.nan for rep in runs]


def report(transport: str, data: dict, args) -> bool:
    facts = data["facts"].get(transport, {})
    fb = facts.get("fb", {})
    print(
        f"## {transport} (UCX_TLS={TLS[transport]}): fabricbench's endpoints {fb.get('transports_by_rank')}, UCX "
        f"{fb.get('ucx')} ({fb.get('ucx_library')}); the C program: {facts.get('c')}"
    )
    if facts.get("loops"):
        print(
            f"# the C program's two processes ended a timed loop on one CPU in {facts['shared_cpu']} of "
            f"{facts['loops']} loops"
        )
    any_missed = False
    for group in args.groups:
        runs = data["reps"][transport].get(group, [])
        if not runs:
            continue
        bandwidth = group == "bandwidth"
        target = BW_TARGET if bandwidth else LAT_TARGET
        unit = "MB/s" if bandwidth else "us"
        print(
            f"# {group} ({unit}) {'size':>8} {'fb':>9} {'c':>9} | {'fb/c':>5} {'95% CI':>10} {'A/A':>5} {'CI':>10} | "
            f"{'perftest':>9} {'pt/c':>5} | verdict (target {target:g})"
        )
        for size in args.bw_sizes if bandwidth else args.lat_sizes:
            ours, c, again = (series(runs, who, size) for who in ("fabricbench", "c", "c again"))
            usable = [i for i in range(len(runs)) if all(math.isfinite(v[i]) and v[i] > 0 for v in (ours, c, again))]
            if len(usable) < 2:
                print(f"  {group:>14} {size_words(size):>8}  too few reps with every figure ({len(usable)})")
                continue
            ours, c, again = ([v[i] for i in usable] for v in (ours, c, again))
            ratio, control = Ratio.of(c, ours), Ratio.of(c, again)
            verdict = ratio.verdict(target, higher_is_better=bandwidth)
            any_missed |= missed(verdict)
            tool_figures = [v for v in series(runs, "ucx_perftest", size) if math.isfinite(v)]
            if tool_figures:
                theirs = statistics.median(tool_figures)
                beside = f"{theirs:>9.2f} {theirs / statistics.median(c):>5.2f}"
            else:
                beside = f"{'-':>9} {'-':>5}"
            print(
                f"  {group:>14} {size_words(size):>8} {statistics.median(ours):>9.2f} {statistics.median(c):>9.2f} | "
                f"{ratio.median:>5.2f} {ratio.interval:>10} {control.median:>5.2f} {control.interval:>10} | "
                f"{beside} | {verdict} ({len(usable)} reps)"
            )
    return any_missed


def counts(text: str) -> tuple[int, int]:
    iterations, warmup = (int(part) for part in text.split("/"))
    if iterations < 1 or warmup < 0:
        raise argparse.ArgumentTypeError("ITERATIONS/WARMUP, at least 1 iteration")
    return iterations, warmup


def size_list(text: str) -> list[int]:
    scale = {"K": KiB, "M": MiB}
    try:
        return [int(p[:-1]) * scale[p[-1].upper()] if p[-1].upper() in scale else int(p) for p in text.split(",") if p]
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"sizes such as 8,64,4K,1M, not {text!r}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument(
        "--transports",
        default="shm,tcp",
        help="shm (UCX_TLS=sm,self), tcp (UCX_TLS=tcp), rc_verbs (UCX_TLS=rc_verbs,sm,self; with --sockaddr, and "
        "UCX_NET_DEVICES and UCX_IB_GID_INDEX from the environment)",
    )
    parser.add_argument(
        "--sockaddr",
        metavar="IPV4",
        help="connect client-server through a listener there (fabricbench --ucx-sockaddr, the C program's -S): "
        "rdma_cm then wires rc_verbs up, with no ud_verbs",
    )
    parser.add_argument(
        "--progress",
        choices=["spin", "yield"],
        default="spin",
        help="spin: busy ucp_worker_progress (default); yield: sched_yield where it finds nothing (fabricbench's "
        "--ucx-progress yield, the C program's -Y), where the two processes share a CPU (the SoftRoCE VM's one)",
    )
    parser.add_argument("--groups", default="latency,bandwidth", help="latency,bandwidth (default both)")
    parser.add_argument("--lat-counts", type=counts, default=(1000, 100), help="ITERATIONS/WARMUP (1000/100)")
    parser.add_argument("--bw-counts", type=counts, default=(8, 1), help="windows/warm-up windows per size (8/1)")
    parser.add_argument("--window", type=int, default=16, help="messages per window (-W) (16)")
    parser.add_argument("--lat-sizes", type=size_list, default=[8, 64, 512, 4 * KiB], help="latency sizes reported")
    parser.add_argument("--bw-sizes", type=size_list, default=[64 * KiB, MiB, 4 * MiB], help="bw sizes reported")
    parser.add_argument("--no-ucx-perftest", action="store_true", help="leave ucx_perftest out")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--raw", type=Path, help="write every rep's figures here as JSON, after each rep")
    parser.add_argument("--report", type=Path, nargs="+", help="only print the report of --raw files, reps pooled")
    args = parser.parse_args()
    check_reps(parser, args.reps)
    args.transports = [t for t in args.transports.split(",") if t]
    args.groups = [g for g in args.groups.split(",") if g]
    if not args.groups or set(args.groups) - set(GROUPS) or set(args.transports) - set(TLS):
        parser.error("--groups: latency and/or bandwidth; --transports: shm, tcp and/or rc_verbs")
    args.lat_sweep = sizes_between(min(args.lat_sizes), max(args.lat_sizes))
    args.bw_sweep = sizes_between(min(args.bw_sizes), max(args.bw_sizes))
    if not set(args.lat_sizes) <= set(args.lat_sweep) or not set(args.bw_sizes) <= set(args.bw_sweep):
        parser.error("the reported sizes must be the smallest one doubled (fabricbench's -m sweep)")
    if args.report:
        raws = [json.loads(path.read_text()) for path in args.report]
        for key, value in raws[0]["settings"].items():
            setattr(args, key, tuple(value) if key.endswith("_counts") else value)
        runs = [decode(raw) for raw in raws]
        data = {"reps": {}, "facts": runs[0]["facts"], "seconds": sum(run["seconds"] for run in runs)}
        for run in runs:
            for transport, groups in run["reps"].items():
                for group, got in groups.items():
                    data["reps"].setdefault(transport, {}).setdefault(group, []).extend(got)
        args.transports = list(data["reps"])
    else:
        if not args.no_ucx_perftest and not shutil.which("ucx_perftest"):
            raise SystemExit("ucx_perftest is not installed (Debian: apt-get install ucx-utils)")
        with tempfile.TemporaryDirectory() as tmp:
            data = measure(args, build(Path(tmp)))
    reps = max(len(runs) for groups in data["reps"].values() for runs in groups.values())
    print("# fabricbench -t ucx against ucx_reference.c (the same UCP calls, no Python, MPI or dlmopen) on one host,")
    print(f"# {reps} paired and shuffled reps, {data['seconds']:.0f} s; fb/c: median of the paired ratios with its 95%")
    print("# CI; A/A: the C program over itself. latency: nearest-rank median one way; bandwidth: bytes over the")
    print("# whole loop, 10^6 B/s. perftest: ucx_perftest's tag_lat p50 / tag_bw overall average (no ack per window),")
    print("# median over the reps; pt/c: that over the C program's median. Never judged.")
    print(
        f"# counts: latency {args.lat_counts[0]}/{args.lat_counts[1]} iterations/warm-up, bandwidth "
        f"{args.bw_counts[0]}/{args.bw_counts[1]} windows of {args.window}; progress {args.progress}"
    )
    any_missed = False
    for transport in args.transports:
        any_missed |= report(transport, data, args)
    return 1 if any_missed else 0


if __name__ == "__main__":
    sys.exit(main())
