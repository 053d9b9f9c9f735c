"""Kafka wire codec: frames, headers, and version-agnostic bodies.

Theory of operation. ``kio`` holds one frozen dataclass per (API, version) and
fast readers for them. Handlers should not care which version a client speaks,
so this module translates in both directions:

* requests are decoded into kio entities and read by attribute name (fields a
  version lacks are read with ``getattr(request, name, default)``);
* responses are written by handlers as plain nested dicts holding *every* field
  they know; ``to_entity`` builds the versioned kio entity, keeping the fields
  that version has and filling any missing ones with Kafka's zero value.

Request headers are parsed by hand (they are tiny and on the hot path): v1 for
non-flexible versions, v2 (with tagged fields, skipped) for flexible ones. The
response header is v0 for non-flexible versions and for ApiVersions always
(KIP-511), v1 otherwise. Unknown tagged fields in request bodies are skipped, as
Kafka's readers skip them (KIP-482): kio refuses them, so the length walk that
runs first notes them and the frame is read without them; the same for responses
tidelog's own clients read (a newer Kafka may add tags to a version). Malformed bytes raise ``ProtocolError``; the network layer
closes that connection.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import logging
import struct
import typing
import uuid
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.extensions import EXTENDED_REQUESTS
from tidelog.protocol.file_region import FileRegion, ResponseFrame

logger = logging.getLogger("tidelog.protocol")
_HEADER_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
ZERO_UUID = uuid.UUID(int=0)


class ProtocolError(Exception):
    """Bytes from a peer that are not a valid request; the connection is closed."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio can encode for ``api_key``, or None."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = sorted(schema_name_map[name])
    return versions[0], versions[-1]


@functools.cache
def _request_class(api_key: int, api_version: int):
    """kio's class, or tidelog's with its own tagged fields (``extensions``)."""
    return EXTENDED_REQUESTS.get((api_key, api_version)) or load_request_schema(api_key, api_version)


@functools.cache
def _response_class(api_key: int, api_version: int):
    return load_response_schema(api_key, api_version)


@functools.cache
def _reader(cls):
    return entity_reader(cls)


@functools.cache
def _writer(cls):
    return entity_writer(cls)


def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(_request_class(api_key, api_version).__flexible__)


