"""The consumer group session on the local stack: short, so a member that went away
without leaving the group holds up the next join for seconds, not most of a minute."""

from __future__ import annotations

from memq.consumer.config import ConsumerConfig

__all__ = ["LOCAL_GROUP_SESSION", "local_group_session"]

#: (session.timeout.ms, heartbeat.interval.ms) on the local stack unless set. Under the
#: classic protocol a member that did not leave (killed, its terminal closed, a script
#: stopped without close()) holds its partitions, and a rebalance waits for it, until its
#: session expires: the next join of that group took 45 s with Kafka's default session,
#: 6 s with this one (Apache Kafka 4.1.1). On a developer's machine that is the common
#: way to stop a consumer.
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
