"""What a run produces, with the numbers taken out: to show that a change to the core changes no behaviour.

    python benchmarks/behaviour_snapshot.py snapshot OUT.json      # run the cases on this checkout
    python benchmarks/behaviour_snapshot.py diff BEFORE.json AFTER.json

The cases: the default sweep (``fabricbench run``), ``pairs-bw`` on 4 ranks, ``congestion`` on 10 ranks (its rows
by canary and congestor, and its console text masked), a ``cuda-copy`` run on a host without a GPU (its refusal),
a ``--peer`` run against a local ``serve``, and ``--format osu`` text for a latency, a bandwidth and a collective
kernel. For each it keeps the table's columns, every row's (transport, kernel, size_B, status, method) and the exit
code and stderr; OSU text is kept with every number masked. Rows are compared as sets in run order; figures differ
between runs and are never compared.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import child_env, launch

PYTHON = sys.executable
KEY = ("transport", "kernel", "size_B", "status", "method")
# A number with the spaces that pad it: OSU's columns are fixed-width, so a layout is the same when every run of
# digits, points and spaces holding a digit has the same length.
NUMBER = re.compile(r"[-+\d. ]*\d[-+\d. ]*")


def fabricbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A case: fabricbench run whatever its exit status, in an environment without a launcher's or a run's
    variables, so every case runs as typed at a clean shell."""
    env = child_env(drop=("FABRICBENCH_", "PMI", "OMPI_", "SLURM_"))
    return launch([PYTHON, "-m", "fabricbench", *args], timeout, env)


def table(out: Path, extra: tuple[str, ...] = ()) -> dict:
    """The CSV's columns and the KEY (and EXTRA) cells of every row, as the file holds them: not typed, so a
    snapshot sees what was written, "8" and "" alike."""
    from fabricbench.measure.schema import CSV_NAME
    from fabricbench.measure.table_cells import csv_cells

    cells = csv_cells(out / CSV_NAME, str(out / CSV_NAME))
    at = {name: index for index, name in enumerate(cells.header)}
    return {"columns": cells.header, "rows": [[row[at[name]] for name in KEY + extra] for row in cells.rows]}


def masked(text: str) -> str:
    """OSU text with numbers (and their padding) masked, so layout and words are compared and figures are not."""
    return "\n".join(NUMBER.sub(lambda m: "#" * len(m.group()), line) for line in text.splitlines())


def comparable(case: dict) -> dict:
    """A case as the diff sees it: OSU text masked (the snapshot keeps it raw, figures and all)."""
    return {field: masked(value) if field == "osu_text" else value for field, value in case.items()}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def snapshot(path: Path) -> None:
    cases: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        quick = ["-i", "20", "-x", "2"]

        result = fabricbench("run", "--out", str(work / "default"), "--format", "none")
        cases["default sweep"] = {"rc": result.returncode, **table(work / "default")}

        result = fabricbench("run", "--np", "4", "-k", "pairs-bw", "-m", "1:4K", *quick, "--out", str(work / "pairs"))
        cases["pairs-bw, 4 ranks"] = {"rc": result.returncode, **table(work / "pairs")}

        result = fabricbench(
            "run", "--np", "10", "-t", "mpi", "-k", "congestion", "-i", "20", "-x", "2", "--max-time", "1",
            "--out", str(work / "congestion"),
        )  # fmt: skip
        cases["congestion, 10 ranks"] = {
            "rc": result.returncode,
            "console": masked(result.stdout),
            **table(work / "congestion", ("canary", "congestor")),
        }

        result = fabricbench("run", "-t", "cuda-copy", "--out", str(work / "cuda"))
        cases["cuda-copy refusal"] = {"rc": result.returncode, "stderr": result.stderr.strip().splitlines()}

        port = free_port()
        server = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", "serve", "--address", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            result = fabricbench(
                "run", "--peer", f"127.0.0.1:{port}", "-k", "latency,bw,bibw,allreduce", "-m", "1:4K", "-c",
                *quick, "--out", str(work / "peer"), "--format", "none",
            )  # fmt: skip
            cases["--peer run"] = {"rc": result.returncode, **table(work / "peer")}
        finally:
            server.terminate()
            server.wait(timeout=10)

        for kernels in ("latency", "bw", "allreduce", "latency,bw,bibw,allreduce"):
            result = fabricbench("run", "-k", kernels, "-m", "1:4K", *quick, "--format", "osu", "--out",
                                 str(work / f"osu-{kernels}"))  # fmt: skip
            cases[f"--format osu -k {kernels}"] = {"rc": result.returncode, "osu_text": result.stdout}
        result = fabricbench("run", "-k", "allreduce", "-m", "4:4K", "-c", *quick, "--format", "osu",
                             "--osu-full", "--osu-percentiles", "50,99", "--out", str(work / "osu-full"))  # fmt: skip
        cases["--format osu --osu-full -c"] = {"rc": result.returncode, "osu_text": result.stdout}
    path.write_text(json.dumps(cases, indent=1) + "\n")
    print(f"{len(cases)} cases in {path}")


def diff(before_path: Path, after_path: Path) -> int:
    before, after = (
        {name: comparable(case) for name, case in json.loads(path.read_text()).items()}
        for path in (before_path, after_path)
    )
    failures = 0
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            detail = f"{len(old['rows'])} rows, {len(old['columns'])} columns" if "rows" in old else "identical"
            print(f"same      {name}: {detail}")
            continue
        failures += 1
        print(f"DIFFERENT {name}")
        for field in sorted(set(old or {}) | set(new or {})):
            if (old or {}).get(field) != (new or {}).get(field):
                print(f"  {field}:\n    before {(old or {}).get(field)!r}\n    after  {(new or {}).get(field)!r}")
    print(f"{failures} of {len(set(before) | set(after))} cases differ")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("snapshot").add_argument("out", type=Path)
    compare = sub.add_parser("diff")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot":
        snapshot(args.out)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
