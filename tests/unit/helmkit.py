"""Render the Helm chart offline (helm-python-sdk, no helm binary) and validate the output.

``render(values)`` merges ``values`` over the required values, renders the chart the way
``helm install`` would (schema validation included) and returns a :class:`Release` with
the parsed manifests and the rendered NOTES. ``validate_strict`` checks one manifest
against the Kubernetes OpenAPI schemas bundled with kubernetes-validate, in strict mode
(unknown fields are errors).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import yaml

__all__ = [
    "CHART",
    "KUBE_VERSION",
    "NAMESPACE",
    "RELEASE",
    "REQUIRED",
    "SCHEMALESS_KINDS",
    "Release",
    "chart",
    "container_env",
    "deep_merge",
    "render",
    "resolve_env",
    "validate_strict",
]

CHART = Path(__file__).resolve().parents[2] / "helm" / "memq"
#: The Kubernetes version every manifest is validated against (bundled by kubernetes-validate).
KUBE_VERSION = "1.30.0"
#: Custom resources kubernetes-validate has no schema for; checked by assertions instead.
SCHEMALESS_KINDS = frozenset({"ServiceMonitor"})
RELEASE = "rel"
NAMESPACE = "streaming"

#: The values an install must provide (the chart's defaults leave them empty).
REQUIRED: dict[str, Any] = {
    "zookeeper": {"connect": "zk-0.zk:2181,zk-1.zk:2181,zk-2.zk:2181"},
    "kafka": {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092"},
    "s3": {"bucket": "acme-memq-prod"},
}


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@functools.cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


@dataclass(frozen=True)
class Release:
    """What one render produced: manifests by template, parsed objects, NOTES."""

    manifests: dict[str, str]
    objects: list[dict[str, Any]]
    notes: str

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        return found[0] if found else None


def render(
    values: Mapping[str, Any] | None = None,
    *,
    required: bool = True,
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Release:
    merged = deep_merge(REQUIRED if required else {}, values or {})
    manifests = chart().render(merged, name=name, namespace=namespace)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                assert isinstance(doc, dict), f"{path}: not a mapping"
                objects.append(doc)
    return Release(manifests, objects, notes)


@functools.lru_cache(maxsize=512)
def _validate_json(doc: str) -> None:
    kubernetes_validate.validate(json.loads(doc), KUBE_VERSION, strict=True)


def validate_strict(obj: Mapping[str, Any]) -> None:
    """Validate one manifest (raises kubernetes_validate.ValidationError)."""
    _validate_json(json.dumps(obj, sort_keys=True))


def container_env(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's env entries by name (duplicates are an error)."""
    env: dict[str, dict[str, Any]] = {}
    for entry in container.get("env", []):
        assert entry["name"] not in env, f"env {entry['name']} set twice"
        env[entry["name"]] = entry
    return env


def resolve_env(container: Mapping[str, Any], field_refs: Mapping[str, str]) -> dict[str, str]:
    """The literal env a container would see: downward-API fields from ``field_refs``
    (fieldPath -> value), then ``$(VAR)`` references expanded like the kubelet does."""
    out: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            out[entry["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), entry["value"]
            )
        elif "fieldRef" in entry.get("valueFrom", {}):
            path = entry["valueFrom"]["fieldRef"]["fieldPath"]
            out[entry["name"]] = field_refs[path]
    return out
