"""MkDocs hook: the pages' parts that the code already says, written from the code at build time.

A page holds a marker line, ``<!-- generated: NAME -->``, and the build puts in its place:

- ``columns``: the tidy table's columns, in order, from ``fabricbench.measure.schema`` (kind and unit from the
  schema, meaning from docs/hooks/columns.toml); a column without a meaning there, or a meaning for a column the
  schema lacks, is a warning, which ``mkdocs build --strict`` turns into a failed build;
- ``cli``: every command's ``--help``, as argparse prints it from ``fabricbench.cli.build_parser``;
- ``cloops``: the C timed loops in the tree (``transports/*/_*.c``) and the headers beside each;
- ``kernels``: every kernel (``fabricbench.measure.kernels.KERNELS``), its pattern and the transports that run it;
- ``osu``: the OSU programs ``fabricbench osu-shims`` writes (``fabricbench.launch.osu_shims.BENCHMARKS``), what
  each runs and the OSU options it honours;
- ``transports``: the transport registry (``fabricbench.transports.TRANSPORTS``) with each transport's kernels,
  capabilities, option groups and whether it needs a launcher;
- ``patterns``: the pattern registry (``fabricbench.run.patterns.PATTERNS``) with the capability each asks for and
  its kernels.

It also lets a page link a file of the repository outside docs/ by its path in the tree (``../benchmarks/runs/X``
from docs/validation/X.md reads ``../../benchmarks/runs/X``): the link works where the Markdown is read in the
repository, and the build copies the file into the site and rewrites the link to that copy. A link to a file that
is not in the tree is a warning, so a strict build fails on it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.fabricbench")
REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
# A Markdown link or image whose target is relative: ](target) or ](target "title").
LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\))")


def _import_fabricbench():
    """The fabricbench of this tree, whatever else the Python that runs mkdocs has installed."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import fabricbench

    return fabricbench


def _kind(column: str, schema) -> str:
    if column in schema.INTEGER:
        return "integer"
    if column in schema.RATIOS:
        return "ratio"
    for suffix, unit in (("_us", "µs"), ("_MBps", "MB/s (10^6 B/s)"), ("_GBps", "GB/s (10^9 B/s)")):
        if column.endswith(suffix):
            return f"number, {unit}"
    if column.endswith("_per_s"):
        return "number, per second"
    return "text"


def columns_markdown() -> str:
    _import_fabricbench()
    from fabricbench.measure import schema

    meanings = tomllib.loads((Path(__file__).parent / "columns.toml").read_text())
    for column in schema.COLUMNS:
        if column not in meanings:
            log.warning("docs/hooks/columns.toml has no meaning for the table's column %r (measure/schema.py)", column)
    for column in meanings:
        if column not in schema.COLUMNS:
            log.warning("docs/hooks/columns.toml describes %r, which measure/schema.py's COLUMNS lacks", column)
    lines = [
        f"Schema version **{schema.SCHEMA_VERSION}** (`metadata.json`'s `schema_version`): "
        f"{len(schema.COLUMNS)} columns, in this order.",
        "",
        "| column | kind | meaning | in tables before |",
        "|---|---|---|---|",
    ]
    for column in schema.COLUMNS:
        older = "blank" if column in schema.OPTIONAL else ""
        if column in schema.OPTIONAL_NUMERIC:
            older = "NaN"
        meaning = " ".join(str(meanings.get(column, "")).split()).replace("|", "\\|")
        lines.append(f"| `{column}` | {_kind(column, schema)} | {meaning} | {older} |")
    lines += [
        "",
        "*in tables before*: what a row of an older table that lacks the column reads as (`compare`, `check` and "
        "`model` migrate older tables on read and say so).",
    ]
    return "\n".join(lines) + "\n"


