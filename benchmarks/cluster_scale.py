"""The cluster view at scale: the all-pairs table, verdict, check and compare on synthetic runs of 256 to 10,000
hosts, with known faults under realistic noise.

    python benchmarks/cluster_scale.py [--hosts 256,1024,4096,10000] [--fabrics fat-tree,dragonfly]
                                       [--keep DIR] [--work DIR] [--seed N]

For each fabric and host count it makes one pairs-bw run folder as a run makes it, through fabricbench's own
writers (measure.results: the CSV for a matrix of up to 65,536 pairs, Parquet parts and then results.parquet past
that; metadata.json with the topology), and times, each in a process of its own so that its peak memory is its
own (ru_maxrss):

- write: the run's rows written, a block of sources at a time, and results.parquet made (the table's write);
- read: the table's pair rows read back as the group's N x N matrix (measure.pair_table: the table's read);
- verdict: the same read, then the all-pairs verdict by the run's topology (the verdict alone is the
  difference);
- check: ``fabricbench check`` with a thresholds file that fails on any slow uplink, host or link and on any
  pair under 5,000 MB/s, as a user runs it; its output's lines are counted and measured;
- compare: ``fabricbench compare --out``, the heatmap and the switch x switch matrix;
- healthy: the same fabric without faults, judged from the matrix: what the verdict names there is false.

The fabrics: a three-level fat-tree in Slurm's topology.conf (leaves of 32 hosts, pods of 8 leaves) and a
dragonfly in the TOML map (switches of 16 hosts, groups of 4 switches). Healthy figures by tier (MB/s): same
switch 12,000, across switches 11,000, across groups 9,500; each pair's log figure has normal noise of 2 % and
3 % of pairs are dipped further by an exponential of mean 1 % (the slow-side tail contention gives; heavier
than normal, a healthy pair still almost never 20 % off: about 0.3 such pairs expected in 100 million). The
faults, placed apart from each other: a slow host (its NIC at 40 %), a slow link (one pair of hosts at 30 %,
both ways), a slow uplink (every pair out of one switch at 50 %) and, on the dragonfly, a slow global link
(every pair between two groups at 50 %). Precision and recall are the verdict's named parts against those.
``--stress`` adds a healthy fabric whose noise is Student's t with 3 degrees of freedom (scale 1.5 %), whose
tail does reach 20 %: the slow links named there are what such noise costs at each size.

Each stage's seconds and peak memory are printed per host count, with the growth exponent between successive
counts (2 is linear in the pairs). Targets: 1,024 hosts checked in at most 30 s; 10,000 in at most 5 minutes
and 8 GB; growth no worse than about N^2; every fault named and nothing else, healthy fabric included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import child_env

LEAF, POD = 32, 8  # fat-tree: hosts a leaf, leaves a pod
SWITCH, GROUP = 16, 4  # dragonfly: hosts a switch, switches a group (4 groups at 256 hosts, 157 at 10,000)
TIER_MBPS = {"same-host": 12_000.0, "same-switch": 12_000.0, "cross-switch": 11_000.0, "cross-group": 9_500.0}
NOISE, DIPPED, DIP = 0.02, 0.03, 0.01  # normal noise of the log figure; the share of pairs dipped, their mean dip
SLOW = {"host": 0.4, "link": 0.3, "uplink": 0.5, "global link": 0.5}
SIZE, WINDOW, ITERATIONS = 1 << 20, 64, 100
ROWS_A_BATCH = 1 << 20
THRESHOLDS = """[[threshold]]
name = "all pairs"
transport = "tcp"
kernel = "pairs-bw"
max_slow_uplinks = 0
max_slow_hosts = 0
max_slow_links = 0
min_bw_MBps = 5000
"""
TARGETS = {1024: (30.0, None), 10_000: (300.0, 8.0)}  # hosts: (check's seconds, check's GB)
STAGE_TIMEOUT_S = 3600


def hostname(index: int) -> str:
    return f"node{index:05d}"


def topology_text(fabric: str, hosts: int) -> tuple[str, str]:
    """(file name, text) of the fabric's topology over ``hosts`` hosts."""
    if fabric == "fat-tree":
        leaves = math.ceil(hosts / LEAF)
        lines = [
            f"SwitchName=leaf{leaf:03d} Nodes=node[{leaf * LEAF:05d}-{min(hosts, (leaf + 1) * LEAF) - 1:05d}]"
            for leaf in range(leaves)
        ]
        pods = math.ceil(leaves / POD)
        lines += [
            f"SwitchName=pod{pod:02d} Switches=leaf[{pod * POD:03d}-{min(leaves, (pod + 1) * POD) - 1:03d}]"
            for pod in range(pods)
        ]
        lines.append(f"SwitchName=core Switches=pod[00-{pods - 1:02d}]")
        return "topology.conf", "\n".join(lines) + "\n"
    lines = []
    for switch in range(math.ceil(hosts / SWITCH)):
        last = min(hosts, (switch + 1) * SWITCH) - 1
        lines += [f"[switches.sw{switch:04d}]", f'hosts = "node[{switch * SWITCH:05d}-{last:05d}]"']
        lines.append(f'group = "g{switch // GROUP:03d}"')
    return "topology.toml", "\n".join(lines) + "\n"


