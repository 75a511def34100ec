"""docs/cli.md is generated from the CLI and must be current; every --help works."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from memq.cli.docgen import _walk, render
from memq.cli.main import app

ROOT = Path(__file__).parent.parent.parent


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == render(), (
        "docs/cli.md is stale: run `python -m memq.cli.docgen > docs/cli.md`"
    )


def _paths() -> list[list[str]]:
    import typer

    return [p[1:] for p, _ in _walk(typer.main.get_command(app), ["memq"])]


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "memq")
def test_help(path):
    res = CliRunner().invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage" in res.output


def test_configuration_reference_is_current():
    from memq.configdoc import render as render_config

    assert (ROOT / "docs" / "configuration.md").read_text() == render_config(), (
        "docs/configuration.md is stale: run `python -m memq.configdoc > docs/configuration.md`"
    )
    rows = [r for r in render_config().splitlines() if r.startswith("| `")]
    assert rows
    undocumented = [
        r for r in rows if r.rsplit("|", 2)[1].strip().startswith("(") or r.endswith("|  |")
    ]
    assert not undocumented, undocumented
