"""The pieces tests/test_docs.py reads the pages with: runnable blocks, repository paths and relative links."""

from __future__ import annotations

from pathlib import Path

import pytest

import docs_scan

REPO = Path(__file__).resolve().parents[2]

PAGE = """# A page

<!-- runnable -->
```sh
fabricbench run -k latency -m 8:64
```

```sh
fabricbench run -k bw     # not marked: shown, not run
```

  <!-- runnable -->
  ```bash
  echo indented, in a list
  ```
"""


def test_only_marked_shell_blocks_are_runnable():
    runnable = docs_scan.runnable_blocks(PAGE)
    assert [(b.line, b.info, b.text) for b in runnable] == [
        (4, "sh", "fabricbench run -k latency -m 8:64\n"),
        (13, "bash", "echo indented, in a list\n"),
    ]
    assert len(docs_scan.blocks(PAGE)) == 3


def test_a_marked_block_that_is_not_shell_is_refused():
    with pytest.raises(ValueError, match=r"line 2: a runnable block must be ```sh or ```bash, not ```toml"):
        docs_scan.runnable_blocks("<!-- runnable -->\n```toml\n[a]\n```\n")


def test_a_fence_inside_a_block_of_a_longer_fence_does_not_close_it():
    text = "````md\n```sh\nnot a block\n```\n````\n<!-- runnable -->\n```sh\ntrue\n```\n"
    found = docs_scan.blocks(text)
    assert [b.info for b in found] == ["md", "sh"]
    assert found[1].runnable


def test_paths_found_in_prose_and_code_with_output_folders_left_out():
    text = (
        "See `src/fabricbench/cli.py`, scripts/netns-testbed.sh, (`benchmarks/runs/method_choice-*`).\n"
        "The loop: `transports/tcp/_tcploop.c`; runs in `results/RUN` and `results/<run-id>/`, examples in\n"
        "`results/examples/bisection-leaf-spine-{full,shaped}/`; `tests/NAME.py` is a placeholder.\n"
        "`fabricbench/terminal.py`, and .ci/run.\n"
    )
    assert docs_scan.paths(text) == [
        "src/fabricbench/cli.py",
        "scripts/netns-testbed.sh",
        "benchmarks/runs/method_choice-*",
        "transports/tcp/_tcploop.c",
        "results/examples/bisection-leaf-spine-{full,shaped}/",
        "fabricbench/terminal.py",
        ".ci/run",
    ]


def test_paths_resolve_against_the_tree():
    assert docs_scan.resolves("transports/tcp/_tcploop.c", REPO)  # under src/fabricbench/
    assert docs_scan.resolves("fabricbench/terminal.py", REPO)
    assert docs_scan.resolves("benchmarks/runs/method_choice-*", REPO)
    assert docs_scan.resolves("results/examples/bisection-leaf-spine-{full,shaped}/", REPO)
    # The drift this guards against: the tcp loop moved into its fabric's folder.
    assert not docs_scan.resolves("src/fabricbench/_tcploop.c", REPO)
    assert not docs_scan.resolves("results/examples/bisection-leaf-spine-{full,gone}/", REPO)
    assert docs_scan.missing("the loop is src/fabricbench/_tcploop.c, the builder transports/cbuild.py", REPO) == [
        "src/fabricbench/_tcploop.c"
    ]


def test_relative_links_outside_code_and_urls_left_out(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("x")
    text = (
        "[there](docs/there.md#part) ![pic](docs/missing.png) [web](https://example.org/x) [self](#anchor)\n"
        "`[not a link](nowhere.md)`\n```md\n[in code](nowhere.md)\n```\n"
    )
    assert docs_scan.links(text) == ["docs/there.md", "docs/missing.png"]
    assert docs_scan.broken_links(text, tmp_path / "README.md") == ["docs/missing.png"]
