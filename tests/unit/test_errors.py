from __future__ import annotations

import pytest

from memq import errors
from memq.errors import (
    MemqError,
    NotWriterError,
    StatusCode,
    ThrottledError,
    UnknownTopicError,
    error_for_status,
    status_for_error,
)


@pytest.mark.parametrize("code", [c for c in StatusCode if c is not StatusCode.OK])
def test_every_status_maps_to_a_class_that_maps_back(code):
    err = error_for_status(code, "msg")
    assert isinstance(err, MemqError)
    assert str(err) == "msg"
    assert status_for_error(err) == code


def test_retriable_is_a_class_attribute():
    assert ThrottledError.retriable and NotWriterError.retriable
    assert not UnknownTopicError.retriable
    assert error_for_status(StatusCode.THROTTLED, "x").retriable


def test_unknown_status_and_foreign_exceptions():
    err = error_for_status(999, "new broker")
    assert type(err) is MemqError and "999" in str(err)
    assert status_for_error(ValueError("x")) == StatusCode.UNKNOWN_ERROR
    with pytest.raises(ValueError):
        error_for_status(0, "ok is not an error")


def test_every_exported_error_derives_from_the_root():
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, MemqError), name


def test_status_codes_are_unique_and_stable():
    # Wire constants: a renumbering would break old clients.
    assert StatusCode.THROTTLED == 8 and StatusCode.NOT_WRITER == 12
    assert len({int(c) for c in StatusCode}) == len(StatusCode)


def test_view_reader_is_a_zero_copy_seekable_body():
    import io

    from memq.storage_handlers.base import ViewReader

    data = bytearray(range(256)) * 20_000  # 5 MB
    r = ViewReader(memoryview(data)[100:], min_chunk=1 << 20)
    assert len(r) == len(data) - 100
    first = r.read(8192)  # a small read still returns a large zero-copy slice
    assert isinstance(first, memoryview) and len(first) == 1 << 20
    assert first.obj is data
    rest = r.read()
    assert bytes(first) + bytes(rest) == bytes(data[100:])
    assert r.read(10) == b"" and r.tell() == len(r)
    r.seek(5)
    buf = bytearray(3)
    assert r.readinto(buf) == 3 and bytes(buf) == bytes(data[105:108])
    assert r.seek(-1, io.SEEK_END) == len(r) - 1


def test_corrupt_object_error_pickles_with_its_bucket_and_key():
    import pickle

    from memq.errors import CorruptObjectError

    plain = CorruptObjectError("bad notification")
    assert (plain.key, plain.bucket) == ("", "")
    e = CorruptObjectError("object k is corrupt", key="k", bucket="b", body=b"x")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is CorruptObjectError and str(back) == str(e)
    assert (back.key, back.bucket, back.body) == ("k", "b", b"x")
