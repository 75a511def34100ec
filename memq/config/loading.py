"""Loading config: YAML file, dict and ``MEMQ__`` env layers, validation with clear errors.

Every error names the key, the bad value and the fix; an unknown key gets a "did you
mean" suggestion.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from memq.errors import ConfigError

__all__ = [
    "deep_merge",
    "env_overrides",
    "format_validation_error",
    "read_config_layers",
    "validate_model",
]

M = TypeVar("M", bound=BaseModel)


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


#: Keys whose values are secrets: taken as the literal string (a password "0123" or "yes"
#: must not become a number or a boolean), and never stored outside the broker's own
#: config (see memq.config.topic.without_secrets).
SECRET_KEY = re.compile(r"(password|secret|token)", re.IGNORECASE)


def env_overrides(env: Mapping[str, str], prefix: str = "MEMQ__") -> dict[str, Any]:
    """``MEMQ__A__B=v`` -> ``{"a": {"b": v}}`` with ``v`` parsed as a YAML scalar (a
    secret's value, by its key's name, stays the literal string)."""
    out: dict[str, Any] = {}
    for key, raw in env.items():
        if not key.startswith(prefix):
            continue
        path = [p.lower() for p in key[len(prefix) :].split("__") if p]
        if not path:
            continue
        if SECRET_KEY.search(path[-1]):
            value: Any = raw
        else:
            try:
                value = yaml.safe_load(raw) if raw != "" else ""
            except yaml.YAMLError:
                value = raw
        node = out
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment override {key} conflicts with another one")
        node[path[-1]] = value
    return out


def _model_in(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names and aliases of the model reached by walking ``loc`` (for suggestions)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = current.model_fields
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        current = None if field is None else _model_in(field.annotation)
    if current is None:
        return []
    fields = current.model_fields
    return [f.alias or n for n, f in fields.items()]


def format_validation_error(model: type[BaseModel], err: ValidationError, source: str) -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            known = _fields_at(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            lines.append(f"  {where}: unknown key{hint}")
        else:
            got = e.get("input")
            msg = str(e["msg"]).removeprefix("Value error, ")  # pydantic's prefix
            shown = (
                ""
                if isinstance(got, dict | list) or got is None or repr(got) in msg
                else f" (got {got!r})"
            )
            lines.append(f"  {where}: {msg}{shown}")
    return "\n".join(lines)


def validate_model(model: type[M], data: Any, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(model, e, source)) from None


def read_config_layers(
    path: str | Path | None,
    data: Mapping[str, Any] | None,
    env: Mapping[str, str] | None,
    *,
    what: str,
    prefix: str,
) -> tuple[dict[str, Any], str]:
    """YAML file, then ``data``, then ``<prefix>A__B`` env overrides, deep-merged.

    Returns the raw mapping and a description of its source for error messages.
    """
    raw: dict[str, Any] = {}
    source = what
    if path is not None:
        p = Path(path)
        source = f"{what} {p}"
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"{what} {p} does not exist: pass --config PATH") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{source} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source} must be a YAML mapping, got {type(loaded).__name__}")
        raw = loaded
    if data is not None:
        raw = deep_merge(raw, data)
    raw = deep_merge(raw, env_overrides(os.environ if env is None else env, prefix))
    return raw, source
