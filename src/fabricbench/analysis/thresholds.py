"""``fabricbench check``: a run against a thresholds file, for schedulers and health checks.

The thresholds file is TOML: an array of ``[[threshold]]`` tables, each naming the transports,
kernels and message sizes it covers and one or more limits, ``min_<column>`` or ``max_<column>`` on a
numeric column of the tidy table (``min_bw_MBps``, ``max_lat_p50_us``, ``min_busbw_GBps``, ...). Every
measured row a threshold covers is held to each of its limits; each failing row, pair of an
all-pairs kernel, or host gets one line saying what was expected and what was measured. Exit 0
when everything passes, 1 when anything fails (a threshold that covers no measured row fails too,
unless it says ``optional = true``), 2 for a malformed file, naming its line and field.

Parsing and judging are pure functions on plain rows (tests/unit); pandas is imported only to read
the run, and the run a check starts is a child process (``fabricbench run``).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fabricbench.argtypes import byte_size
from fabricbench.errors import UsageError
from fabricbench.measure.congestion import CANARIES, CONGESTORS, MIX, NONE
from fabricbench.measure.formatting import format_size
from fabricbench.measure.schema import NUMERIC, is_measured
from fabricbench.measure.topology import TIERS, Topology
from fabricbench.measure.verdict import slow_host
from fabricbench.terminal import LINE, printable, printable_lines

FIELDS = ("transport", "kernel", "size", "buffer", "canary", "congestor", "tier", "optional", "name")
# Limits on what the all-pairs verdict (measure.verdict) finds in the covered pairs rather than on a column:
# max_slow_uplinks = 0 fails a run whose verdict, judged by the run's topology, names a slow uplink or global link.
VERDICT_COUNTS = ("slow_uplinks",)
BUFFERS = ("host", "cuda")  # what the buffer column holds: host memory, or a GPU's (-d cuda)
BOUNDS = ("min", "max")
# The signals a run ends by: check passes its exit code on instead of judging a cut run.
STOPPED = {129, 130, 141, 143}
RunOut = Callable[[list[str]], str | None]  # run's words -> their --out (None: the run names its own folder)
_HEADER = re.compile(r"\s*\[\[\s*threshold\s*\]\]")
_size = byte_size("size")
# Bounds on a thresholds file, checked before and after tomllib reads it: tomllib recurses once per bracket
# (50,000 nested arrays end in RecursionError) and reads numbers of any length (a 400-digit one is past what
# float() takes). A [[threshold]] table's list of names is 4 deep; no limit needs more than 40 digits.
MAX_DEPTH = 16
MAX_DIGITS = 40
# What the pre-scan stops at: a comment, a string's opening quotes, a bracket, a run of decimal digits, a line break.
_SCAN = re.compile(r"#|\"\"\"|'''|\"|'|[\[\]{}]|[0-9][0-9_]*|\n")
_CLOSE = {
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),
    "'": re.compile(r"[^'\n]*'"),
    '"""': re.compile(r"(?:[^\\]|\\.)*?\"\"\"", re.DOTALL),
    "'''": re.compile(r".*?'''", re.DOTALL),
}


@dataclass(frozen=True)
class Limit:
    """``min_bw_MBps = 100``: the column, which side of the value passes, and the value."""

    bound: str
    column: str
    value: float

    @property
    def name(self) -> str:
        return f"{self.bound}_{self.column}"

    @property
    def expected(self) -> str:
        return f"{'>=' if self.bound == 'min' else '<='} {_number(self.value)}"

    def passes(self, measured: float) -> bool:
        return measured >= self.value if self.bound == "min" else measured <= self.value


