"""How a MemQ process tells its supervisor it serves: a ready line and a ready file."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["announce_ready"]


def announce_ready(marker: str, info: dict[str, object], ready_file: Path | None) -> None:
    """Print ``<marker> <json>`` on stdout and, with ``ready_file``, write the JSON there
    atomically (what the local stack and process supervisors wait for)."""
    print(f"{marker} {json.dumps(info)}", flush=True)
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(ready_file)
