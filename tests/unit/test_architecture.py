"""docs/architecture.md draws the import-linter contract that `make lint` enforces."""

from __future__ import annotations

import re
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
