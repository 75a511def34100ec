"""The Helm chart (helm/memq): lint, render with many value sets, validate every manifest
strictly against the Kubernetes schemas, and check what the manifests say.

The broker ConfigMap is loaded with the broker's own validator
(``memq.config.load_broker_config``), with the environment the pod would really get.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from memq.config import BrokerConfig, load_broker_config
from tests.unit.helmkit import (
    CHART,
    NAMESPACE,
    RELEASE,
    REQUIRED,
    SCHEMALESS_KINDS,
    Release,
    container_env,
    deep_merge,
    render,
    resolve_env,
    validate_strict,
)

FULLNAME = f"{RELEASE}-memq"
HEADLESS = f"{FULLNAME}-headless"
AUDITOR = f"{FULLNAME}-auditor"
BOOTSTRAP = f"{FULLNAME}.{NAMESPACE}.svc.cluster.local:9092"
BROKER_SELECTOR = {
    "app.kubernetes.io/name": "memq",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "broker",
}
SECRET = {
    "s3": {
        "existingSecret": {
            "name": "memq-s3-keys",
            "accessKeyIdKey": "id",
            "secretAccessKeyKey": "secret",
        }
    }
}
IRSA = {
    "serviceAccount": {
        "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/memq"}
    }
}
TOPICS = {
    "topics": [
        {
            "name": "events",
            "settings": {
                "batch.ms": 500,
                "batch.bytes": 16777216,
                "expected_mbps": 20,
                "notification.partitions": 16,
            },
        },
        {"name": "logs.app_1"},
        {
            "name": "ml-training",
            "settings": {"expected_mbps": 2.5, "storage.s3.hedge_after_ms": 2000},
        },
    ]
}
KITCHEN_SINK: dict[str, Any] = deep_merge(
    deep_merge(SECRET, IRSA),
    {
        **TOPICS,
        "fullnameOverride": "memq-prod",
        "clusterName": "prod",
        "image": {"repository": "registry.example.com/memq-py", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "regcred"}],
        "zookeeper": {"chroot": "/custom/prod", "sessionTimeoutMs": 10000},
        "kafka": {"producer": {"security.protocol": "SASL_SSL", "linger.ms": 5}},
        "s3": {
            "region": "eu-west-1",
            "endpointUrl": "https://minio.storage.svc:9000",
            "useHashPrefix": False,
            "existingSecret": {"sessionTokenKey": "token"},
            "options": {"attempts": 8, "hedge_after_ms": 1500, "upload_checksum": False},
        },
        "topicDefaults": {
            "batch": {"bytes": 4194304, "ms": 250},
            "ring_size": 8,
            "max_block_bytes": 1048576,
            "notification": {"partitions": 32, "replication_factor": 3},
        },
        "broker": {
            "replicas": 6,
            "config": {
                "shutdown_timeout_s": 120.5,
                "upload_threads": 32,
                "gc_thresholds": [50000, 10, 200],
            },
            "preStopSleepSeconds": 5,
            "rackFromZoneLabel": True,
            "antiAffinity": "hard",
            "topologySpread": {"whenUnsatisfiable": "DoNotSchedule", "maxSkew": 2},
            "extraTopologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "node.kubernetes.io/instance-type",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "broker"}},
                }
            ],
            "nodeSelector": {"workload": "streaming"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "memq", "effect": "NoSchedule"}
            ],
            "priorityClassName": "high",
            "podAnnotations": {"team": "data"},
            "podLabels": {"cost-center": "42"},
            "extraEnv": [
                {"name": "MEMQ__MAX_CONNECTIONS", "value": "2048"},
                {
                    "name": "MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": "kafka-sasl", "key": "password"}},
                },
            ],
            "extraEnvFrom": [{"configMapRef": {"name": "memq-extra"}}],
            "service": {"annotations": {"example.com/internal": "true"}},
        },
        "auditor": {
            "persistence": {"enabled": False},
            "bootstrapServers": "audit-kafka:9092",
            "auditTopic": "memq.audit.prod",
            "gracePeriodSeconds": 900,
            "extraEnv": [{"name": "LOG_LEVEL", "value": "INFO"}],
        },
        "metrics": {"podAnnotations": False, "serviceMonitor": {"enabled": True}},
    },
)
#: TLS + tokens + ACLs + a secured auditor, SASL_SSL Kafka and a private-CA S3 store.
SECURE: dict[str, Any] = {
    **TOPICS,
    "tls": {"enabled": True, "secretName": "memq-tls", "caKey": "ca.crt", "clientAuth": "optional"},
    "auth": {
        "enabled": True,
        "tokenSecret": {"name": "memq-auth", "key": "signing-secret"},
        "superusers": ["ops"],
        "adminTokenSecret": {"name": "memq-admin-token", "key": "token"},
        "acls": [
            {"principal": "analytics", "topic": "logs.*", "ops": ["consume"]},
            {"principal": "ingest", "topic": "events", "ops": ["produce", "consume"]},
        ],
    },
    "auditor": {"tls": {"enabled": True}, "auth": {"enabled": True}},
    "kafka": {
        "producer": {"linger.ms": 5, "security.protocol": "PLAINTEXT"},  # security wins
        "security": {
            "protocol": "SASL_SSL",
            "saslMechanism": "SCRAM-SHA-512",
            "saslSecret": {"name": "kafka-memq", "usernameKey": "user", "passwordKey": "pass"},
            "caSecret": {"name": "kafka-ca", "key": "ca.pem"},
        },
    },
    "s3": {"endpointUrl": "https://minio.storage.svc:9000", "caBundle": {"name": "minio-ca"}},
    "metrics": {"serviceMonitor": {"enabled": True}},
}
#: Mutual TLS required, nothing but certificates (the admin Jobs cannot run: off).
MTLS_REQUIRED: dict[str, Any] = {
    "tls": {"enabled": True, "secretName": "memq-tls", "caKey": "ca.crt", "clientAuth": "required"},
    "auth": {"enabled": True, "superusers": ["ops"]},
    "auditor": {"tls": {"enabled": True, "clientAuth": "required"}},
    "retention": {"enabled": False},
    "metrics": {"serviceMonitor": {"enabled": True}},
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "auditor-off": {"auditor": {"enabled": False}},
    "service-monitor": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}
    },
    "hpa": {"broker": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 9}}},
    "hard-anti-affinity": {"broker": {"antiAffinity": "hard"}},
    "existing-s3-secret": SECRET,
    "irsa": IRSA,
    "topics": TOPICS,
    "no-pdb-no-sa": {
        "broker": {"podDisruptionBudget": {"enabled": False}},
        "serviceAccount": {"create": False, "name": "shared"},
    },
    "kitchen-sink": KITCHEN_SINK,
    "secure": SECURE,
    "mtls-required": MTLS_REQUIRED,
}


@pytest.fixture(scope="module")
def releases() -> dict[str, Release]:
    return {key: render(values) for key, values in VALUE_SETS.items()}


def broker_container(rel: Release) -> dict[str, Any]:
    sts = rel.one("StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return container


def broker_config(rel: Release, env: dict[str, str] | None = None) -> BrokerConfig:
    cm = next(c for c in rel.all("ConfigMap") if c["metadata"]["name"].endswith("-broker"))
    data = yaml.safe_load(cm["data"]["broker.yaml"])
    assert isinstance(data, dict)
    return load_broker_config(data=data, env=env or {})


def pod_specs(rel: Release) -> list[dict[str, Any]]:
    return [
        o["spec"]["template"]["spec"]
        for o in rel.objects
        if o["kind"] in {"StatefulSet", "Deployment", "Job"}
    ] + [o["spec"]["jobTemplate"]["spec"]["template"]["spec"] for o in rel.all("CronJob")]


# --- lint and strict validation ----------------------------------------------------------


def test_lint_passes_with_the_required_values():
    report = helm_python.lint(CHART, REQUIRED, strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_lint_with_defaults_only_names_every_missing_required_value():
    report = helm_python.lint(CHART)
    text = "\n".join(report["errors"])
    for path in ("/zookeeper/connect", "/kafka/bootstrapServers", "/s3/bucket"):
        assert path in text


@pytest.mark.parametrize("key", list(VALUE_SETS))
def test_every_manifest_validates_strictly(releases, key):
    rel = releases[key]
    assert {"StatefulSet", "Service", "ConfigMap"} <= rel.kinds()
    checked = 0
    for obj in rel.objects:
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert len(obj["metadata"]["name"]) <= 63
        if obj["kind"] in SCHEMALESS_KINDS:
            continue
        validate_strict(obj)
        checked += 1
    assert checked == len([o for o in rel.objects if o["kind"] not in SCHEMALESS_KINDS])


def test_strict_validation_catches_a_bad_manifest(releases):
    # The validator really looks at fields: a typo'd field and a wrong type both fail.
    sts = copy.deepcopy(releases["defaults"].one("StatefulSet"))
    sts["spec"]["replicaz"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strict(sts)
    sts = copy.deepcopy(releases["defaults"].one("StatefulSet"))
    sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "90"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strict(sts)


def test_no_secret_material_is_rendered(releases):
    for rel in releases.values():
        assert "Secret" not in rel.kinds()
        for cm in rel.all("ConfigMap"):
            text = yaml.safe_dump(cm["data"])
            assert "AWS_" not in text
            assert "password" not in text.lower()


# --- what is rendered, per values ------------------------------------------------------------


def test_kinds_present_by_default(releases):
    rel = releases["defaults"]
    assert rel.kinds() == {
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "Deployment",
        "PersistentVolumeClaim",
        "CronJob",
    }
    assert {s["metadata"]["name"] for s in rel.all("Service")} == {FULLNAME, HEADLESS, AUDITOR}
    assert {c["metadata"]["name"] for c in rel.all("ConfigMap")} == {f"{FULLNAME}-broker", AUDITOR}


def test_auditor_off_removes_every_auditor_object(releases):
    rel = releases["auditor-off"]
    assert "Deployment" not in rel.kinds()
    assert "PersistentVolumeClaim" not in rel.kinds()
    assert rel.find("Service", AUDITOR) is None
    assert rel.find("ConfigMap", AUDITOR) is None
    assert "port-forward" not in rel.notes


def test_optional_objects_follow_their_switches(releases):
    assert "ServiceMonitor" not in releases["defaults"].kinds()
    assert "HorizontalPodAutoscaler" not in releases["defaults"].kinds()
    assert "Job" not in releases["defaults"].kinds()
    assert {m["metadata"]["name"] for m in releases["service-monitor"].all("ServiceMonitor")} == {
        f"{FULLNAME}-broker",
        AUDITOR,
    }
    assert releases["hpa"].one("HorizontalPodAutoscaler")
    assert "PodDisruptionBudget" not in releases["no-pdb-no-sa"].kinds()
    assert "ServiceAccount" not in releases["no-pdb-no-sa"].kinds()
    assert releases["topics"].one("Job")


def test_service_account_carries_irsa_annotations_and_every_pod_uses_it(releases):
    rel = releases["irsa"]
    sa = rel.one("ServiceAccount")
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/memq"
    }
    assert sa["automountServiceAccountToken"] is False
    assert "annotations" not in releases["defaults"].one("ServiceAccount")["metadata"]
    for spec in pod_specs(rel):
        assert spec["serviceAccountName"] == FULLNAME
    for spec in pod_specs(releases["no-pdb-no-sa"]):
        assert spec["serviceAccountName"] == "shared"


# --- brokers -------------------------------------------------------------------------------


def test_replica_counts(releases):
    assert releases["defaults"].one("StatefulSet")["spec"]["replicas"] == 3
    assert releases["kitchen-sink"].one("StatefulSet")["spec"]["replicas"] == 6
    # With autoscaling the HPA owns the count: the StatefulSet must not reset it on upgrade.
    rel = releases["hpa"]
    assert "replicas" not in rel.one("StatefulSet")["spec"]
    hpa = rel.one("HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": FULLNAME,
    }


def test_services_headless_for_identity_client_for_bootstrap(releases):
    rel = releases["defaults"]
    sts = rel.one("StatefulSet")
    headless = rel.one("Service", HEADLESS)
    client = rel.one("Service", FULLNAME)
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["serviceName"] == HEADLESS
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert client["spec"]["type"] == "ClusterIP"
    assert "publishNotReadyAddresses" not in client["spec"]
    assert {(p["name"], p["port"]) for p in headless["spec"]["ports"]} == {
        ("broker", 9092),
        ("http", 9093),
    }
    assert [(p["name"], p["port"]) for p in client["spec"]["ports"]] == [("broker", 9092)]
    for svc in (headless, client):
        assert svc["spec"]["selector"] == BROKER_SELECTOR
        assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sts["spec"]["selector"]["matchLabels"] == BROKER_SELECTOR
    ports = {p["name"]: p["containerPort"] for p in broker_container(rel)["ports"]}
    assert ports == {"broker": 9092, "http": 9093}


def test_probes(releases):
    c = broker_container(releases["defaults"])
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named[c["livenessProbe"]["httpGet"]["port"]] == 9093
    # Liveness must not kill a draining broker: the readiness probe is the one that flips.
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 60


def test_broker_command(releases):
    c = broker_container(releases["defaults"])
    assert c["command"] + c["args"] == ["memq", "broker", "--config", "/etc/memq/broker.yaml"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/etc/memq"] == "config"
    volumes = {
        v["name"]: v
        for v in releases["defaults"].one("StatefulSet")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["config"]["configMap"]["name"] == f"{FULLNAME}-broker"
    assert c["image"] == "memq-py:0.1.0"
    assert (
        broker_container(releases["kitchen-sink"])["image"] == "registry.example.com/memq-py:1.2.3"
    )


def test_broker_env_wiring(releases):
    env = container_env(broker_container(releases["defaults"]))
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["MEMQ__BROKER_ID"]["value"] == "$(POD_NAME)"
    assert (
        env["MEMQ__ADVERTISED_HOST"]["value"]
        == f"$(POD_NAME).{HEADLESS}.{NAMESPACE}.svc.cluster.local"
    )
    names = list(env)
    # $(VAR) only expands variables defined earlier in the list.
    assert names.index("POD_NAME") < names.index("MEMQ__BROKER_ID")
    assert names.index("POD_NAME") < names.index("MEMQ__ADVERTISED_HOST")
    assert "MEMQ__RACK" not in env


def test_aws_secret_refs_only_when_configured(releases):
    for key in ("defaults", "irsa", "topics"):
        env = container_env(broker_container(releases[key]))
        assert not [n for n in env if n.startswith("AWS_")], key
    env = container_env(broker_container(releases["existing-s3-secret"]))
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {
        "secretKeyRef": {"name": "memq-s3-keys", "key": "id"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "memq-s3-keys", "key": "secret"}
    }
    assert "AWS_SESSION_TOKEN" not in env
    assert all("value" not in e for n, e in env.items() if n.startswith("AWS_"))
    env = container_env(broker_container(releases["kitchen-sink"]))
    assert env["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"


def test_rack_extra_env_and_env_from(releases):
    c = broker_container(releases["kitchen-sink"])
    env = container_env(c)
    assert env["MEMQ__RACK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['topology.kubernetes.io/zone']"
    )
    assert env["MEMQ__MAX_CONNECTIONS"]["value"] == "2048"
    sasl = env["MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.PASSWORD"]
    assert sasl["valueFrom"]["secretKeyRef"] == {"name": "kafka-sasl", "key": "password"}
    assert c["envFrom"] == [{"configMapRef": {"name": "memq-extra"}}]


def test_broker_configmap_is_a_valid_broker_config(releases):
    cfg = broker_config(releases["defaults"])
    assert cfg.cluster == "default"
    assert (cfg.host, cfg.port, cfg.http_port) == ("0.0.0.0", 9092, 9093)
    assert cfg.auto_create_topics is False
    assert cfg.topics == []
    assert cfg.zookeeper is not None
    assert cfg.zookeeper.connect == REQUIRED["zookeeper"]["connect"]
    assert cfg.zookeeper.chroot == "/memq/default"
    assert cfg.zookeeper.session_timeout_ms == 6000
    d = cfg.topic_defaults
    assert d is not None
    assert d.storage.type == "s3" and d.storage.s3 is not None
    assert d.storage.s3.bucket == "acme-memq-prod"
    assert d.storage.s3.region is None and d.storage.s3.endpoint_url is None
    assert d.notification.bootstrap_servers == REQUIRED["kafka"]["bootstrapServers"]
    assert (d.batch.max_bytes, d.batch.ms, d.notification.partitions) == (8388608, 1000, 8)
    assert d.retention.ms == 7 * 86_400_000 and d.retention.max_bytes is None
    assert d.storage.s3.object_tags == {}  # retention tags are opt-in (tag_retention)
    assert cfg.shutdown_timeout_s == 60


def test_broker_config_with_the_pods_environment(releases):
    """What broker 1 of the StatefulSet really loads: file + its resolved env overrides."""
    rel = releases["kitchen-sink"]
    pod = "memq-prod-1"
    env = resolve_env(
        broker_container(rel),
        {
            "metadata.name": pod,
            "metadata.labels['topology.kubernetes.io/zone']": "eu-west-1b",
        },
    )
    env.pop("LOG_LEVEL", None)
    cfg = broker_config(rel, env)
    assert cfg.broker_id == pod
    assert cfg.advertised_host == f"{pod}.memq-prod-headless.{NAMESPACE}.svc.cluster.local"
    assert cfg.advertised == cfg.advertised_host
    assert cfg.rack == "eu-west-1b"
    assert cfg.max_connections == 2048
    assert cfg.cluster == "prod"
    assert cfg.shutdown_timeout_s == 120.5 and cfg.upload_threads == 32
    assert cfg.gc_thresholds == (50000, 10, 200)
    assert cfg.zookeeper is not None
    assert (cfg.zookeeper.chroot, cfg.zookeeper.session_timeout_ms) == ("/custom/prod", 10000)
    d = cfg.topic_defaults
    assert d is not None and d.storage.s3 is not None
    s3 = d.storage.s3
    assert (s3.region, s3.endpoint_url) == ("eu-west-1", "https://minio.storage.svc:9000")
    assert s3.use_hash_prefix is False
    assert (s3.attempts, s3.hedge_after_ms, s3.upload_checksum) == (8, 1500, False)
    assert (d.batch.max_bytes, d.batch.ms, d.batch.max_blocks) == (4194304, 250, 4096)
    assert (d.ring_size, d.max_block_bytes) == (8, 1048576)
    assert (d.notification.partitions, d.notification.replication_factor) == (32, 3)
    assert d.notification.producer == {"security.protocol": "SASL_SSL", "linger.ms": 5}


def test_config_change_rolls_the_brokers_and_nothing_else_does():
    def checksum(values):
        sts = render(values).one("StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    base = checksum({})
    assert checksum({"broker": {"replicas": 5}}) == base
    assert checksum({"topicDefaults": {"batch": {"ms": 200}}}) != base
    assert checksum({"s3": {"bucket": "other-bucket"}}) != base


def test_anti_affinity_soft_and_hard(releases):
    soft = releases["defaults"].one("StatefulSet")["spec"]["template"]["spec"]["affinity"]
    anti = soft["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    keys = {
        t["podAffinityTerm"]["topologyKey"]: t["weight"]
        for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]
    }
    assert keys == {"kubernetes.io/hostname": 100, "topology.kubernetes.io/zone": 50}
    for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]:
        assert t["podAffinityTerm"]["labelSelector"]["matchLabels"] == BROKER_SELECTOR

    hard = releases["hard-anti-affinity"].one("StatefulSet")["spec"]["template"]["spec"]
    anti = hard["affinity"]["podAntiAffinity"]
    (required,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    assert required["labelSelector"]["matchLabels"] == BROKER_SELECTOR
    (zone,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert zone["podAffinityTerm"]["topologyKey"] == "topology.kubernetes.io/zone"


def test_affinity_override_replaces_the_generated_rules():
    custom = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["memq"]}]}
                ]
            }
        }
    }
    spec = render({"broker": {"affinity": custom}}).one("StatefulSet")["spec"]["template"]["spec"]
    assert spec["affinity"] == custom


def test_topology_spread(releases):
    spec = releases["defaults"].one("StatefulSet")["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for c in spread.values():
        assert c["maxSkew"] == 1
        assert c["whenUnsatisfiable"] == "ScheduleAnyway"
        assert c["labelSelector"]["matchLabels"] == BROKER_SELECTOR
    spec = releases["kitchen-sink"].one("StatefulSet")["spec"]["template"]["spec"]
    zone, host, extra = spec["topologySpreadConstraints"]
    assert (zone["topologyKey"], zone["whenUnsatisfiable"], zone["maxSkew"]) == (
        "topology.kubernetes.io/zone",
        "DoNotSchedule",
        2,
    )
    assert host["topologyKey"] == "kubernetes.io/hostname"
    assert extra["topologyKey"] == "node.kubernetes.io/instance-type"
    assert spec["nodeSelector"] == {"workload": "streaming"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert spec["priorityClassName"] == "high"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_termination_grace_exceeds_the_drain_timeout(releases):
    spec = releases["defaults"].one("StatefulSet")["spec"]["template"]["spec"]
    cfg = broker_config(releases["defaults"])
    assert spec["terminationGracePeriodSeconds"] == 90
    assert spec["terminationGracePeriodSeconds"] >= cfg.shutdown_timeout_s + 30
    # 120.5 s drain + 5 s preStop sleep + 30 s margin.
    rel = releases["kitchen-sink"]
    spec = rel.one("StatefulSet")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == math.ceil(120.5) + 5 + 30
    assert broker_container(rel)["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert "lifecycle" not in broker_container(releases["defaults"])


def test_pod_disruption_budget(releases):
    pdb = releases["defaults"].one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == BROKER_SELECTOR


def test_prometheus_annotations_and_service_monitors(releases):
    sts = releases["defaults"].one("StatefulSet")
    ann = sts["spec"]["template"]["metadata"]["annotations"]
    assert (ann["prometheus.io/scrape"], ann["prometheus.io/port"], ann["prometheus.io/path"]) == (
        "true",
        "9093",
        "/metrics",
    )
    dep = releases["defaults"].one("Deployment")
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    ks = releases["kitchen-sink"].one("StatefulSet")["spec"]["template"]["metadata"]
    assert "prometheus.io/scrape" not in ks["annotations"]
    assert ks["annotations"]["team"] == "data" and ks["labels"]["cost-center"] == "42"

    rel = releases["service-monitor"]
    sm = rel.one("ServiceMonitor", f"{FULLNAME}-broker")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    # It selects exactly one Service (the headless one, which has the http port).
    selected = [
        s
        for s in rel.all("Service")
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == [HEADLESS]
    assert "http" in {p["name"] for p in selected[0]["spec"]["ports"]}
    asm = rel.one("ServiceMonitor", AUDITOR)
    selected = [
        s
        for s in rel.all("Service")
        if asm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == [AUDITOR]


def test_security_context_of_every_pod_and_container(releases):
    for key, rel in releases.items():
        specs = pod_specs(rel)
        assert specs, key
        for spec in specs:
            psc = spec["securityContext"]
            assert psc["runAsNonRoot"] is True
            assert psc["runAsUser"] == 10001 and psc["runAsUser"] > 0
            assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
            tmp = [v for v in spec["volumes"] if v["name"] == "tmp"]
            assert tmp and "emptyDir" in tmp[0]
            for c in spec.get("initContainers", []) + spec["containers"]:
                sc = c["securityContext"]
                assert sc["runAsNonRoot"] is True
                assert sc["readOnlyRootFilesystem"] is True
                assert sc["allowPrivilegeEscalation"] is False
                assert sc["capabilities"] == {"drop": ["ALL"]}
                assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
                if c["name"] != "done":  # `memq --version` writes nothing
                    assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, c["name"]


# --- auditor -------------------------------------------------------------------------------


def test_auditor_deployment_and_config(releases):
    rel = releases["defaults"]
    dep = rel.one("Deployment", AUDITOR)
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["command"] + c["args"] == [
        "memq",
        "audit",
        "serve",
        "--config",
        "/etc/memq/auditor.yaml",
    ]
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    config = yaml.safe_load(rel.one("ConfigMap", AUDITOR)["data"]["auditor.yaml"])
    assert config == {
        "kafka": {"bootstrap_servers": REQUIRED["kafka"]["bootstrapServers"]},
        "audit_topic": "memq.audit",
        "db_path": "/var/lib/memq-auditor/audit.db",
        "http_host": "0.0.0.0",
        "http_port": 8080,
        "grace_period_s": 600,
        "lag": {
            "bootstrap_servers": f"{FULLNAME}.streaming.svc.cluster.local:9092",
            "interval_s": 30,
        },
    }
    # The SQLite file's directory is the persistent volume.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/memq-auditor"] == "data"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": AUDITOR}}
    pvc = rel.one("PersistentVolumeClaim", AUDITOR)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    svc = rel.one("Service", AUDITOR)
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, "http")]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "auditor"


def test_auditor_without_persistence_and_with_its_own_kafka(releases):
    rel = releases["kitchen-sink"]
    name = "memq-prod-auditor"
    assert "PersistentVolumeClaim" not in rel.kinds()
    dep = rel.one("Deployment", name)
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}
    config = yaml.safe_load(rel.one("ConfigMap", name)["data"]["auditor.yaml"])
    assert config["kafka"] == {"bootstrap_servers": "audit-kafka:9092"}
    assert (config["audit_topic"], config["grace_period_s"]) == ("memq.audit.prod", 900)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert container_env(c)["LOG_LEVEL"]["value"] == "INFO"


# --- topic creation ------------------------------------------------------------------------


def test_topic_job_creates_each_listed_topic(releases):
    job = releases["topics"].one("Job")
    ann = job["metadata"]["annotations"]
    assert ann["helm.sh/hook"] == "post-install,post-upgrade"
    assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "OnFailure"
    commands = [c["command"] for c in spec["initContainers"]]
    assert commands == [
        [
            "memq",
            "topic",
            "create",
            "events",
            "--bootstrap-servers",
            BOOTSTRAP,
            "--if-not-exists",
            "--set",
            "batch.bytes=16777216",
            "--set",
            "batch.ms=500",
            "--set",
            "expected_mbps=20",
            "--set",
            "notification.partitions=16",
        ],
        [
            "memq",
            "topic",
            "create",
            "logs.app_1",
            "--bootstrap-servers",
            BOOTSTRAP,
            "--if-not-exists",
        ],
        [
            "memq",
            "topic",
            "create",
            "ml-training",
            "--bootstrap-servers",
            BOOTSTRAP,
            "--if-not-exists",
            "--set",
            "expected_mbps=2.5",
            "--set",
            "storage.s3.hedge_after_ms=2000",
        ],
    ]
    assert all("args" not in c for c in spec["initContainers"])
    (done,) = spec["containers"]
    assert done["command"] == ["memq", "--version"]


def test_topic_job_targets_the_client_service():
    rel = render({**TOPICS, "fullnameOverride": "mq", "clusterDomain": "k8s.example"})
    cmd = rel.one("Job")["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert cmd[cmd.index("--bootstrap-servers") + 1] == f"mq.{NAMESPACE}.svc.k8s.example:9092"
    assert rel.find("Service", "mq") is not None


# --- NOTES ---------------------------------------------------------------------------------


def test_notes_explain_producing_consuming_and_the_dashboard(releases):
    notes = releases["defaults"].notes
    assert f"bootstrap.servers:  {BOOTSTRAP}" in notes
    assert (
        f"produce --topic events --count 10000 --size 1024 --bootstrap-servers {BOOTSTRAP}" in notes
    )
    assert (
        f"consume --topic events --group my-group --from-beginning --bootstrap-servers {BOOTSTRAP}"
        in notes
    )
    assert f'Producer({{"bootstrap.servers": "{BOOTSTRAP}", "acks": "all"}})' in notes
    assert f'Consumer({{"bootstrap.servers": "{BOOTSTRAP}", "group.id": "my-group"}})' in notes
    assert f"port-forward service/{AUDITOR} 8080:8080" in notes
    assert "topic create events" in notes
    notes = releases["topics"].notes
    assert "- logs.app_1" in notes and "topic create" not in notes
    assert "(3-9 brokers, autoscaled)" in releases["hpa"].notes
    assert "{{" not in notes and "<no value>" not in notes


# --- bad values ----------------------------------------------------------------------------


def without_zookeeper_connect() -> dict[str, Any]:
    values = copy.deepcopy(REQUIRED)
    del values["zookeeper"]["connect"]
    return values


BAD_VALUES = {
    "missing zookeeper connect": (
        without_zookeeper_connect(),
        # The chart's default is "": a missing value is an empty one.
        "at '/zookeeper/connect': minLength: got 0, want 1",
    ),
    "blank kafka bootstrap": (
        deep_merge(REQUIRED, {"kafka": {"bootstrapServers": "  "}}),
        "at '/kafka/bootstrapServers': '  ' does not match pattern",
    ),
    "negative replicas": (
        deep_merge(REQUIRED, {"broker": {"replicas": -1}}),
        "at '/broker/replicas': minimum: got -1, want 1",
    ),
    "typo'd key": (
        deep_merge(REQUIRED, {"broker": {"replica": 3}}),
        "at '/broker': additional properties 'replica' not allowed",
    ),
    "typo'd broker config key": (
        deep_merge(REQUIRED, {"broker": {"config": {"upload_thread": 3}}}),
        "at '/broker/config': additional properties 'upload_thread' not allowed",
    ),
    "wrong anti-affinity enum": (
        deep_merge(REQUIRED, {"broker": {"antiAffinity": "strict"}}),
        "at '/broker/antiAffinity': value must be one of 'soft', 'hard'",
    ),
    "wrong pull policy": (
        deep_merge(REQUIRED, {"image": {"pullPolicy": "Sometimes"}}),
        "at '/image/pullPolicy': value must be one of",
    ),
    "batch too small": (
        deep_merge(REQUIRED, {"topicDefaults": {"batch": {"bytes": 10}}}),
        "at '/topicDefaults/batch/bytes': minimum: got 10, want 1,024",
    ),
    "bad topic name": (
        deep_merge(REQUIRED, {"topics": [{"name": "no spaces"}]}),
        "at '/topics/0/name': 'no spaces' does not match pattern",
    ),
    "retention.ms zero": (
        deep_merge(REQUIRED, {"topicDefaults": {"retention": {"ms": 0}}}),
        "at '/topicDefaults/retention/ms'",
    ),
    "typo'd retention key": (
        deep_merge(REQUIRED, {"retention": {"shedule": "@hourly"}}),
        "at '/retention': additional properties 'shedule' not allowed",
    ),
    "bad retention schedule": (
        deep_merge(REQUIRED, {"retention": {"schedule": "hourly"}}),
        "at '/retention/schedule'",
    ),
    "bad topic setting key": (
        deep_merge(REQUIRED, {"topics": [{"name": "t", "settings": {"batch ms": 5}}]}),
        "at '/topics/0/settings': additional properties 'batch ms' not allowed",
    ),
}


@pytest.mark.parametrize(("values", "where"), BAD_VALUES.values(), ids=list(BAD_VALUES))
def test_schema_rejects_bad_values_with_a_clear_message(values, where):
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(values, required=False)
    assert "values don't meet the specifications of the schema" in str(err.value)
    assert where in str(err.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"topics": [{"name": "events"}, {"name": "events"}]},
            'topics: "events" is listed twice',
        ),
        (
            {"topicDefaults": {"ring_size": 256, "batch": {"bytes": 16777216}}},
            "not even one topic would fit",
        ),
        (
            {"topicDefaults": {"batch": {"bytes": 33554432}}},
            "does not fit in broker.config.max_frame_bytes",
        ),
        (
            {"broker": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}},
            "minReplicas (5) is greater than maxReplicas (2)",
        ),
    ],
    ids=["duplicate topic", "ring over memory limit", "block over frame", "hpa min > max"],
)
def test_cross_field_checks_fail_the_render(values, message):
    with pytest.raises(helm_python.HelmError) as err:
        render(values)
    assert message in str(err.value)


def test_the_same_values_are_accepted_when_fixed():
    # The counterpart of the rejections above: fixing the value renders.
    render(
        {
            "topicDefaults": {"batch": {"bytes": 33554432}},
            "broker": {"config": {"max_frame_bytes": 67108864}},
        }
    )
    render({"topics": [{"name": "events"}, {"name": "events-2"}]})


# --- retention -----------------------------------------------------------------------------


def retention_container(rel: Release) -> dict[str, Any]:
    (container,) = rel.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ]
    return container


def test_retention_cronjob_runs_the_job_against_the_brokers(releases):
    cron = releases["defaults"].one("CronJob")
    assert cron["metadata"]["name"] == f"{FULLNAME}-retention"
    spec = cron["spec"]
    assert spec["schedule"] == "17 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid"  # runs never overlap
    assert "timeZone" not in spec
    job = spec["jobTemplate"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert job["activeDeadlineSeconds"] == 3000 and job["backoffLimit"] == 1
    c = retention_container(releases["defaults"])
    assert c["command"] == [
        "memq", "retention", "run", "--bootstrap-servers", BOOTSTRAP,
        "--orphan-grace-ms", "3600000", "--json",
    ]  # fmt: skip
    assert "args" not in c
    assert c["resources"]["limits"] == {"memory": "1Gi"}


def test_retention_cronjob_options_credentials_and_switch():
    rel = render(
        deep_merge(
            SECRET,
            {
                "retention": {
                    "schedule": "@daily",
                    "timeZone": "Europe/Berlin",
                    "dryRun": True,
                    "orphans": False,
                    "orphanGraceMs": 7200000,
                    "extraArgs": ["--kafka-option", "sasl.username=memq"],
                    "extraEnv": [{"name": "X", "value": "1"}],
                }
            },
        )
    )
    spec = rel.one("CronJob")["spec"]
    assert (spec["schedule"], spec["timeZone"]) == ("@daily", "Europe/Berlin")
    c = retention_container(rel)
    assert c["command"][5:] == [
        "--orphan-grace-ms", "7200000", "--no-orphans", "--dry-run", "--json",
        "--kafka-option", "sasl.username=memq",
    ]  # fmt: skip
    assert [e["name"] for e in c["env"]] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "X"]
    validate_strict(rel.one("CronJob"))
    assert "CronJob" not in render({"retention": {"enabled": False}}).kinds()


def test_topic_defaults_retention_reaches_the_broker_config():
    rel = render({"topicDefaults": {"retention": {"ms": 3600000, "bytes": 10**12}}})
    d = broker_config(rel).topic_defaults
    assert d is not None and d.retention.ms == 3600000 and d.retention.max_bytes == 10**12
    assert d.storage.s3 is not None and d.storage.s3.object_tags == {}  # tags are opt-in
    # -1 (Kafka's spelling): forever. A null would only remove the key in Helm (default back).
    forever = broker_config(render({"topicDefaults": {"retention": {"ms": -1}}})).topic_defaults
    assert forever is not None and forever.retention.ms is None
    assert forever.storage.s3 is not None and forever.storage.s3.object_tags == {}


# --- TLS, authentication, ACLs, Kafka and S3 client security ------------------------------


def container_volumes(
    spec: dict[str, Any], container: dict[str, Any]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, volume) of one container of a pod spec."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container.get("volumeMounts", [])}


def secret_file(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) that ``path`` is in this container: the file must be an item of
    a Secret volume mounted read-only."""
    for mount_path, (mount, volume) in container_volumes(spec, container).items():
        if path.startswith(mount_path + "/"):
            assert mount.get("readOnly") is True, f"{mount_path} is writable"
            secret = volume["secret"]
            assert secret["defaultMode"] == 0o440  # owner and fsGroup read, nobody writes
            items = {i["path"]: i["key"] for i in secret["items"]}
            return secret["secretName"], items[path.removeprefix(mount_path + "/")]
    raise AssertionError(f"{path} is on no volume of {container['name']}")


