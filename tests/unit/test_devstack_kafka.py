"""The local stack's Apache Kafka: where its jars come from, its Java, its settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memq.devstack import kafka
from memq.devstack.services import java_major
from memq.errors import DevStackError


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_402"', 8),
        ('openjdk version "11.0.22" 2024-01-16 LTS', 11),
        ("no version here", None),
    ],
)
def test_java_major(output: str, major: int | None) -> None:
    assert java_major(output) == major


def test_kafka_home_wins_and_must_hold_kafka(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    with pytest.raises(DevStackError, match="holds no Kafka distribution"):
        kafka.find_kafka_libs()
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    assert kafka.find_kafka_libs() == tmp_path / "libs"


def test_without_kafka_home_the_venv_copy_or_how_to_get_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(
        DevStackError, match=r"run `make install`.*KAFKA_HOME.*MEMQ_KAFKA_BOOTSTRAP"
    ):
        kafka.find_kafka_libs()
    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    assert kafka.find_kafka_libs() == libs


def test_pom_pins_the_version_the_code_names() -> None:
    pom = (Path(kafka.__file__).parent / "jvm" / "pom.xml").read_text()
    assert f"<kafka.version>{kafka.KAFKA_VERSION}</kafka.version>" in pom


def test_server_properties_one_node_quick_groups(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1)
        for line in kafka._server_properties(9092, 9192, 9093, tmp_path).splitlines()
    )
    assert props["process.roles"] == "broker,controller"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9192"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path)


def test_cluster_ids_never_look_like_an_option(monkeypatch) -> None:
    """StorageTool reads ``-t -...`` as an option: an id starting with "-" is redrawn."""
    import uuid as uuid_mod

    from memq.devstack import kafka

    # 0xf8 first: base64 "-" (62) in the first character; then an ordinary id
    draws = iter([bytes([0xF8]) + bytes(15), bytes(16)])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: uuid_mod.UUID(bytes=next(draws)))
    cid = kafka._cluster_id()
    assert cid == "AAAAAAAAAAAAAAAAAAAAAA" and len(cid) == 22


def test_tools_log_warnings_to_stderr_and_the_server_info_to_its_log(monkeypatch) -> None:
    monkeypatch.setattr(kafka, "find_java", lambda _v: "java")
    monkeypatch.setattr(kafka, "find_kafka_libs", lambda: Path("/k/libs"))
    tool = kafka.kafka_java("org.apache.kafka.tools.ConsoleProducer", "--help")
    server = kafka.kafka_java("kafka.Kafka", "server.properties", server=True)
    (tool_log,) = [a for a in tool if a.startswith("-Dlog4j2.configurationFile=")]
    (server_log,) = [a for a in server if a.startswith("-Dlog4j2.configurationFile=")]
    tools_cfg = Path(tool_log.split("=", 1)[1]).read_text()
    assert "target = SYSTEM_ERR" in tools_cfg and "rootLogger.level = warn" in tools_cfg
    assert Path(server_log.split("=", 1)[1]).name == "log4j2.properties"
    assert tool[-2:] == ["org.apache.kafka.tools.ConsoleProducer", "--help"]
    assert tool[tool.index("-cp") + 1] == "/k/libs/*"