@dataclass(frozen=True)
class Threshold:
    """One ``[[threshold]]`` table: what it covers and its limits; ``index`` counts from 1, ``line`` 0 if unknown."""

    index: int
    line: int
    transports: tuple[str, ...]
    kernels: tuple[str, ...]
    size_min: int | None = None
    size_max: int | None = None
    buffer: str | None = None
    limits: tuple[Limit, ...] = ()
    optional: bool = False
    name: str = ""
    canaries: tuple[str, ...] = ()  # the congestion kernel's rows of these canary tests only (): all
    congestors: tuple[str, ...] = ()  # and of these congestor patterns only
    tiers: tuple[str, ...] = ()  # the pairs of these tiers only (measure.topology.TIERS; a run with --topology)

    def covers(self, row: dict) -> bool:
        size = row.get("size_B")
        if row.get("transport") not in self.transports or row.get("kernel") not in self.kernels:
            return False
        if self.canaries and row.get("canary") not in self.canaries:
            return False
        if self.congestors and row.get("congestor") not in self.congestors:
            return False
        if self.tiers and row.get("tier") not in self.tiers:
            return False
        if self.buffer is not None and row.get("buffer", "host") != self.buffer:
            return False
        if size is None or (isinstance(size, float) and math.isnan(size)):
            return self.size_min is None and self.size_max is None
        return (self.size_min is None or size >= self.size_min) and (self.size_max is None or size <= self.size_max)

    @property
    def where(self) -> str:
        place = f"threshold {self.index}" + (f", line {self.line}" if self.line else "")
        return f"{self.name} ({place})" if self.name else place

    @property
    def scope(self) -> str:
        """``tcp,mpi pairs-bw 64 KiB-4 MiB``: what the threshold covers, as its lines say it."""
        if self.size_min is None and self.size_max is None:
            sizes = "every size"
        elif self.size_min == self.size_max:
            sizes = format_size(self.size_min)
        else:
            low = format_size(self.size_min) if self.size_min is not None else ""
            high = format_size(self.size_max) if self.size_max is not None else ""
            sizes = f"{low or '0 B'}-{high}" if high else f"{low} and up"
        buffer = f" {self.buffer} buffers" if self.buffer else ""
        tests = f" canary {','.join(self.canaries)}" if self.canaries else ""
        tests += f" with {','.join(self.congestors)}" if self.congestors else ""
        tests += f" {','.join(self.tiers)} pairs" if self.tiers else ""
        return f"{','.join(self.transports)} {','.join(self.kernels)} {sizes}{buffer}{tests}"


@dataclass
class Verdict:
    """What check prints, in order, and whether it passed: lines start with ``ok``, ``warn`` or ``FAIL``."""

    lines: list[str] = field(default_factory=list)
    failures: int = 0
    warnings: int = 0
    rows_checked: int = 0

    def add(self, level: str, text: str, indent: bool = False, counts: bool = True) -> None:
        """One line; ``counts`` False for a summary whose failures are the lines under it."""
        self.lines.append(f"{'  ' if indent else ''}{level:<4} {text}")
        if not counts:
            return
        if level == "FAIL":
            self.failures += 1
        elif level == "warn":
            self.warnings += 1


def _number(value: float) -> str:
    return f"{value:.4g}"


# --- parsing -------------------------------------------------------------------------------------------------------


class _Lines:
    """Where tables and fields sit in the file's text: tomllib parses without positions, so they are found here."""

    def __init__(self, text: str, tables: int):
        self.text = text.splitlines()
        headers = [number for number, line in enumerate(self.text, 1) if _HEADER.match(line)]
        # Only a file written as [[threshold]] headers maps table k to its header line.
        self.headers = headers if len(headers) == tables else []

    def table(self, index: int) -> int:
        return self.headers[index - 1] if self.headers else 0

    def field(self, index: int, name: str) -> int:
        if not self.headers:
            return 0
        start = self.headers[index - 1]
        end = self.headers[index] - 1 if index < len(self.headers) else len(self.text)
        pattern = re.compile(rf"\s*(\"|'|){re.escape(name)}\1\s*=")
        for number in range(start + 1, end + 1):
            if pattern.match(self.text[number - 1]):
                return number
        return start

    def top_level(self, name: str) -> int:
        pattern = re.compile(rf"\s*(\[+\s*)?(\"|'|){re.escape(name)}\2\s*[=\].]")
        return next((n for n, line in enumerate(self.text, 1) if pattern.match(line)), 0)