def auditor_parts(rel: Release) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = rel.one("Deployment", AUDITOR)["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def test_secure_broker_config_points_at_the_mounted_secrets(releases):
    rel = releases["secure"]
    spec = rel.one("StatefulSet")["spec"]["template"]["spec"]
    c = broker_container(rel)
    # The broker's own validator, with the SASL overrides the kubelet would set from the
    # Secret (their names are the config's override paths).
    env = resolve_env(c, {"metadata.name": f"{FULLNAME}-0"})
    env["MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.USERNAME"] = "memq"
    env["MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.PASSWORD"] = "s3cr3t-Pw"
    env.pop("AWS_CA_BUNDLE")
    cfg = broker_config(rel, env)
    assert cfg.tls is not None and cfg.auth is not None
    assert cfg.tls.client_auth == "optional"
    assert secret_file(spec, c, str(cfg.tls.cert_file)) == ("memq-tls", "tls.crt")
    assert secret_file(spec, c, str(cfg.tls.key_file)) == ("memq-tls", "tls.key")
    assert secret_file(spec, c, str(cfg.tls.ca_file)) == ("memq-tls", "ca.crt")
    assert cfg.auth.enabled and cfg.auth.mtls_identity and cfg.auth.superusers == ["ops"]
    assert cfg.auth.token_secret is None  # the secret is a file, never a config value
    assert secret_file(spec, c, str(cfg.auth.token_secret_file)) == ("memq-auth", "signing-secret")
    assert cfg.auth.acls == []  # clustered brokers keep ACLs in ZooKeeper (the ACL Job)
    d = cfg.topic_defaults
    assert d is not None and d.storage.s3 is not None
    producer = d.notification.producer
    assert producer == {
        "linger.ms": 5,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "ssl.ca.location": "/etc/memq-kafka-ca/ca.crt",
        "sasl.username": "memq",
        "sasl.password": "s3cr3t-Pw",
    }
    assert secret_file(spec, c, str(producer["ssl.ca.location"])) == ("kafka-ca", "ca.pem")
    envs = container_env(c)
    for name, key in (("USERNAME", "user"), ("PASSWORD", "pass")):
        ref = envs[f"MEMQ__TOPIC_DEFAULTS__NOTIFICATION__PRODUCER__SASL.{name}"]["valueFrom"]
        assert ref == {"secretKeyRef": {"name": "kafka-memq", "key": key}}
    # S3: the endpoint in the config, the private CA for boto3 from its Secret.
    assert d.storage.s3.endpoint_url == "https://minio.storage.svc:9000"
    assert envs["AWS_CA_BUNDLE"]["value"] == "/etc/memq-s3-ca/ca.crt"
    assert secret_file(spec, c, "/etc/memq-s3-ca/ca.crt") == ("minio-ca", "ca.crt")


def test_secure_auditor_config_reuses_the_brokers_secrets(releases):
    from memq.audit.config import load_auditor_config

    rel = releases["secure"]
    spec, c = auditor_parts(rel)
    data = yaml.safe_load(rel.one("ConfigMap", AUDITOR)["data"]["auditor.yaml"])
    cfg = load_auditor_config(
        data=data,
        env={
            "MEMQ_AUDITOR__KAFKA__CONSUMER__SASL.USERNAME": "memq",
            "MEMQ_AUDITOR__KAFKA__CONSUMER__SASL.PASSWORD": "pw",
        },
    )
    assert cfg.tls is not None and cfg.auth is not None and cfg.auth.enabled
    assert cfg.tls.client_auth == "none"
    assert secret_file(spec, c, str(cfg.tls.cert_file)) == ("memq-tls", "tls.crt")
    assert secret_file(spec, c, str(cfg.tls.key_file)) == ("memq-tls", "tls.key")
    assert secret_file(spec, c, str(cfg.auth.token_secret_file)) == ("memq-auth", "signing-secret")
    assert cfg.kafka.consumer == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "ssl.ca.location": "/etc/memq-kafka-ca/ca.crt",
        "sasl.username": "memq",
        "sasl.password": "pw",
    }
    assert secret_file(spec, c, "/etc/memq-kafka-ca/ca.crt") == ("kafka-ca", "ca.pem")
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    assert refs == {
        "MEMQ_AUDITOR__KAFKA__CONSUMER__SASL.USERNAME": {"name": "kafka-memq", "key": "user"},
        "MEMQ_AUDITOR__KAFKA__CONSUMER__SASL.PASSWORD": {"name": "kafka-memq", "key": "pass"},
        # the lag client's (test_secure_auditor_measures_lag_...)
        "MEMQ_AUDITOR__LAG__KAFKA__SASL.USERNAME": {"name": "kafka-memq", "key": "user"},
        "MEMQ_AUDITOR__LAG__KAFKA__SASL.PASSWORD": {"name": "kafka-memq", "key": "pass"},
        "MEMQ_AUDITOR__LAG__CLIENT__AUTH.TOKEN": refs["MEMQ_AUDITOR__LAG__CLIENT__AUTH.TOKEN"],
    }
    assert "https://127.0.0.1:8080/?token=<token>" in rel.notes


