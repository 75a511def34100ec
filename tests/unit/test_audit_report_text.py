"""`memq audit report` as text: every group name and figure whole, at any terminal width
(a table when it fits, one group after another when it does not)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from memq.cli.audit import print_report


def _group(name: str, **over: Any) -> dict[str, Any]:
    g = {
        "group": name, "consumed_records": 1_234_567, "missing_records": 89,
        "pending_records": 4_321, "expired_records": 5_555, "duplicate_records": 12, "duplicate_blocks": 3,
        "dropped_duplicate_records": 56, "dropped_duplicate_blocks": 7, "mismatches": 2,
        "unaudited_records": 9_876, "latency_p50_ms": 6910, "latency_p99_ms": 7010,
        "status": "missing",
    }  # fmt: skip
    g.update(over)
    return g


NAMES = ["ml-training-readers-eu-west-1", "billing[red]-x"]  # (markup stays text)
DOC = {
    "since_ms": 0,
    "grace_period_s": 60,
    "topics": [
        {
            "topic": "events",
            "produced_records": 1_234_656,
            "produced_blocks": 9,
            "groups": [_group(NAMES[0]), _group(NAMES[1], status="ok")],
        }
    ],
}
FIGURES = ["1,234,567", "89", "4,321", "5,555", "12 (3 blocks)", "56 (7 copies)", "9,876",
           "6.91 s", "7.01 s", "missing", "ok"]  # fmt: skip


@pytest.mark.parametrize("width", [60, 80, 120, 220])
def test_names_and_figures_are_never_cut(width: int) -> None:
    buf = io.StringIO()
    print_report(Console(file=buf, width=width, color_system=None), DOC, {})
    text = buf.getvalue()
    assert "…" not in text
    for s in [*NAMES, *FIGURES]:
        assert s in text, (width, s)
    assert max(map(len, text.splitlines())) <= width
    table = "┃" in text
    assert table == (width >= 200), text  # (the table needs ~170 columns here)


def test_a_status_other_than_ok_is_explained() -> None:
    """(issue 43) The report says why a group is ``warn`` or ``missing``."""
    why = "700 records in 3 blocks consumed with no produced record (unaudited: x)"
    doc = {**DOC, "topics": [{**DOC["topics"][0], "groups": [
        _group("g1", status="warn", reason=why), _group("g2", status="ok", reason=None),
    ]}]}  # fmt: skip
    buf = io.StringIO()
    print_report(Console(file=buf, width=250, color_system=None), doc, {})
    text = buf.getvalue()
    assert f"warn for group g1: {why}" in text
    assert "for group g2" not in text
