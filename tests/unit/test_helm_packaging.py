"""The image and the operations guide agree with the chart and the code.

No Docker engine runs in the tests: the Dockerfile is checked by reading it against the
chart (user id, ports, entrypoint) and pyproject.toml (every package is copied, no extras
installed). docs/operations.md is checked for what can rot: its JSON and YAML examples
parse, every metric it names is one the broker exports, and its example values install.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from memq.audit.metrics import AuditorMetrics
from memq.broker.metrics import BrokerMetrics
from memq.config import load_broker_config
from memq.governor.metrics import ClusterMetrics
from tests.unit.helmkit import CHART, render, validate_strict

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
DOCKERIGNORE = (ROOT / ".dockerignore").read_text().splitlines()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """Dockerfile instructions as (KEYWORD, arguments), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def packages() -> list[str]:
    """The folders the wheel is built from: memq/ and the top-level folders it links in."""
    linked = [p.name for p in (ROOT / "memq").iterdir() if p.is_symlink()]
    return sorted(["memq", *linked])


def test_the_wheel_installs_one_namespace():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["memq", "memq.*"]
    for name in ("governor", "storage_handlers", "consumer", "spark"):
        link = ROOT / "memq" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve()


# --- Dockerfile ----------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_on_python_3_11_slim():
    steps = instructions(DOCKERFILE)
    froms = [args for word, args in steps if word == "FROM"]
    assert [f.split(" AS ")[-1] for f in froms] == ["build", "runtime"]
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", args["PYTHON_IMAGE"])
    runs = " ".join(a for w, a in steps if w == "RUN")
    assert "pip wheel --wheel-dir /wheels ." in runs
    assert "pip install --no-index --find-links=/wheels memq-py" in runs
    # Runtime dependencies only: no extras anywhere.
    assert not re.search(r"\[(dev|spark)", DOCKERFILE)


