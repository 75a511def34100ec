"""S3 storage (boto3): bounded retries with full-jitter backoff, optional hedged uploads.

Credentials come from boto3's standard chain (env, profile, instance/IRSA role);
endpoint and region are configurable, so any S3 API (moto, MinIO, Ceph) works.
"""

from __future__ import annotations

import base64
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar
from urllib.parse import urlencode

from pydantic import BaseModel

from memq.config import S3Config, StorageConfig
from memq.errors import (
    ConfigError,
    MemqError,
    ObjectNotFoundError,
    StorageAccessError,
    StorageError,
)
from memq.formats.crc import crc32
from memq.formats.keys import object_key, validate_name
from memq.retry import call_with_retries
from memq.storage_handlers.base import (
    DeleteResult,
    ObjectInfo,
    StorageHandler,
    StorageReader,
    StorageWriter,
    StoredObject,
    ViewReader,
)

__all__ = [
    "S3Bucket",
    "S3Config",
    "S3Handler",
    "S3Reader",
    "S3Writer",
    "classify_s3_error",
    "make_client",
]

log = logging.getLogger(__name__)

_RETRIABLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
#: Keys per DeleteObjects request (S3's limit).
DELETE_BATCH = 1000


def classify_s3_error(exc: BaseException, what: str) -> MemqError:
    """Map a boto3/botocore failure to a typed MemQ error (retriable or not)."""
    from botocore import exceptions as bx

    if isinstance(exc, MemqError):
        return exc
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        msg = f"{what}: {code or status} {err.get('Message', '')}".strip()
        if code in _NOT_FOUND:
            return ObjectNotFoundError(f"{msg} (deleted, expired, or the wrong bucket?)")
        if code in _RETRIABLE_CODES or status >= 500 or status == 429:
            return StorageError(msg)
        return StorageAccessError(f"{msg}: check the bucket name, region and credentials")
    if isinstance(exc, bx.ParamValidationError):  # refused before any request: no retry helps
        return StorageAccessError(f"{what}: invalid request: {exc}")
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return StorageAccessError(
            f"{what}: no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or attach an IAM role"
        )
    if isinstance(exc, bx.BotoCoreError | OSError):
        return StorageError(f"{what}: {type(exc).__name__}: {exc}")
    return StorageError(f"{what}: unexpected {type(exc).__name__}: {exc}")