def _names(value: object, what: str, known: Iterable[str]) -> tuple[str, ...]:
    """A name or a list of names, each one of ``known``; raises ValueError saying what is wrong."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"must be a {what} name or a list of them, got {value!r}")
    known = list(known)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(names))


def parse_size(value: object) -> tuple[int | None, int | None]:
    """``size``: bytes (8), a byte count ("64K", "1M") or a range "MIN:MAX" with either end left open."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"must be a byte count of 0 or more, got {value}")
        return value, value
    if not isinstance(value, str):
        raise ValueError(f"must be a byte count (8, 64K, 1M) or a range MIN:MAX, got {value!r}")
    try:
        if ":" not in value:
            return _size(value), _size(value)
        low, high = value.split(":", 1)
        size_min = _size(low) if low.strip() else None
        size_max = _size(high) if high.strip() else None
    except UsageError:
        raise ValueError(f"must be a byte count (8, 64K, 1M) or a range MIN:MAX, got {value!r}") from None
    if size_min is not None and size_max is not None and size_min > size_max:
        raise ValueError(f"range {value!r} runs backwards: its minimum is above its maximum")
    return size_min, size_max


def _limit(name: str, value: object) -> Limit:
    bound, _, column = name.partition("_")
    if bound not in BOUNDS or column not in NUMERIC and not (bound == "max" and column in VERDICT_COUNTS):
        raise KeyError(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a number of 0 or more, got {value!r}")
    return Limit(bound, column, float(value))


def _unknown_field(name: str) -> str:
    limits = sorted(f"{bound}_{column}" for bound in BOUNDS for column in NUMERIC)
    limits += [f"max_{count}" for count in VERDICT_COUNTS]
    close = difflib.get_close_matches(name, [*FIELDS, *limits], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown field{hint}; a threshold has {', '.join(FIELDS)} and limits min_ or max_ a numeric column, "
        "e.g. min_bw_MBps, max_lat_p50_us, min_busbw_GBps, or max_slow_uplinks"
    )


def scan_bounds(text: str) -> tuple[int, str] | None:
    """The first line of TOML ``text`` past MAX_DEPTH brackets open at once or a number of more than MAX_DIGITS
    digits, and what is past; None when within both. A linear scan that skips comments and strings, so tomllib
    is never handed what it would recurse or compute on without end."""
    depth, line, at = 0, 1, 0
    while found := _SCAN.search(text, at):
        token, at = found.group(), found.end()
        if token == "\n":
            line += 1
        elif token == "#":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end
        elif token in _CLOSE:
            closed = _CLOSE[token].match(text, at)  # unclosed: tomllib refuses it; the scan goes on at the line's end
            end = closed.end() if closed else text.find("\n", at) % (len(text) + 1)
            line += text.count("\n", at, end)
            at = end
        elif token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, f"arrays or tables nested more than {MAX_DEPTH} deep"
        elif token in "]}":
            depth = max(0, depth - 1)
        elif len(token) - token.count("_") > MAX_DIGITS:
            return line, f"a number of more than {MAX_DIGITS} digits"
    return None


def value_bounds(data: object) -> str | None:
    """What in parsed TOML is past the bounds (tables nested by dotted keys, a hexadecimal number of any length),
    or None; walked with a stack, not by recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"arrays or tables nested more than {MAX_DEPTH} deep"
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_DIGITS:
            return f"a number of more than {MAX_DIGITS} digits"
    return None


def parse_thresholds(text: str, source: str, transports: Iterable[str], kernels: Iterable[str]) -> list[Threshold]:
    """The thresholds in TOML ``text``; a UsageError names ``source``, the line and the field of any fault."""
    import tomllib

    past = scan_bounds(text)
    if past:
        raise UsageError(f"{source}: line {past[0]}: {past[1]}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its words end with "(at line L, column C)"
        raise UsageError(f"{source}: not valid TOML: {exc}") from None
    except (RecursionError, ValueError) as exc:  # what the scan missed: nesting or digits it could not see
        raise UsageError(f"{source}: not valid TOML: {str(exc).splitlines()[0][:200]}") from None
    past = value_bounds(data)
    if past:
        raise UsageError(f"{source}: {past}")
    tables = data.get("threshold")
    lines = _Lines(text, len(tables) if isinstance(tables, list) else 0)

    def fault(line: int, what: str) -> UsageError:
        return UsageError(f"{source}{f': line {line}' if line else ''}: {what}")

    for key in data:
        if key != "threshold":
            raise fault(lines.top_level(key), f"{key!r}: unknown table or key; the file holds [[threshold]] tables")
    if tables is None:
        raise fault(0, "holds no [[threshold]] table: a check with nothing to check")
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise fault(lines.top_level("threshold"), "'threshold' must be an array of tables: write [[threshold]]")
    transports, kernels = list(transports), list(kernels)
    found = []
    for index, table in enumerate(tables, 1):
        where = f"threshold {index}"
        values: dict = {}
        limits = []
        for name, value in table.items():
            try:
                if name == "transport":
                    values["transports"] = _names(value, "transport", transports)
                elif name == "kernel":
                    values["kernels"] = _names(value, "kernel", kernels)
                elif name == "size":
                    values["size_min"], values["size_max"] = parse_size(value)
                elif name == "canary":
                    values["canaries"] = _names(value, "canary test", CANARIES)
                elif name == "tier":
                    values["tiers"] = _names(value, "tier", TIERS)
                elif name == "congestor":
                    values["congestors"] = _names(value, "congestor pattern", [*CONGESTORS, MIX, NONE])
                elif name in ("buffer", "name"):
                    if not isinstance(value, str) or not value:
                        raise ValueError(f"must be a non-empty string, got {value!r}")
                    if name == "buffer" and value not in BUFFERS:
                        raise ValueError(
                            f"must be one of {', '.join(BUFFERS)} (the table's buffer column), got {value!r}"
                        )
                    values[name] = value
                elif name == "optional":
                    if not isinstance(value, bool):
                        raise ValueError(f"must be true or false, got {value!r}")
                    values[name] = value
                else:
                    limits.append(_limit(name, value))
            except ValueError as exc:
                raise fault(lines.field(index, name), f"{where}, field {name!r}: {exc}") from None
            except KeyError:
                raise fault(lines.field(index, name), f"{where}, field {name!r}: {_unknown_field(name)}") from None
        for required in ("transport", "kernel"):
            if required not in table:
                raise fault(lines.table(index), f"{where}: field {required!r} is missing")
        if not limits:
            raise fault(lines.table(index), f"{where}: no limit; give at least one, e.g. min_bw_MBps or max_lat_p50_us")
        found.append(Threshold(index, lines.table(index), limits=tuple(limits), **values))
    if not found:
        raise fault(0, "holds no [[threshold]] table: a check with nothing to check")
    return found


def read_thresholds(path: str) -> list[Threshold]:
    """The thresholds file at ``path``, checked against the transports and kernels this fabricbench has."""
    from fabricbench.measure.kernels import KERNELS
    from fabricbench.transports import TRANSPORTS

    source = Path(path)
    if not source.is_file():
        raise UsageError(f"no thresholds file {path!r}" if not source.exists() else f"{path!r} is not a regular file")
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path!r}: {exc}") from None
    return parse_thresholds(text, path, TRANSPORTS, KERNELS)


# --- judging -------------------------------------------------------------------------------------------------------


def _value(row: dict, column: str) -> float:
    value = row.get(column)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value


def _rank(text: object) -> str:
    """A rank cell as written: CSV gives '3', Parquet may give 3.0."""
    try:
        return str(int(float(text)))
    except (TypeError, ValueError):
        return str(text)


def is_pair(row: dict) -> bool:
    """A row of one (source, destination) pair of ranks of an all-pairs kernel."""
    return bool(row.get("src_host")) and bool(row.get("dst_host")) and not is_gpu_route(row)


def is_gpu_route(row: dict) -> bool:
    """A row of one (source, destination) pair of GPUs in one host (cuda-copy peer)."""
    return str(row.get("src_gpu", "")) not in ("", "nan", "None")


def row_name(row: dict) -> str:
    """``tcp pairs-bw 1 MiB fbh1 -> fbh3 (ranks 0 -> 2, shift)``, or ``cuda-copy peer 64 MiB gpu1 GPU 0 -> GPU 1``:
    which row, pair and repeat a line is about."""
    text = f"{row['transport']} {row['kernel']} {format_size(row['size_B'])}"
    if row.get("buffer", "host") not in ("host", ""):
        text += f" {row['buffer']} buffers"
    if is_pair(row):
        detail = f"ranks {_rank(row.get('src_rank'))} -> {_rank(row.get('dst_rank'))}"
        if row.get("schedule"):
            detail += f", {row['schedule']}"
        text += f" {row['src_host']} -> {row['dst_host']} ({detail})"
    elif is_gpu_route(row):
        text += f" {row.get('src_host', '')} GPU {_rank(row['src_gpu'])} -> GPU {_rank(row.get('dst_gpu'))}"
    elif row.get("canary"):
        text += f" {row['canary']} with {row.get('congestor', '')}"
    if str(row.get("repeat", "0")) not in ("0", "0.0", "", "nan"):
        text += f" repeat {_rank(row['repeat'])}"
    return text


def slow_hosts(pairs: list[dict], failing: list[dict]) -> dict[str, tuple[set[str], set[str]]]:
    """Hosts most of whose peers share a failing pair with them (the verdict's slow_host rule): {host: (failing
    peers, all peers)}.

    A host needs at least two peers to be named: with one, a slow link and a slow host look alike. A
    pair counts for both its hosts, in either direction, so a host whose own link is slow (every
    pair through it fails one way) is named, and a single slow link names no host.
    """
    peers: dict[str, set[str]] = defaultdict(set)
    bad: dict[str, set[str]] = defaultdict(set)
    for row in pairs:
        src, dst = row["src_host"], row["dst_host"]
        if src != dst:
            peers[src].add(dst)
            peers[dst].add(src)
    for row in failing:
        src, dst = row["src_host"], row["dst_host"]
        if src != dst:
            bad[src].add(dst)
            bad[dst].add(src)
    return {
        host: (bad[host], peers[host])
        for host in sorted(peers)
        if len(peers[host]) >= 2 and slow_host(len(bad[host]), len(peers[host]))
    }


def _judge_count(verdict: Verdict, threshold: Threshold, limit: Limit, rows: list[dict], fabric) -> None:
    """A limit on the all-pairs verdict's count of slow uplinks (and global links) among the covered pair rows,
    judged by the run's topology: one summary line, then one line per slow uplink."""
    from fabricbench.measure.verdict import summary_lines
    from fabricbench.measure.verdict import verdict as pairs_verdict

    head = f"{threshold.where}: {threshold.scope}, {limit.name} {_number(limit.value)}"
    pairs = [row for row in rows if is_pair(row)]
    if fabric is None or not pairs:
        why = "the run has no topology (run --topology)" if pairs else "no all-pairs row"
        verdict.add("warn" if threshold.optional else "FAIL", f"{head}: {why}: no uplink was judged")
        return
    found = pairs_verdict(pairs, topology=fabric)
    uplinks = found["slow_uplinks"]
    if limit.passes(len(uplinks)):
        judged = sum(group["pairs"] for group in found["groups"])
        verdict.add("ok", f"{head}: {len(uplinks)} slow uplinks ({judged} pairs judged)")
        return
    verdict.add("FAIL", f"{head}: {len(uplinks)} slow uplinks, expected {limit.expected}", counts=False)
    for line in summary_lines({**found, "slow_links": [], "slow_hosts": []}):
        if line.startswith("#   slow "):
            verdict.add("FAIL", line.removeprefix("#   slow "), indent=True)


