"""TLS contexts and authentication tokens for the broker protocol and HTTP ports.

Tokens are HMAC-SHA256 signed, with an expiry, in the compact form
``base64url(payload) "." base64url(signature)`` where the payload is the JSON object
``{"sub": <principal>, "exp": <unix seconds>}`` (``memq token create`` makes one).
Brokers verify them with the shared secret (``auth.token_secret``); a connection
presents one in an AUTH request before anything else. With mutual TLS the client
certificate's common name is the principal instead (``cn:<name>`` is not used: the
plain name, so ACLs read the same for both).

Pure functions except the ``ssl`` context builders, which read certificate files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from memq.acl import AclEntry
from memq.errors import AuthenticationError, ConfigError

__all__ = [
    "AuthConfig",
    "ClientSecurity",
    "TlsConfig",
    "client_context",
    "make_token",
    "peer_principal",
    "server_context",
    "verify_token",
]

MAX_TOKEN_BYTES = 4096


class TlsConfig(BaseModel):
    """Server TLS: the broker protocol and its HTTP port (or the auditor's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: PEM certificate chain of this server.
    cert_file: Path
    #: PEM private key of ``cert_file``.
    key_file: Path
    #: PEM CA bundle that signs client certificates (mutual TLS); None: no client certs.
    ca_file: Path | None = None
    #: Client certificates: none, optional (verified when sent) or required (mutual TLS).
    client_auth: Literal["none", "optional", "required"] = "none"


class AuthConfig(BaseModel):
    """Authentication of clients: HMAC tokens and/or mutual-TLS identities."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Reject every request (but PING and AUTH) of a connection that has not authenticated.
    enabled: bool = False
    #: Shared secret that signs tokens (set it through MEMQ__AUTH__TOKEN_SECRET or
    #: token_secret_file, not in a committed file). Never logged.
    token_secret: SecretStr | None = None
    #: File holding the secret (e.g. a mounted Kubernetes Secret).
    token_secret_file: Path | None = None
    #: Accept a verified client certificate's common name as the principal.
    mtls_identity: bool = True
    #: Principals allowed everything (the first admins; they grant the others).
    superusers: list[str] = []
    #: ACLs of a standalone broker; clustered brokers keep theirs in ZooKeeper
    #: (``memq acl add|remove|list``).
    acls: list[AclEntry] = []

    def secret(self) -> bytes | None:
        if self.token_secret is not None:
            return self.token_secret.get_secret_value().encode()
        if self.token_secret_file is not None:
            try:
                return self.token_secret_file.read_bytes().strip()
            except OSError as e:
                raise ConfigError(
                    f"auth.token_secret_file {self.token_secret_file}: {e.strerror or e}"
                ) from None
        return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_token(secret: bytes, principal: str, ttl_s: float, now: float | None = None) -> str:
    """A token for ``principal`` valid for ``ttl_s`` seconds."""
    if not secret:
        raise ConfigError("cannot sign a token with an empty secret")
    if not principal or len(principal) > 256:
        raise ConfigError("a token principal must be 1-256 characters")
    exp = int((time.time() if now is None else now) + ttl_s)
    payload = json.dumps({"sub": principal, "exp": exp}, separators=(",", ":")).encode()
    sig = hmac.new(secret, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(sig)}"


def verify_token(secret: bytes, token: str | bytes, now: float | None = None) -> tuple[str, int]:
    """(principal, expiry) of a valid token; :class:`AuthenticationError` otherwise.

    Error texts never include the token or the secret.
    """
    if isinstance(token, bytes):
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationError("token too long")
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationError("malformed token: not ASCII") from None
    head, dot, sig = token.partition(".")
    if not dot or not head or not sig:
        raise AuthenticationError("malformed token: expected <payload>.<signature>")
    try:
        payload, given = _unb64(head), _unb64(sig)
    except (ValueError, TypeError):
        raise AuthenticationError("malformed token: not base64url") from None
    if not hmac.compare_digest(hmac.new(secret, payload, hashlib.sha256).digest(), given):
        raise AuthenticationError("invalid token signature (signed with another secret?)")
    try:
        claims: Any = json.loads(payload)
        sub, exp = claims["sub"], claims["exp"]
    except (ValueError, KeyError, TypeError):
        raise AuthenticationError("malformed token payload") from None
    if not isinstance(sub, str) or not isinstance(exp, int) or isinstance(exp, bool):
        raise AuthenticationError("malformed token payload")
    if exp <= (time.time() if now is None else now):
        raise AuthenticationError(f"token of {sub!r} expired at {exp}: get a new one")
    return sub, exp


def server_context(cfg: TlsConfig) -> ssl.SSLContext:
    """TLS server context (TLS 1.2+), with client verification per ``client_auth``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        if cfg.client_auth != "none":
            if cfg.ca_file is None:
                raise ConfigError("tls.client_auth needs tls.ca_file (the CA of client certs)")
            ctx.load_verify_locations(cfg.ca_file)
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if cfg.client_auth == "required" else ssl.CERT_OPTIONAL
            )
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"tls: cannot load certificate/key/CA: {e}") from None
    return ctx


def client_context(
    ca_file: Path | str | None,
    cert_file: Path | str | None = None,
    key_file: Path | str | None = None,
    *,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """TLS client context: verify the server with ``ca_file`` (default: system CAs)."""
    try:
        ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = check_hostname
        if cert_file:
            ctx.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl: cannot load CA/certificate/key: {e}") from None
    return ctx


def peer_principal(ssl_object: Any) -> str | None:
    """Common name of a verified peer certificate, if any."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class ClientSecurity(BaseModel):
    """What a client connection needs: a TLS context and/or a token (built from config)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    ssl_context: ssl.SSLContext | None = None
    token: SecretStr | None = Field(default=None, repr=False)

    @property
    def enabled(self) -> bool:
        return self.ssl_context is not None or self.token is not None
