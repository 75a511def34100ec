"""Generate ``docs/cli.md`` from the CLI itself: ``python -m memq.cli.docgen > docs/cli.md``.

A test checks the committed file equals this output, so the reference never drifts.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import typer

from memq.cli.main import app

HEADER = """# `memq` command reference

Generated from the CLI by `python -m memq.cli.docgen > docs/cli.md` (a test keeps it
current). Every command also prints this with `--help`. Commands that talk to a cluster
default to the local stack recorded under `--state-dir` (default `.memq/`, env
`MEMQ_STATE_DIR`) when no endpoint is given. Errors print one line saying what failed
and what to do, and exit with status 1.
"""


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name in sorted(cmd.commands):
            out += _walk(cmd.commands[name], [*path, name])
    return out


def _param_row(p: Any) -> str:
    help_ = str(getattr(p, "help", None) or "")
    if p.param_type_name == "argument":
        name = f"`{(p.name or '').upper()}` (argument)"
    else:
        name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    if p.envvar:
        help_ += f" Env: `{p.envvar}`."
    default = p.default
    shown = "" if default in (None, False, ()) or callable(default) else f"`{default}`"
    return f"| {name} | {help_.strip()} | {shown} |"


def render() -> str:
    root = typer.main.get_command(app)
    parts = [HEADER]
    for path, cmd in _walk(root, ["memq"]):
        if cmd.hidden:
            continue
        title = " ".join(path)
        parts.append(f"\n## `{title}`\n")
        doc = inspect.cleandoc(cmd.help or "")
        if doc:
            parts.append(doc + "\n")
        params = [
            p for p in cmd.params if p.name not in {"help"} and not getattr(p, "hidden", False)
        ]
        if hasattr(cmd, "commands"):
            subs = ", ".join(f"`{n}`" for n in sorted(cmd.commands))
            parts.append(f"\nSubcommands: {subs}.\n")
        if params:
            parts.append("\n| option | meaning | default |\n|---|---|---|")
            parts.extend(_param_row(p) for p in params)
            parts.append("")
    text = "\n".join(parts)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
