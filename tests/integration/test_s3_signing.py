"""Uploads send a CRC-32 checksum header and skip SHA-256 payload signing by default
(one hashing pass per object instead of two); sign_payload restores it."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import pytest

from memq.config import S3Config
from memq.devstack import StackState
from memq.storage_handlers.s3 import S3Writer


@pytest.mark.parametrize("sign", [False, True])
def test_put_headers(memq_stack: StackState, s3_bucket: str, sign: bool) -> None:
    cfg = S3Config(bucket=s3_bucket, endpoint_url=memq_stack.s3_endpoint, region="us-east-1",
                   access_key_id="memq-dev", secret_access_key="memq-dev-secret",
                   sign_payload=sign)  # fmt: skip
    w = S3Writer(cfg, "c")
    sent: list[dict[str, Any]] = []
    w.client.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: sent.append(dict(request.headers))
    )
    data = b"memq" * 1000
    stored = w.store("t", "b1", 1_763_790_000_000, data)
    (h,) = sent
    assert h["x-amz-checksum-crc32"] == base64.b64encode(zlib.crc32(data).to_bytes(4, "big"))
    assert (h["X-Amz-Content-SHA256"] == b"UNSIGNED-PAYLOAD") is not sign
    body = w.client.get_object(Bucket=s3_bucket, Key=stored.key)["Body"].read()
    assert body == data