def load_topology(folder: Path):
    from fabricbench.measure.topology import read_topology

    return read_topology(str(next(folder.glob("topology.*"))))


def faults(fabric: str, hosts: int, topology) -> dict:
    """Where the faults go: a switch a third of the way in, a host and a link's two hosts under other switches,
    and on the dragonfly two groups apart from the switch's."""
    switch_of = [topology.switch_of(hostname(i)) for i in range(hosts)]
    group_of = [topology.group_of(hostname(i)) for i in range(hosts)]
    switches = sorted(set(switch_of))
    slow_switch = switches[len(switches) // 3]
    placed: dict = {"uplink": slow_switch}
    others = [g for g in sorted(set(group_of)) if g != group_of[switch_of.index(slow_switch)]]
    if fabric == "dragonfly" and len(others) >= 2:  # with two groups every cross-group pair crosses it: unknowable
        placed["global link"] = (others[0], others[-1])
    away = set(placed.get("global link", ()))
    free = [i for i in range(hosts) if switch_of[i] != slow_switch and group_of[i] not in away]
    placed.update(host=free[len(free) * 2 // 3], link=(free[len(free) // 5], free[-7]))
    return placed


def synthesise(fabric: str, hosts: int, topology, placed: dict | None, seed: int, noise: str = "dips") -> np.ndarray:
    """The N x N matrix of pairs-bw figures (MB/s; NaN on the diagonal), built a block of sources at a time."""
    from fabricbench.measure.verdict import tier_matrix

    rng = np.random.default_rng(seed)
    names = [hostname(i) for i in range(hosts)]
    tiers, switch_code, switch_names, group_code, group_names = tier_matrix(names, topology)
    base = np.array([TIER_MBPS[t] for t in ("same-host", "same-switch", "cross-switch", "cross-group")])
    values = np.empty((hosts, hosts))
    for first in range(0, hosts, 512):
        rows = slice(first, min(hosts, first + 512))
        shape = (rows.stop - rows.start, hosts)
        if noise == "dips":
            off = rng.normal(0.0, NOISE, shape)
            off -= np.where(rng.random(shape) < DIPPED, rng.exponential(DIP, shape), 0.0)
        else:  # the stress: Student's t, 3 degrees of freedom
            off = 0.015 * rng.standard_t(3, shape)
        values[rows] = base[tiers[rows]] * np.exp(off)
    del tiers
    if placed:
        under = switch_code == switch_names.index(placed["uplink"])
        values[np.ix_(under, ~under)] *= SLOW["uplink"]
        values[np.ix_(~under, under)] *= SLOW["uplink"]
        values[placed["host"], :] *= SLOW["host"]
        values[:, placed["host"]] *= SLOW["host"]
        a, b = placed["link"]
        values[a, b] *= SLOW["link"]
        values[b, a] *= SLOW["link"]
        if "global link" in placed:
            g1, g2 = (group_code == group_names.index(g) for g in placed["global link"])
            values[np.ix_(g1, g2)] *= SLOW["global link"]
            values[np.ix_(g2, g1)] *= SLOW["global link"]
    np.fill_diagonal(values, np.nan)
    return values


def write_run(folder: Path, values: np.ndarray, topology) -> dict:
    """The run folder of a pairs-bw run over these figures, written as fabricbench writes one: the CSV or the
    Parquet spool by the size's row count, metadata.json, then results.parquet. Returns the seconds of each."""
    from fabricbench.measure import results
    from fabricbench.measure.rows import Coded, RowBatch
    from fabricbench.measure.schema import PARQUET_ONLY_ROWS
    from fabricbench.measure.topology import TIERS
    from fabricbench.measure.verdict import tier_matrix

    hosts = len(values)
    names = [hostname(i) for i in range(hosts)]
    size_rows = hosts * (hosts - 1)
    writer, spool = results.TableWriter(folder), results.PartSpool(folder)
    tiers = tier_matrix(names, topology)[0]
    constant = {"run_id": "cluster-scale", "label": folder.name, "repeat": 0, "transport": "tcp", "kernel": "pairs-bw"}
    constant |= {"method": "c-loop", "buffer": "host", "size_B": SIZE, "ranks": hosts, "pairs": 1, "window": WINDOW}
    constant |= {"iterations": ITERATIONS, "warmup": 10, "sample": "window", "schedule": "isolated", "status": "ok"}
    constant |= {"validation": "off", "note": ""}
    started = time.perf_counter()
    block = max(1, ROWS_A_BATCH // hosts)
    for first in range(0, hosts, block):
        sources = np.arange(first, min(hosts, first + block))
        src = np.repeat(sources, hosts)
        dst = np.tile(np.arange(hosts), len(sources))
        keep = src != dst
        src, dst = src[keep], dst[keep]
        bw = values[src, dst]
        window_us = SIZE * WINDOW / bw  # a window's time at that rate
        columns = dict(constant, src_rank=src, dst_rank=dst, bw_MBps=bw, msgrate_per_s=bw * 1e6 / SIZE)
        columns |= {
            "src_host": Coded(src, names),
            "dst_host": Coded(dst, names),
            "tier": Coded(tiers[src, dst], list(TIERS)),
        }
        columns |= {"hops": np.where(tiers[src, dst] >= 2, 2.0, 0.0), "bw_peak_MBps": bw * 1.04}
        columns |= {
            f"lat_{stat}_us": window_us * factor for stat, factor in (("min", 0.96), ("p50", 1.0), ("mean", 1.01))
        }
        columns |= {
            f"lat_{stat}_us": window_us * factor for stat, factor in (("p90", 1.03), ("p99", 1.08), ("p999", 1.2))
        }
        columns |= {"lat_max_us": window_us * 1.3, "lat_stdev_us": window_us * 0.02}
        batch = RowBatch(len(src), columns, size_rows, last=sources[-1] == hosts - 1)
        if size_rows > results.CSV_SIZE_ROWS:
            spool.append(batch)
        else:
            writer.append_many(batch.rows())
    spool.flush()
    writer.close()
    rows_s = time.perf_counter() - started
    metadata = {"schema_version": 10, "run_id": "cluster-scale", "label": folder.name, "complete": True}
    metadata |= {"rows": writer.rows + spool.rows, "topology": topology.metadata(names), "hosts": names[:1]}
    if spool.rows:
        metadata[PARQUET_ONLY_ROWS] = spool.rows
    results.write_metadata(folder, metadata)
    started = time.perf_counter()
    results.write_parquet(folder, metadata)
    return {"rows_s": rows_s, "parquet_s": time.perf_counter() - started}


def read_group(folder: Path):
    from fabricbench.measure.pair_table import PairTable, run_sources
    from fabricbench.transports import TRANSPORTS

    (group,) = PairTable(run_sources(folder), TRANSPORTS).groups()
    return group


def named(found: dict) -> set:
    """What a verdict names, as the faults are placed: uplinks by switch, global links by groups, hosts, links."""
    parts = set()
    for uplink in found.get("slow_uplinks", []):
        parts.add(
            ("uplink", uplink["switch"]) if "switch" in uplink else ("global link", tuple(sorted(uplink["groups"])))
        )
    parts |= {("host", host["host"]) for host in found["slow_hosts"]}
    parts |= {("link", tuple(sorted((link["src_host"], link["dst_host"])))) for link in found["slow_links"]}
    return parts


def injected(placed: dict) -> set:
    parts = {("uplink", placed["uplink"]), ("host", hostname(placed["host"]))}
    parts.add(("link", tuple(sorted(hostname(i) for i in placed["link"]))))
    if "global link" in placed:
        parts.add(("global link", tuple(sorted(placed["global link"]))))
    return parts


# --- the stages, each in a process of its own --------------------------------------------------------------------


def stage(name: str, fabric: str, hosts: int, folder: Path, seed: int) -> dict:
    topology = load_topology(folder)
    placed = faults(fabric, hosts, topology)
    found: dict = {}
    if name == "write":
        started = time.perf_counter()
        values = synthesise(fabric, hosts, topology, placed, seed)
        found["synthesis_s"] = time.perf_counter() - started
        found |= write_run(folder / "run", values, topology)
        found["seconds"] = found["rows_s"] + found["parquet_s"]
        found["table_GB"] = (folder / "run" / "results.parquet").stat().st_size / 1e9
    elif name in ("read", "verdict"):
        from fabricbench.measure.verdict import verdict

        started = time.perf_counter()
        group = read_group(folder / "run")
        found["read_s"] = time.perf_counter() - started
        if name == "verdict":
            started = time.perf_counter()
            judged = verdict([group], topology=topology)
            found["verdict_s"] = time.perf_counter() - started
            found["named"] = sorted(map(list, named(judged)))
            found["z"] = judged["groups"][0]["outlier_z_used"]
        found["seconds"] = found["read_s"] + found.get("verdict_s", 0.0)
    elif name in ("healthy", "stress"):
        from fabricbench.measure.verdict import PairGroup, verdict

        values = synthesise(fabric, hosts, topology, None, seed + 1, "dips" if name == "healthy" else "t")
        group = PairGroup(
            ("tcp", "pairs-bw", "isolated", SIZE), np.arange(hosts), [hostname(i) for i in range(hosts)], values
        )
        started = time.perf_counter()
        judged = verdict([group], topology=topology)
        found["seconds"] = time.perf_counter() - started
        found["named"] = sorted(map(list, named(judged)))
    elif name in ("check", "compare"):
        python = [sys.executable, "-m", "fabricbench"]
        if name == "check":
            (folder / "thresholds.toml").write_text(THRESHOLDS)
            command = [*python, "check", str(folder / "thresholds.toml"), str(folder / "run")]
        else:
            command = [*python, "compare", str(folder / "run"), "--out", str(folder / "plots")]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=child_env(checkout_path=True))
        found["seconds"] = time.perf_counter() - started
        found["exit"] = done.returncode
        found["output"] = done.stdout
        found["errors"] = done.stderr[-2000:] if done.returncode not in (0, 1) else ""
        found["child_peak_GB"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
    found["peak_GB"] = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, found.get("child_peak_GB", 0.0))
    return found


def run_stage(name: str, fabric: str, hosts: int, folder: Path, seed: int) -> dict:
    command = [sys.executable, __file__, "--stage", name, "--fabrics", fabric, "--hosts", str(hosts)]
    command += ["--work", str(folder), "--seed", str(seed)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=STAGE_TIMEOUT_S, env=child_env(checkout_path=True)
    )
    if done.returncode != 0:
        raise SystemExit(f"cluster_scale: stage {name} at {hosts} hosts ({fabric}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the report --------------------------------------------------------------------------------------------------


def growth(counts: list[int], seconds: list[float]) -> list[str]:
    """The exponent k of time ~ N^k between successive host counts ("-" for the first)."""
    out = ["-"]
    for (n1, t1), (n2, t2) in zip(
        zip(counts, seconds, strict=True), zip(counts[1:], seconds[1:], strict=True), strict=False
    ):
        out.append(f"{math.log(t2 / t1) / math.log(n2 / n1):.2f}" if t1 > 0 and t2 > 0 else "-")
    return out


def report(fabric: str, counts: list[int], found: dict[int, dict], stress: bool) -> list[str]:
    lines = [f"## {fabric}", ""]
    header = ["hosts (pairs)", "write s (GB)", "read s", "verdict s (GB)", "check s (GB)", "compare s (GB)"]
    lines += [
        "| "
        + " | ".join(header)
        + " | z | precision | recall | named, healthy"
        + (" | named, t3" if stress else "")
        + " |"
    ]
    lines += ["|" + "---|" * (len(header) + 4 + stress)]
    for hosts in counts:
        f = found[hosts]
        truth, got = (
            {tuple(map(_tupled, p)) for p in f["injected"]},
            {tuple(map(_tupled, p)) for p in f["verdict"]["named"]},
        )
        hits = len(truth & got)
        cells = [
            f"{hosts:,} ({hosts * (hosts - 1):,})",
            f"{f['write']['seconds']:.1f} ({f['write']['peak_GB']:.1f})",
            f"{f['read']['seconds']:.1f}",
            f"{f['verdict']['verdict_s']:.1f} ({f['verdict']['peak_GB']:.1f})",
            f"{f['check']['seconds']:.1f} ({f['check']['peak_GB']:.1f})",
            f"{f['compare']['seconds']:.1f} ({f['compare']['peak_GB']:.1f})",
            f"{f['verdict']['z']:.2f}",
            f"{hits}/{len(got)}",
            f"{hits}/{len(truth)}",
            str(len(f["healthy"]["named"])),
        ]
        if stress:
            cells.append(str(len(f["stress"]["named"])))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for what, key, part in (
        ("write", "write", "seconds"),
        ("verdict", "verdict", "verdict_s"),
        ("check", "check", "seconds"),
        ("compare", "compare", "seconds"),
    ):
        exponents = growth(counts, [found[n][key][part] for n in counts])
        lines.append(f"growth of {what} (time ~ N^k between successive host counts): {', '.join(exponents)}")
    return lines


def _tupled(value):
    return tuple(value) if isinstance(value, list) else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="256,1024,4096,10000", help="comma list of host counts")
    parser.add_argument("--fabrics", default="fat-tree,dragonfly", help="fat-tree, dragonfly or both")
    parser.add_argument("--work", help="a folder for the runs (default: a temporary one, removed)")
    parser.add_argument("--keep", help="copy each run's check output and plots here")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--stress", action="store_true", help="also judge a healthy fabric of Student-t noise")
    parser.add_argument("--stage", help=argparse.SUPPRESS)  # one stage, in this process (the parent's children)
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    fabrics = args.fabrics.split(",")
    if args.stage:
        print(json.dumps(stage(args.stage, fabrics[0], counts[0], Path(args.work), args.seed)))
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="fabricbench-scale-"))
    print(
        f"# cluster_scale: {os.cpu_count()} cores, seed {args.seed}, {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True
    )
    met = True
    for fabric in fabrics:
        found: dict[int, dict] = {}
        for hosts in counts:
            folder = work / f"{fabric}-{hosts}"
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "run").mkdir(parents=True)
            name, text = topology_text(fabric, hosts)
            (folder / name).write_text(text)
            placed = faults(fabric, hosts, load_topology(folder))
            mine = {"injected": sorted(map(list, injected(placed)))}
            for step in (
                "write",
                "read",
                "verdict",
                "check",
                "compare",
                "healthy",
                *(["stress"] if args.stress else []),
            ):
                mine[step] = run_stage(step, fabric, hosts, folder, args.seed)
                print(
                    f"# {fabric} {hosts}: {step} {mine[step]['seconds']:.1f} s, peak {mine[step]['peak_GB']:.2f} GB",
                    flush=True,
                )
            check = mine["check"]["output"].splitlines()
            mine["check_lines"], mine["check_width"] = len(check), max(map(len, check), default=0)
            print(f"# {fabric} {hosts}: check printed {len(check)} lines, the longest {mine['check_width']} characters")
            if args.keep:
                keep = Path(args.keep) / f"{fabric}-{hosts}"
                keep.mkdir(parents=True, exist_ok=True)
                (keep / "check.txt").write_text(mine["check"]["output"])
                for picture in (folder / "plots").glob("*.png"):
                    shutil.copy(picture, keep / picture.name)
            found[hosts] = mine
            seconds, gigabytes = TARGETS.get(hosts, (None, None))
            truth = {tuple(map(_tupled, p)) for p in mine["injected"]}
            got = {tuple(map(_tupled, p)) for p in mine["verdict"]["named"]}
            met &= truth == got and not mine["healthy"]["named"] and mine["check"]["exit"] == 1
            met &= seconds is None or mine["check"]["seconds"] <= seconds
            met &= gigabytes is None or mine["check"]["peak_GB"] <= gigabytes
            shutil.rmtree(folder / "run", ignore_errors=True)
        print("\n".join(["", *report(fabric, counts, found, args.stress), ""]), flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"targets: {'met' if met else 'missed'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
