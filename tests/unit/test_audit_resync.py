"""When the auditor's stored offsets no longer describe the audit topic (issue 16, item 1)."""

from __future__ import annotations

from pathlib import Path

from memq.audit.ingest import resync_reason
from memq.audit.store import AuditStore


def test_same_topic_keeps_the_offsets() -> None:
    assert resync_reason("id-a", "id-a", {0: 113}, {}) is None
    assert resync_reason(None, "id-a", {0: 113}, {}) is None  # first sight: recorded only


def test_a_new_topic_id_means_a_new_kafka_or_a_recreated_topic() -> None:
    why = resync_reason("id-a", "id-b", {0: 113}, {})
    assert why is not None and "id-a -> id-b" in why and "new Kafka" in why


def test_without_topic_ids_an_offset_beyond_the_end_resyncs() -> None:
    assert resync_reason(None, None, {0: 100, 1: 5}, {0: 100, 1: 7}) is None
    why = resync_reason(None, None, {0: 113, 1: 5}, {0: 40, 1: 7})
    assert why is not None and "partition 0: 113 > end 40" in why
    assert "partition 1" not in why


def test_watermarks_are_not_consulted_when_the_topic_has_an_id() -> None:
    # The same topic id: the offsets were read from this very topic, whatever its ends.
    assert resync_reason("id-a", "id-a", {0: 113}, {0: 40}) is None


def test_store_resync_drops_offsets_keeps_figures_and_records_the_id(tmp_path: Path) -> None:
    store = AuditStore(tmp_path / "a.db")
    store.reset_offsets("memq.audit", {0: 113, 1: 7})
    store.reset_offsets("other", {0: 3})
    store.set_topic_id("memq.audit", "id-a")
    assert store.topic_id("memq.audit") == "id-a"
    assert store.resync("memq.audit", "id-b") == {0: 113, 1: 7}
    assert store.offsets("memq.audit") == {} and store.offsets("other") == {0: 3}
    assert store.topic_id("memq.audit") == "id-b"
    store.reset_offsets("memq.audit", {0: 2})
    store.reset_offsets("memq.audit", {0: 1})  # may go backwards (Kafka reset it)
    assert store.offsets("memq.audit") == {0: 1}
