"""Read the local dev stack (``memq dev up``) from Spark without copying its settings by hand."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memq.client.profile import load_profile
from memq.errors import ConfigError

__all__ = ["local_stack_options"]


def local_stack_options(state_dir: Path | str | None = None) -> dict[str, str]:
    """The ``memq`` source's options for the local stack under ``state_dir`` (default:
    ``MEMQ_STATE_DIR``, else ``.memq``): bucket, cluster, endpoint_url, region.

    Also puts what Spark's Python workers inherit into this process's environment, so
    call it **before the SparkSession starts**: the local S3 server's throwaway
    credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``; credentials are never
    source options) and ``PYSPARK_PYTHON`` (this interpreter) unless already set.
    """
    profile = load_profile(state_dir)
    if profile is None or profile.bucket is None:
        raise ConfigError(
            "no local stack with a broker under "
            f"{state_dir or os.environ.get('MEMQ_STATE_DIR') or '.memq'}: run `memq dev up` "
            "(or pass bucket, cluster and endpoint_url options yourself)"
        )
    storage = profile.storage
    if "access_key_id" in storage:
        os.environ["AWS_ACCESS_KEY_ID"] = str(storage["access_key_id"])
        os.environ["AWS_SECRET_ACCESS_KEY"] = str(storage["secret_access_key"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = {"bucket": profile.bucket, "cluster": profile.cluster}
    for key in ("endpoint_url", "region"):
        if storage.get(key):
            options[key] = str(storage[key])
    return options