def _judge_limit(verdict: Verdict, threshold: Threshold, limit: Limit, rows: list[dict]) -> None:
    """One summary line for (threshold, limit), then one line per failing row, pair or host."""
    head = f"{threshold.where}: {threshold.scope}, {limit.name} {_number(limit.value)}"
    held = [row for row in rows if not math.isnan(_value(row, limit.column))]
    if not held:
        level = "warn" if threshold.optional else "FAIL"
        verdict.add(level, f"{head}: no valid measured row has {limit.column}")
        return
    failing = [row for row in held if not limit.passes(_value(row, limit.column))]
    if not failing:
        key = min if limit.bound == "min" else max
        worst = key(_value(row, limit.column) for row in held)
        verdict.add("ok", f"{head}: {len(held)} rows pass (worst {_number(worst)})")
        return
    verdict.add("FAIL", f"{head}: {len(failing)} of {len(held)} rows fail", counts=False)

    def measured(row: dict) -> str:
        return f"{limit.column} {_number(_value(row, limit.column))}, expected {limit.expected}"

    for row in failing:
        if not is_pair(row):
            verdict.add("FAIL", f"{row_name(row)}: {measured(row)}", indent=True)
    # Pairs of one all-pairs measurement (transport, kernel, size, schedule, repeat) name their slow hosts.
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in held:
        if is_pair(row):
            key = tuple(str(row.get(c, "")) for c in ("transport", "kernel", "buffer", "size_B", "schedule", "repeat"))
            groups[key].append(row)
    failing_ids = {id(row) for row in failing}
    for group in groups.values():
        bad = [row for row in group if id(row) in failing_ids]
        hosts = slow_hosts(group, bad)
        first = group[0]
        what = row_name({**first, "src_host": ""}) + (f" ({first['schedule']})" if first.get("schedule") else "")
        for host, (bad_peers, peers) in hosts.items():
            theirs = [_value(r, limit.column) for r in group if host in (r["src_host"], r["dst_host"])]
            verdict.add(
                "FAIL",
                f"host {host}: {what}: pairs with {len(bad_peers)} of its "
                f"{len(peers)} peers fail ({', '.join(sorted(bad_peers))}); {limit.column} median "
                f"{_number(statistics.median(theirs))}, expected {limit.expected}",
                indent=True,
            )
        for row in bad:
            if row["src_host"] not in hosts and row["dst_host"] not in hosts:
                verdict.add("FAIL", f"{row_name(row)}: {measured(row)}", indent=True)


