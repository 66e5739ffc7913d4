"""What tests/test_docs.py reads in README.md and docs/: the command blocks marked runnable and the repository paths.

Pure functions over a page's text, so tests/unit checks them without a process.

A block is runnable when the line before its opening fence is ``<!-- runnable -->``; its commands then run, as
written, in a scratch folder that links the repository's examples/ and scripts/ (tests/test_docs.py).
A path is any word that starts with one of the repository's top folders (``src/``, ``scripts/``, ``benchmarks/``,
``tests/``, ``examples/``, ``docs/``, ``.ci/``, ``results/examples/``) or with a folder of the package
(``transports/``, ``measure/``, ...: read under src/fabricbench/), with ``*`` globs and ``{a,b}`` alternatives
expanded. Other ``results/...`` words are output folders a reader makes (``results/RUN``) and are not checked.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

RUNNABLE = "<!-- runnable -->"
TOP = ("src/", "scripts/", "benchmarks/", "tests/", "examples/", "docs/", ".ci/", "results/examples/")
# Folders of src/fabricbench/ that pages name without the prefix (``transports/tcp/_tcploop.c``).
PACKAGE = ("analysis/", "launch/", "run/", "report/", "transports/", "measure/", "collectives/", "control/")
PACKAGE_ROOT = "src/fabricbench/"
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
# A path-like word: letters, digits and . _ - / * { } , (alternatives); it ends before punctuation that closes prose.
_WORD = re.compile(r"(?<![\w/.$~-])((?:\.ci|[a-z_]+)/[\w.*{},/<>+-]*)")
_PLACEHOLDER = re.compile(r"[<>]|\b[A-Z]{2,}\b")  # results/<run-id>/, tests/NAME: a placeholder, not a path


@dataclass(frozen=True)
class Block:
    """One fenced code block: the page's line where its fence opens, its info string and its text."""

    line: int
    info: str
    text: str
    runnable: bool


def blocks(text: str) -> list[Block]:
    """Every fenced code block of a Markdown page, with whether the line before its fence marks it runnable."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        body = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and lines[j].strip().strip(fence[0]) == ""):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        marked = i > 0 and lines[i - 1].strip() == RUNNABLE
        found.append(Block(i + 1, info.strip(), "\n".join(body) + "\n", marked))
        i = j + 1
    return found


def runnable_blocks(text: str) -> list[Block]:
    """The blocks marked runnable; a marked block must be a shell block (``sh`` or ``bash``)."""
    marked = [b for b in blocks(text) if b.runnable]
    for b in marked:
        if b.info.split()[:1] not in (["sh"], ["bash"]):
            raise ValueError(f"line {b.line}: a runnable block must be ```sh or ```bash, not ```{b.info}")
    return marked


def _expand(word: str) -> list[str]:
    """``a/{b,c}/d`` as ``a/b/d`` and ``a/c/d`` (one level of alternatives, as the pages write them)."""
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [alt for part in m.group(1).split(",") for alt in _expand(word[: m.start()] + part + word[m.end() :])]


def paths(text: str) -> list[str]:
    """The repository paths a page names, as written (globs and alternatives unexpanded), in order, once each."""
    seen: dict[str, None] = {}
    for m in _WORD.finditer(text):
        word = m.group(1).rstrip(".,;:)")
        if _PLACEHOLDER.search(word) or not word.startswith(TOP + PACKAGE + ("fabricbench/", "results/")):
            continue
        if word.startswith("results/") and not word.startswith("results/examples/"):
            continue  # an output folder the reader makes (results/RUN, results/a)
        seen.setdefault(word, None)
    return list(seen)


def resolves(word: str, repo: Path) -> bool:
    """Whether a path a page names is in the tree (a glob: matches something; alternatives: each one does)."""
    for candidate in _expand(word):
        if candidate.startswith("fabricbench/"):
            rel = "src/" + candidate
        else:
            rel = candidate if candidate.startswith(TOP) else PACKAGE_ROOT + candidate
        if not glob.glob(str(repo / rel)):
            return False
    return True


def missing(text: str, repo: Path) -> list[str]:
    """The paths a page names that are not in the tree."""
    return [w for w in paths(text) if not resolves(w, repo)]


# A Markdown link or image: [text](target) or ![alt](target "title"); the target up to a space, ) or #.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s#]*)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> list[str]:
    """The relative link targets of a page (not URLs, not anchors on the page itself), outside code blocks."""
    code = {n for b in blocks(text) for n in range(b.line, b.line + b.text.count("\n") + 2)}
    prose = "\n".join(line for n, line in enumerate(text.splitlines(), 1) if n not in code)
    prose = re.sub(r"`[^`\n]*`", "", prose)  # inline code spans
    found = []
    for m in _LINK.finditer(prose):
        target = m.group(1)
        if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("/"):
            found.append(target)
    return found


def broken_links(text: str, page: Path) -> list[str]:
    """The relative links of a page (at ``page`` in the tree) that point at nothing."""
    return [t for t in links(text) if not (page.parent / t).exists()]
