"""The table's one answer to "was this row measured?" (measure/schema.py), which every reader and report asks."""

from __future__ import annotations

import pytest

from fabricbench.measure.schema import is_measured


@pytest.mark.parametrize(
    ("status", "measured"),
    [("ok", True), ("unsupported: needs 2 ranks", False), ("skipped: too slow", False), ("", False), (None, False)],
)
def test_only_an_ok_status_is_measured(status, measured):
    assert is_measured(status) is measured
