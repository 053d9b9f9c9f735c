"""Zig-zag varints as Kafka's record format uses them (protobuf style)."""

from __future__ import annotations

from tidelog.core.errors import CorruptRecordError


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint encoding of a signed 64-bit ``value``."""
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def decode_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """Decode a zig-zag varint at ``pos``; return ``(value, next_pos)``.

    Never reads at or beyond ``end``; at most 10 bytes (a varlong).
    """
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos
