"""``fabricbench check``'s pure parts: the thresholds file read and judged against hand-built rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fabricbench.analysis.thresholds import (
    Threshold,
    judge,
    junit_cases,
    parse_size,
    parse_thresholds,
    read_thresholds,
    summary,
    write_junit,
)
from fabricbench.errors import UsageError
from fabricbench.measure.topology import parse_slurm

REPO = Path(__file__).resolve().parents[2]
TRANSPORTS = ["mpi", "tcp", "verbs"]
KERNELS = ["latency", "bw", "allreduce", "pairs-bw"]


def parse(text: str) -> list[Threshold]:
    return parse_thresholds(text, "t.toml", TRANSPORTS, KERNELS)


def fault(text: str) -> str:
    with pytest.raises(UsageError) as caught:
        parse(text)
    return str(caught.value)


def row(transport="mpi", kernel="latency", size=8, **fields) -> dict:
    base = {
        "transport": transport,
        "kernel": kernel,
        "size_B": float(size),
        "buffer": "host",
        "status": "ok",
        "validation": "off",
        "repeat": "0",
        "lat_p50_us": math.nan,
        "bw_MBps": math.nan,
        "src_host": "",
        "dst_host": "",
    }
    return base | fields


def test_a_file_of_thresholds_reads_names_sizes_and_limits():
    found = parse(
        """
# comment
[[threshold]]
transport = "mpi"
kernel = ["latency", "bw"]
size = 8
max_lat_p50_us = 50
min_bw_MBps = 100.5

