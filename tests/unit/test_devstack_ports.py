"""The dev brokers' Kafka ports (``memq dev up --kafka-listener-port``): one per broker,
consecutive, each checked before anything starts."""

from __future__ import annotations

import socket

import pytest

from memq.devstack.stack import _kafka_listener_ports
from memq.errors import DevStackError


def test_free_ports_unless_pinned_then_consecutive_from_the_first() -> None:
    assert _kafka_listener_ports(None, None) == [0]
    assert _kafka_listener_ports(None, 3) == [0, 0, 0]
    with socket.socket() as s:  # (a port free a moment ago: bound here, then released)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _kafka_listener_ports(port, 1) == [port]


def test_a_taken_port_is_an_error_naming_the_broker_and_the_option() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DevStackError) as e:
            _kafka_listener_ports(port, 1)
    assert str(e.value) == (
        f"port {port} (broker-1's Kafka port, from --kafka-listener-port {port}) is in use: "
        "pick another port, or leave the option out for free ones"
    )


def test_ports_past_65535_are_refused() -> None:
    with pytest.raises(DevStackError, match="needs ports up to 65537, past 65535"):
        _kafka_listener_ports(65534, 4)
