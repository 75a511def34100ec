"""TLS and authentication on the broker protocol and HTTP port (real broker, real S3/Kafka).

Certificates come from the same throwaway-CA code `memq dev up --tls` uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memq import Consumer, Producer
from memq.client.connection import ClientConnection
from memq.devstack import StackState
from memq.devstack.certs import DevCerts, make_dev_certs
from memq.errors import AuthenticationError, ConfigError, ConnectionLostError, MemqError
from memq.formats import RequestType
from memq.run.broker import BrokerThread
from memq.security import ClientSecurity, client_context, make_token
from memq.testing import broker_config
from tests.integration.helpers import external_stack_env

SECRET = "s3cr3t-for-tests-0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


def tls_broker(
    stack: StackState, bucket: str, certs: DevCerts, *, client_auth: str = "none", auth: bool = True
) -> BrokerThread:
    cfg = broker_config(
        stack,
        bucket=bucket,
        topics=["sec"],
        batch_ms=50,
        cluster=f"sec-{uuid.uuid4().hex[:8]}",  # notification topics of this broker only
        tls={
            "cert_file": str(certs.server_cert),
            "key_file": str(certs.server_key),
            "ca_file": str(certs.ca_file),
            "client_auth": client_auth,
        },
        auth={
            "enabled": auth,
            "token_secret": SECRET,
            "acls": [
                {"principal": "*", "topic": "sec", "ops": ["produce", "consume"]},
                {"principal": "root", "topic": "*", "ops": ["admin"]},
            ],
        },
    )
    return BrokerThread(cfg)


@pytest.fixture
def broker(memq_stack: StackState, s3_bucket: str, certs: DevCerts) -> Iterator[BrokerThread]:
    with tls_broker(memq_stack, s3_bucket, certs) as b:
        yield b


def client_conf(certs: DevCerts, broker: BrokerThread, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.address,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca_file),
        "linger.ms": 2,
        "delivery.timeout.ms": 5000,
        "request.timeout.ms": 3000,
        **extra,
    }


def test_tls_and_token_produce_and_consume(
    broker: BrokerThread, certs: DevCerts, memq_stack: StackState
) -> None:
    token = make_token(SECRET.encode(), "app-1", 600)
    conf = client_conf(certs, broker, **{"auth.token": token})
    values = [b"secret-%d" % i for i in range(300)]
    with Producer(conf) as p:
        futs = [p.produce("sec", v) for v in values]
        assert p.flush(30) == 0
        assert all(f.exception(0) is None for f in futs)
    c = Consumer({**{k: v for k, v in conf.items() if k not in ("linger.ms", "delivery.timeout.ms",
                  "request.timeout.ms")}, "group.id": "sec-readers",
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 1000})  # fmt: skip
    try:
        c.subscribe("sec")
        got: list[bytes] = []
        for _ in range(60):
            got += [m.value for m in c.consume(500, 1.0)]
            if len(got) >= len(values):
                break
        assert sorted(got) == sorted(values)
    finally:
        c.close()


def test_missing_expired_and_forged_tokens_are_rejected(
    broker: BrokerThread, certs: DevCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # TLS but no token: every request but PING/AUTH is UNAUTHENTICATED, non-retriable.
    with Producer(client_conf(certs, broker)) as p:
        err = p.produce("sec", b"x").exception(30)
    assert isinstance(err, AuthenticationError) and "auth.token" in str(err)
    expired = make_token(SECRET.encode(), "app-1", -5)
    forged = make_token(b"another-secret-entirely", "admin", 600)
    for token, what in ((expired, "expired"), (forged, "signature")):
        with Producer(client_conf(certs, broker, **{"auth.token": token})) as p:
            err = p.produce("sec", b"x").exception(30)
        assert isinstance(err, AuthenticationError) and what in str(err), err
        assert token not in str(err)
    # Secrets never reach logs or error texts.
    text = caplog.text
    assert SECRET not in text and expired not in text and forged not in text
    # The broker is still serving a good client.
    ok = make_token(SECRET.encode(), "app-2", 600)
    with Producer(client_conf(certs, broker, **{"auth.token": ok})) as p:
        assert p.produce("sec", b"fine").result(30).key


def test_three_bad_auth_attempts_close_the_connection(
    broker: BrokerThread, certs: DevCerts
) -> None:
    async def go() -> None:
        sec = ClientSecurity(ssl_context=client_context(certs.ca_file))
        conn = await ClientConnection.open(broker.address, security=sec)
        for i in range(2):
            with pytest.raises(AuthenticationError):
                await conn.request(RequestType.AUTH, b"bogus.token%d" % i, timeout=10)
        assert not conn.closed
        with pytest.raises((AuthenticationError, ConnectionLostError)):
            await conn.request(RequestType.AUTH, b"bogus.again", timeout=10)
        for _ in range(100):
            if conn.closed:
                break
            await asyncio.sleep(0.05)
        assert conn.closed

    asyncio.run(go())


def test_plaintext_client_and_wrong_ca_fail_clearly(
    broker: BrokerThread, certs: DevCerts, tmp_path: Path
) -> None:
    token = make_token(SECRET.encode(), "app-1", 600)
    plain = {"bootstrap.servers": broker.address, "auth.token": token, "linger.ms": 2,
             "delivery.timeout.ms": 3000, "request.timeout.ms": 2000}  # fmt: skip
    with Producer(plain) as p:
        err = p.produce("sec", b"x").exception(30)
    assert isinstance(err, MemqError)
    other = make_dev_certs(tmp_path / "other")  # a CA that did not sign the broker's cert
    with Producer(client_conf(other, broker, **{"auth.token": token})) as p:
        err = p.produce("sec", b"x").exception(30)
    assert isinstance(err, AuthenticationError) and "ssl.ca.location" in str(err), err


def test_mutual_tls_identity_needs_no_token(
    memq_stack: StackState, s3_bucket: str, certs: DevCerts
) -> None:
    with tls_broker(memq_stack, s3_bucket, certs, client_auth="required") as b:
        conf = client_conf(certs, b, **{"ssl.certificate.location": str(certs.client_cert),
                                        "ssl.key.location": str(certs.client_key)})  # fmt: skip
        with Producer(conf) as p:
            assert p.produce("sec", b"via mtls").result(30).key
        # Without a client certificate the handshake itself is refused.
        with Producer(client_conf(certs, b)) as p:
            err = p.produce("sec", b"x").exception(30)
        assert isinstance(err, MemqError)
        assert b.server is not None
        principals = [c.principal for c in b.server.connections]
        assert all(p in (None, certs.client_name) for p in principals)


def test_http_is_tls_and_status_needs_a_bearer_token(broker: BrokerThread, certs: DevCerts) -> None:
    assert broker.server is not None and broker.server.http_port
    base = f"https://127.0.0.1:{broker.server.http_port}"
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    with urllib.request.urlopen(f"{base}/healthz", context=ctx, timeout=5) as r:
        assert json.loads(r.read())["status"] == "ok"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{base}/status", context=ctx, timeout=5)
    assert e.value.code == 401
    # Every topic the broker writes: cluster admins only (a producer saw them all).
    token = make_token(SECRET.encode(), "ops", 600)
    req = urllib.request.Request(f"{base}/status", headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=ctx, timeout=5)
    assert e.value.code == 403 and "may not admin" in json.loads(e.value.read())["error"]
    token = make_token(SECRET.encode(), "root", 600)
    req = urllib.request.Request(f"{base}/status", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        doc = json.loads(r.read())
    assert doc["topics"]["sec"]["storage"] == "s3"
    assert SECRET not in json.dumps(doc)


def test_auth_without_a_credential_source_is_a_config_error(
    memq_stack: StackState, s3_bucket: str
) -> None:
    with pytest.raises(ConfigError, match=r"auth\.enabled needs"):
        broker_config(memq_stack, bucket=s3_bucket, topics=["sec"], auth={"enabled": True})


def test_dev_up_tls_local_clients_pick_up_ca_and_token(
    memq_stack: StackState, tmp_path: Path
) -> None:
    import subprocess
    import sys

    d = tmp_path / "tls-stack"
    env = external_stack_env(memq_stack, MEMQ_STATE_DIR=str(d))

    def memq(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memq.cli.main", *args],
            capture_output=True, text=True, timeout=timeout, env=env, check=False,
        )  # fmt: skip

    up = memq("dev", "up", "--tls", "--no-auditor")
    assert up.returncode == 0, up.stderr
    try:
        assert "TLS on" in up.stderr
        secret = (d / "tls" / "token_secret").read_text()
        assert (d / "tls" / "token_secret").stat().st_mode & 0o077 == 0
        status = memq("dev", "status", "--json")
        assert status.returncode == 0, status.stderr
        assert secret not in status.stdout and secret not in up.stdout + up.stderr
        doc = json.loads(status.stdout)
        brokers = doc["brokers"]
        assert doc["healthy"] and brokers and all(b["healthy"] for b in brokers), status.stdout
        assert all(b["http"].startswith("https://") for b in brokers)
        prod = memq("produce", "--topic", "tls-t", "--count", "50", "--size", "100")
        assert prod.returncode == 0, prod.stderr
        cons = memq("consume", "--topic", "tls-t", "--group", "g", "--from-beginning",
                    "--max", "50", "--format", "json", "-X", "session.timeout.ms=6000",
                    "-X", "heartbeat.interval.ms=1000")  # fmt: skip
        assert cons.returncode == 0, cons.stderr
        assert len(cons.stdout.strip().splitlines()) == 50
        # A client with no CA or token gets nowhere.
        endpoint = brokers[0]["endpoint"]
        with Producer({"bootstrap.servers": endpoint, "delivery.timeout.ms": 3000,
                       "request.timeout.ms": 2000}) as p:  # fmt: skip
            assert isinstance(p.produce("tls-t", b"x").exception(30), MemqError)
    finally:
        down = memq("dev", "down")
        assert down.returncode == 0, down.stderr