def make_client(cfg: S3Config) -> Any:
    """A boto3 S3 client for ``cfg``; ConfigError (one line) for a profile or region
    boto3 refuses."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import InvalidRegionError, ProfileNotFound

    keys: dict[str, str] = {}
    if cfg.access_key_id and cfg.secret_access_key is not None:
        keys = {
            "aws_access_key_id": cfg.access_key_id,
            "aws_secret_access_key": cfg.secret_access_key.get_secret_value(),
        }
    config = Config(
        connect_timeout=cfg.connect_timeout_ms / 1000,
        read_timeout=cfg.read_timeout_ms / 1000,
        retries={"max_attempts": 0},  # our own policy retries, with metrics
        max_pool_connections=cfg.max_connections,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={
            **({"addressing_style": "path"} if cfg.endpoint_url else {}),
            # With the CRC-32 header (verified by S3, covered by the signature) the
            # body need not also be SHA-256 hashed for SigV4 (a second full pass,
            # ~2 CPU-s per GiB): it goes as UNSIGNED-PAYLOAD.
            "payload_signing_enabled": cfg.sign_payload or not cfg.upload_checksum,
        },
    )
    try:
        session = boto3.session.Session(profile_name=cfg.profile)
        return session.client(
            "s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region, **keys, config=config
        )
    except ProfileNotFound:
        raise ConfigError(
            f"S3 profile {cfg.profile!r} is not in the AWS config files (~/.aws/config, "
            "AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE): name one there, or leave the "
            "profile out for boto3's default chain"
        ) from None
    except InvalidRegionError:
        raise ConfigError(
            f"S3 region {cfg.region!r} is not a region name: use e.g. us-east-1, or leave "
            "it out for boto3's default chain"
        ) from None


class _S3Base:
    def __init__(self, cfg: S3Config, client: Any = None) -> None:
        self.config = cfg
        self._client = client
        self._lock = threading.Lock()
        #: Called with each failure that will be retried (the broker counts them).
        self.retry_listener: Callable[[BaseException], None] | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = make_client(self.config)
        return self._client

    def _retrying(self, fn: Callable[[], Any], what: str) -> Any:
        def attempt() -> Any:
            try:
                return fn()
            except Exception as e:
                raise classify_s3_error(e, what) from e

        def note(n: int, e: BaseException, delay: float) -> None:
            log.warning("%s failed (try %d), retrying in %.2fs: %s", what, n, delay, e)
            if self.retry_listener is not None:
                self.retry_listener(e)

        return call_with_retries(attempt, self.config.retry_policy(), on_retry=note)


class S3Writer(_S3Base, StorageWriter):
    """Uploads batch objects; a hedged second upload under a new key if one is slow."""

    name: ClassVar[str] = "s3"

    def __init__(self, cfg: S3Config, cluster: str, client: Any = None) -> None:
        super().__init__(cfg, client)
        self.cluster = validate_name("cluster", cluster)
        self._hedge_pool: ThreadPoolExecutor | None = None

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        extra: dict[str, Any] = {}
        if self.config.upload_checksum:
            crc = crc32(data).to_bytes(4, "big")
            extra["ChecksumCRC32"] = base64.b64encode(crc).decode()
        if self.config.object_tags:  # memq-retention-days=<n>: what lifecycle rules match
            extra["Tagging"] = urlencode(sorted(self.config.object_tags.items()))
        body = ViewReader(data)

        def put() -> Any:
            body.seek(0)
            return self.client.put_object(
                Bucket=self.config.bucket,
                Key=key,
                Body=body,
                ContentLength=len(body),
                ContentType="application/vnd.memq.batch",
                **extra,
            )

        self._retrying(put, f"PUT s3://{self.config.bucket}/{key}")

    def store(
        self, topic: str, batch_id: str, created_ms: int, data: bytes | bytearray | memoryview
    ) -> StoredObject:
        key = object_key(
            self.cluster, topic, batch_id, created_ms, use_hash_prefix=self.config.use_hash_prefix
        )
        if self.config.hedge_after_ms is None:
            self._put(key, data)
            return StoredObject("s3", self.config.bucket, key, len(data))
        return self._hedged(topic, batch_id, created_ms, key, data)

    def _hedged(
        self,
        topic: str,
        batch_id: str,
        created_ms: int,
        key: str,
        data: bytes | bytearray | memoryview,
    ) -> StoredObject:
        assert self.config.hedge_after_ms is not None
        # Both attempts read a private copy: the caller may reuse its buffer as soon as we
        # return, while the losing attempt is still running.
        data = bytes(data)
        with self._lock:
            if self._hedge_pool is None:
                self._hedge_pool = ThreadPoolExecutor(
                    max_workers=self.config.max_connections, thread_name_prefix="s3-hedge"
                )
        pool = self._hedge_pool
        first = pool.submit(self._put, key, data)
        done, _ = wait([first], timeout=self.config.hedge_after_ms / 1000)
        if done:
            first.result()
            return StoredObject("s3", self.config.bucket, key, len(data))
        key2 = object_key(
            self.cluster,
            topic,
            f"{batch_id}-h1",
            created_ms,
            use_hash_prefix=self.config.use_hash_prefix,
        )
        log.info(
            "upload of %s is slow after %d ms: hedging as %s", key, self.config.hedge_after_ms, key2
        )
        second = pool.submit(self._put, key2, data)
        keys = {first: key, second: key2}
        pending = {first, second}
        last_error: BaseException | None = None
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                if f.exception() is None:
                    for loser in pending:
                        loser.add_done_callback(functools.partial(self._drop_loser, keys[loser]))
                    return StoredObject("s3", self.config.bucket, keys[f], len(data))
                last_error = f.exception()
        assert last_error is not None
        raise last_error

    def delete(self, key: str) -> None:
        self._retrying(
            functools.partial(self.client.delete_object, Bucket=self.config.bucket, Key=key),
            f"DELETE s3://{self.config.bucket}/{key}",
        )

    def delete_many(self, keys: Sequence[str]) -> DeleteResult:
        """Batched DeleteObjects (1,000 keys per request, each request retried)."""
        deleted: list[str] = []
        failed: list[tuple[str, str]] = []
        bucket = self.config.bucket
        for i in range(0, len(keys), DELETE_BATCH):
            chunk = list(keys[i : i + DELETE_BATCH])
            request = {"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            try:
                resp = self._retrying(
                    functools.partial(self.client.delete_objects, Bucket=bucket, Delete=request),
                    f"DELETE {len(chunk)} objects from s3://{bucket}",
                )
            except MemqError as e:
                failed.extend((k, str(e)) for k in chunk)
                continue
            errors = {
                str(err.get("Key")): f"{err.get('Code')}: {err.get('Message', '')}".strip()
                for err in resp.get("Errors", [])
                if err.get("Code") not in _NOT_FOUND  # already gone: deleted
            }
            failed.extend(errors.items())
            deleted.extend(k for k in chunk if k not in errors)
        return DeleteResult(tuple(deleted), tuple(failed))

    def _drop_loser(self, key: str, fut: Future[None]) -> None:
        if fut.exception() is not None:
            return
        try:
            self.delete(key)
        except Exception as e:  # the duplicate is harmless: no notification points at it
            log.warning(
                "could not delete hedged duplicate s3://%s/%s: %s", self.config.bucket, key, e
            )

    def close(self) -> None:
        if self._hedge_pool is not None:
            self._hedge_pool.shutdown(wait=True)


def _receive(body: Any, into: memoryview, what: str) -> bytes | memoryview:
    """A GET's body straight from the socket into ``into`` when it is exactly that long.

    botocore's ``read()`` and urllib3's ``readinto()`` return fresh ``bytes``; only
    ``http.client``'s response under them reads into a given buffer, so this reaches it
    (``StreamingBody._raw_stream._fp``, as botocore's own ``set_socket_timeout`` reaches
    the socket) when every layer is the one it knows, and else reads the usual way. The
    length is checked here as botocore would; the caller verifies the content.
    """
    import http.client

    from botocore.response import StreamingBody

    raw: Any = getattr(body, "_raw_stream", None)
    fp: Any = getattr(raw, "_fp", None)
    direct = (
        type(body) is StreamingBody
        and isinstance(fp, http.client.HTTPResponse)
        and not fp.chunked
        and fp.length == len(into)
        and callable(getattr(raw, "release_conn", None))
    )
    if not direct:
        data: bytes = body.read()
        return data
    got = 0
    try:
        while got < len(into):
            n = fp.readinto(into[got:])
            if not n:
                raise StorageError(f"{what}: the body ended after {got} of {len(into)} bytes")
            got += n
    except BaseException:
        raw.close()  # (a connection stopped mid-body is not reusable)
        raise
    raw.release_conn()
    return into.toreadonly()


class S3Reader(_S3Base, StorageReader):
    name: ClassVar[str] = "s3"

    def read(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        kw: dict[str, Any] = {}
        if start or end is not None:
            if end is not None and end <= start:
                return b""
            kw["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        data: bytes = self._get(bucket, key, lambda body, _what: body.read(), **kw)
        return data

    def receive(self, bucket: str, key: str, into: memoryview) -> bytes | memoryview:
        data: bytes | memoryview = self._get(
            bucket, key, lambda body, what: _receive(body, into, what)
        )
        return data

    def _get(self, bucket: str, key: str, take: Callable[[Any, str], Any], **kw: Any) -> Any:
        """One GET, retried by the storage policy; ``take(body, what)`` reads its body."""
        what = f"GET s3://{bucket}/{key}"

        def get() -> Any:
            return take(self.client.get_object(Bucket=bucket, Key=key, **kw)["Body"], what)

        return self._retrying(get, what)

    def exists(self, bucket: str, key: str) -> bool:
        """HEAD the object."""

        def head() -> bool:
            self.client.head_object(Bucket=bucket, Key=key)
            return True

        try:
            found: bool = self._retrying(head, f"HEAD s3://{bucket}/{key}")
        except ObjectNotFoundError:
            return False
        return found

    def _pages(self, bucket: str, prefix: str, **extra: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, **extra}
            if token:
                kw["ContinuationToken"] = token
            page: dict[str, Any] = self._retrying(
                functools.partial(self.client.list_objects_v2, **kw),
                f"LIST s3://{bucket}/{prefix}",
            )
            yield page
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def list_objects(self, bucket: str, prefix: str) -> Iterator[ObjectInfo]:
        for page in self._pages(bucket, prefix):
            for obj in page.get("Contents", []):
                modified = obj.get("LastModified")
                ms = int(modified.timestamp() * 1000) if modified is not None else None
                yield ObjectInfo(obj["Key"], int(obj["Size"]), ms)

    def list_dirs(self, bucket: str, prefix: str) -> list[str]:
        return [
            p["Prefix"]
            for page in self._pages(bucket, prefix, Delimiter="/")
            for p in page.get("CommonPrefixes", [])
        ]


class S3Bucket(_S3Base):
    """Bucket-level settings MemQ manages: the lifecycle rules that expire tagged objects."""

    def lifecycle_rules(self) -> list[dict[str, Any]]:
        """The bucket's lifecycle rules ([] when it has none)."""
        from botocore.exceptions import ClientError

        bucket = self.config.bucket

        def get() -> list[dict[str, Any]]:
            try:
                resp = self.client.get_bucket_lifecycle_configuration(Bucket=bucket)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == "NoSuchLifecycleConfiguration":
                    return []
                raise
            return list(resp.get("Rules", []))

        rules: list[dict[str, Any]] = self._retrying(get, f"GET lifecycle of s3://{bucket}")
        return rules

    def put_lifecycle_rules(self, rules: list[dict[str, Any]]) -> None:
        """Replace the bucket's lifecycle configuration (none at all when ``rules`` is empty)."""
        bucket = self.config.bucket
        if not rules:
            call = functools.partial(self.client.delete_bucket_lifecycle, Bucket=bucket)
        else:
            call = functools.partial(
                self.client.put_bucket_lifecycle_configuration,
                Bucket=bucket,
                LifecycleConfiguration={"Rules": rules},
            )
        self._retrying(call, f"PUT lifecycle of s3://{bucket}")


