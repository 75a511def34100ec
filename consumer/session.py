"""The consumer group session on the local stack: short, so a join is served in seconds."""

from __future__ import annotations

from memq.consumer.config import ConsumerConfig

__all__ = ["LOCAL_GROUP_SESSION", "local_group_session"]

#: (session.timeout.ms, heartbeat.interval.ms) on the local stack unless set: its Kafka
#: assigns partitions about session.timeout.ms / 2 after a join (23 s with the default 45 s).
LOCAL_GROUP_SESSION = (6000, 1000)


def local_group_session(cfg: ConsumerConfig) -> ConsumerConfig:
    """``cfg`` with the local stack's short group session where the user set none."""
    if cfg.group_protocol != "classic":  # the broker sets them
        return cfg
    given = cfg.model_fields_set
    session, heartbeat = LOCAL_GROUP_SESSION
    update: dict[str, int] = {}
    if "session_timeout_ms" not in given:
        hb = cfg.heartbeat_interval_ms if "heartbeat_interval_ms" in given else heartbeat
        update["session_timeout_ms"] = max(session, 3 * hb)
    if "heartbeat_interval_ms" not in given:
        update["heartbeat_interval_ms"] = min(heartbeat, cfg.session_timeout_ms // 3)
    return cfg.model_copy(update=update) if update else cfg