[[threshold]]
name = "streams"
transport = ["tcp", "mpi"]
kernel = "pairs-bw"
size = "64K:"
min_bw_MBps = 50
optional = true
"""
    )
    first, second = found
    assert (first.index, first.line, first.transports, first.kernels) == (1, 3, ("mpi",), ("latency", "bw"))
    assert (first.size_min, first.size_max) == (8, 8)
    assert [(lim.name, lim.value) for lim in first.limits] == [("max_lat_p50_us", 50.0), ("min_bw_MBps", 100.5)]
    assert (second.line, second.size_min, second.size_max, second.optional) == (10, 65536, None, True)
    assert second.where == "streams (threshold 2, line 10)" and second.scope == "tcp,mpi pairs-bw 64 KiB and up"


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, (0, 0)),
        ("1M", (1 << 20, 1 << 20)),
        ("4K:1M", (4096, 1 << 20)),
        (":8K", (None, 8192)),
        ("1G:", (1 << 30, None)),
    ],
)
def test_sizes_are_bytes_counts_or_open_ranges(size, expected):
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", [-1, 1.5, True, "1Q", "8K:4K", "a:b", [8]])
def test_a_bad_size_says_what_a_size_is(size):
    with pytest.raises(ValueError, match="byte count|backwards"):
        parse_size(size)


def test_a_syntax_error_names_its_line_and_column():
    message = fault('[[threshold]]\ntransport = "mpi"\nkernel = latency\n')
    assert message.startswith("t.toml: not valid TOML:") and "line 3" in message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            '[[threshold]]\ntransport = "mpi"\nkernel = "latency"\nmin_bw_MBs = 5\n',
            4,
            "field 'min_bw_MBs': unknown field",
        ),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "latency"\nmax_lat_p50_us = "fast"\n', 4, "must be a number"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "latency"\nmax_lat_p50_us = -1\n', 4, "0 or more"),
        ('[[threshold]]\ntransport = "ib"\nkernel = "latency"\nmax_lat_p50_us = 1\n', 2, "unknown transport 'ib'"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = []\nmax_lat_p50_us = 1\n', 3, "field 'kernel'"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\nsize = "1Q"\nmin_bw_MBps = 1\n', 4, "field 'size'"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\noptional = "yes"\nmin_bw_MBps = 1\n', 4, "true or false"),
        ('[[threshold]]\ntransport = "mpi"\nmin_bw_MBps = 1\n', 1, "field 'kernel' is missing"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\n', 1, "no limit"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\nmin_bw_MBps = 1\n[extra]\nx = 1\n', 5, "'extra': unknown"),
        ('[threshold]\ntransport = "mpi"\nkernel = "bw"\nmin_bw_MBps = 1\n', 1, "write [[threshold]]"),
        ('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\nbuffer = "gpu"\nmin_bw_MBps = 1\n', 4, "host, cuda"),
    ],
)
def test_a_bad_field_names_its_line_and_the_field(text, line, words):
    message = fault(text)
    assert message.startswith(f"t.toml: line {line}: ") and words in message, message


def test_the_second_table_of_a_file_is_found_by_its_own_header():
    text = '[[threshold]]\ntransport = "mpi"\nkernel = "bw"\nmin_bw_MBps = 1\n\n[[threshold]]\ntransport = "mpi"\n'
    message = fault(text + 'kernel = "bw"\nmin_bw_MBps = 1\nmax_bw_MBps = "x"\n')
    assert message.startswith("t.toml: line 10: threshold 2, field 'max_bw_MBps'"), message


def test_a_close_misspelling_is_suggested():
    assert "did you mean 'min_bw_MBps'" in fault('[[threshold]]\ntransport = "mpi"\nkernel = "bw"\nmin_bw_mbps = 1\n')


def test_an_empty_file_checks_nothing_and_is_refused():
    assert "holds no [[threshold]] table" in fault("# nothing\n")


HEAD = '[[threshold]]\ntransport = "mpi"\nkernel = "latency"\n'


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (HEAD + "max_lat_p50_us = " + "9" * 400 + "\n", "t.toml: line 4: a number of more than 40 digits"),
        (HEAD + "max_lat_p50_us = " + "9" * 5000 + "\n", "t.toml: line 4: a number of more than 40 digits"),
        (HEAD + "max_lat_p50_us = 0x" + "f" * 400 + "\n", "t.toml: a number of more than 40 digits"),
        (HEAD + "name = " + "[" * 50_000 + "]" * 50_000 + "\n", "t.toml: line 4: arrays or tables nested more than 16"),
        (HEAD + "name = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "t.toml: line 4: arrays or tables nested more"),
        (HEAD + "name." + ".".join(["a"] * 3000) + " = 1\n", "t.toml: arrays or tables nested more than 16 deep"),
        ("[" + ".".join(["a"] * 3000) + "]\nx = 1\n", "t.toml: arrays or tables nested more than 16 deep"),
    ],
    ids=["400 digits", "5000 digits", "400 hex digits", "arrays 50,000 deep", "inline tables 3,000 deep",
         "dotted keys 3,000 deep", "a header 3,000 deep"],
)  # fmt: skip
def test_a_file_past_the_depth_or_digit_bounds_is_one_line(text, words):
    message = fault(text)
    assert message.startswith(words) and "\n" not in message, message


def test_brackets_and_digits_in_strings_and_comments_are_not_counted():
    deep, long = "[" * 40, "9" * 60
    text = HEAD + f'name = "{deep} {long}" # {deep} {long}\nmax_lat_p50_us = 5\n'
    text += f'[[threshold]]\ntransport = \'mpi\'\nkernel = \'bw\'\nname = """\n{deep}\n{long}"""\nmin_bw_MBps = 1\n'
    first, second = parse(text)
    assert first.name == f"{deep} {long}" and first.limits[0].value == 5
    assert second.name == f"{deep}\n{long}" and second.limits[0].value == 1
    assert parse(HEAD + "max_lat_p50_us = " + "9" * 40 + "\n")[0].limits[0].value == pytest.approx(1e40)


def test_the_shipped_examples_parse():
    for path in sorted((REPO / "examples" / "thresholds").glob("*.toml")):
        assert read_thresholds(str(path)), path


def thresholds(text: str) -> list[Threshold]:
    return parse(f'[[threshold]]\ntransport = "mpi"\n{text}\n')


def test_rows_within_their_limits_pass_with_the_worst_figure():
    found = thresholds('kernel = "latency"\nsize = ":1K"\nmax_lat_p50_us = 10')
    verdict = judge(found, [row(size=8, lat_p50_us=2.0), row(size=1024, lat_p50_us=4.5), row(size=4096, lat_p50_us=99)])
    assert verdict.failures == 0 and verdict.rows_checked == 2
    assert verdict.lines == [
        "ok   threshold 1, line 1: mpi latency 0 B-1 KiB, max_lat_p50_us 10: 2 rows pass (worst 4.5)"
    ]
    assert summary(verdict, 1) == "check: pass: 2 rows checked against 1 thresholds"


def test_each_failing_row_gets_a_line_with_what_was_expected_and_measured():
    found = thresholds('kernel = "bw"\nmin_bw_MBps = 100')
    verdict = judge(found, [row(kernel="bw", size=1 << 20, bw_MBps=12.0), row(kernel="bw", size=64, bw_MBps=500.0)])
    assert verdict.failures == 1
    assert verdict.lines[1] == "  FAIL mpi bw 1 MiB: bw_MBps 12, expected >= 100"
    assert summary(verdict, 1).startswith("check: FAIL: 1 failing lines")


def test_a_threshold_that_covers_no_row_fails_unless_optional():
    rows = [row(lat_p50_us=1.0)]
    verdict = judge(thresholds('kernel = "bw"\nmin_bw_MBps = 1'), rows)
    assert verdict.failures == 1 and "covers no row; nothing was checked" in verdict.lines[0]
    verdict = judge(thresholds('kernel = "bw"\nmin_bw_MBps = 1\noptional = true'), rows)
    assert verdict.failures == 0 and verdict.warnings == 1 and verdict.lines[0].startswith("warn")
    assert summary(verdict, 1) == "check: FAIL: 0 rows checked against 1 thresholds; 1 warnings: nothing was checked"


def test_unsupported_rows_and_failed_validation_do_not_pass():
    found = thresholds('kernel = "latency"\nmax_lat_p50_us = 10')
    verdict = judge(found, [row(status="unsupported: no zero-byte message")])
    assert verdict.failures == 1 and "only rows that were not measured (unsupported" in verdict.lines[0]
    verdict = judge(found, [row(lat_p50_us=1.0, validation="fail")])
    assert verdict.failures == 2  # the row's data, and then no row left with a figure
    assert "received data failed validation" in verdict.lines[0]


def pair(src: str, dst: str, bw: float) -> dict:
    ranks = {"h1": 0, "h2": 1, "h3": 2, "h4": 3}
    return row(
        transport="tcp",
        kernel="pairs-bw",
        size=1 << 20,
        bw_MBps=bw,
        schedule="isolated",
        src_host=src,
        dst_host=dst,
        src_rank=str(ranks[src]),
        dst_rank=str(ranks[dst]),
    )


def matrix(slow: set[tuple[str, str]]) -> list[dict]:
    hosts = ["h1", "h2", "h3", "h4"]
    return [pair(a, b, 12.0 if (a, b) in slow else 900.0) for a in hosts for b in hosts if a != b]


PAIRS = parse('[[threshold]]\ntransport = "tcp"\nkernel = "pairs-bw"\nmin_bw_MBps = 50\n')


def test_one_slow_pair_is_named_and_no_host():
    verdict = judge(PAIRS, matrix({("h1", "h3"), ("h3", "h1")}))
    failing = [line.strip() for line in verdict.lines if line.startswith("  FAIL")]
    assert failing == [
        "FAIL tcp pairs-bw 1 MiB h1 -> h3 (ranks 0 -> 2, isolated): bw_MBps 12, expected >= 50",
        "FAIL tcp pairs-bw 1 MiB h3 -> h1 (ranks 2 -> 0, isolated): bw_MBps 12, expected >= 50",
    ]


def test_a_host_whose_pairs_mostly_fail_is_named_once_instead_of_its_pairs():
    slow = {("h2", peer) for peer in ("h1", "h3", "h4")}  # h2's own egress is slow: every pair from it
    verdict = judge(PAIRS, matrix(slow))
    failing = [line.strip() for line in verdict.lines if line.startswith("  FAIL")]
    assert failing == [
        "FAIL host h2: tcp pairs-bw 1 MiB (isolated): pairs with 3 of its 3 peers fail (h[1,3-4]); "
        "bw_MBps median 456, expected >= 50"
    ]
    assert verdict.failures == 1


def test_a_host_is_named_with_two_peers_and_a_majority_failing():
    two = judge(PAIRS, [pair("h1", "h2", 1.0), pair("h2", "h1", 900.0)])
    # one link: a slow link and a slow host look alike, so the pair is named
    assert [line.strip() for line in two.lines[1:]] == [
        "FAIL tcp pairs-bw 1 MiB h1 -> h2 (ranks 0 -> 1, isolated): bw_MBps 1, expected >= 50"
    ]
    found = judge(PAIRS, matrix({("h1", "h2"), ("h1", "h3")}))
    assert [line.split(":")[0].strip() for line in found.lines[1:]] == ["FAIL host h1"]


def test_min_link_pct_limited_to_a_tier_holds_each_tiers_pairs_to_their_share_of_the_link():
    # Two switches; every host's link carries 1000 MB/s; pairs across the switches share an oversubscribed uplink.
    fabric = parse_slurm("SwitchName=s1 Nodes=h[1-2]\nSwitchName=s2 Nodes=h[3-4]\nSwitchName=top Switches=s[1-2]", "t")
    rows = [
        dict(found, link_MBps=1000.0, link_pct=found["bw_MBps"] / 10)
        for found in matrix({(a, b) for a in ("h1", "h2") for b in ("h3", "h4")} | {("h3", "h1"), ("h4", "h1")})
    ]  # 12 MB/s across the switches (1.2 %), 900 within a switch (90 %)

    def verdict(limits: str):
        return judge(parse(f'[[threshold]]\ntransport = "tcp"\nkernel = "pairs-bw"\n{limits}\n'), rows, fabric)

    within = verdict('tier = "same-switch"\nmin_link_pct = 85')
    assert within.failures == 0 and within.lines[0].endswith("min_link_pct 85: 4 rows pass (worst 90)"), within.lines
    across = verdict('tier = "cross-switch"\nmin_link_pct = 1')  # the same file, a floor for the slower tier
    assert across.failures == 0 and across.lines[0].endswith("min_link_pct 1: 8 rows pass (worst 1.2)"), across.lines
    every = verdict("min_link_pct = 85")
    assert every.lines[0].endswith("min_link_pct 85: 6 of 12 rows fail"), every.lines


def outcomes(cases) -> list[tuple[str, list[str], str]]:
    return [(case.name, case.failures, case.skipped) for case in cases]


def test_junit_has_a_case_per_covered_row_failing_with_its_measured_and_allowed_figures():
    (found,) = thresholds('kernel = ["latency", "bw"]\nsize = ":1K"\nmax_lat_p50_us = 10')
    rows = [row(size=8, lat_p50_us=2.0), row(size=1024, lat_p50_us=40.0), row(kernel="bw", size=64, bw_MBps=9.0)]
    cases = junit_cases(found, [*rows, row(size=4096, lat_p50_us=99)])
    assert outcomes(cases) == [
        ("mpi latency 8 B", [], ""),
        ("mpi latency 1 KiB", ["mpi latency 1 KiB: lat_p50_us 40, expected <= 10"], ""),
        ("mpi bw 64 B", [], "mpi bw 64 B: has no lat_p50_us"),  # covered, but nothing to hold it to
    ]
    assert cases[1].kinds == ["max_lat_p50_us"]


def test_junit_fails_a_threshold_that_covers_nothing_and_skips_it_when_optional():
    rows = [row(lat_p50_us=1.0)]
    (case,) = junit_cases(thresholds('kernel = "bw"\nmin_bw_MBps = 1')[0], rows)
    assert case.failures == ["mpi bw every size: covers no row; nothing was checked"] and not case.skipped
    (case,) = junit_cases(thresholds('kernel = "bw"\nmin_bw_MBps = 1\noptional = true')[0], rows)
    assert case.skipped and not case.failures
    (case,) = junit_cases(thresholds('kernel = "latency"\nmax_lat_p50_us = 1')[0], [row(status="unsupported: x")])
    assert "only rows that were not measured (unsupported: x)" in case.failures[0]


def test_junit_fails_a_row_whose_data_failed_validation_and_a_limit_no_row_has():
    (found,) = thresholds('kernel = "latency"\nmax_lat_p50_us = 10')
    cases = junit_cases(found, [row(lat_p50_us=1.0, validation="fail")])
    assert outcomes(cases) == [
        ("mpi latency every size: lat_p50_us", ["no valid measured row has lat_p50_us"], ""),
        ("mpi latency 8 B", ["mpi latency 8 B: received data failed validation; its figures do not stand"], ""),
    ]


def test_junit_has_a_case_per_group_of_pairs_naming_each_failing_pair_under_it():
    (case,) = junit_cases(PAIRS[0], matrix({("h1", "h3")}))
    assert case.name == "tcp pairs-bw 1 MiB (isolated): min_bw_MBps" and case.kinds == ["min_bw_MBps"]
    assert case.failures == ["tcp pairs-bw 1 MiB (isolated): min_bw_MBps: 1 of 12 pairs fail, expected >= 50"]
    assert case.details == ["tcp pairs-bw 1 MiB h1 -> h3 (ranks 0 -> 2, isolated): bw_MBps 12, expected >= 50"]
    (passing,) = junit_cases(PAIRS[0], matrix(set()))
    assert not passing.failures and not passing.skipped


def test_the_junit_report_reads_back_with_hostile_names_kept_on_one_line(tmp_path):
    from junitparser import JUnitXml

    found = thresholds('name = "evil\\u001b[2J\\nname"\nkernel = "latency"\nmax_lat_p50_us = 10')
    report = tmp_path / "check.xml"
    write_junit(str(report), found, [row(lat_p50_us=20.0, src_host="")], None, "t.toml", run_code=3)
    suite, run = JUnitXml.fromfile(str(report))
    assert suite.name == "evil\\x1b[2J\\nname (threshold 1, line 1)"
    (case,) = suite
    assert case.result[0].message == "mpi latency 8 B: lat_p50_us 20, expected <= 10"
    assert case.result[0].text.splitlines()[-1] == f"{suite.name}: mpi latency every size; max_lat_p50_us <= 10"
    assert [(c.name, c.result[0].message) for c in run] == [("the run", "the run exited 3")]


def test_junit_is_taken_from_checks_own_words_but_not_from_runs():
    from fabricbench.cli import _junit_among

    assert _junit_among(["run1", "--junit", "r.xml"], None) == (["run1"], "r.xml")
    assert _junit_among(["--junit=r.xml", "run1"], None) == (["run1"], "r.xml")
    words = ["--", "run", "--junit", "x"]  # run's words: run refuses what it does not know
    assert _junit_among(words, "r.xml") == (words, "r.xml")
    with pytest.raises(UsageError, match="given twice"):
        _junit_among(["run1", "--junit", "b.xml"], "a.xml")
    with pytest.raises(UsageError, match="needs a FILE"):
        _junit_among(["run1", "--junit"], None)
