"""MemQ data formats: pure bytes-in/bytes-out codecs, versioned, no I/O.

Documented byte by byte in ``docs/formats.md``; golden vectors in ``tests/vectors/``.
"""

from memq.formats.batch import (
    BATCH_PREFIX_SIZE,
    BatchBuilder,
    BatchHeader,
    IndexEntry,
    batch_header_length,
    decode_batch,
    decode_batch_header,
    encode_batch,
    iter_batch_blocks,
    verify_batch_block,
)
from memq.formats.block import (
    BLOCK_HEADER_SIZE,
    BlockHeader,
    Record,
    decode_block,
    decode_block_header,
    decode_records,
    encode_block,
    encode_block_parts,
    verify_block,
)
from memq.formats.compression import Compression, parse_compression
from memq.formats.frames import (
    FrameDecoder,
    FrameReceiver,
    PrefixedReceiver,
    RawFrame,
    Request,
    RequestType,
    Response,
    decode_frame,
    encode_request,
    encode_response,
    parse_frame,
    request_frame_parts,
)
from memq.formats.keys import ObjectKey, batch_id, object_key, parse_object_key, topic_prefix
from memq.formats.notification import Notification, decode_notification, encode_notification

__all__ = [
    "BATCH_PREFIX_SIZE",
    "BLOCK_HEADER_SIZE",
    "BatchBuilder",
    "BatchHeader",
    "BlockHeader",
    "Compression",
    "FrameDecoder",
    "FrameReceiver",
    "IndexEntry",
    "Notification",
    "ObjectKey",
    "PrefixedReceiver",
    "RawFrame",
    "Record",
    "Request",
    "RequestType",
    "Response",
    "batch_header_length",
    "batch_id",
    "decode_batch",
    "decode_batch_header",
    "decode_block",
    "decode_block_header",
    "decode_frame",
    "decode_notification",
    "decode_records",
    "encode_batch",
    "encode_block",
    "encode_block_parts",
    "encode_notification",
    "encode_request",
    "encode_response",
    "iter_batch_blocks",
    "object_key",
    "parse_compression",
    "parse_frame",
    "parse_object_key",
    "request_frame_parts",
    "topic_prefix",
    "verify_batch_block",
    "verify_block",
]
