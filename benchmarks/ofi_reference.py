"""How close is fabricbench's ofi transport to a minimal C loop making the same libfabric calls, and to fi_pingpong?

Run it alone, on one machine (Debian: apt-get install libfabric-dev libfabric-bin), from any directory:

    PYTHONPATH=src python benchmarks/ofi_reference.py [--providers tcp,shm] [--reps 10] [--raw RUN.json]

The reference is ofi_reference.c, beside this script: the smallest program that makes _ofiloop.c's libfabric
calls with the same hints (an RDM endpoint, tagged fi_tinject at or below the inject size else fi_tsend, one
fi_trecv posted ahead, fi_cq_read busy-polled, the address vector; bw: a window of sends and a 4-byte ack), in
one process that forks two, with no MPI, Python, ctypes or dlmopen. It is built at start with ``cc -O2 ...
-lfabric`` into a temporary directory. Contenders, per provider (--providers) and group, each a launch of its own:
- ``fabricbench``: ``run -t ofi --ofi-provider P`` (2 ranks, its own mpiexec), reading its rows back;
- ``c`` and ``c again``: the C program, twice; the second is the A/A control, the resolution this machine allows;
- ``fi_pingpong`` (latency only): ``fi_pingpong -p P -e rdm -m tagged -I N -S SIZE``, a server and a client on
  127.0.0.1, one launch per reported size. Its ``usec/xfer`` is the whole loop's mean one-way latency, with no
  warm-up (the first message's connection setup is in it), and it uses fi_tsend with a completion waited for
  at the inject size itself (it injects only below it); its MB/sec is 10^6 B/s. Printed beside, never judged.
Both fabricbench and the C program sweep the same sizes (latency 8 B-4 KiB, bandwidth 64 KiB-4 MiB, doubling)
with the same counts, window (-W) and buffer layout (fabricbench with ``--hugepages off``, so its buffers get
the pages the C program's posix_memalign does); the tables show --lat-sizes and --bw-sizes, the --raw JSON
holds every size. The compared statistics are the same on both sides:
- latency: the nearest-rank median of the per-iteration round trips, halved (fabricbench's lat_p50_us). The
  means (lat_mean_us and the C program's) are printed beside: on a shared 2-core machine a preempted round
  trip costs a scheduler tick, so the means mostly count preemptions;
- bandwidth: all windows' bytes over their whole time (fabricbench's bw_MBps). The median window's rate
  (fabricbench's window bytes over its lat_p50_us) is printed beside.

The design of the other reference benchmarks (benchmarks/paired.py): in every rep each provider's groups run in
a shuffled order, and each group's contenders back to back in an order shuffled anew, each after a moment to
settle; a rep's ratio is fabricbench over the C program run of that same rep and group. Each measure is the
median of its paired ratios with a distribution-free 95 % interval. The machine switches between speed modes
from one launch to the next, so as in verbs_reference.py a rep's mode is read from its A/A pair: "fast" when
both C program runs beat the median of all C program runs; the ratios within each mode and best against best
(each one's best rep) are printed beside the median. A rep's three launches need not share a mode, though
(on a 2-vCPU VM shm latency sits at about 0.3 or about 0.9 us at 8 B, in spells of 0.1 s to seconds, for
fabricbench and the C program alike), so a second table takes each launch's mode from its own figure: all
launches' figures at a size split at their widest gap, where it is a factor of 1.5 or more; it gives how many
launches of each landed in the slow mode and fabricbench over the C program within each mode. A line per
group says how often the C program's two processes ended a timed loop on one CPU (they poll, so a third busy
task on the host can leave them taking turns there).

``--report RUN.json [RUN2.json ...]`` prints the report of runs saved with --raw, their reps pooled.

Targets: fabricbench's latency at most 1.05x the C program's (8 B-4 KiB); bandwidth at least 0.97x (64 KiB-4
MiB). Exit status 1 when a target is missed by the median.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import fabricbench as run_fabricbench
from harness import tool
from paired import Ratio, check_reps, missed, run_shuffled

SOURCE = Path(__file__).with_name("ofi_reference.c")
LAT_TARGET, BW_TARGET = 1.05, 0.97
KiB, MiB = 1024, 1024 * 1024
SETTLE_S = 0.3
TIMEOUT_S = 300  # one contender's launch
GROUPS = ("latency", "bandwidth")
MODE_GAP = 1.5  # launches whose figures are this far apart, with none between, are in different speed modes
WHO = ("fabricbench", "c", "c again", "fi_pingpong")


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


def build(work: Path) -> Path:
    """ofi_reference.c built with cc -O2 against this host's libfabric (pkg-config's flags where it has them)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise SystemExit("no C compiler (apt-get install gcc)")
    flags = ["-lfabric"]
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags", "--libs", "libfabric"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            flags = found.stdout.split()
    program = work / "ofi_reference"
    tool([compiler, "-O2", "-o", str(program), str(SOURCE), *flags], TIMEOUT_S)
    return program


