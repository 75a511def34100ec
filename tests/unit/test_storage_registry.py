"""Storage handlers chosen by name: the registry, its errors, and lazy heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memq.config import StorageConfig
from memq.errors import ConfigError
from memq.storage_handlers.devnull import DevNullWriter
from memq.storage_handlers.filesystem import FilesystemReader, FilesystemWriter
from memq.storage_handlers.registry import HANDLERS, make_reader, make_writer
from memq.storage_handlers.s3 import S3Reader, S3Writer


def test_handlers_are_named_by_their_storage_type() -> None:
    assert list(HANDLERS) == ["s3", "filesystem", "devnull"]
    for name, handler in HANDLERS.items():
        assert handler.name == name
        section = StorageConfig.model_fields.get(name)
        assert handler.config_model is (None if section is None else _model(section.annotation))


def _model(annotation: object) -> object:
    return next(a for a in getattr(annotation, "__args__", ()) if a is not type(None))


def test_make_writer_builds_each_handler(tmp_path) -> None:
    s3 = make_writer(StorageConfig(type="s3", s3={"bucket": "my-bucket"}), "c")
    assert isinstance(s3, S3Writer) and s3.config.bucket == "my-bucket"
    fs = make_writer(StorageConfig(type="filesystem", filesystem={"root": str(tmp_path)}), "c")
    assert isinstance(fs, FilesystemWriter) and fs.root == tmp_path.resolve()
    assert isinstance(make_writer(StorageConfig(type="devnull"), "c"), DevNullWriter)
    bogus = StorageConfig.model_construct(type="tape")
    with pytest.raises(ConfigError, match="unknown storage type 'tape': use one of s3, filesys"):
        make_writer(bogus, "c")


def test_make_reader_applies_overrides(tmp_path) -> None:
    public = StorageConfig(type="s3", s3={"bucket": "bkt", "region": "eu-west-1"}).public()
    r = make_reader(public, {"endpoint_url": "http://localhost:9000"})
    assert isinstance(r, S3Reader)
    assert (r.config.bucket, r.config.region, r.config.endpoint_url) == (
        "bkt",
        "eu-west-1",
        "http://localhost:9000",
    )
    fs = make_reader({"type": "filesystem", "root": "/elsewhere"}, {"root": str(tmp_path)})
    assert isinstance(fs, FilesystemReader) and fs.root_override == tmp_path.resolve()
    assert isinstance(make_reader({"type": "filesystem"}), FilesystemReader)


@pytest.mark.parametrize("kind", ["devnull", "tape", None])
def test_make_reader_refuses_types_without_a_reader(kind: str | None) -> None:
    with pytest.raises(ConfigError) as e:
        make_reader({"type": kind})
    assert str(e.value) == (
        f"cannot read storage type {kind!r}: readers exist for s3 and filesystem "
        "(devnull keeps nothing to read)"
    )


def test_boto3_loads_only_when_an_s3_client_is_used() -> None:
    code = (
        "import sys\n"
        "from memq.config import StorageConfig\n"
        "from memq.storage_handlers.registry import make_reader, make_writer\n"
        "make_writer(StorageConfig(type='s3', s3={'bucket': 'abc'}), 'c')\n"
        "make_reader({'type': 's3', 'bucket': 'abc'})\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_profile_or_region_boto3_refuses_is_a_one_line_config_error(
    tmp_path, monkeypatch
) -> None:
    """(botocore's ProfileNotFound / InvalidRegionError reached Spark jobs and brokers.)"""
    from memq.config import S3Config
    from memq.storage_handlers.s3 import make_client

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    with pytest.raises(ConfigError, match="S3 profile 'nope' is not in the AWS config files"):
        make_client(S3Config(bucket="bkt", profile="nope"))
    with pytest.raises(ConfigError, match="S3 region 'not a region!' is not a region name"):
        make_client(S3Config(bucket="bkt", region="not a region!"))
    assert make_client(S3Config(bucket="bkt", region="eu-west-1")).meta.region_name == "eu-west-1"
