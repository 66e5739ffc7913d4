"""No module compares a transport's, kernel's or pattern's name outside the module that owns it.

Read from the package's source (ast, no processes). The names come from their sources of truth: the transports
are fabricbench.transports.TRANSPORTS's keys, the kernels measure/kernels.py's KERNELS, the patterns
fabricbench.run.patterns.PATTERNS, the canary tests and congestor patterns measure/congestion.py's CANARIES,
CONGESTORS, MIX and NONE.

A string literal is compared when it is an operand of ``==``, ``!=``, ``in`` or ``not in`` (alone, or inside a
tuple, list or set of literals, or a module-level constant bound to one: ``OTHERS = ("mpi",)`` then
``name in OTHERS``), the value of a ``match``/``case`` pattern, or the argument (or a tuple of them) of
``.startswith`` or ``.endswith``.

Who may compare what:
- transports/<fabric>/ compares the names of its own transports (those TRANSPORTS places in that folder) and the
  kernel names its transports run (choosing a loop per kernel is the transport's business);
- measure/kernels.py and collectives/ compare any kernel name;
- the file defining a pattern's class (PATTERNS[name]) compares that pattern's name and the names of the kernels
  whose pattern it is;
- everything else compares none of them: it asks the kernel, the transport class or the pattern instead.

A canary test or congestor pattern is not a kernel even where the two share a name (allreduce): measure/congestion.py
owns those names, and a shared name counts as the canary's (never as a kernel's) there and in a comparison whose
other side says ``canary`` or ``congestor`` (``canary.name == "allreduce"``). Anywhere else it is a kernel name.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "fabricbench"
KERNEL_OWNERS = ("measure/kernels.py", "collectives/")
CONGESTION_OWNER = "measure/congestion.py"
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
PREFIX_TESTS = ("startswith", "endswith")
# (path, literal): comparisons that are not of a transport's, kernel's or pattern's name, each with why.
ALLOWED = {
    ("transports/ofi/transport.py", "verbs"): "libfabric's verbs provider (fi_getinfo's choice), not the transport",
    ("measure/bisection.py", "all"): "the bisection row of every pair's tier (measure.bisection.ALL), not the pattern",
    ("transports/mpi/transport.py", "ucx"): "MPICH_CH4_NETMOD's and OMPI_MCA_pml's word for UCX, not the transport",
    ("transports/mpi/transport.py", "all"): "UCX_TLS's and UCX_NET_DEVICES' word for every one, not the pattern",
}


@dataclass(frozen=True)
class Names:
    """What is named, and where each name may be compared: paths relative to the package, a folder ending in /."""

    transports: dict[str, str]  # transport -> the folder holding its module
    kernels: dict[str, str]  # kernel -> its pattern
    runs: dict[str, frozenset[str]]  # transport folder -> the kernels its transports run
    patterns: dict[str, str]  # pattern -> the file defining its class
    congestion: frozenset[str]  # canary tests and congestor patterns


@dataclass(frozen=True)
class Offence:
    path: str
    line: int
    literal: str
    kinds: tuple[str, ...]  # which names it is: transport, kernel, pattern

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.literal!r} ({' and '.join(self.kinds)} name)"


@functools.cache
def package_names() -> Names:
    import fabricbench
    from fabricbench.measure import congestion
    from fabricbench.measure.kernels import KERNELS
    from fabricbench.run import patterns
    from fabricbench.transports import TRANSPORTS, transport_class

    root = Path(fabricbench.__file__).parent

    def defined_in(cls: type) -> str:
        return Path(sys.modules[cls.__module__].__file__).relative_to(root).as_posix()

    transports = {name: "/".join(module.split(".")[1:-1]) + "/" for name, (module, _) in TRANSPORTS.items()}
    runs: dict[str, frozenset[str]] = {}
    for name, folder in transports.items():
        runs[folder] = runs.get(folder, frozenset()) | transport_class(name).kernels
    return Names(
        transports=transports,
        kernels={name: kernel.pattern for name, kernel in KERNELS.items()},
        runs=runs,
        patterns={name: defined_in(cls) for name, cls in patterns.PATTERNS.items()},
        congestion=frozenset([*congestion.CANARIES, *congestion.CONGESTORS, congestion.MIX, congestion.NONE]),
    )


def module_constants(tree: ast.Module) -> dict[str, list[str]]:
    """{name: its strings} for each module-level name bound to a string or a tuple, list or set of strings."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        strings = literal_strings(value, {})
        if isinstance(target, ast.Name) and strings:
            found[target.id] = strings
    return found


