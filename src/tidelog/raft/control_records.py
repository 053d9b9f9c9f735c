"""KRaft's voter-set control records on the wire (KIP-853): ``VotersRecord`` batches.

Theory of operation. A dynamic quorum keeps its voter set in ``__cluster_metadata``
itself: each change is one control batch holding one ``VotersRecord`` (Kafka's
ControlRecordType.KRAFT_VOTERS, 6), the whole new set. ``build_voters_batch``
writes one, ``voters_of_batch`` reads one back (None for any other batch), so the
metadata logs (``metadata/file_log.py``, ``raft/memory_log.py``) can index where
each set starts, and a replica (``raft/replica.py``) take the latest as its own.
A snapshot carries the set in force at its end as one such batch after its
records (metadata readers skip control batches), as Kafka's checkpoints do.

The value is VotersRecord version 0 (flexible): Version int16; Voters, a compact
array of (VoterId int32, VoterDirectoryId uuid, Endpoints — a compact array of
(Name, Host compact strings, Port uint16) — and KRaftVersionFeature (Min, Max
int16)), each structure ending in empty tagged fields. A value that does not
parse whole is a ``MetadataLogError`` naming the problem.
"""

from __future__ import annotations

import struct
import uuid

from tidelog.metadata.log import MetadataLogError
from tidelog.raft.replica import Voter
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches, iter_records

CONTROL_KRAFT_VOTERS = 6
KRAFT_VERSION_SUPPORTED = (0, 1)            # the kraft.version range this replica speaks
_KEY = struct.pack(">hh", 0, CONTROL_KRAFT_VOTERS)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def _directory_bytes(directory_id: str) -> bytes:
    return uuid.UUID(directory_id).bytes if directory_id else bytes(16)


def encode_voters(voters: tuple[Voter, ...]) -> bytes:
    out = bytearray(struct.pack(">h", 0)) + _uvarint(len(voters) + 1)
    for voter in voters:
        out += struct.pack(">i", voter.voter_id) + _directory_bytes(voter.directory_id)
        out += _uvarint(len(voter.endpoints) + 1)
        for name, host, port in voter.endpoints:
            out += _compact_string(name) + _compact_string(host) + struct.pack(">H", port) + b"\0"
        out += struct.pack(">hh", *KRAFT_VERSION_SUPPORTED) + b"\0"      # KRaftVersionFeature
        out += b"\0"                                                      # the voter's tagged fields
    return bytes(out + b"\0")


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise MetadataLogError(f"a VotersRecord ends early (byte {self.pos} of {len(self.data)})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MetadataLogError("a VotersRecord varint is longer than 5 bytes")

    def count(self) -> int:
        n = self.uvarint() - 1
        if n < 0 or n > len(self.data):
            raise MetadataLogError(f"a VotersRecord array of {n} entries")
        return n

    def string(self) -> str:
        return self.take(self.count()).decode()

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_voters(data: bytes) -> tuple[Voter, ...]:
    reader = _Reader(bytes(data))
    (version,) = struct.unpack(">h", reader.take(2))
    if version != 0:
        raise MetadataLogError(f"VotersRecord version {version} (only 0 is known)")
    voters = []
    for _ in range(reader.count()):
        voter_id, directory = struct.unpack(">i16s", reader.take(20))
        endpoints = []
        for _ in range(reader.count()):
            name, host = reader.string(), reader.string()
            (port,) = struct.unpack(">H", reader.take(2))
            reader.tagged_fields()
            endpoints.append((name, host, port))
        reader.take(4)                                   # KRaftVersionFeature
        reader.tagged_fields()
        reader.tagged_fields()
        directory_id = "" if directory == bytes(16) else str(uuid.UUID(bytes=directory))
        voters.append(Voter(voter_id, directory_id, tuple(endpoints)))
    reader.tagged_fields()
    if reader.pos != len(reader.data):
        raise MetadataLogError(f"{len(reader.data) - reader.pos} bytes after a VotersRecord")
    return tuple(voters)


def build_voters_batch(base_offset: int, epoch: int, voters: tuple[Voter, ...], timestamp_ms: int) -> bytes:
    return build_batch([SimpleRecord(encode_voters(voters), _KEY)], base_offset=base_offset,
                       partition_leader_epoch=epoch, timestamp_ms=timestamp_ms, is_control=True)


def voters_of_batch(data: bytes, position: int = 0) -> tuple[Voter, ...] | None:
    """The voter set of the control batch at ``position`` if it is a VotersRecord, else None."""
    for start, header in iter_batches(data[position:]):
        if not header.is_control:
            return None
        for record in iter_records(data, position + start):
            if record.key is not None and bytes(record.key[:4]) == _KEY and record.value is not None:
                return decode_voters(bytes(record.value))
            return None
        return None
    return None


def voters_in(data: bytes) -> list[tuple[int, tuple[Voter, ...]]]:
    """(base offset, voters) of every VotersRecord batch in ``data`` (whole batches)."""
    found = []
    for position, header in iter_batches(data):
        if header.is_control and position + header.size_bytes <= len(data):
            voters = voters_of_batch(data[position:position + header.size_bytes])
            if voters is not None:
                found.append((header.base_offset, voters))
    return found


class VotersIndex:
    """Where each VotersRecord of a metadata log sits: what ``last_voters`` and
    ``voters_before`` answer, kept by the file and memory logs alike. Entries below
    the log start stay (the set in force there); a snapshot's set counts as at its
    last offset."""

    def __init__(self):
        self.entries: list[tuple[int, tuple[Voter, ...]]] = []

    def note(self, data: bytes) -> None:
        """Index the VotersRecord batches among whole batches just appended."""
        self.entries.extend(voters_in(data))

    def last(self) -> tuple[int, tuple[Voter, ...]] | None:
        return self.entries[-1] if self.entries else None

    def before(self, offset: int) -> tuple[Voter, ...] | None:
        earlier = [voters for at, voters in self.entries if at < offset]
        return earlier[-1] if earlier else None

    def truncate(self, end_offset: int) -> None:
        while self.entries and self.entries[-1][0] >= end_offset:
            self.entries.pop()

    def restart_at_snapshot(self, end_offset: int, snapshot: bytes) -> None:
        """The log now starts at a snapshot's end: its set (if any) is the only one."""
        self.entries = [(end_offset - 1, voters) for _, voters in voters_in(snapshot)[-1:]]

    def snapshot_suffix(self, end_offset: int, epoch: int, record_count: int) -> bytes:
        """The batch a snapshot ending at ``end_offset`` carries after its records."""
        voters = self.before(end_offset)
        return b"" if voters is None else build_voters_batch(record_count, epoch, voters, 0)
