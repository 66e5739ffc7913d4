"""The docs cannot drift: README.md's and docs/'s runnable blocks run, and every path and link they name exists.

A block marked ``<!-- runnable -->`` runs as written (``bash -eo pipefail``), in a scratch folder with this venv's
bin first on PATH and the repository's examples/ and scripts/ linked in, its own process group killed after it
(a ``serve`` it left in the background too). The blocks keep their sizes small: all of them run in well under a
minute. tests/docs_scan.py finds the blocks, the paths and the links (tested in tests/unit/test_docs_scan.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

import docs_scan
from support import BIN, REPO, clean_env

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
RUNNABLE = [
    pytest.param(page, block, id=f"{page.relative_to(REPO)}:{block.line}")
    for page in PAGES
    for block in docs_scan.runnable_blocks(page.read_text(encoding="utf-8"))
]
IDS = [str(page.relative_to(REPO)) for page in PAGES]


def test_there_are_runnable_blocks_in_the_readme_and_the_docs():
    pages = {param.values[0] for param in RUNNABLE}
    assert REPO / "README.md" in pages
    assert any(page.is_relative_to(REPO / "docs") for page in pages)


@pytest.mark.parametrize(("page", "block"), RUNNABLE)
def test_runnable_block_exits_0(page, block, tmp_path):
    for name in ("examples", "scripts"):
        (tmp_path / name).symlink_to(REPO / name)
    env = clean_env(
        {
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "FABRICBENCH_OSU_RESULTS": str(tmp_path / "osu-results"),  # the shims' tables, not under $HOME
        }
    )
    proc = subprocess.Popen(
        ["bash", "-eo", "pipefail", "-c", block.text],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        out = "(timed out after 180 s)"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever the block left running (a serve in the background)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, f"{page.relative_to(REPO)} line {block.line}: exit {proc.returncode}\n{out[-4000:]}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_path_a_page_names_is_in_the_tree(page):
    missing = docs_scan.missing(page.read_text(encoding="utf-8"), REPO)
    assert missing == [], f"{page.relative_to(REPO)} names paths that are not in the tree: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_points_at_something(page):
    broken = docs_scan.broken_links(page.read_text(encoding="utf-8"), page)
    assert broken == [], f"{page.relative_to(REPO)} links what is not there: {broken}"


def _build(root, site):
    """``mkdocs build --strict`` of the site at ``root`` (not ``--quiet``: it hides the warnings strict counts)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    mkdocs = shutil.which("mkdocs", path=str(BIN)) or shutil.which("mkdocs")
    command = [mkdocs] if mkdocs else [sys.executable, "-m", "mkdocs"]
    return subprocess.run(
        [*command, "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env({"NO_MKDOCS_2_WARNING": "1"}),
    )


def test_the_site_builds_in_strict_mode(tmp_path):
    """What .ci/run does after installing the docs extra; skipped where MkDocs is not installed."""
    result = _build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    table = (tmp_path / "site" / "table" / "index.html").read_text(encoding="utf-8")
    assert "<code>busbw_GBps</code>" in table  # the columns were written from the schema
    assert (tmp_path / "site" / "benchmarks" / "runs").is_dir()  # the validation pages' runs came along
    # Python-Markdown wants a blank line before a list and four spaces for what nests in one; a page written
    # to GitHub's lazier rules renders its list as a paragraph of "- " lines.
    flat = [
        f"{page.relative_to(tmp_path / 'site')}: {line.strip()[:80]}"
        for page in (tmp_path / "site").rglob("*.html")
        for paragraph in re.findall(r"<p>(.*?)</p>", page.read_text(encoding="utf-8"), re.S)
        for line in paragraph.splitlines()
        if re.match(r"(- |\| |\d+\. )", re.sub(r"<[^>]+>", "", line).strip())
    ]
    assert flat == [], "lists or tables rendered as text:\n" + "\n".join(flat)


def test_a_column_without_its_meaning_fails_the_build(tmp_path):
    """The table's page cannot fall behind the schema: a copy of the site whose columns.toml lost a line."""
    root = tmp_path / "tree"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root)
    for name in ("src", "benchmarks", "results"):  # what the hook reads, and the files the pages link
        (root / name).symlink_to(REPO / name)
    columns = root / "docs" / "hooks" / "columns.toml"
    columns.write_text("".join(line for line in columns.read_text().splitlines(True) if not line.startswith("hops ")))
    result = _build(root, tmp_path / "site")
    assert result.returncode != 0
    assert "no meaning for the table's column 'hops'" in result.stderr
