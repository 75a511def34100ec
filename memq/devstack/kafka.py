"""Apache Kafka for the local stack: one KRaft node, broker and controller in one process.

The jars come from ``KAFKA_HOME`` (an unpacked Kafka distribution: ``$KAFKA_HOME/libs``)
or from ``<venv>/kafka/libs``, where ``make install`` copies the version pinned in
``memq/devstack/jvm/pom.xml`` from Maven Central. Nothing is downloaded here.

The node is formatted on its first start (``kafka.tools.StorageTool format --standalone``)
and keeps its log directory under the state dir; its settings favour quick tests (no
initial rebalance delay, one partition and one replica for internal topics, short group
session minimums) and are otherwise Kafka's defaults.
"""

from __future__ import annotations

import base64
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from memq.devstack import procs
from memq.devstack.services import HOST, Service, ServiceState, find_java, log_has
from memq.errors import DevStackError

__all__ = ["KAFKA_VERSION", "KafkaService", "find_kafka_libs", "kafka_java"]

#: The Apache Kafka that ``make install`` fetches (memq/devstack/jvm/pom.xml pins the same).
KAFKA_VERSION = "4.1.1"
JVM_DIR = Path(__file__).parent / "jvm"
#: Kafka's own start script's JVM settings (kafka-run-class.sh), with a small heap.
KAFKA_JVM_OPTS = (
    "-Xmx512m",
    "-Xms128m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


def find_kafka_libs() -> Path:
    """The directory of Kafka's jars: ``$KAFKA_HOME/libs``, else the venv's copy."""
    home = os.environ.get("KAFKA_HOME")
    if home:
        libs = Path(home) / "libs"
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise DevStackError(
                f"KAFKA_HOME={home} holds no Kafka distribution ({libs}/kafka_2.13-*.jar is "
                "missing): point it at an unpacked Apache Kafka 4.x, or unset it to use the "
                "one `make install` fetches"
            )
        return libs
    libs = Path(sys.prefix) / "kafka" / "libs"
    if any(libs.glob("kafka_2.13-*.jar")):
        return libs
    raise DevStackError(
        f"Apache Kafka for the local stack is not installed ({libs} is empty): run "
        "`make install` (fetches it from Maven Central with mvn), or set KAFKA_HOME to an "
        "unpacked Kafka 4.x distribution, or MEMQ_KAFKA_BOOTSTRAP to use a running Kafka"
    )


def kafka_java(
    main: str, *args: str, jvm: tuple[str, ...] = ("-Xmx256m",), server: bool = False
) -> list[str]:
    """The command line that runs one of Kafka's Java entry points: a tool (its logging at
    WARN on stderr, as Kafka's scripts set it, so stdout is its output alone), or with
    ``server`` the broker (INFO, on stdout: the stack's log file)."""
    logging = "log4j2.properties" if server else "tools-log4j2.properties"
    return [
        find_java(17),
        *jvm,
        f"-Dlog4j2.configurationFile={JVM_DIR / logging}",
        "-cp",
        f"{find_kafka_libs()}/*",
        main,
        *args,
    ]


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, never
    starting with "-" (as Kafka's own Uuid.randomUuid: StorageTool's ``-t -x..`` would
    read it as an option; 1 start in 64 did, and the stack failed to start)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaService(Service):
    name: ClassVar[str] = "kafka"
    env_var: ClassVar[str] = "MEMQ_KAFKA_BOOTSTRAP"
    #: Advertise another port than the one listened on (a proxy in front, for fault tests).
    advertised_port: int | None = None

    def _dir(self, state_dir: Path) -> Path:
        return state_dir / self.name

    def prepare(self, state_dir: Path, port: int, *, fresh: bool) -> None:
        d = self._dir(state_dir)
        data = d / "data"
        props = d / "server.properties"
        controller = d / "controller.port"
        if fresh or not (data / "meta.properties").exists():
            if data.exists():
                import shutil

                shutil.rmtree(data)
            controller.write_text(f"{procs.free_port(HOST)}\n")
        # A restart keeps the controller's port: the formatted quorum names it.
        cport = int(controller.read_text())
        props.write_text(_server_properties(port, self.advertised_port or port, cport, data))
        if not (data / "meta.properties").exists():
            argv = kafka_java(
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                "--ignore-formatted",
                "-t",
                _cluster_id(),
                "-c",
                str(props),
            )
            procs.run_checked(argv, what="formatting Kafka's log directory", timeout=120)

    def argv(self, state_dir: Path, port: int) -> list[str]:
        return kafka_java(
            "kafka.Kafka",
            str(self._dir(state_dir) / "server.properties"),
            jvm=KAFKA_JVM_OPTS,
            server=True,
        )

    def ready(self, endpoint: str, log: Path, log_offset: int) -> bool:
        host, port = endpoint.rsplit(":", 1)
        return log_has(log, log_offset, b"Kafka Server started") and procs.port_open(
            host, int(port)
        )

    def check(self, state: ServiceState, timeout: float = 3.0) -> str | None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": state.endpoint, "socket.timeout.ms": 2000})
        try:
            admin.list_topics(timeout=timeout)
        except Exception as e:
            return f"no Kafka metadata from {state.endpoint}: {e}"
        return None


def _server_properties(port: int, advertised: int, controller: int, data: Path) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{advertised}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data),
        # One node: every internal topic has one replica, and one partition keeps the
        # first group join and transaction quick.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Topics are made on purpose (MemQ's admin, tests), never by a stray producer.
        "auto.create.topics.enable": "false",
        # Groups: no wait for more members before the first assignment, and session and
        # heartbeat minimums low enough for tests of members that come and go.
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "10000",
        "group.consumer.min.heartbeat.interval.ms": "250",
        "group.consumer.heartbeat.interval.ms": "1000",
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())