def parse_request_header(frame) -> tuple[RequestHeader, int]:
    """Parse the header of a request frame (without its size prefix).

    Returns the header and the offset of the body. The header's flexibility
    depends on the API version, so an unknown (key, version) is parsed as v1 and
    the body left to the caller to reject.
    """
    if len(frame) < 10:
        raise ProtocolError(f"request header needs at least 10 bytes, got {len(frame)}")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    (client_id_length,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id = None
    if client_id_length >= 0:
        if pos + client_id_length > len(frame):
            raise ProtocolError("request header client id runs past the frame")
        try:
            client_id = bytes(frame[pos:pos + client_id_length]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request header client id is not UTF-8") from None
        pos += client_id_length
    elif client_id_length != -1:
        raise ProtocolError(f"request header client id length {client_id_length}")
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    versions = kio_versions(api_key)
    if versions and versions[0] <= api_version <= versions[1] and is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(frame, pos)
    return header, pos


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("unsigned varint runs past the frame")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint is too long")


def _skip_tagged_fields(buf, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("tagged field runs past the frame")
    return pos


@functools.lru_cache(maxsize=None)
def _array_fields(cls) -> tuple[tuple[str, bool, type | None], ...]:
    """(name, nullable, element entity class or None) of every array field of ``cls``."""
    out = []
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        nullable = type(None) in args
        array = hint if typing.get_origin(hint) is tuple else next(
            (a for a in args if typing.get_origin(a) is tuple), None)
        if array is None:
            continue
        element = typing.get_args(array)[0]
        out.append((name, nullable, element if dataclasses.is_dataclass(element) else None))
    return tuple(out)


def _check_arrays(entity) -> None:
    """Kafka's parser refuses null for an array its schema says is not nullable (a
    handler would otherwise iterate None): raise ProtocolError, the connection closes."""
    for name, nullable, element in _array_fields(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                raise ProtocolError(f"{type(entity).__name__}.{name} is null but not nullable")
        elif element is not None:
            for item in value:
                _check_arrays(item)


_FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
                "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}


_FIXED, _STRING, _BYTES, _ARRAY_FIXED, _ARRAY, _ENTITY, _ARRAY_STRING, _NULLABLE_ENTITY = range(8)


@functools.cache
def _layout(cls) -> tuple[bool, tuple, int | None]:
    """``cls``'s wire layout for ``_check_lengths``: (flexible, steps, fixed size or None).

    Steps: (_FIXED, n) — runs of fixed-size fields merged; (_STRING,) / (_BYTES,);
    (_ARRAY_FIXED, element size) — an array of primitives or of fixed-size entities;
    (_ARRAY, entity class); (_ENTITY, entity class); (_ARRAY_STRING, type) — an array
    of strings (or bytes). Tagged fields are in the
    tagged-field section of a flexible entity."""
    flexible = bool(cls.__flexible__)
    steps: list = []

    def fixed(n: int) -> None:
        if steps and steps[-1][0] == _FIXED:
            steps[-1] = (_FIXED, steps[-1][1] + n)
        else:
            steps.append((_FIXED, n))
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        kind = classify_field(field)
        if isinstance(kind, (EntityField, EntityTupleField)):
            size = _layout(kind.type_)[2]
            if kind.is_array:
                steps.append((_ARRAY_FIXED, size) if size is not None else (_ARRAY, kind.type_))
            elif is_optional(field):
                steps.append((_NULLABLE_ENTITY, kind.type_))     # int8 -1 (null) or 1, then the struct
            elif size is not None:
                fixed(size)
            else:
                steps.append((_ENTITY, kind.type_))
            continue
        kafka_type = field.metadata["kafka_type"]
        size = _FIXED_SIZES.get(kafka_type)
        if kind.is_array:
            steps.append((_ARRAY_FIXED, size) if size is not None else (_ARRAY_STRING, kafka_type))
        elif size is not None:
            fixed(size)
        else:
            steps.append((_STRING,) if kafka_type == "string" else (_BYTES,))
    total = steps[0][1] if not flexible and len(steps) == 1 and steps[0][0] == _FIXED else None
    return flexible, tuple(steps), total


STRING_BYTES_MAX = 0x7FFF      # Kafka's strings: an int16 length, also in the compact (varint) form


def _check_lengths(cls, buf, pos: int) -> "_LengthWalk":
    """Walk the body of ``cls`` at ``pos`` checking that every declared length and
    array count fits in the bytes that remain; returns the walk (its ``dropped``: the
    tagged fields ``cls`` does not declare).

    kio's native reader allocates an array's declared count before reading it, so
    a 20-byte request declaring 2^32 elements would abort the process; this walk
    refuses it first (``ProtocolError``: the connection closes, as Kafka's parser
    would on a size larger than the request). Runs of fixed-size fields are one
    step, and arrays of fixed-size elements are checked without a loop."""
    walk = _LengthWalk(cls.__name__, buf)
    walk.entity(cls, pos)
    return walk


def _without_unknown_tags(cls, frame, body_offset: int):
    """``frame`` checked by ``_check_lengths``, and without the tagged fields ``cls``
    does not declare: Kafka's readers skip them (KIP-482), kio's refuse them. The
    frame is copied only when there is one. Tags inside a tagged field are left
    (dropping them would change that field's size); kio refuses those."""
    walk = _check_lengths(cls, memoryview(frame), body_offset)
    if not walk.dropped:
        return frame
    out, pos = bytearray(), 0
    for start, count_end, count, drops in sorted(walk.dropped):
        out += frame[pos:start]
        out += _uvarint(count)
        pos = count_end
        for drop_start, drop_end in drops:
            out += frame[pos:drop_start]
            pos = drop_end
    out += frame[pos:]
    return bytes(out)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _LengthWalk:
    """One walk of ``_check_lengths`` over ``buf``; ``name`` (the request's class) heads
    its error messages. Each method takes a position and returns the one after what it read."""

    __slots__ = ("buf", "end", "name", "dropped")

    def __init__(self, name: str, buf):
        self.buf, self.end, self.name = buf, len(buf), name
        # (section start, count end, count kept, [(start, end) of each unknown tag])
        self.dropped: list[tuple[int, int, int, list[tuple[int, int]]]] = []

    def length(self, p: int, flexible: bool, size: int) -> tuple[int, int]:
        """A string/bytes length or array count (-1: null) and the position after it."""
        if flexible:
            n, p = _read_uvarint(self.buf, p)
            return n - 1, p
        if p + size > self.end:
            raise ProtocolError(f"{self.name}: length past the end of the request")
        return int.from_bytes(self.buf[p:p + size], "big", signed=True), p + size

    def string_length(self, n: int) -> int:
        """A Kafka string holds at most 32767 bytes (Kafka's parser refuses a compact string
        declaring more: "string field value had invalid length"), so no request carries a
        10 MB config value, topic or group name into the metadata log."""
        if n > STRING_BYTES_MAX:
            raise ProtocolError(f"{self.name}: a string declares {n} bytes; a Kafka string has at most "
                                f"{STRING_BYTES_MAX}")
        return n

    def skip(self, p: int, n: int) -> int:
        if n < -1 or p + n > self.end:
            raise ProtocolError(f"{self.name}: a field declares {n} bytes; {self.end - p} remain")
        return p + max(n, 0)

    def entity(self, entity_cls, p: int) -> int:
        flexible, steps, _ = _layout(entity_cls)
        for step in steps:
            kind = step[0]
            if kind == _FIXED:
                p = self.skip(p, step[1])
            elif kind == _STRING:
                n, p = self.length(p, flexible, 2)
                p = self.skip(p, self.string_length(n))
            elif kind == _BYTES:
                n, p = self.length(p, flexible, 4)
                p = self.skip(p, n)
            elif kind == _ENTITY:                # a nested struct (not an array of them)
                p = self.entity(step[1], p)
            elif kind == _NULLABLE_ENTITY:
                if p + 1 > self.end:
                    raise ProtocolError(f"{self.name}: a struct marker past the end of the request")
                present = self.buf[p] != 0xFF
                p += 1
                if present:
                    p = self.entity(step[1], p)
            else:
                p = self.array(entity_cls, step, p, flexible)
        if flexible:
            p = self.tagged_fields(entity_cls, p)
        return p

    def array(self, entity_cls, step: tuple, p: int, flexible: bool) -> int:
        """An array field of ``entity_cls``: its count, then each element."""
        kind = step[0]
        count, p = self.length(p, flexible, 4)
        if count < -1 or count > self.end - p:
            raise ProtocolError(f"{entity_cls.__name__}: an array declares {count} elements; "
                                f"{self.end - p} bytes remain")
        if kind == _ARRAY_FIXED:
            p = self.skip(p, count * step[1] if count > 0 else 0)
        elif kind == _ARRAY:
            for _ in range(count):
                p = self.entity(step[1], p)
        else:
            assert kind == _ARRAY_STRING, kind
            width = 2 if step[1] == "string" else 4
            for _ in range(count):
                n, p = self.length(p, flexible, width)
                p = self.skip(p, self.string_length(n) if width == 2 else n)
        return p

    def tagged_fields(self, entity_cls, p: int) -> int:
        """A flexible entity's tagged-field section: a count, then (tag, size, bytes) each.
        A tag ``entity_cls`` declares as an array of structs is walked like any array,
        within its size (kio reads it); one it does not declare is noted in ``dropped``."""
        start = p
        count, p = _read_uvarint(self.buf, p)
        if not count:
            return p                             # the usual case: no tagged field
        if count > self.end - p:
            raise ProtocolError(f"{entity_cls.__name__}: {count} tagged fields; {self.end - p} bytes remain")
        count_end, drops = p, []
        known = _tagged(entity_cls)
        for _ in range(count):
            tag_start = p
            tag, p = _read_uvarint(self.buf, p)
            size, p = _read_uvarint(self.buf, p)
            end = self.skip(p, size)
            if tag not in known:
                drops.append((tag_start, end))
            elif known[tag] is not None:
                inner = _LengthWalk(self.name, self.buf[:end])
                if inner.array(entity_cls, (_ARRAY, known[tag]), p, True) != end:
                    raise ProtocolError(f"{entity_cls.__name__}: tagged field {tag} does not fill its {size} bytes")
            p = end
        if drops:
            self.dropped.append((start, count_end, count - len(drops), drops))
        return p


@functools.cache
def _tagged(cls) -> dict[int, type | None]:
    """tag → element class of ``cls``'s tagged fields that are arrays of structs (walked
    before kio reads them), None for its other tagged fields."""
    tagged = {}
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            kind = classify_field(field)
            tagged[field.metadata["tag"]] = kind.type_ if isinstance(kind, EntityTupleField) else None
    return tagged


def decode_request(header: RequestHeader, frame, body_offset: int):
    """Decode the body of a request whose (key, version) the caller accepted."""
    cls = _request_class(header.api_key, header.api_version)
    frame = _without_unknown_tags(cls, frame, body_offset)
    try:
        entity, size = _reader(cls)(memoryview(frame), body_offset)
    except Exception as e:  # kio raises a variety of errors on malformed input
        raise ProtocolError(f"cannot decode {cls.__name__} v{header.api_version}: {e}") from None
    _check_arrays(entity)
    if body_offset + size != len(frame):
        # Kafka's parser ignores bytes after the last field it knows; some clients
        # (librdkafka's AdminClient, Metadata v13) send fields a version dropped.
        logger.debug("%s v%d: ignoring %d trailing bytes", cls.__name__, header.api_version,
                  len(frame) - body_offset - size)
    return entity


def encode_response(header: RequestHeader, body: dict | Any, file_regions: bool = False) -> bytes | ResponseFrame:
    """Encode a full response frame, size prefix included. A records field may hold a
    ``FileRegion`` (a Fetch's, protocol/file_region.py): with ``file_regions`` the answer
    is then a ``ResponseFrame`` that leaves the region to be sent from its file, else the
    region is read into the bytes."""
    cls = _response_class(header.api_key, header.api_version)
    entity = body if isinstance(body, cls) else to_entity(cls, body)
    out = _RegionWriter(file_regions) if header.api_key == ApiKey.FETCH else io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_INT32.pack(header.correlation_id))
    if cls.__flexible__ and header.api_key != ApiKey.API_VERSIONS:
        out.write(b"\x00")  # response header v1: no tagged fields
    _writer(cls)(out, entity)
    if isinstance(out, _RegionWriter) and out.parts:
        return out.frame()
    frame = out.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


class _RegionWriter(io.BytesIO):
    """kio's writers call ``len(value)`` and then ``write(value)`` for a records field, so
    a ``FileRegion`` there has its length prefix written like any bytes; ``write`` then
    either reads the region in or ends the current part and keeps the region as a part."""

    def __init__(self, file_regions: bool):
        super().__init__()
        self.file_regions = file_regions
        self.parts: list = []

    def write(self, data) -> int:
        if type(data) is not FileRegion:
            return super().write(data)
        if not self.file_regions:
            return super().write(data.read())
        self.parts.append(self.getvalue())
        self.parts.append(data)
        self.seek(0)
        self.truncate()
        return len(data)

    def frame(self) -> ResponseFrame:
        self.parts.append(self.getvalue())
        response = ResponseFrame([part for part in self.parts if len(part)])
        first = bytearray(response.parts[0])
        _INT32.pack_into(first, 0, response.size - 4)
        response.parts[0] = bytes(first)
        return response


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict | Any) -> bytes:
    """Encode a full request frame (used by tidelog's own clients)."""
    cls = _request_class(api_key, api_version)
    entity = body if isinstance(body, cls) else to_entity(cls, body)
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_HEADER_PREFIX.pack(api_key, api_version, correlation_id))
    if client_id is None:
        out.write(_INT16.pack(-1))
    else:
        raw = client_id.encode("utf-8")
        out.write(_INT16.pack(len(raw)))
        out.write(raw)
    if cls.__flexible__:
        out.write(b"\x00")
    _writer(cls)(out, entity)
    frame = out.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


def decode_response(api_key: int, api_version: int, frame) -> tuple[int, Any]:
    """Decode a response frame (without size prefix): (correlation id, entity)."""
    cls = _response_class(api_key, api_version)
    if len(frame) < 4:
        raise ProtocolError("response shorter than its header")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
        pos = _skip_tagged_fields(frame, pos)
    try:
        entity, _size = _reader(_readable(cls))(memoryview(frame), pos)
    except Exception as e:
        if "Unknown tagged field" not in str(e):
            raise ProtocolError(f"cannot decode {cls.__name__} v{api_version}: {e}") from None
        # A newer Kafka's tags, skipped as Kafka's client skips them; walked only then (the
        # walk costs ~2 µs per Fetch partition, 4x kio's read, on every follower fetch).
        try:
            entity, _size = _reader(_readable(cls))(memoryview(_without_unknown_tags(cls, frame, pos)), pos)
        except Exception as e:
            raise ProtocolError(f"cannot decode {cls.__name__} v{api_version}: {e}") from None
    return correlation_id, entity


@functools.cache
def _readable(cls):
    """``cls``, or a copy of it in which each datetime field that is not nullable (and each
    entity holding one) reads as nullable. Kafka writes -1 for "no time" there (DescribeTransactions'
    transaction_start_time of an id with no transaction), which kio's reader refuses; read
    this way it is None (``millis``: -1)."""
    fields, changed = [], False
    for f in dataclasses.fields(cls):
        kind, hint = classify_field(f), f.type
        if isinstance(kind, (EntityField, EntityTupleField)) and _readable(kind.type_) is not kind.type_:
            nested = _readable(kind.type_)
            hint = tuple[nested, ...] if isinstance(kind, EntityTupleField) else (
                nested | None if is_optional(f) else nested)
            changed = True
        elif f.metadata.get("kafka_type") == "datetime_i64" and not is_optional(f) and not kind.is_array:
            hint, changed = hint | None, True
        default = {} if f.default is dataclasses.MISSING else {"default": f.default}
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = {"default_factory": f.default_factory}  # type: ignore[misc]
        fields.append((f.name, hint, dataclasses.field(metadata=f.metadata, **default)))
    if not changed:
        return cls
    namespace = {name: value for name, value in vars(cls).items()
                 if name in ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True, slots=True,
                                      kw_only=True)


# ---------------------------------------------------------------------------
# dict -> versioned entity


@functools.cache
def _plan(cls) -> tuple:
    """Per field of ``cls``: (name, kind, nested class, kafka type, optional, default)."""
    plan = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        nested = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = dataclasses.MISSING
        plan.append((f.name, type(kind).__name__, nested, f.metadata.get("kafka_type"),
                     is_optional(f), default))
    return tuple(plan)


def _zero(kafka_type: str | None, optional: bool, kind: str):
    if kind in ("EntityTupleField", "PrimitiveTupleField"):
        return ()
    if optional:
        return None
    return {
        "string": "", "bool": False, "uuid": ZERO_UUID, "bytes": b"", "records": b"",
        "float64": 0.0, "error_code": KioErrorCode.none,
        "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    }.get(kafka_type, 0)


# The field types ``_convert`` changes; any other value is written as it is.
_CONVERTED_TYPES = frozenset({"error_code", "timedelta_i32", "timedelta_i64", "datetime_i64"})


def _convert(kafka_type: str | None, value, optional: bool = True):
    if kafka_type == "error_code" and not isinstance(value, KioErrorCode):
        return KioErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        # -1 ("none") is null where the field is nullable, else written as it is.
        return None if value < 0 and optional else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def to_entity(cls, data: dict):
    """Build a ``cls`` instance from a dict, recursively, keeping only ``cls``'s fields."""
    kwargs = {}
    for name, kind, nested, kafka_type, optional, default in _plan(cls):
        if name in data and data[name] is not None:
            value = data[name]
            if kind == "EntityTupleField":
                value = tuple(v if isinstance(v, nested) else to_entity(nested, v) for v in value)
            elif kind == "EntityField":
                value = value if isinstance(value, nested) else to_entity(nested, value)
            elif kind == "PrimitiveTupleField":
                value = (tuple(_convert(kafka_type, v) for v in value) if kafka_type in _CONVERTED_TYPES
                         else tuple(value))
            else:
                value = _convert(kafka_type, value, optional)
        elif name in data and optional:
            value = None
        elif default is not dataclasses.MISSING:
            value = default
        elif kind == "EntityField":
            value = None if optional else to_entity(nested, {})
        else:
            value = _zero(kafka_type, optional, kind)
        kwargs[name] = value
    return cls(**kwargs)


def millis(value) -> int:
    """A kio timedelta/datetime field (or int) as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH) / datetime.timedelta(milliseconds=1))
    if value is None:
        return -1
    return int(value)