def judge(thresholds: list[Threshold], rows: list[dict], fabric: Topology | None = None) -> Verdict:
    """Every threshold against every row it covers; a threshold covering no measured row fails (warns if optional).
    ``fabric``: the run's topology, for the limits on the all-pairs verdict (VERDICT_COUNTS)."""
    verdict = Verdict()
    checked = set()
    for threshold in thresholds:
        covered = [row for row in rows if threshold.covers(row)]
        measured = [row for row in covered if is_measured(row.get("status", ""))]
        if not measured:
            level = "warn" if threshold.optional else "FAIL"
            why = "no row" if not covered else f"only rows that were not measured ({covered[0].get('status')})"
            verdict.add(level, f"{threshold.where}: {threshold.scope}: covers {why}; nothing was checked")
            continue
        for row in measured:
            checked.add(id(row))
            if row.get("validation") == "fail":
                verdict.add("FAIL", f"{row_name(row)}: received data failed validation; its figures do not stand")
        valid = [row for row in measured if row.get("validation") != "fail"]
        for limit in threshold.limits:
            if limit.column in VERDICT_COUNTS:
                _judge_count(verdict, threshold, limit, valid, fabric)
            else:
                _judge_limit(verdict, threshold, limit, valid)
    verdict.rows_checked = len(checked)
    return verdict


# --- the JUnit report (check --junit) -----------------------------------------------------------------------------


@dataclass
class Case:
    """One JUnit test case: a row a threshold covers, or the threshold itself where no row stands for what it says
    (it covers no measured row, no row has a limit's column, a limit on the all-pairs verdict). ``failures``: one
    ``what was measured, what was allowed`` each; ``skipped``: why nothing was held to the threshold."""

    name: str
    failures: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # the limits failed (max_lat_p50_us), or what else failed
    skipped: str = ""
    details: list[str] = field(default_factory=list)


def junit_cases(threshold: Threshold, rows: list[dict], fabric: Topology | None = None) -> list[Case]:
    """The test cases of one threshold: one per measured row it covers, held to each of its limits on a column the
    row has; one per limit on the all-pairs verdict; one for what the text verdict fails as a whole (no covered
    row, no row with a limit's column). An optional threshold's cases skip where the verdict only warns."""
    covered = [row for row in rows if threshold.covers(row)]
    measured = [row for row in covered if is_measured(row.get("status", ""))]
    head = threshold.scope

    def unjudged(name: str, why: str, kind: str) -> Case:
        return Case(name, skipped=why) if threshold.optional else Case(name, [why], [kind])

    if not measured:
        why = "no row" if not covered else f"only rows that were not measured ({covered[0].get('status')})"
        return [unjudged(head, f"{head}: covers {why}; nothing was checked", "no_row")]
    valid = [row for row in measured if row.get("validation") != "fail"]
    found = []
    columns = [limit for limit in threshold.limits if limit.column not in VERDICT_COUNTS]
    for limit in threshold.limits:
        if limit.column in VERDICT_COUNTS:
            verdict = Verdict()
            _judge_count(verdict, threshold, limit, valid, fabric)  # its lines: "LEVEL text", the slow uplinks under
            level = verdict.lines[0].split()[0]
            first, *rest = (line.strip().split(" ", 1)[1].strip() for line in verdict.lines)
            name = f"{head}: {limit.name}"
            if level == "warn":
                found.append(Case(name, skipped=first))
            else:
                found.append(Case(name, [first] if level == "FAIL" else [], [limit.name], details=rest))
        elif not any(not math.isnan(_value(row, limit.column)) for row in valid):
            found.append(unjudged(f"{head}: {limit.column}", f"no valid measured row has {limit.column}", limit.name))
    for row in measured:
        name = row_name(row)
        case = Case(name)
        if row.get("validation") == "fail":
            case.failures.append(f"{name}: received data failed validation; its figures do not stand")
            case.kinds.append("validation")
        held = [limit for limit in columns if not math.isnan(_value(row, limit.column))]
        for limit in held:
            value = _value(row, limit.column)
            if not limit.passes(value):
                case.failures.append(f"{name}: {limit.column} {_number(value)}, expected {limit.expected}")
                case.kinds.append(limit.name)
        if not held and not case.failures:
            case.skipped = f"{name}: has no {', '.join(dict.fromkeys(limit.column for limit in columns))}"
        found.append(case)
    return found


