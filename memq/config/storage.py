"""Storage config: which handler stores a topic's batch objects, and its settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from memq.config.base import FrozenModel
from memq.retry import RetryPolicy

__all__ = ["FilesystemConfig", "S3Config", "StorageConfig"]


class S3Config(FrozenModel):
    """S3 storage settings. Credentials: boto3's standard chain (env, profile, IRSA,
    instance role); static keys only for S3-compatible stores that need them (MinIO, the
    local stack's S3), never for AWS."""

    #: Bucket that holds the batch objects.
    bucket: str = Field(min_length=3, max_length=63)
    #: AWS region (default: boto3's chain, e.g. AWS_DEFAULT_REGION).
    region: str | None = None
    #: S3 API endpoint for non-AWS stores (MinIO, Ceph, moto); null for AWS.
    endpoint_url: str | None = None
    #: Named AWS profile; null uses the standard credential chain (env, IRSA, instance role).
    profile: str | None = None
    #: Static access key of an S3-compatible store (MinIO, the local stack); null: the chain.
    access_key_id: str | None = None
    #: Secret of access_key_id (set it through the environment or a mounted file, never a
    #: committed config). Never logged.
    secret_access_key: SecretStr | None = Field(default=None, repr=False)
    #: Prefix keys with 2 hex digits to spread load over S3 partitions.
    use_hash_prefix: bool = True
    #: Tries per operation (first try included) on 5xx, throttling, timeouts, resets.
    attempts: int = Field(default=5, ge=1, le=50)
    #: First retry backoff; grows x2 per try, fully jittered.
    backoff_ms: int = Field(default=100, ge=1)
    #: Largest retry backoff.
    backoff_max_ms: int = Field(default=5000, ge=1)
    #: Overall deadline of one operation, retries included.
    deadline_ms: int = Field(default=60_000, ge=100)
    #: TCP connect timeout of one try.
    connect_timeout_ms: int = Field(default=5_000, ge=100)
    #: Socket read timeout of one try.
    read_timeout_ms: int = Field(default=30_000, ge=100)
    #: Start a second upload under a new key (suffix -h1) if the first is not done by then; null: off.
    hedge_after_ms: int | None = Field(default=None, ge=10)
    #: HTTP connection pool size.
    max_connections: int = Field(default=32, ge=1, le=1024)
    #: Send a CRC-32 of each object so S3 rejects a corrupted upload.
    upload_checksum: bool = True
    #: Also SHA-256 each object body for the SigV4 signature. Off (default) with
    #: upload_checksum: the signed CRC-32 header lets S3 reject a corrupted body, the
    #: payload goes as UNSIGNED-PAYLOAD (use HTTPS endpoints: TLS protects it in transit),
    #: and each upload saves a full hashing pass.
    sign_payload: bool = False
    #: Tag each object ``memq-retention-days=<days>`` (the topic's retention.ms rounded up
    #: to whole days), so bucket lifecycle rules (``memq retention apply-lifecycle``) can
    #: expire it. Needs s3:PutObjectTagging (off by default: existing IAM policies keep
    #: working; the retention job needs no tags).
    tag_retention: bool = False
    #: Tags put on every object (at most 10, e.g. cost allocation). With tag_retention on,
    #: MemQ sets ``memq-retention-days`` here from the topic's retention.ms.
    object_tags: dict[str, str] = {}

    @field_validator("object_tags")
    @classmethod
    def _s3_tag_limits(cls, tags: dict[str, str]) -> dict[str, str]:
        if len(tags) > 10:
            raise ValueError(f"S3 allows at most 10 tags per object, got {len(tags)}")
        for k, v in tags.items():
            if not 1 <= len(k) <= 128 or len(v) > 256:
                raise ValueError(f"object tag {k!r}: keys are 1-128 characters, values at most 256")
        return tags

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.attempts,
            base=self.backoff_ms / 1000,
            cap=max(self.backoff_max_ms, self.backoff_ms) / 1000,
            deadline=self.deadline_ms / 1000,
        )


class FilesystemConfig(FrozenModel):
    """Filesystem storage settings: a directory tree with the S3 key layout (NFS, disk)."""

    #: Directory that holds the batch objects (NFS or local disk).
    root: str = Field(min_length=1)
    #: Prefix keys with 2 hex digits (rarely useful on a filesystem).
    use_hash_prefix: bool = False
    #: fsync each object and its directory before acknowledging.
    fsync: bool = True


class StorageConfig(FrozenModel):
    """Where a topic's batch objects go: ``type`` picks the handler, its section configures it."""

    #: Storage handler: s3, filesystem, or devnull (discards: benchmarks only).
    type: Literal["s3", "filesystem", "devnull"] = "s3"
    #: Settings of the s3 handler (required when type is s3).
    s3: S3Config | None = None
    #: Settings of the filesystem handler (required when type is filesystem).
    filesystem: FilesystemConfig | None = None

    @model_validator(mode="after")
    def _section_present(self) -> StorageConfig:
        if self.type == "s3" and self.s3 is None:
            raise ValueError("storage type s3 needs an `s3:` section with at least `bucket`")
        if self.type == "filesystem" and self.filesystem is None:
            raise ValueError("storage type filesystem needs a `filesystem:` section with `root`")
        return self

    def public(self) -> dict[str, Any]:
        """What readers need (sent to consumers in metadata): no retry or tuning knobs."""
        if self.type == "s3" and self.s3 is not None:
            return {
                "type": "s3",
                "bucket": self.s3.bucket,
                "region": self.s3.region,
                "endpoint_url": self.s3.endpoint_url,
                "use_hash_prefix": self.s3.use_hash_prefix,
            }
        if self.type == "filesystem" and self.filesystem is not None:
            return {
                "type": "filesystem",
                "root": str(Path(self.filesystem.root).absolute()),
                "use_hash_prefix": self.filesystem.use_hash_prefix,
            }
        return {"type": self.type}