def test_secure_auditor_measures_lag_with_the_admin_token_ca_and_kafka_sasl(releases):
    from memq.audit.config import load_auditor_config

    rel = releases["secure"]
    spec, c = auditor_parts(rel)
    data = yaml.safe_load(rel.one("ConfigMap", AUDITOR)["data"]["auditor.yaml"])
    env = {e["name"]: e for e in c["env"]}
    ca = env["MEMQ_AUDITOR__LAG__CLIENT__SSL.CA.LOCATION"]["value"]
    cfg = load_auditor_config(
        data=data,
        env={
            "MEMQ_AUDITOR__LAG__CLIENT__SSL.CA.LOCATION": ca,
            "MEMQ_AUDITOR__LAG__CLIENT__AUTH.TOKEN": "tok-7f3a",
            "MEMQ_AUDITOR__LAG__KAFKA__SASL.USERNAME": "memq",
            "MEMQ_AUDITOR__LAG__KAFKA__SASL.PASSWORD": "pw-9c1e",
        },
    )
    assert cfg.lag.bootstrap_servers == f"{FULLNAME}.streaming.svc.cluster.local:9092"
    assert cfg.lag.client == {
        "security.protocol": "ssl",
        "ssl.ca.location": ca,
        "auth.token": "tok-7f3a",
    }
    assert cfg.lag.kafka["security.protocol"] == "SASL_SSL"
    assert cfg.lag.kafka["sasl.password"] == "pw-9c1e"
    token = env["MEMQ_AUDITOR__LAG__CLIENT__AUTH.TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["name"]  # the admin token secret, never a value in the ConfigMap
    if ca.startswith("/etc/memq-tls/"):
        assert secret_file(spec, c, ca)[0]  # mounted from the TLS secret
    assert "tok-7f3a" not in json.dumps(data) and "pw-9c1e" not in json.dumps(data)


def test_auditor_lag_off():
    rel = render({"auditor": {"lag": {"enabled": False}}})
    data = yaml.safe_load(rel.one("ConfigMap", AUDITOR)["data"]["auditor.yaml"])
    assert "lag" not in data


def test_plain_install_has_no_security_volumes_or_sections(releases):
    rel = releases["defaults"]
    cfg = broker_config(rel)
    assert cfg.tls is None and cfg.auth is None
    for spec in pod_specs(rel):
        assert {v["name"] for v in spec["volumes"]} <= {"config", "tmp", "data"}
    for cm in rel.all("ConfigMap"):
        assert "tls" not in yaml.safe_load(next(iter(cm["data"].values())))


def test_probes_use_https_with_tls(releases):
    c = broker_container(releases["secure"])
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):  # fmt: skip
        assert c[probe]["httpGet"] == {"path": path, "port": "http", "scheme": "HTTPS"}
    _, a = auditor_parts(releases["secure"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert a[probe]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}
    assert "scheme" not in broker_container(releases["defaults"])["livenessProbe"]["httpGet"]


def test_required_client_certificates_probe_from_inside_the_pod(releases):
    # The kubelet has no client certificate: with clientAuth required the probes run in the
    # pod and present the server's own certificate.
    rel = releases["mtls-required"]
    c = broker_container(rel)
    spec = rel.one("StatefulSet")["spec"]["template"]["spec"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert "httpGet" not in c[probe]
        cmd = c[probe]["exec"]["command"]
        assert cmd[:2] == ["python", "-c"] and f"https://127.0.0.1:9093{path}" in cmd[2]
        for f in ("/etc/memq-tls/tls.crt", "/etc/memq-tls/tls.key"):
            assert f in cmd[2] and secret_file(spec, c, f)[0] == "memq-tls"
    cfg = broker_config(rel)
    assert cfg.tls is not None and cfg.tls.client_auth == "required"
    assert cfg.auth is not None and cfg.auth.token_secret_file is None  # certificates only
    _, a = auditor_parts(rel)
    assert "https://127.0.0.1:8080/healthz" in a["readinessProbe"]["exec"]["command"][2]
    assert "Job" not in rel.kinds() and "CronJob" not in rel.kinds()


def _pod_pki(directory: Any) -> tuple[str, str, str]:
    """(ca.crt, tls.crt, tls.key): a CA and one certificate for 127.0.0.1 valid for both
    server and client auth (cert-manager: usages [server auth, client auth])."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("test CA"))
        .issuer_name(name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("memq-0"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = (directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(files[0]), str(files[1]), str(files[2])


def test_the_exec_probe_passes_a_server_requiring_client_certificates(releases, tmp_path):
    """Run the rendered probe command against a real TLS server with client_auth required
    (memq.security.server_context, as the broker's HTTP port), with a certificate valid
    for both server and client auth (cert-manager: usages [server auth, client auth])."""
    import http.server
    import subprocess
    import sys
    import threading

    from memq.security import TlsConfig, server_context

    ca_file, crt, key = _pod_pki(tmp_path)
    status = {"code": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"] if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    tls = TlsConfig(cert_file=crt, key_file=key, ca_file=ca_file, client_auth="required")
    server.socket = server_context(tls).wrap_socket(server.socket, server_side=True)
    server.handle_error = lambda *a: None  # type: ignore[method-assign]
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cmd = broker_container(releases["mtls-required"])["readinessProbe"]["exec"]["command"]
        script = cmd[2].replace("/etc/memq-tls", str(tmp_path)).replace(":9093/", f":{port}/")

        def probe(code: str) -> int:
            run = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, timeout=60, check=False
            )
            return run.returncode

        assert probe(script) == 0
        status["code"] = 503  # draining
        assert probe(script) != 0
        status["code"] = 200
        # Without a client certificate (what an httpGet probe would do) the handshake fails.
        assert probe(script.replace("c.load_cert_chain(", "(lambda *a: None)(")) != 0
    finally:
        server.shutdown()
        server.server_close()


def test_service_monitors_scrape_https_and_verify_the_brokers(releases):
    rel = releases["secure"]
    ep = rel.one("ServiceMonitor", f"{FULLNAME}-broker")["spec"]["endpoints"][0]
    assert ep["scheme"] == "https" and ep["path"] == "/metrics"
    assert ep["tlsConfig"] == {
        "ca": {"secret": {"name": "memq-tls", "key": "ca.crt"}},
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc.cluster.local",
    }
    ep = rel.one("ServiceMonitor", AUDITOR)["spec"]["endpoints"][0]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"]["serverName"] == f"{AUDITOR}.{NAMESPACE}.svc.cluster.local"
    plain = releases["service-monitor"].one("ServiceMonitor", f"{FULLNAME}-broker")
    assert "scheme" not in plain["spec"]["endpoints"][0]
    # A client certificate for clientAuth required is merged in.
    client = {"cert": {"secret": {"name": "prom-client", "key": "tls.crt"}},
              "keySecret": {"name": "prom-client", "key": "tls.key"}}  # fmt: skip
    rel = render(deep_merge(MTLS_REQUIRED, {"metrics": {"serviceMonitor": {"tlsConfig": client}}}))
    cfg = rel.one("ServiceMonitor", f"{FULLNAME}-broker")["spec"]["endpoints"][0]["tlsConfig"]
    assert cfg["keySecret"] == client["keySecret"] and cfg["ca"]["secret"]["name"] == "memq-tls"


def test_admin_jobs_get_the_ca_and_a_superuser_token_never_the_key(releases):
    rel = releases["secure"]
    jobs = {j["metadata"]["name"]: j for j in rel.all("Job")}
    assert set(jobs) == {f"{FULLNAME}-topics", f"{FULLNAME}-acls"}
    acl_job = jobs[f"{FULLNAME}-acls"]
    assert acl_job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    acl_spec = acl_job["spec"]["template"]["spec"]
    assert [c["command"] for c in acl_spec["initContainers"]] == [
        ["memq", "acl", "add", "--principal", "analytics", "--topic", "logs.*",
         "--op", "consume", "--bootstrap-servers", BOOTSTRAP],
        ["memq", "acl", "add", "--principal", "ingest", "--topic", "events",
         "--op", "produce", "--op", "consume", "--bootstrap-servers", BOOTSTRAP],
    ]  # fmt: skip
    cron_spec = rel.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    topic_spec = jobs[f"{FULLNAME}-topics"]["spec"]["template"]["spec"]
    checked = 0
    for spec in (acl_spec, topic_spec, cron_spec):
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["name"] == "done":
                continue
            env = container_env(c)
            assert env["MEMQ_SSL_CA_LOCATION"]["value"] == "/etc/memq-tls/ca.crt"
            assert env["MEMQ_AUTH_TOKEN"]["valueFrom"] == {
                "secretKeyRef": {"name": "memq-admin-token", "key": "token"}
            }
            assert secret_file(spec, c, "/etc/memq-tls/ca.crt") == ("memq-tls", "ca.crt")
            checked += 1
        tls_ca = next(v for v in spec["volumes"] if v["name"] == "tls-ca")
        assert tls_ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # no tls.key
    assert checked == 2 + 3 + 1
    # TLS with a public CA (no caKey): the image's system CAs.
    rel = render({**TOPICS, "tls": {"enabled": True, "secretName": "memq-tls"}})
    c = rel.one("Job")["spec"]["template"]["spec"]["initContainers"][0]
    assert container_env(c)["MEMQ_SSL_CA_LOCATION"]["value"] == "/etc/ssl/certs/ca-certificates.crt"
    assert "MEMQ_AUTH_TOKEN" not in container_env(c)


def test_retention_job_reads_kafka_with_the_chart_security(releases):
    rel = releases["secure"]
    c = retention_container(rel)
    spec = rel.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    options = [c["command"][i + 1] for i, a in enumerate(c["command"]) if a == "--kafka-option"]
    assert options == [
        "sasl.mechanisms=SCRAM-SHA-512",
        "security.protocol=SASL_SSL",
        "ssl.ca.location=/etc/memq-kafka-ca/ca.crt",
        # Expanded by the kubelet from the env below: the manifest holds no secret.
        "sasl.username=$(MEMQ_KAFKA_SASL_USERNAME)",
        "sasl.password=$(MEMQ_KAFKA_SASL_PASSWORD)",
    ]
    env = container_env(c)
    assert env["MEMQ_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka-memq", "key": "pass"}  # fmt: skip
    assert "MEMQ_KAFKA_SASL_USERNAME" in env  # $(VAR) in the command expands only defined vars
    assert secret_file(spec, c, "/etc/memq-kafka-ca/ca.crt") == ("kafka-ca", "ca.pem")
    assert env["AWS_CA_BUNDLE"]["value"] == "/etc/memq-s3-ca/ca.crt"
    assert secret_file(spec, c, "/etc/memq-s3-ca/ca.crt") == ("minio-ca", "ca.crt")


def test_no_secret_value_is_in_any_configmap_or_literal_env(releases):
    secret_words = ("password", "sasl.username", "token_secret:", "secretkeyref", "memq_auth_token")
    for key in ("secure", "mtls-required"):
        rel = releases[key]
        assert "Secret" not in rel.kinds()
        for cm in rel.all("ConfigMap"):
            text = yaml.safe_dump(cm["data"]).lower()
            assert not [w for w in secret_words if w in text], (key, cm["metadata"]["name"])
        for spec in pod_specs(rel):
            for c in spec.get("initContainers", []) + spec["containers"]:
                for e in c.get("env", []):
                    if any(w in e["name"] for w in ("PASSWORD", "TOKEN", "SECRET", "USERNAME")):
                        assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
    # The loaded configs hold no secret either: only paths of mounted files.
    cfg = broker_config(releases["secure"])
    assert cfg.auth is not None and cfg.auth.token_secret is None
    d = cfg.topic_defaults
    assert d is not None and d.storage.s3 is not None and d.storage.s3.secret_access_key is None


def test_security_changes_roll_the_brokers():
    def checksum(values):
        sts = render(values).one("StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    base = checksum({})
    assert checksum({"tls": {"enabled": True, "secretName": "memq-tls"}}) != base
    assert checksum({"kafka": {"security": {"protocol": "SSL"}}}) != base


SECURE_BASE = {"tls": {"enabled": True, "secretName": "memq-tls", "caKey": "ca.crt"}}
BAD_SECURITY = {
    "clientAuth required without a CA": (
        {"tls": {"enabled": True, "secretName": "memq-tls", "clientAuth": "required"}},
        "tls.clientAuth=required needs the CA of client certificates: set tls.caKey",
    ),
    "clientAuth without TLS": (
        {"tls": {"clientAuth": "optional", "caKey": "ca.crt"}},
        "tls.clientAuth=optional needs tls.enabled=true",
    ),
    "TLS without a Secret": ({"tls": {"enabled": True}}, "tls.enabled needs tls.secretName"),
    "auth without tokens or mTLS": (
        {**SECURE_BASE, "auth": {"enabled": True}, "retention": {"enabled": False}},
        "auth.enabled needs a way to authenticate: auth.tokenSecret.name",
    ),
    "auth with mTLS identities off": (
        deep_merge(
            MTLS_REQUIRED, {"tls": {"clientAuth": "optional"}, "auth": {"mtlsIdentity": False}}
        ),
        "auth.enabled needs a way to authenticate",
    ),
    "auth without an admin token for the Jobs": (
        {"auth": {"enabled": True, "tokenSecret": {"name": "memq-auth"}}},
        "auth.enabled: the retention CronJob (retention.enabled) must authenticate: set "
        "auth.adminTokenSecret.name",
    ),
    "admin token without the signing secret": (
        deep_merge(
            MTLS_REQUIRED,
            {"tls": {"clientAuth": "optional"}, "auth": {"adminTokenSecret": {"name": "t"}}},
        ),
        "auth.adminTokenSecret holds a token",
    ),
    "clientAuth required with the admin Jobs": (
        {
            "tls": {
                "enabled": True,
                "secretName": "memq-tls",
                "caKey": "ca.crt",
                "clientAuth": "required",
            },
            **TOPICS,
        },
        "tls.clientAuth=required: the topics Job (topics), the retention CronJob "
        "(retention.enabled) would fail",
    ),
    "ACLs without auth": (
        {"auth": {"acls": [{"principal": "a", "topic": "t", "ops": ["produce"]}]}},
        "auth.acls needs auth.enabled=true",
    ),
    "auditor TLS without a Secret": (
        {"auditor": {"tls": {"enabled": True}}},
        "auditor.tls.enabled needs tls.secretName",
    ),
    "auditor auth without the signing secret": (
        {"auditor": {"auth": {"enabled": True}}},
        "auditor.auth.enabled needs auth.tokenSecret.name",
    ),
    "SASL secret without a SASL protocol": (
        {"kafka": {"security": {"protocol": "SSL", "saslSecret": {"name": "k"}}}},
        'need protocol SASL_SSL or SASL_PLAINTEXT, not "SSL"',
    ),
    "Kafka CA without TLS to Kafka": (
        {"kafka": {"security": {"caSecret": {"name": "k"}}}},
        "kafka.security.caSecret is for TLS to Kafka",
    ),
}


@pytest.mark.parametrize(("values", "message"), BAD_SECURITY.values(), ids=list(BAD_SECURITY))
def test_security_combinations_that_cannot_work_fail_the_render(values, message):
    with pytest.raises(helm_python.HelmError) as err:
        render(values)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"tls": {"clientAuth": "always"}}, "at '/tls/clientAuth': value must be one of"),
        ({"tls": {"secret": "x"}}, "at '/tls': additional properties 'secret' not allowed"),
        (
            {"auth": {"acls": [{"principal": "a", "topic": "t", "ops": ["write"]}]}},
            "at '/auth/acls/0/ops/0': value must be one of 'produce', 'consume', 'admin'",
        ),
        (
            {"auth": {"acls": [{"principal": "a", "topic": "bad topic", "ops": ["produce"]}]}},
            "at '/auth/acls/0/topic'",
        ),
        ({"kafka": {"security": {"protocol": "sasl_ssl"}}}, "at '/kafka/security/protocol'"),
        ({"auditor": {"tls": {"enable": True}}}, "additional properties 'enable' not allowed"),
        ({"s3": {"caBundle": {"name": "Bad_Name"}}}, "at '/s3/caBundle/name'"),
    ],
    ids=[
        "clientAuth enum",
        "tls typo",
        "acl op",
        "acl topic",
        "kafka protocol",
        "auditor typo",
        "secret name",
    ],
)
def test_schema_rejects_bad_security_values(values, where):
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(values)
    assert where in str(err.value)


def test_the_guides_secure_install_renders_and_its_certificate_names_the_services():
    import re
    import textwrap
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    found = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", guide, re.S)]
    docs = [yaml.safe_load(b) for b in found]
    blocks = {b.splitlines()[0]: b for b in found}
    prod = yaml.safe_load(blocks["# values-prod.yaml"])
    secure = yaml.safe_load(blocks["# values-secure.yaml"])
    assert "helm upgrade --install memq ./helm/memq -n streaming -f values-prod.yaml -f values-secure.yaml" in guide  # fmt: skip
    rel = render(deep_merge(prod, secure), required=False, name="memq")
    for obj in rel.objects:
        if obj["kind"] not in SCHEMALESS_KINDS:
            validate_strict(obj)
    cm = rel.one("ConfigMap", "memq-broker")
    cfg = load_broker_config(data=yaml.safe_load(cm["data"]["broker.yaml"]), env={})
    assert cfg.tls is not None and cfg.tls.client_auth == "optional"
    assert cfg.auth is not None and cfg.auth.superusers == ["ops"]
    assert {j["metadata"]["name"] for j in rel.all("Job")} == {"memq-topics", "memq-acls"}
    # The Certificate's names are the ones clients and the ServiceMonitors use.
    (cert,) = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Certificate"]
    assert cert["spec"]["secretName"] == secure["tls"]["secretName"]
    names = cert["spec"]["dnsNames"]
    for sm in rel.all("ServiceMonitor"):
        assert sm["spec"]["endpoints"][0]["tlsConfig"]["serverName"] in names
    sts = rel.one("StatefulSet", "memq")
    host = container_env(sts["spec"]["template"]["spec"]["containers"][0])["MEMQ__ADVERTISED_HOST"]
    assert host["value"].replace("$(POD_NAME)", "*") in names


# --- Kafka-protocol listener ----------------------------------------------------------------

KAFKA_LISTENER: dict[str, Any] = {
    "broker": {"kafkaListener": {"enabled": True, "port": 9095, "partitions": 16}}
}


def _port_names(ports: list[dict[str, Any]]) -> set[str]:
    return {p["name"] for p in ports}


def test_kafka_listener_port_is_exposed_and_configured_only_when_enabled(releases):
    on = render(KAFKA_LISTENER)
    for obj in on.objects:
        if obj["kind"] not in SCHEMALESS_KINDS:
            validate_strict(obj)
    kafka_svc_port = {"name": "kafka", "port": 9095, "targetPort": "kafka", "protocol": "TCP"}
    for name in (FULLNAME, HEADLESS):
        assert kafka_svc_port in on.one("Service", name)["spec"]["ports"]
    assert {"name": "kafka", "containerPort": 9095, "protocol": "TCP"} in broker_container(on)[
        "ports"
    ]
    listener = broker_config(on).kafka_listener
    assert listener is not None
    assert (listener.port, listener.tls, listener.partitions) == (9095, True, 16)
    assert f"bootstrap.servers {FULLNAME}.{NAMESPACE}.svc.cluster.local:9095" in on.notes
    assert "security.protocol PLAINTEXT" in on.notes

    off = releases["defaults"]
    for name in (FULLNAME, HEADLESS):
        assert "kafka" not in _port_names(off.one("Service", name)["spec"]["ports"])
    assert _port_names(broker_container(off)["ports"]) == {"broker", "http"}
    assert broker_config(off).kafka_listener is None
    assert "Kafka producers" not in off.notes


def test_kafka_listener_with_tls_and_tokens_speaks_sasl_ssl():
    rel = render(deep_merge(SECURE, {"broker": {"kafkaListener": {"enabled": True}}}))
    listener = broker_config(rel).kafka_listener
    assert listener is not None and (listener.port, listener.tls) == (9094, True)
    assert listener.partitions is None  # the topic's notification.partitions
    assert "security.protocol SASL_SSL (sasl.mechanism PLAIN" in rel.notes
    plain = render({"broker": {"kafkaListener": {"enabled": True, "tls": False}}})
    assert broker_config(plain).kafka_listener.tls is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"broker": {"kafkaListener": {"enabled": True, "port": 9093}}},
            "broker.kafkaListener.port 9093 is the broker's protocol or HTTP port",
        ),
        (
            {
                "broker": {"kafkaListener": {"enabled": True}},
                "tls": {"enabled": True, "secretName": "t", "caKey": "ca.crt"},
                "auth": {"enabled": True, "tokenSecret": {"name": ""}, "mtlsIdentity": True},
            },
            "broker.kafkaListener with auth.enabled: Kafka clients could not authenticate",
        ),
    ],
    ids=["port clash", "no way to authenticate"],
)
def test_kafka_listener_misconfigurations_fail_the_render(values, message):
    with pytest.raises(helm_python.HelmError) as err:
        render(values)
    assert message in str(err.value)


def test_schema_rejects_bad_kafka_listener_values():
    with pytest.raises(helm_python.HelmValuesError) as err:
        render({"broker": {"kafkaListener": {"enabled": True, "partitions": 0}}})
    assert "at '/broker/kafkaListener/partitions'" in str(err.value)
    # The listener is set through broker.kafkaListener (which opens the ports), never raw.
    with pytest.raises(helm_python.HelmValuesError) as err:
        render({"broker": {"config": {"kafka_listener": {"port": 9094}}}})
    assert "additional properties 'kafka_listener' not allowed" in str(err.value)
