"""The four codecs Kafka clients use, with a bound on decompressed size.

Kafka compresses the *records* section of a batch as one stream:
gzip (RFC 1952), snappy (raw, or xerial-framed as the Java client writes it),
lz4 (the LZ4 frame format, KIP-57), zstd (a zstd frame). Decompression stops
with ``CorruptRecordError`` at ``limit`` bytes so a tiny batch cannot expand into
gigabytes.
"""

from __future__ import annotations

import enum
import io
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from tidelog.core.errors import CorruptRecordError, UnsupportedCompressionError
from tidelog.core.limits import RECORD_BATCH_DECOMPRESSED_SIZE_MAX_BYTES


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> "Compression":
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionError(f"unknown compression type {name!r}") from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE_BYTES = 16
_XERIAL_BLOCK_SIZE_BYTES = 32 * 1024


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise UnsupportedCompressionError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data, limit: int = RECORD_BATCH_DECOMPRESSED_SIZE_MAX_BYTES) -> bytes:
    """Decompress ``data``; raise ``CorruptRecordError`` on bad input or past ``limit``."""
    try:
        codec = Compression(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None
    try:
        if codec == Compression.NONE:
            out = bytes(data)
        elif codec == Compression.GZIP:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(bytes(data), limit + 1)
            if not d.eof and len(out) <= limit:
                raise CorruptRecordError("gzip stream is truncated")
        elif codec == Compression.SNAPPY:
            out = _snappy_decompress(bytes(data), limit)
        elif codec == Compression.LZ4:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(bytes(data), max_length=limit + 1)
            if not d.eof and len(out) <= limit:
                raise CorruptRecordError("lz4 frame is truncated")
        else:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)))
            out = reader.read(limit + 1)
    except CorruptRecordError:
        raise
    except Exception as e:  # every codec library has its own error types
        raise CorruptRecordError(f"{codec.name.lower()} data cannot be decompressed: {e}") from None
    if len(out) > limit:
        raise CorruptRecordError(f"decompressed records exceed {limit} bytes")
    return out


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC)
    out += struct.pack(">ii", 1, 1)  # version, compatible version
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK_SIZE_BYTES]))
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def _snappy_raw_length(block: bytes) -> int:
    # A raw snappy block opens with its uncompressed length as an unsigned varint.
    length = shift = 0
    for i, byte in enumerate(block[:5]):
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    raise CorruptRecordError("snappy block has a bad length preamble")


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        if _snappy_raw_length(data) > limit:
            raise CorruptRecordError(f"decompressed records exceed {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE_BYTES
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy block length is truncated")
        (block_size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if block_size < 0 or pos + block_size > len(data):
            raise CorruptRecordError("xerial snappy block runs past the data")
        block = data[pos:pos + block_size]
        pos += block_size
        if len(out) + _snappy_raw_length(block) > limit:
            raise CorruptRecordError(f"decompressed records exceed {limit} bytes")
        out += cramjam.snappy.decompress_raw(block)
    return bytes(out)
