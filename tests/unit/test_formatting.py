"""The one home of byte counts and column names as text (measure/formatting.py): message sizes and memory."""

from __future__ import annotations

import pytest

from fabricbench.measure.formatting import format_bytes, format_size, short_name


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (512, "512 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (4 << 20, "4 MiB"), (1 << 40, "1024 GiB")],
)
def test_a_message_size_has_four_digits_and_stops_at_gib(size, text):
    assert format_size(size) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (64 << 20, "64.0 MiB"), (int(21.3 * (1 << 30)), "21.3 GiB"), (2 << 40, "2.0 TiB")],
)
def test_memory_has_one_decimal_and_reaches_tib(count, text):
    assert format_bytes(count) == text


@pytest.mark.parametrize(
    ("column", "name"),
    [("lat_p50_us", "p50"), ("busbw_GBps", "busbw"), ("bw_MBps", "bw"), ("msgrate_per_s", "msgrate"), ("note", "note")]
    + [("overlap_pct", "overlap"), ("link_MBps", "link_MBps"), ("link_pct", "link_pct")],  # "link" would be both
)
def test_a_column_is_named_without_its_unit(column, name):
    assert short_name(column) == name