def write_junit(path: str, thresholds: list[Threshold], rows: list[dict], fabric, source: str, run_code: int) -> None:
    """The JUnit XML report of a check: a test suite per threshold, a test case per row it covers (``junit_cases``),
    a failure's message saying the row (link, kernel, size) and its measured and allowed figures. What comes from
    the thresholds file or the table passes ``printable``: XML 1.0 cannot hold most control characters."""
    from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

    report = JUnitXml("fabricbench check")
    groups = []
    for threshold in thresholds:
        limits = ", ".join(f"{limit.name} {limit.expected}" for limit in threshold.limits)
        groups.append(
            (threshold.where, f"{threshold.where}: {threshold.scope}; {limits}", junit_cases(threshold, rows, fabric))
        )
    if run_code:
        groups.append(("fabricbench run", "", [Case("the run", [f"the run exited {run_code}"], ["exit_status"])]))
    for name, said, cases in groups:
        suite = TestSuite(printable(name, LINE))
        suite.add_property("thresholds", printable(source, LINE))  # properties come before the cases
        tests = []
        for case in cases:
            test = TestCase(printable(case.name, LINE), classname=printable(f"fabricbench check.{name}", LINE))
            if case.failures:
                failure = Failure(printable("; ".join(case.failures), LINE), ",".join(case.kinds))
                failure.text = printable_lines([*case.failures, *case.details, *([said] if said else [])])
                test.result = [failure]
            elif case.skipped:
                test.result = [Skipped(printable(case.skipped, LINE))]
            tests.append(test)
        suite.add_testcases(tests)  # counts once, not per case
        report.add_testsuite(suite)
    report.update_statistics()
    try:
        report.write(path, pretty=True)
    except OSError as exc:
        raise UsageError(f"cannot write the JUnit report {path!r}: {exc.strerror or exc}") from None


