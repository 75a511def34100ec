from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.errors import InvalidRequestError, MalformedError
from memq.protocol import (
    Ack,
    BrokerInfo,
    ClusterMetadata,
    MetadataRequest,
    TopicMetadata,
    WriteAck,
    decode_msg,
    decode_write,
    encode_msg,
    encode_write_header,
    parse_ack,
)


@given(st.text(min_size=1, max_size=100), st.sampled_from(list(Ack)), st.binary(max_size=300))
def test_write_round_trip(topic, ack, block):
    body = encode_write_header(topic, ack) + block
    a, t, b = decode_write(body)
    assert (a, t, bytes(b)) == (ack, topic, block)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"\x02", MalformedError),
        (b"\x02\x02\x00\x01t", MalformedError),  # reserved flags
        (b"\x09\x00\x00\x01t", InvalidRequestError),  # ack mode
        (b"\x02\x00\x00\x09t", MalformedError),  # topic runs past the end
        (b"\x02\x00\x00\x01\xff", MalformedError),  # not UTF-8
    ],
)
def test_bad_write_bodies(body, error):
    with pytest.raises(error):
        decode_write(body)


def test_parse_ack():
    assert [parse_ack(v) for v in ("0", 1, "all", "-1", "ALL")] == [
        Ack.NONE,
        Ack.LEADER,
        Ack.ALL,
        Ack.ALL,
        Ack.ALL,
    ]
    with pytest.raises(InvalidRequestError):
        parse_ack("3")
    with pytest.raises(InvalidRequestError, match="acks must be 0, 1 or all"):
        parse_ack("2")  # the wire value of all, not a setting: Kafka rejects acks=2
    assert parse_ack(Ack.ALL) is Ack.ALL


def test_metadata_messages_round_trip():
    md = ClusterMetadata(
        cluster="c",
        broker="b1",
        brokers=[BrokerInfo(id="b1", host="h", port=1), BrokerInfo(id="b2", host="h2", port=2)],
        topics={
            "t": TopicMetadata(name="t", writers=["b2"], storage={"type": "s3", "bucket": "x"})
        },
    )
    again = decode_msg(ClusterMetadata, encode_msg(md), "md")
    assert again == md
    assert again.writer_addresses("t") == ["h2:2"] and again.writer_addresses("u") == []
    assert decode_msg(MetadataRequest, encode_msg(MetadataRequest(topics=None)), "r").topics is None
    ack = WriteAck(bucket="b", key="k", block=3)
    assert decode_msg(WriteAck, encode_msg(ack), "a") == ack


def test_decode_msg_errors():
    with pytest.raises(MalformedError):
        decode_msg(WriteAck, b"\xc1", "x")
    with pytest.raises(InvalidRequestError, match="bucket: Field required"):
        decode_msg(WriteAck, encode_msg(MetadataRequest()), "x")


def test_an_integer_past_64_bits_is_a_typed_error_not_an_overflow() -> None:
    from memq.protocol import TopicCreate

    with pytest.raises(InvalidRequestError, match="must fit 64 bits"):
        encode_msg(TopicCreate(name="t", settings={"retention.ms": 10**23}))
    assert encode_msg(TopicCreate(name="t", settings={"retention.ms": (1 << 63) - 1}))
