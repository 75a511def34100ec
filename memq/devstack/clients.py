"""Clients for the local stack's servers, built from their recorded state."""

from __future__ import annotations

from typing import Any

from memq.devstack.services import DEV_ACCESS_KEY, DEV_REGION, DEV_SECRET_KEY, ServiceState

__all__ = ["aws_env", "s3_client"]


def aws_env(s3: ServiceState) -> dict[str, str]:
    """Environment for boto3 (and Spark workers) to reach the stack's S3.

    An external S3 keeps the standard credential chain: nothing is injected.
    """
    if s3.external:
        return {}
    return {
        "AWS_ACCESS_KEY_ID": DEV_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": DEV_SECRET_KEY,
        "AWS_DEFAULT_REGION": s3.details.get("region", DEV_REGION),
    }


def s3_client(s3: ServiceState, *, timeout: float = 10.0, retries: int = 0) -> Any:
    """A boto3 S3 client for the stack's S3 endpoint."""
    import boto3
    from botocore.config import Config

    creds = aws_env(s3)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=s3.details.get("region", DEV_REGION),
        aws_access_key_id=creds.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=creds.get("AWS_SECRET_ACCESS_KEY"),
        config=Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"max_attempts": retries, "mode": "standard"},
            s3={"addressing_style": "path"},
        ),
    )
