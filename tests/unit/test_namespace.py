"""One import namespace: the wheel installs `memq` and nothing else at top level.

The repository keeps its top-level folders (governor/, storage_handlers/, consumer/,
spark/); memq/ links them in, so a user's own `consumer.py` or `spark/` never collides.
"""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("governor", "storage_handlers", "consumer", "spark")


def test_wheel_holds_only_the_memq_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("memq_py-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"memq", "memq_py-0.1.0.dist-info"}
    for folder in FOLDERS:  # every module of each folder, under memq/
        for src in (ROOT / folder).glob("*.py"):
            assert f"memq/{folder}/{src.name}" in names

    # A fresh venv with only the wheel (no dependencies): `memq.governor` imports (its
    # pure modules need nothing else) and the bare folder names do not exist.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    with zipfile.ZipFile(wheel) as z:
        site = next((env_dir / "lib").glob("python3*/site-packages"))
        z.extractall(site)
    probe = (
        "import importlib.util, memq.governor.assignment;"
        "print([n for n in ('consumer','governor','spark','storage_handlers')"
        " if importlib.util.find_spec(n)])"
    )
    out = subprocess.run(
        [str(py), "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "[]"


def test_editable_install_exposes_only_memq(tmp_path: Path) -> None:
    """The development venv (make install) too: run from outside the repository."""
    probe = (
        "import importlib.util, memq.consumer, memq.governor.zk;"
        "print([n for n in ('consumer','governor','spark','storage_handlers')"
        " if importlib.util.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "[]"
