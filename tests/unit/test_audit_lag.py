"""The auditor's lag pieces without servers: the document, the group filter, the totals.

The measurements themselves run against real servers in
tests/integration/test_audit_lag.py; here a stand-in for :class:`GroupAdmin` (our own
class, not Kafka) feeds :class:`LagCollector` fixed answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from memq.audit.config import AuditLagConfig, load_auditor_config
from memq.audit.lag import NOT_CONFIGURED, lag_document
from memq.consumer.groups import GroupAdmin, LagCollector, PartitionLag


class FakeAdmin:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.asked: list[tuple[str, list[str]]] = []

    def list_groups(self, match: Any = None, *, members: bool = True) -> list[dict[str, Any]]:
        # Lag is measured for groups that committed (a live one that has not would
        # count from the start of the topic).
        assert members is False
        if self.fail is not None:
            raise self.fail
        groups = [
            {"group": "orders-a", "state": "empty", "topics": ["orders", "other"]},
            {"group": "audit-x", "state": "stable", "topics": ["orders"]},
        ]
        return [g for g in groups if match is None or match(g["group"])]

    def lag(self, group: str, topics: Sequence[str]) -> dict[str, list[PartitionLag]]:
        self.asked.append((group, list(topics)))
        return {
            t: [
                PartitionLag(0, 4, 0, 10, 6, 60, 12.5),
                PartitionLag(1, None, 2, 5, 3, 30, 40.0, records_estimated=True),
            ]
            for t in topics
        }


def collector(admin: FakeAdmin, groups: Sequence[str] = ()) -> LagCollector:
    return LagCollector(cast(GroupAdmin, admin), groups)


def test_totals_filters_and_the_document() -> None:
    admin = FakeAdmin()
    lag = collector(admin, ["orders-*"])
    lag.refresh({"orders"})
    assert admin.asked == [("orders-a", ["orders"])]  # filtered by pattern and topic
    doc = lag_document(lag, AuditLagConfig(bootstrap_servers="b:9092", groups=["orders-*"]))
    assert doc["enabled"] and doc["error"] is None and doc["hint"] is None
    assert doc["measured_ms"] is not None and doc["group_patterns"] == ["orders-*"]
    (g,) = doc["groups"]
    assert (g["group"], g["topic"], g["state"]) == ("orders-a", "orders", "empty")
    # Uncommitted partitions count from their start offset, as their lag does.
    assert (g["lag_objects"], g["lag_records"], g["committed"], g["end"]) == (9, 90, 6, 15)
    assert g["lag_seconds"] == 40.0 and g["records_estimated"] is True


def test_no_topics_measures_nothing_and_failures_are_one_typed_line() -> None:
    admin = FakeAdmin(ConnectionError("refused\n  by peer"))
    lag = collector(admin)
    lag.refresh(set())  # no audited topic yet: nothing asked
    assert lag.snapshot()["groups"] == [] and lag.last_error is None
    lag.refresh({"orders"})
    snap = lag.snapshot()
    assert snap["error"] == "ConnectionError: refused by peer" and snap["errors"] == 1
    doc = lag_document(lag, AuditLagConfig(bootstrap_servers="b:9092"))
    assert "lag.bootstrap_servers" in doc["hint"]


def test_not_configured_and_config_keys() -> None:
    doc = lag_document(None, AuditLagConfig())
    assert (doc["enabled"], doc["error"], doc["groups"]) == (False, NOT_CONFIGURED, [])
    cfg = load_auditor_config(
        data={"kafka": {"bootstrap_servers": "k:9092"}},
        env={"MEMQ_AUDITOR__LAG__BOOTSTRAP_SERVERS": "memq:9092",
             "MEMQ_AUDITOR__LAG__INTERVAL_S": "5"},
    )  # fmt: skip
    assert (cfg.lag.bootstrap_servers, cfg.lag.interval_s) == ("memq:9092", 5.0)


def test_bad_lag_settings_are_one_line_config_errors() -> None:
    import pytest

    from memq.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_auditor_config(
            data={"kafka": {"bootstrap_servers": "k:9092"}, "lag": {"interval_s": 0}}
        )
    assert "lag.interval_s: Input should be greater than or equal to 1" in str(e.value)
