"""Tokens (pure): signing, expiry, tampering, and error texts that never leak secrets."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq.errors import AuthenticationError, ConfigError
from memq.security import make_token, verify_token

SECRET = b"unit-test-secret"


def test_round_trip_and_expiry() -> None:
    tok = make_token(SECRET, "alice", 60, now=1_000)
    assert verify_token(SECRET, tok, now=1_059) == ("alice", 1_060)
    assert verify_token(SECRET, tok.encode(), now=1_000)[0] == "alice"
    with pytest.raises(AuthenticationError, match="expired"):
        verify_token(SECRET, tok, now=1_060)


def test_tampered_payload_or_other_secret_is_rejected() -> None:
    tok = make_token(SECRET, "alice", 60, now=1_000)
    _, sig = tok.split(".")
    forged = base64.urlsafe_b64encode(json.dumps({"sub": "admin", "exp": 9e9}).encode())
    with pytest.raises(AuthenticationError, match="signature"):
        verify_token(SECRET, forged.decode().rstrip("=") + "." + sig, now=1_000)
    with pytest.raises(AuthenticationError, match="signature"):
        verify_token(b"other", tok, now=1_000)


@pytest.mark.parametrize("bad", ["", "nodot", ".", "a.", ".b", "!!!.???", "é.é"])
def test_malformed_tokens(bad: str) -> None:
    with pytest.raises(AuthenticationError) as e:
        verify_token(SECRET, bad, now=0)
    assert SECRET.decode() not in str(e.value)


def test_oversized_and_non_ascii_bytes() -> None:
    with pytest.raises(AuthenticationError, match="too long"):
        verify_token(SECRET, b"a" * 5000)
    with pytest.raises(AuthenticationError, match="ASCII"):
        verify_token(SECRET, b"\xff\xfe.\x00")


def test_bad_signing_inputs_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        make_token(b"", "alice", 60)
    with pytest.raises(ConfigError):
        make_token(SECRET, "", 60)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        verify_token(SECRET, data, now=0)
    except AuthenticationError as e:
        assert SECRET.decode() not in str(e)