def test_dockerfile_matches_the_chart():
    steps = instructions(DOCKERFILE)
    (user,) = [a for w, a in steps if w == "USER"]
    sc = VALUES["securityContext"]
    assert user == f"{sc['runAsUser']}:{sc['runAsGroup']}"
    assert int(user.split(":")[0]) > 0
    assert [a for w, a in steps if w == "ENTRYPOINT"] == ['["memq"]']
    (exposed,) = [a.split() for w, a in steps if w == "EXPOSE"]
    assert set(exposed) == {"9092", "9093", "8080"}
    assert "PYTHONDONTWRITEBYTECODE=1" in DOCKERFILE  # read-only root filesystem
    # The chart's pods run the same command the image's entrypoint names.
    sts = render().one("StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["command"] == ["memq"]


@pytest.mark.parametrize("package", packages())
def test_every_package_is_in_the_build_context_and_copied(package):
    assert f"!{package}/" in DOCKERIGNORE
    assert re.search(rf"^COPY {package} \./{package}$", DOCKERFILE, re.M)
    assert (ROOT / package / "__init__.py").exists()


def test_dockerignore_is_an_allow_list():
    assert DOCKERIGNORE[[line.strip() for line in DOCKERIGNORE].index("*")] == "*"
    for needed in ("!pyproject.toml", "!README.md"):
        assert needed in DOCKERIGNORE


# --- docs/operations.md --------------------------------------------------------------------


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", OPERATIONS, re.S)


def exported_metric_names() -> set[str]:
    names: set[str] = set()
    registry = BrokerMetrics().registry
    ClusterMetrics(registry)  # a clustered broker's /metrics has these too
    from memq.consumer.groups import LagCollector

    lag = LagCollector(object())  # type: ignore[arg-type]  # collect() never calls the admin
    # the auditor's, and the lag it (or `memq group exporter`) exports
    from memq.broker.auditing import BlockAudit

    class _Sink:  # a broker with `audit` on also exports its audit records' counter
        def stats(self) -> dict[str, int]:
            return {}

    audit = BlockAudit(_Sink(), "b")  # type: ignore[arg-type]
    families = [
        *registry.collect(),
        *AuditorMetrics().registry.collect(),
        *lag.collect(),
        *audit.collect(),
    ]
    for family in families:
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(
            family.type, []
        )
        if family.type != "counter":  # counters are only queried as <name>_total
            names.add(family.name)
        names.update(family.name + s for s in suffixes)
    return names


def test_operations_json_examples_parse():
    from memq.retention import lifecycle_rules
    from memq.retention_job import TopicReport

    docs = [json.loads(text) for text in blocks("json")]
    lifecycle = [d for d in docs if "Rules" in d]
    reports = [d for d in docs if "topics" in d]
    assert len(lifecycle) >= 1 and len(reports) >= 1
    for doc in lifecycle:
        for rule in doc["Rules"]:
            assert rule["Status"] == "Enabled" and rule["Expiration"]["Days"] > 0
    # The lifecycle example is what `memq retention apply-lifecycle` writes; the report
    # example has the fields `memq retention run --json` prints.
    assert lifecycle[0]["Rules"] == lifecycle_rules([], [3, 7])
    fields = set(TopicReport("t", "s3://b", False).as_dict())
    for doc in reports:
        assert {"dry_run", "ok", "errors", "topics"} <= set(doc)
        for topic in doc["topics"]:
            assert set(topic) == fields


def test_operations_yaml_examples_parse_and_alert_rules_are_complete():
    docs = [yaml.safe_load(text) for text in blocks("yaml")]
    rules = [r for d in docs if "groups" in d for g in d["groups"] for r in g["rules"]]
    assert len(rules) >= 10
    for rule in rules:
        assert rule["alert"].startswith("Memq") and rule["expr"].strip()
        assert rule["labels"]["severity"] in {"page", "ticket"}


def test_every_metric_named_in_the_guide_is_exported():
    named = set(re.findall(r"\bmemq_[a-z0-9_]+", OPERATIONS))
    exported = exported_metric_names()
    assert named, "the guide names no metrics"
    assert named <= exported, f"unknown metrics: {sorted(named - exported)}"
    for required in (
        "memq_errors_total",
        "memq_storage_retries_total",
        "memq_buffers_in_use",
        "memq_pool_held_bytes",
        "memq_pool_limit_bytes",
        "memq_buffer_waits_total",
        "memq_upload_seconds",
        "memq_notification_seconds",
        "memq_ack_seconds",
        "memq_ack1_records_lost_total",
        "memq_uploads_in_flight",
        "memq_connections",
    ):
        assert required in named


def test_the_guides_example_values_install():
    (text,) = [b for b in blocks("yaml") if b.startswith("# values-prod.yaml")]
    rel = render(yaml.safe_load(text), required=False, name="memq")
    for obj in rel.objects:
        validate_strict(obj)
    cm = rel.one("ConfigMap", "memq-broker")
    cfg = load_broker_config(data=yaml.safe_load(cm["data"]["broker.yaml"]), env={})
    assert cfg.cluster == "prod"
    assert cfg.zookeeper is not None and cfg.zookeeper.chroot == "/memq/prod"
    assert rel.one("StatefulSet", "memq")["spec"]["replicas"] == 6
    names = [c["command"][3] for c in rel.one("Job")["spec"]["template"]["spec"]["initContainers"]]
    assert names == ["events", "app-logs"]
    # The names the guide uses for this release are the chart's.
    for name in ("memq-headless", "memq-auditor", "memq-topics"):
        assert name in OPERATIONS
    assert "memq.streaming.svc.cluster.local:9092" in OPERATIONS
    assert rel.find("Service", "memq-headless") is not None


def test_worked_cost_example_is_right():
    # 200 MB/s in 8 MiB objects at $0.005 per 1,000 PUTs.
    puts_per_s = 200e6 / (8 * 1024 * 1024)
    per_day = puts_per_s * 86_400
    assert f"{puts_per_s:.1f} | {per_day / 1e6:.2f} M | ${per_day / 1000 * 0.005:.2f}" in (
        OPERATIONS.replace("**", "")
    )
