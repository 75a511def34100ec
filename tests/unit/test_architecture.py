"""docs/architecture.md draws the import-linter contract that `make lint` enforces."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def contract_layers() -> list[list[str]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in cfg["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in re.split(r"[|:]", row)] for row in layers["layers"]]


def doc_layers() -> list[list[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- layers:", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = [r for r in table.splitlines() if re.match(r"^\| \d+ \|", r)]
    return [re.findall(r"`([a-z_.]+)`", r.split("|")[3]) for r in rows]


def test_the_architecture_doc_lists_the_contract_layers_in_order() -> None:
    assert doc_layers() == contract_layers()


def test_every_package_module_belongs_to_a_layer() -> None:
    """A new top-level module of memq must be placed in a layer (else nothing checks it)."""
    layered = {m for row in contract_layers() for m in row}
    found = {
        f"memq.{p.stem}"
        for p in (ROOT / "memq").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert found - layered == set()


#: Past this many lines a module says in its docstring why it is one module ("long
#: because ..."): house style aims for ~500, and a split should follow cohesion, not a
#: line count.
LONG_MODULE_LINES = 800


def package_modules() -> dict[str, Path]:
    """Every module under memq/, following the linked folders (governor/,
    storage_handlers/, consumer/, spark/ are symlinked as memq/<name>)."""
    base = ROOT / "memq"
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(base, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = Path(folder) / name
                found[path.relative_to(base).as_posix()] = path
    return found


def test_long_modules_say_why() -> None:
    modules = package_modules()
    assert {"governor/member.py", "consumer/consumer.py", "spark/datasource.py"} <= set(modules)
    unexplained = {}
    for name, path in modules.items():
        text = path.read_text()
        lines = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text)) or ""
        if lines > LONG_MODULE_LINES and "long because" not in " ".join(doc.split()):
            unexplained[name] = lines
    assert unexplained == {}, (
        f"modules over {LONG_MODULE_LINES} lines whose docstring does not say why they are "
        f"one module ('long because ...'): split them by cohesion or say why: {unexplained}"
    )


_NO_DEV_STACK = """
import contextlib, io, json, sys
import typer.main
import memq.cli.main
cmd = typer.main.get_command(memq.cli.main.app)
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    cmd.main(["broker", "--help"], prog_name="memq", standalone_mode=False)
dev = ("memq.devstack", "memq.demo", "memq.testing", "memq.configdoc", "pytest")
print(json.dumps({
    "help": out.getvalue(),
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] == "pytest" or m.startswith(dev)),
}))
"""


def test_the_cli_loads_no_dev_stack_for_product_commands() -> None:
    """`memq broker` (any product command) runs without loading the dev stack: `memq dev`
    and `memq demo` import it inside their commands. import-linter counts imports inside
    functions too, so this is checked by running it."""
    proc = subprocess.run(
        [sys.executable, "-c", _NO_DEV_STACK],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert "Run a broker" in result["help"]
    assert result["loaded"] == []