class S3Handler(StorageHandler):
    """Any S3 API (AWS, MinIO, Ceph, moto). boto3 loads when the first request is made."""

    name: ClassVar[str] = "s3"
    config_model: ClassVar[type[BaseModel] | None] = S3Config

    @classmethod
    def writer(cls, cfg: StorageConfig, cluster: str) -> StorageWriter:
        if cfg.s3 is None:
            raise ConfigError("storage type s3 needs an `s3:` section with at least `bucket`")
        return S3Writer(cfg.s3, cluster)

    @staticmethod
    def _public_config(
        public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None
    ) -> S3Config:
        s = {**public_settings, **(overrides or {})}
        fields = {k: s[k] for k in ("bucket", "region", "endpoint_url", "profile") if s.get(k)}
        fields.setdefault("bucket", "unknown-bucket")
        extra = {k: v for k, v in s.items() if k in S3Config.model_fields and k not in fields}
        extra.pop("type", None)
        return S3Config.model_validate({**extra, **fields})

    @classmethod
    def reader(
        cls, public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> StorageReader:
        return S3Reader(cls._public_config(public_settings, overrides))

    @classmethod
    def bucket(
        cls, public_settings: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> S3Bucket:
        """Bucket settings (lifecycle rules) of the storage a broker advertises."""
        return S3Bucket(cls._public_config(public_settings, overrides))

    @classmethod
    def deleter(
        cls,
        public_settings: Mapping[str, Any],
        cluster: str,
        overrides: Mapping[str, Any] | None = None,
    ) -> StorageWriter:
        return S3Writer(cls._public_config(public_settings, overrides), cluster)