def literal_strings(node: ast.expr, constants: dict[str, list[str]]) -> list[str]:
    """The strings an operand compares against: a literal, a tuple/list/set of them, or a constant bound to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.Name):
        return constants.get(node.id, [])
    return []


def compared(tree: ast.Module) -> Iterator[tuple[int, str, ast.expr]]:
    """(line, literal, the expression it is compared with) for every compared string literal."""
    constants = module_constants(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
                if isinstance(op, COMPARISONS):
                    for literal in literal_strings(left, constants):
                        yield node.lineno, literal, right
                    for literal in literal_strings(right, constants):
                        yield node.lineno, literal, left
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PREFIX_TESTS:
            for arg in node.args[:1]:
                for literal in literal_strings(arg, constants):
                    yield node.lineno, literal, node.func.value
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for value in ast.walk(case.pattern):
                    if isinstance(value, ast.MatchValue):
                        for literal in literal_strings(value.value, {}):
                            yield value.lineno, literal, node.subject


def in_folder(path: str, folder: str) -> bool:
    return path.startswith(folder) if folder.endswith("/") else path == folder


def kinds_out_of_place(path: str, literal: str, other: ast.expr, names: Names) -> tuple[str, ...]:
    """Which of the literal's names ``path`` may not compare (empty: it owns each name it is, or it is none)."""
    found = []
    if literal in names.transports and not in_folder(path, names.transports[literal]):
        found.append("transport")
    if literal in names.kernels and not (literal in names.congestion and canary_side(path, other)):
        runs_it = any(in_folder(path, folder) and literal in kernels for folder, kernels in names.runs.items())
        pattern_file = names.patterns.get(names.kernels[literal])
        if not (runs_it or path == pattern_file or any(in_folder(path, owner) for owner in KERNEL_OWNERS)):
            found.append("kernel")
    if literal in names.patterns and path != names.patterns[literal]:
        found.append("pattern")
    return tuple(found)


def canary_side(path: str, other: ast.expr) -> bool:
    """A name shared by a kernel and a canary test or congestor pattern is the latter's here."""
    text = ast.unparse(other).lower()
    return path == CONGESTION_OWNER or "canary" in text or "congestor" in text


def offences(path: str, text: str, names: Names) -> list[Offence]:
    """Every comparison in the module at ``path`` (relative to the package) of a name it does not own."""
    found = []
    for line, literal, other in compared(ast.parse(text, path)):
        kinds = kinds_out_of_place(path, literal, other, names)
        if kinds and (path, literal) not in ALLOWED:
            found.append(Offence(path, line, literal, kinds))
    return sorted(found, key=lambda offence: offence.line)


def test_no_name_compared_outside_its_owner():
    names = package_names()
    found = [
        str(offence)
        for source in sorted(PACKAGE.rglob("*.py"))
        for offence in offences(source.relative_to(PACKAGE).as_posix(), source.read_text(), names)
    ]
    assert not found, "names compared outside their owner (ask an attribute instead):\n" + "\n".join(found)


def test_each_allowed_comparison_is_still_made():
    """An entry that no longer matches a comparison goes, or it would let a later one through unseen."""
    for path, literal in ALLOWED:
        assert literal in {found for _, found, _ in compared(ast.parse((PACKAGE / path).read_text()))}, path


def test_the_checker_finds_a_kernel_name_outside_its_owner():
    names = package_names()
    text = "def f(kernel):\n    if kernel.name == 'bw':\n        return 1\n"
    assert [str(o) for o in offences("report/console.py", text, names)] == ["report/console.py:2: 'bw' (kernel name)"]
    assert offences("measure/kernels.py", text, names) == []
    assert offences("transports/tcp/transport.py", text, names) == []  # tcp runs bw


def test_the_checker_reads_each_way_of_comparing():
    names = package_names()
    text = """\
OTHERS = ("mpi",)
def f(kernel, transport, name):
    a = kernel.pattern in ("one-pair", "concurrent-pairs")
    b = transport not in OTHERS
    c = "tcp" != transport
    d = name.startswith(("nccl", "x"))
    match kernel.name:
        case "latency" | "something else":
            pass
    e = {"mpi": 1}["mpi"]  # a lookup, not a comparison
"""
    found = [str(o) for o in offences("report/osu.py", text, names)]
    assert found == [
        "report/osu.py:3: 'one-pair' (pattern name)",
        "report/osu.py:3: 'concurrent-pairs' (pattern name)",
        "report/osu.py:4: 'mpi' (transport name)",
        "report/osu.py:5: 'tcp' (transport name)",
        "report/osu.py:6: 'nccl' (transport name)",
        "report/osu.py:8: 'latency' (kernel name)",
    ]


def test_the_owners():
    names = package_names()
    mpi = 'def f(self, kernel):\n    return self.name == "mpi-rma" or kernel.name == "latency"\n'
    assert offences("transports/mpi/rma.py", mpi, names) == []
    assert [str(o) for o in offences("transports/tcp/transport.py", mpi, names)] == [
        "transports/tcp/transport.py:2: 'mpi-rma' (transport name)"
    ]
    # a transport's folder compares only the kernels its transports run: cuda-copy's d2d is not tcp's
    assert [o.literal for o in offences("transports/tcp/x.py", 'k == "d2d"', names)] == ["d2d"]
    assert offences("transports/gpu/x.py", 'k == "d2d"', names) == []
    # a pattern's file: its pattern's name and its kernels'; the congestion module: the canaries, even allreduce
    pattern_file = names.patterns["all-pairs"]
    assert offences(pattern_file, 'k.pattern == "all-pairs" or k.name == "pairs-bw"', names) == []
    assert offences("measure/congestion.py", 'name == "allreduce"', names) == []
    assert offences("report/congestion.py", 'canary.name == "allreduce"', names) == []
    assert [o.literal for o in offences("report/congestion.py", 'kernel.name == "allreduce"', names)] == ["allreduce"]
