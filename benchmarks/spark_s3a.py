"""Spark's S3A connector for the backfill benchmark's baseline: Spark's own Parquet reader
over the same S3 as the ``memq`` source.

The jars (hadoop-aws of the Hadoop that pyspark bundles, and the AWS SDK v2 modules it uses) are
copied by ``make install`` into ``<venv>/spark-jars`` (memq/devstack/jvm/spark-s3a.pom.xml);
nothing is downloaded here. S3A is configured as its docs say for a third-party store
(endpoint, path-style access, a region for signing, plain HTTP, the access keys) and for
Parquet: the ``analytics`` input stream (Hadoop 3.5's default, "aware-of and adapted-to
the columnar storage formats", with Parquet footer caching and row-group prefetch), or
the ``classic`` stream with ``fadvise=random`` (the advice before it); a connection pool
(500) and thread pool (96) far above what ``local[*]`` on a few cores asks for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: Where ``make install`` puts S3A's jars.
JARS = Path(sys.prefix) / "spark-jars"
STREAMS = ("analytics", "classic")


def jars() -> list[Path]:
    """S3A's jars, or a SystemExit that says how to get them."""
    found = sorted(JARS.glob("hadoop-aws-*.jar"))
    if not found:
        raise SystemExit(
            f"Spark's S3A connector is not installed ({JARS} has no hadoop-aws jar): run "
            "`make install` (fetches it with mvn from Maven Central)"
        )
    return sorted(JARS.glob("*.jar"))


def settings(endpoint: str, stream: str = "analytics") -> dict[str, str]:
    """S3A's settings (``fs.s3a.*``, without the secret) for the S3 at ``endpoint``."""
    if stream not in STREAMS:
        raise SystemExit(f"unknown S3A input stream {stream!r}: choose from {STREAMS}")
    out = {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": "us-east-1",  # any name works for moto; signing needs one
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https:")).lower(),
        # (Hadoop 3.5's defaults, stated: a changed default must not move the baseline)
        "fs.s3a.connection.maximum": "500",
        "fs.s3a.threads.max": "96",
        "fs.s3a.input.stream.type": stream,
    }
    if stream == "classic":
        out["fs.s3a.experimental.input.fadvise"] = "random"
    return out


def session_conf(endpoint: str, master: str, stream: str = "analytics") -> dict[str, str]:
    """SparkSession settings: S3A's jars on the classpath and :func:`settings`, with the
    access keys of the environment (the dev stack's, which the benchmark exports) or, if
    none, S3A's default credential chain."""
    found = jars()
    if master.startswith("local"):
        # Driver = executor here: on the JVM's classpath, instead of spark.jars, which
        # would copy the jars into every session's work dir.
        cp = os.pathsep.join(str(j) for j in found)
        conf = {"spark.driver.extraClassPath": cp}
    else:
        conf = {"spark.jars": ",".join(str(j) for j in found)}
    conf.update({f"spark.hadoop.{k}": v for k, v in settings(endpoint, stream).items()})
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        conf.update(
            {
                "spark.hadoop.fs.s3a.aws.credentials.provider": (
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
                ),
                "spark.hadoop.fs.s3a.access.key": key,
                "spark.hadoop.fs.s3a.secret.key": secret,
            }
        )
    return conf


def upload(client: Any, local: Path, bucket: str, prefix: str) -> int:
    """Upload the Parquet files under ``local`` to ``bucket``/``prefix``; their bytes."""
    total = 0
    for f in sorted(local.rglob("*.parquet")):
        client.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(local).as_posix()}")
        total += f.stat().st_size
    if not total:
        raise SystemExit(f"no Parquet files under {local} to upload")
    return total