def cli_markdown() -> str:
    _import_fabricbench()
    from fabricbench.cli import build_parser

    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps its help to the terminal's width; the page's is fixed
    try:
        parser = build_parser()
        parts = ["## fabricbench", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, sub in parser.commands.items():
            parts += [f"## fabricbench {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width
    return "\n".join(parts)


def transports_markdown() -> str:
    _import_fabricbench()
    from fabricbench.transports import TRANSPORTS, capabilities, transport_class, transport_groups

    protocols = [capabilities.PairCases, capabilities.Routes, capabilities.CongestionCases, capabilities.SelfTimed]
    lines = [
        "| transport | class | kernels | in the default sweep | capabilities | option groups | needs a launcher |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (module, cls_name) in TRANSPORTS.items():
        cls = transport_class(name)
        path = module.replace(".", "/")
        caps = ", ".join(f"`{p.__name__}`" for p in protocols if issubclass(cls, p)) or "—"
        groups = ", ".join(f"`{g.name}`" for g in transport_groups(cls) if g.name) or "—"
        kernels = " ".join(f"`{k}`" for k in sorted(cls.kernels))
        default = " ".join(f"`{k}`" for k in cls.default_kernels) or "—"
        lines.append(
            f"| `{name}` | `{cls_name}` in `src/{path}.py` | {kernels} | {default} | {caps} | {groups} | "
            f"{'yes' if cls.needs_launcher else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def patterns_markdown() -> str:
    _import_fabricbench()
    from fabricbench.run.patterns import PATTERNS, kernels_of

    lines = ["| pattern | class | capability asked of a transport | kernels |", "|---|---|---|---|"]
    for name, pattern in PATTERNS.items():
        capability = f"`{pattern.capability.__name__}`" if pattern.capability else "— (`Transport.case`)"
        kernels = " ".join(f"`{k}`" for k in kernels_of(pattern) if _pattern_name(k) == name)
        lines.append(f"| `{name}` | `{pattern.__name__}` | {capability} | {kernels} |")
    return "\n".join(lines) + "\n"


def _pattern_name(kernel: str) -> str:
    from fabricbench.measure.kernels import get_kernel

    return get_kernel(kernel).pattern


def osu_markdown() -> str:
    _import_fabricbench()
    from fabricbench.launch import osu_shims

    lines = ["| OSU program | runs | OSU options it honours (besides -h, -v) |", "|---|---|---|"]
    for name, bench in osu_shims.BENCHMARKS.items():
        transport, kernel = getattr(bench, "transport", None), getattr(bench, "kernel", None)
        if not (transport and kernel):
            log.warning("osu_shims.BENCHMARKS[%r] names no transport and kernel for docs/osu.md's table", name)
        letters = " ".join(f"`-{c}`" for c in getattr(bench, "letters", "") if c not in "hv")
        lines.append(f"| `{name}` | `-t {transport} -k {kernel}` | {letters} |")
    return f"{len(osu_shims.BENCHMARKS)} programs of OSU {osu_shims.OSU_VERSION}:\n\n" + "\n".join(lines) + "\n"


def cloops_markdown() -> str:
    loops = sorted((SRC / "fabricbench" / "transports").glob("*/_*.c"))
    lines = ["| fabric | C loop | beside it |", "|---|---|---|"]
    for loop in loops:
        headers = " ".join(f"`{h.name}`" for h in sorted(loop.parent.glob("_*.h"))) or "—"
        lines.append(f"| `{loop.parent.name}` | `{loop.relative_to(REPO).as_posix()}` | {headers} |")
    return "\n".join(lines) + "\n"


def kernels_markdown() -> str:
    _import_fabricbench()
    from fabricbench.measure.kernels import KERNELS
    from fabricbench.transports import TRANSPORTS, transport_class

    runs = {name: transport_class(name).kernels for name in TRANSPORTS}
    lines = ["| kernel | pattern | transports that run it |", "|---|---|---|"]
    for name, kernel in KERNELS.items():
        transports = " ".join(f"`{t}`" for t, kernels in runs.items() if name in kernels) or "—"
        lines.append(f"| `{name}` | `{kernel.pattern}` | {transports} |")
    return "\n".join(lines) + "\n"


GENERATORS = {
    "cloops": cloops_markdown,
    "kernels": kernels_markdown,
    "osu": osu_markdown,
    "columns": columns_markdown,
    "cli": cli_markdown,
    "transports": transports_markdown,
    "patterns": patterns_markdown,
}


def _outside_docs(page_src: str, target: str, docs_dir: Path) -> str | None:
    """The repository path a page's relative link names, when it leaves docs/ (else None)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None  # a URL or an absolute path
    where = posixpath.normpath(posixpath.join(posixpath.dirname(page_src), target))
    if not where.startswith("../"):
        return None
    repo_path = (docs_dir / where).resolve()
    try:
        return repo_path.relative_to(REPO).as_posix()
    except ValueError:
        return None


def on_files(files, config):
    """Copy into the site every file of the tree that a page links outside docs/ (and warn on those missing)."""
    docs_dir = Path(config["docs_dir"])
    wanted: set[str] = set()
    for page in docs_dir.rglob("*.md"):
        src = page.relative_to(docs_dir).as_posix()
        for m in LINK.finditer(page.read_text(encoding="utf-8")):
            repo_path = _outside_docs(src, m.group(2), docs_dir)
            if repo_path is None:
                continue
            if (REPO / repo_path).is_file():
                wanted.add(repo_path)
            else:
                log.warning("docs/%s links %s, which is not a file in the tree", src, m.group(2))
    for repo_path in sorted(wanted):
        if files.get_file_from_path(repo_path) is None:
            files.append(File.generated(config, repo_path, abs_src_path=str(REPO / repo_path)))
    return files


def on_page_markdown(markdown, page, config, files):
    def generate(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            log.warning("%s: no generator named %r", page.file.src_uri, name)
            return m.group(0)
        return GENERATORS[name]()

    markdown = MARKER.sub(generate, markdown)
    docs_dir = Path(config["docs_dir"])
    page_dir = posixpath.dirname(page.file.src_uri)

    def relink(m: re.Match) -> str:
        repo_path = _outside_docs(page.file.src_uri, m.group(2), docs_dir)
        if repo_path is None:
            return m.group(0)
        return m.group(1) + posixpath.relpath(repo_path, page_dir or ".") + m.group(3)

    return LINK.sub(relink, markdown)
