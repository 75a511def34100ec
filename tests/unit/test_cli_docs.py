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


def test_command_lists_fill_their_lines() -> None:
    """``memq --help`` shows each command's summary as one wrapped paragraph: a line
    followed by more of the same summary is filled (Typer kept the docstring's own line
    breaks there, leaving lines like "consume with a")."""
    import itertools
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    for args in (["--help"], ["topic", "--help"], ["group", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "memq.cli.main", *args],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip
        panel = out.split("Commands", 1)[1].splitlines()[1:]
        lines = [ln[1:].rstrip(" │") for ln in panel if ln.startswith("│")]
        assert lines, out
        width = max(map(len, lines))
        for line, after in itertools.pairwise(lines):
            if after[:10].strip() == "":  # (no command name: more of the same summary)
                next_word = after.split()[0]
                # wrapped where the next word no longer fitted, not at a source line break
                assert len(line) + 1 + len(next_word) > width, (args, line, after)