def junit_path(path: str) -> str:
    """``--junit FILE`` checked before anything runs: a file in a folder that exists, not a folder itself."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--junit {path!r} is a folder; give a file to write the JUnit report to")
    if not target.parent.is_dir():
        raise UsageError(f"--junit {path!r}: no folder {str(target.parent)!r} to write the JUnit report in")
    if not os.access(target.parent, os.W_OK):
        raise UsageError(f"--junit {path!r}: the folder {str(target.parent)!r} is not writable")
    return path


def summary(verdict: Verdict, thresholds: int) -> str:
    outcome = "FAIL" if verdict.failures or not verdict.rows_checked else "pass"
    counts = f"{verdict.rows_checked} rows checked against {thresholds} thresholds"
    if verdict.failures:
        counts = f"{verdict.failures} failing lines; {counts}"
    if verdict.warnings:
        counts += f"; {verdict.warnings} warnings"
    if not verdict.rows_checked:
        counts += ": nothing was checked"
    return f"check: {outcome}: {counts}"


# --- the command ---------------------------------------------------------------------------------------------------


def _rows(path: str) -> tuple[list[dict], Topology | None]:
    """A finished run's rows, read and migrated as compare reads them, and the topology its metadata keeps."""
    from fabricbench.analysis import load

    frame, metadata = load.read_run(path)
    try:
        fabric = Topology.from_metadata(metadata.get("topology"))
    except UsageError as exc:
        raise UsageError(f"{path!r}: {exc}") from None
    return frame.to_dict("records"), fabric


def _start_run(words: list[str], run_out: RunOut) -> tuple[str, int]:
    """Run ``fabricbench run WORDS`` as a child; the folder it wrote and its exit code."""
    from fabricbench.launch import launcher as launch
    from fabricbench.measure.results import RUN_ID_VAR, new_run_id

    if launch.launcher() is not None:
        raise UsageError(
            "check -- run starts its own ranks; under a launcher run `fabricbench run --out DIR`, "
            "then `fabricbench check THRESHOLDS DIR`"
        )
    out = run_out(words)  # bad run options: one line, exit 2, now
    env = dict(os.environ)
    if not out:
        run_id = new_run_id()
        env[RUN_ID_VAR] = run_id  # the run names itself, and its folder, by this id
        out = os.path.join("results", run_id)
    code = subprocess.run([sys.executable, "-m", "fabricbench", "run", *words], env=env).returncode
    return out, code


def check(thresholds_path: str, target: list[str], run_out: RunOut, junit: str | None = None) -> int:
    """``check THRESHOLDS RUN`` or ``check THRESHOLDS -- run ARGS``: print the verdict; 0 pass, 1 fail.

    ``run_out`` reads ``run``'s own words as ``run`` does (the command line's parser, which lives above this
    module) and returns their --out, or None; it raises UsageError for words run would refuse. ``junit``: a file
    to write the verdict to as a JUnit XML report as well (``write_junit``)."""
    words = target[1:] if target[:1] == ["--"] else target
    if not words:
        raise UsageError("check needs a finished run's folder, or -- run ARGS to start one")
    if junit is not None:
        junit_path(junit)  # a bad path stops check before any run starts
    thresholds = read_thresholds(thresholds_path)  # a malformed file stops check before any run starts
    run_code = 0
    if words[0] == "run" and (len(words) > 1 or target[:1] == ["--"]):
        run, run_code = _start_run(words[1:], run_out)
        if run_code < 0:  # killed by a signal: the shell's 128 + N
            return 128 - run_code
        if run_code == 2 or run_code in STOPPED:  # bad input, or stopped: nothing to judge
            return run_code
        if not Path(run).exists():
            print(f"check: FAIL: the run exited {run_code} and left no table in {run}")
            return 1
    elif len(words) == 1:
        run = words[0]
    else:
        raise UsageError(f"check takes one run folder, or -- run ARGS; got {' '.join(words)!r}")
    rows, fabric = _rows(run)
    verdict = judge(thresholds, rows, fabric)
    if run_code:
        verdict.add("FAIL", f"the run exited {run_code}")
    if junit is not None:  # first: the report stands even when the console is gone (check ... | head)
        write_junit(junit, thresholds, rows, fabric, thresholds_path, run_code)
    # The lines quote the thresholds file's names and the table's hosts and labels.
    print(printable_lines([f"check: {thresholds_path} against {run} ({len(rows)} rows)", *verdict.lines]))
    print(summary(verdict, len(thresholds)))
    return 1 if verdict.failures or not verdict.rows_checked else 0