# --- one run of each contender: {size: (compared figure, figure beside)} ----------------------------------------


def fabricbench(args, provider: str, group: str, out: Path, facts: dict) -> dict[int, tuple[float, float]]:
    """One fabricbench run of a group: latency (lat_p50_us, lat_mean_us) or bandwidth (bw_MBps, median window's
    MB/s) per size."""
    if group == "latency":
        kernel, sweep, counts = "latency", f"{args.lat_sweep[0]}:{args.lat_sweep[-1]}", args.lat_counts
    else:
        kernel, sweep, counts = "bw", f"{args.bw_sweep[0]}:{args.bw_sweep[-1]}", args.bw_counts
    command = ["run", "-t", "ofi", "-k", kernel, "--ofi-provider", provider, "-m", sweep]
    command += ["-i", str(counts[0]), "-x", str(counts[1]), "-W", str(args.window), "--hugepages", "off"]
    table, metadata = run_fabricbench([*command, "--timeout", "120"], out, TIMEOUT_S)
    rows = table.to_dict("records")
    if not facts:
        ofi = metadata["transports"]["ofi"]
        facts.update({key: ofi.get(key) for key in ("provider", "inject_size_B", "libfabric", "libfabric_library")})
    shutil.rmtree(out)
    figures = {}
    for row in rows:
        if row["status"] != "ok":
            raise SystemExit(f"fabricbench ofi {kernel} {row['size_B']:g} B: {row['status']} {row['note']}")
        size = int(row["size_B"])
        if group == "latency":
            figures[size] = (float(row["lat_p50_us"]), float(row["lat_mean_us"]))
        else:
            figures[size] = (float(row["bw_MBps"]), size * args.window / float(row["lat_p50_us"]))
    return figures


def c_program(args, program: Path, provider: str, group: str, facts: dict) -> dict[int, tuple[float, float, int]]:
    """One run of the C program: latency (median, mean) or bandwidth (whole-loop MB/s, median window's) per size,
    and 1 where its two processes ended the size's timed loop on one CPU."""
    sizes, counts = (args.lat_sweep, args.lat_counts) if group == "latency" else (args.bw_sweep, args.bw_counts)
    kind = "latency" if group == "latency" else "bw"
    out = tool(
        [str(program), "-p", provider, "-k", kind, "-s", ",".join(map(str, sizes)), "-i", str(counts[0]),
         "-x", str(counts[1]), "-w", str(args.window), "-t", str(TIMEOUT_S)],
        TIMEOUT_S,
    )  # fmt: skip
    figures = {}
    for line in out.splitlines():
        if line.startswith("#"):
            facts.setdefault("c", line.lstrip("# "))
            continue
        _, size, _, compared, beside, cpu, other = line.split("\t")
        figures[int(size)] = (float(compared), float(beside), int(cpu == other))
    return figures


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fi_pingpong(args, provider: str) -> dict[int, tuple[float, float]]:
    """fi_pingpong at each reported latency size: (usec/xfer, MB/sec), the client's figures."""
    figures = {}
    for size in args.lat_sizes:
        common = ["fi_pingpong", "-p", provider, "-e", "rdm", "-m", "tagged", "-I", str(args.pingpong_iterations)]
        common += ["-S", str(size)]
        for _attempt in range(5):
            port = free_port()
            server = subprocess.Popen([*common, "-B", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                out = ""
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and server.poll() is None:
                    client = subprocess.run(
                        [*common, "-P", str(port), "127.0.0.1"], capture_output=True, text=True, timeout=TIMEOUT_S
                    )
                    if client.returncode == 0:
                        out = client.stdout
                        break
                    if "failed to connect" not in client.stderr:  # refused: the server is not listening yet
                        raise SystemExit(f"fi_pingpong -p {provider} -S {size} failed:\n{client.stderr[-2000:]}")
                    time.sleep(0.05)
                server.wait(timeout=TIMEOUT_S)
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
            if out:
                break  # else the server's port was taken (it exited) or it never listened: another port
        else:
            raise SystemExit(f"fi_pingpong -p {provider} -S {size}: no server took a client")
        lines = [line.split() for line in out.splitlines() if line[:1].isdigit()]
        figures[size] = (float(lines[-1][6]), float(lines[-1][5]))  # usec/xfer, MB/sec
    return figures


def slot(args, program: Path, provider: str, group: str, work: Path, counter: list[int], facts: dict) -> dict:
    """The contenders of one group, each a callable that runs it once."""

    def ours():
        counter[0] += 1
        return fabricbench(args, provider, group, work / f"run{counter[0]}", facts.setdefault("fabricbench", {}))

    def reference():
        return c_program(args, program, provider, group, facts)

    contenders = {"fabricbench": ours, "c": reference, "c again": reference}
    if group == "latency" and not args.no_fi_pingpong:
        contenders["fi_pingpong"] = lambda: fi_pingpong(args, provider)
    return contenders


def measure(args, program: Path) -> dict:
    """Every rep: per provider, its groups in a shuffled order, each group's contenders back to back shuffled."""
    order = random.Random(args.seed)
    reps: dict = {p: {g: [] for g in args.groups} for p in args.providers}
    facts: dict = {p: {} for p in args.providers}
    counter = [0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for provider in order.sample(args.providers, len(args.providers)):
                for group in order.sample(args.groups, len(args.groups)):
                    contenders = slot(args, program, provider, group, Path(tmp), counter, facts[provider])
                    reps[provider][group].append(run_shuffled(order, contenders, before=settle))
            print(f"# rep {rep + 1} of {args.reps} done, {time.monotonic() - started:.0f} s", file=sys.stderr)
            if args.raw:
                args.raw.write_text(json.dumps(encode(args, reps, facts, time.monotonic() - started)))
    return {"reps": reps, "facts": facts, "seconds": time.monotonic() - started}


def encode(args, reps: dict, facts: dict, seconds: float) -> dict:
    settings = {key: getattr(args, key) for key in ("lat_counts", "bw_counts", "window", "pingpong_iterations")}
    settings |= {"reps": args.reps, "seed": args.seed, "lat_sweep": args.lat_sweep, "bw_sweep": args.bw_sweep}
    return {"settings": settings, "facts": facts, "seconds": seconds, "reps": reps}


def decode(raw: dict) -> dict:
    """JSON's string keys back to sizes."""
    reps = {
        provider: {
            group: [{who: {int(s): tuple(v) for s, v in got.items()} for who, got in rep.items()} for rep in runs]
            for group, runs in groups.items()
        }
        for provider, groups in raw["reps"].items()
    }
    return {"reps": reps, "facts": raw["facts"], "seconds": raw.get("seconds", math.nan)}


def pooled(raws: list[dict]) -> dict:
    """Runs read back and their reps put together; the runs must have had the same counts and sizes."""
    same = ("lat_counts", "bw_counts", "window", "pingpong_iterations", "lat_sweep", "bw_sweep")
    first = raws[0]["settings"]
    if any({k: raw["settings"].get(k) for k in same} != {k: first.get(k) for k in same} for raw in raws):
        raise SystemExit("--report: these runs had different counts, window or sizes; they cannot be pooled")
    runs = [decode(raw) for raw in raws]
    reps: dict = {}
    for run in runs:
        for provider, groups in run["reps"].items():
            for group, got in groups.items():
                reps.setdefault(provider, {}).setdefault(group, []).extend(got)
    facts = {provider: runs[0]["facts"].get(provider, {}) for provider in reps}
    return {"reps": reps, "facts": facts, "seconds": sum(run["seconds"] for run in runs), "settings": first}


# --- the report ----------------------------------------------------------------------------------------------------


def series(runs: list[dict], who: str, size: int, which: int = 0) -> list[float]:
    """One contender's figure at one size in every rep (NaN where it has none)."""
    return [rep[who][size][which] if who in rep and size in rep[who] else math.nan for rep in runs]


def judge(runs: list[dict], size: int, bandwidth: bool) -> dict:
    """One size's figures: medians, the paired ratio and its CI, A/A, the figure beside, best/best, per mode."""
    ours, c, again = (series(runs, who, size) for who in ("fabricbench", "c", "c again"))
    usable = [i for i in range(len(runs)) if all(math.isfinite(v[i]) and v[i] > 0 for v in (ours, c, again))]
    if len(usable) < 2:
        return {"reps": len(usable)}
    pick = lambda values: [values[i] for i in usable]  # noqa: E731
    ours, c, again = pick(ours), pick(c), pick(again)
    middle = statistics.median(c + again)

    def faster(value: float) -> bool:
        return value > middle if bandwidth else value < middle

    fast = [i for i in range(len(c)) if faster(c[i]) and faster(again[i])]
    slow = [i for i in range(len(c)) if i not in fast]

    def within(chosen: list[int]) -> float:
        return statistics.median(ours[i] / c[i] for i in chosen) if chosen else math.nan

    best = max if bandwidth else min
    beside_ours, beside_c = pick(series(runs, "fabricbench", size, 1)), pick(series(runs, "c", size, 1))
    return {
        "reps": len(usable),
        "fast_reps": len(fast),
        "fabricbench": statistics.median(ours),
        "c": statistics.median(c),
        "ratio": Ratio.of(c, ours),
        "control": Ratio.of(c, again),
        "beside": statistics.median(o / r for o, r in zip(beside_ours, beside_c, strict=True)),
        "best": best(ours) / best(c + again),
        "fast": within(fast),
        "slow": within(slow),
    }


def launch_modes(runs: list[dict], size: int, bandwidth: bool) -> dict | None:
    """The speed modes as each launch shows them: every launch's figure (fabricbench's and both C program runs')
    split at the widest gap between them, where that gap is a factor of MODE_GAP or more; None where there is no
    such gap. The slow side's share for each, and fabricbench over the C program within each mode (medians)."""
    values = {who: [v for v in series(runs, who, size) if math.isfinite(v) and v > 0] for who in ("fabricbench", "c")}
    values["c"] += [v for v in series(runs, "c again", size) if math.isfinite(v) and v > 0]
    ordered = sorted(values["fabricbench"] + values["c"])
    if len(ordered) < 4:
        return None
    gap, cut = max((ordered[i + 1] / ordered[i], i) for i in range(1, len(ordered) - 2))  # 2 or more a side
    if gap < MODE_GAP:
        return None
    boundary = math.sqrt(ordered[cut] * ordered[cut + 1])

    def slow(value: float) -> bool:
        return value < boundary if bandwidth else value > boundary

    def within(want_slow: bool) -> float:
        ours = [v for v in values["fabricbench"] if slow(v) == want_slow]
        theirs = [v for v in values["c"] if slow(v) == want_slow]
        return statistics.median(ours) / statistics.median(theirs) if ours and theirs else math.nan

    return {
        "boundary": boundary,
        "fabricbench": (sum(map(slow, values["fabricbench"])), len(values["fabricbench"])),
        "c": (sum(map(slow, values["c"])), len(values["c"])),
        "fast": within(False),
        "slow": within(True),
    }


def modes_table(runs: list[dict], sizes: list[int], bandwidth: bool) -> None:
    """A line per size: the launch-level speed modes (launch_modes)."""
    unit = "MB/s" if bandwidth else "us"
    print(f"  # speed modes by launch: split at the widest gap (x{MODE_GAP:g} or more) between all launches' figures")
    for size in sizes:
        got = launch_modes(runs, size, bandwidth)
        if got is None:
            print(f"  {'modes':>14} {size_words(size):>8}  one mode (no gap of x{MODE_GAP:g})")
            continue
        (fb_slow, fb_n), (c_slow, c_n) = got["fabricbench"], got["c"]
        print(
            f"  {'modes':>14} {size_words(size):>8}  slow {'below' if bandwidth else 'above'} "
            f"{got['boundary']:.2f} {unit}: fabricbench {fb_slow} of {fb_n} launches slow, the C program "
            f"{c_slow} of {c_n}; fb/c within the fast mode {got['fast']:.2f}, within the slow {got['slow']:.2f}"
        )


def pingpong_figures(runs: list[dict], size: int) -> str:
    """fi_pingpong's median usec/xfer and MB/sec over the reps, and its paired ratio to the C program's mean."""
    usec, mbps = series(runs, "fi_pingpong", size), series(runs, "fi_pingpong", size, 1)
    c_mean = series(runs, "c", size, 1)
    pairs = [(u, m) for u, m in zip(usec, c_mean, strict=True) if math.isfinite(u) and math.isfinite(m)]
    if not pairs:
        return ""
    ratio = statistics.median(u / m for u, m in pairs)
    finite = [m for m in mbps if math.isfinite(m)]
    return f"{statistics.median(u for u, _ in pairs):>9.2f} {statistics.median(finite):>8.2f} {ratio:>6.2f}"


def report(provider: str, data: dict, args) -> bool:
    """The tables of one provider; True when a target is missed by the median."""
    facts = data["facts"].get(provider, {})
    ours = facts.get("fabricbench", {})
    print(
        f"## {provider}: fabricbench opened {ours.get('provider')} (inject {ours.get('inject_size_B')} B) with "
        f"libfabric {ours.get('libfabric')} ({ours.get('libfabric_library')}); the C program: {facts.get('c')}"
    )
    any_missed = False
    for group in args.groups:
        runs = data["reps"][provider].get(group, [])
        if not runs:
            continue
        bandwidth = group == "bandwidth"
        target = BW_TARGET if bandwidth else LAT_TARGET
        unit, beside = ("MB/s", "p50w") if bandwidth else ("us", "mean")
        pingpong = "" if bandwidth or args.no_fi_pingpong else f" | {'fi_pp us':>9} {'fi MB/s':>8} {'pp/c':>6}"
        print(
            f"# {group} ({unit}) {'size':>8} {'fb':>9} {'c':>9} | {'fb/c':>5} {'95% CI':>10} {'A/A':>5} {'CI':>10} "
            f"{beside:>5} | {'best':>5} {'fast':>5} {'slow':>5}{pingpong} | verdict (target {target:g})"
        )
        shared = launches = 0
        for size in args.bw_sizes if bandwidth else args.lat_sizes:
            got = judge(runs, size, bandwidth)
            if "ratio" not in got:
                print(f"  {group:>14} {size_words(size):>8}  too few reps with every figure ({got['reps']})")
                continue
            ratio, control = got["ratio"], got["control"]
            verdict = ratio.verdict(target, higher_is_better=bandwidth)
            any_missed |= missed(verdict)
            extra = "" if bandwidth or args.no_fi_pingpong else f" | {pingpong_figures(runs, size):>25}"
            ends = [rep.get(who, {}).get(size, ()) for rep in runs for who in ("c", "c again")]
            placed = [figures for figures in ends if len(figures) > 2]
            shared, launches = shared + sum(int(figures[2]) for figures in placed), launches + len(placed)
            print(
                f"  {group:>14} {size_words(size):>8} {got['fabricbench']:>9.2f} {got['c']:>9.2f} | "
                f"{ratio.median:>5.2f} {ratio.interval:>10} {control.median:>5.2f} {control.interval:>10} "
                f"{got['beside']:>5.2f} | {got['best']:>5.2f} {got['fast']:>5.2f} {got['slow']:>5.2f}{extra} | "
                f"{verdict} ({got['reps']} reps, {got['fast_reps']} fast)"
            )
        modes_table(runs, args.bw_sizes if bandwidth else args.lat_sizes, bandwidth)
        if launches:  # a run before the C program said where its processes were has no such count
            print(f"  # the C program's two processes ended a timed loop on one CPU in {shared} of {launches} cases")
    return any_missed


def counts(text: str) -> tuple[int, int]:
    iterations, warmup = (int(part) for part in text.split("/"))
    if iterations < 1 or warmup < 0:
        raise argparse.ArgumentTypeError("ITERATIONS/WARMUP, at least 1 iteration")
    return iterations, warmup


def size_list(text: str) -> list[int]:
    """``8,64,4K,1M``: sizes in bytes, K and M being 1024 and 1024^2."""
    scale = {"K": KiB, "M": MiB}
    try:
        return [int(p[:-1]) * scale[p[-1].upper()] if p[-1].upper() in scale else int(p) for p in text.split(",") if p]
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"sizes such as 8,64,4K,1M, not {text!r}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--providers", default="tcp,shm", help="libfabric providers, comma-separated")
    parser.add_argument("--groups", default="latency,bandwidth", help="latency,bandwidth (default both)")
    parser.add_argument("--lat-counts", type=counts, default=(1000, 100), help="ITERATIONS/WARMUP (1000/100)")
    parser.add_argument("--bw-counts", type=counts, default=(8, 1), help="windows/warm-up windows per size (8/1)")
    parser.add_argument("--window", type=int, default=16, help="messages per window (-W), for latency too (16)")
    parser.add_argument("--lat-sizes", type=size_list, default=[8, 64, 512, 4 * KiB], help="latency sizes reported")
    parser.add_argument("--bw-sizes", type=size_list, default=[64 * KiB, MiB, 4 * MiB], help="bw sizes reported")
    parser.add_argument("--pingpong-iterations", type=int, default=1000, help="fi_pingpong's -I (1000)")
    parser.add_argument("--no-fi-pingpong", action="store_true", help="leave fi_pingpong out")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--raw", type=Path, help="write every rep's figures here as JSON, after each rep")
    parser.add_argument(
        "--report", type=Path, nargs="+", help="only print the report of --raw files (several: their reps pooled)"
    )
    args = parser.parse_args()
    check_reps(parser, args.reps)
    args.providers = [p for p in args.providers.split(",") if p]
    args.groups = [g for g in args.groups.split(",") if g]
    if not args.groups or set(args.groups) - set(GROUPS):
        parser.error("--groups: a comma-separated list of latency and bandwidth")
    if not all(8 <= s <= 4 * KiB for s in args.lat_sizes) or not all(64 * KiB <= s <= 4 * MiB for s in args.bw_sizes):
        parser.error("--lat-sizes must be within 8 B-4 KiB and --bw-sizes within 64 KiB-4 MiB")
    args.lat_sweep = sizes_between(min(args.lat_sizes), max(args.lat_sizes))
    args.bw_sweep = sizes_between(min(args.bw_sizes), max(args.bw_sizes))
    if not set(args.lat_sizes) <= set(args.lat_sweep) or not set(args.bw_sizes) <= set(args.bw_sweep):
        parser.error("the reported sizes must be the smallest one doubled (fabricbench's -m sweep)")
    if args.report:
        data = pooled([json.loads(path.read_text()) for path in args.report])
        for key, value in data["settings"].items():  # the counts the runs had, not this command line's
            setattr(args, key, tuple(value) if key.endswith("_counts") else value)
        args.providers = list(data["reps"])
    else:
        for needed in ("fi_pingpong",) if not args.no_fi_pingpong else ():
            if not shutil.which(needed):
                raise SystemExit(f"{needed} is not installed (Debian: apt-get install libfabric-bin)")
        with tempfile.TemporaryDirectory() as tmp:
            data = measure(args, build(Path(tmp)))
    print("# fabricbench -t ofi against ofi_reference.c (the same libfabric calls, no Python, MPI or dlmopen) on one")
    reps = max(len(runs) for groups in data["reps"].values() for runs in groups.values())
    print(f"# host, {reps} paired and shuffled reps, {data['seconds']:.0f} s; fb/c: median of the paired ratios")
    print("# with its 95% CI; A/A: the C program over itself; best: best rep over best rep; fast/slow: the ratio")
    print("# within each speed mode (fast: both C runs of the rep beat the median C run). latency: nearest-rank")
    print("# median one way (mean: the means' paired ratio); bandwidth: bytes over the whole loop, 10^6 B/s (p50w:")
    print("# the median window's rate, ratio). fi_pingpong: usec/xfer (its whole-loop mean) and MB/sec, medians")
    print("# over the reps; pp/c: fi_pingpong's mean over the C program's mean, paired.")
    print(
        f"# counts: latency {args.lat_counts[0]}/{args.lat_counts[1]} iterations/warm-up over "
        f"{size_words(args.lat_sweep[0])}-{size_words(args.lat_sweep[-1])}, bandwidth {args.bw_counts[0]}/"
        f"{args.bw_counts[1]} windows of {args.window} over {size_words(args.bw_sweep[0])}-"
        f"{size_words(args.bw_sweep[-1])}; fi_pingpong -I {args.pingpong_iterations}"
    )
    any_missed = False
    for provider in args.providers:
        any_missed |= report(provider, data, args)
    return 1 if any_missed else 0


if __name__ == "__main__":
    sys.exit(main())
