"""What reaches the terminal from a file or the network passes one sanitiser (fabricbench/terminal.py).

A results folder's metadata and cells, a thresholds file's names and an error's quote of any of them are
shown with their escape sequences visible, one line kept one line; the tables written to disk keep the raw
values. A --token's value is masked in an error even where an option parsed before --token quotes it.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fabricbench.cli import main
from fabricbench.terminal import printable, printable_lines

HOSTILE = "x\x1b[2J\x1b[31m\nfabricbench: error: forged\u202e"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("MPICH 4.1", "MPICH 4.1"),
        ("a\nb", "a\\nb"),
        ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),
        ("\r\t\x00\x7f\x9b", "\\r\\t\\x00\\x7f\\x9b"),
        ("\u202eevil\u2028", "\\u202eevil\\u2028"),
        ("µs ±", "µs ±"),
    ],
)
def test_printable_shows_what_a_terminal_would_act_on(text, shown):
    assert printable(text) == shown
    assert printable(text).isprintable()


def test_printable_bounds_long_text_and_keeps_each_line_one_line():
    assert printable("x" * 10_000) == "x" * 253 + "..."
    assert printable("x" * 100, 10) == "x" * 7 + "..."
    assert printable_lines(["# A = a\nb", "", "row"]).splitlines() == ["# A = a\\nb", "", "row"]


def _hostile_run(directory, label: str = HOSTILE) -> str:
    """A results folder whose metadata and cells hold escape sequences and a newline."""
    directory.mkdir()
    rows = {"transport": ["tcp"] * 3, "kernel": ["latency"] * 3, "size_B": [8, 64, 512], "status": ["ok"] * 3}
    frame = pd.DataFrame(rows | {"lat_p50_us": [2.5, 3.0, 4.0], "bw_MBps": [1.0, 2.0, 3.0], "label": [label] * 3})
    frame.to_csv(directory / "results.csv", index=False)
    metadata = {"label": label, "mpi_vendor": HOSTILE, "hosts": [HOSTILE]}
    (directory / "metadata.json").write_text(json.dumps(metadata))
    return str(directory)


def _no_escape(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text
    assert not any(line.startswith("fabricbench: error: forged") for line in text.splitlines()), text


@pytest.mark.filterwarnings("ignore:Glyph")  # the plots draw the raw label: a PNG is no terminal
def test_compare_shows_a_hostile_label_and_vendor_visibly_on_one_line(tmp_path, capsys):
    a, b = _hostile_run(tmp_path / "a"), _hostile_run(tmp_path / "b", "plain")
    out = tmp_path / "cmp"
    assert main(["compare", a, b, "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    _no_escape(shown)
    legend = [line for line in shown.splitlines() if line.startswith("#   A = ")]
    assert len(legend) == 1 and "x\\x1b[2J\\x1b[31m\\nfabricbench: error: forged" in legend[0], shown
    # The table on disk is data: it keeps the raw value.
    assert HOSTILE in pd.read_csv(out / "comparison.csv", keep_default_na=False)["series"].tolist()


def test_model_shows_a_hostile_label_visibly_on_one_line(tmp_path, capsys):
    run = _hostile_run(tmp_path / "a")
    assert main(["model", run, "--project-ranks", "2,4"]) == 0
    shown = capsys.readouterr().out
    _no_escape(shown)
    assert "x\\x1b[2J\\x1b[31m\\nfabricbench: error: forged\\u202e tcp" in shown.splitlines()


def test_check_shows_a_hostile_threshold_name_visibly(tmp_path, capsys):
    run = _hostile_run(tmp_path / "a")
    thresholds = tmp_path / "t.toml"
    thresholds.write_text(
        '[[threshold]]\nname = "evil\\u001b[2J\\nFAIL forged"\ntransport = "tcp"\nkernel = "latency"\n'
        "max_lat_p50_us = 1\n"
    )
    assert main(["check", str(thresholds), run]) == 1
    shown = capsys.readouterr().out
    _no_escape(shown)
    assert "\\x1b[2J\\nFAIL forged" in shown and not any(line.startswith("FAIL forged") for line in shown.splitlines())


def test_an_error_quoting_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "evil\x1b[2J\nfabricbench: error: forged").mkdir()
    assert main(["compare", str(tmp_path / "evil\x1b[2J\nfabricbench: error: forged")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err, err


@pytest.mark.parametrize("spelling", [["--token=SECRET-V"], ["--token", "SECRET-V"]])
def test_a_token_quoted_by_an_option_parsed_before_it_is_masked(capsys, spelling):
    argv = ["run", "--peer", "127.0.0.1:1", "-t", "tcp", "-k", "latency", "-m", "SECRET-V", *spelling]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "SECRET-V" not in err and err.startswith("fabricbench: error: bad message size '***'"), err


@pytest.mark.parametrize("argv", [[], ["--token"], ["run", "--token"]])
def test_a_command_line_with_no_word_or_a_bare_token_flag_is_parsed_not_crashed(capsys, argv):
    """The --token scan runs before parsing: an empty command line, or --token with no value after it, is left to
    argparse's one line (exit 2), never a traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip(), err
