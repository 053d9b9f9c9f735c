"""File regions in responses: a Fetch's records sent from the segment file, not copied.

Theory of operation. A Fetch answers with ``FileSlice``s of segment files
(storage/log.py). ``FileRegion.pin`` turns one into what the response holds until it
is written: a region with its *own* descriptor (``os.dup`` of the segment's) when it is
at least ``SENDFILE_MIN_BYTES``, else its bytes, read at once. Pinning happens when the
fetch completes, as reading did before: the segment may be closed (retention, a
shutdown) or deleted right after, and the region still names the same file, whose
bytes the kernel keeps while a descriptor is open. A truncated file is not kept: a
region sent after a truncation comes up short, and the connection is closed (Kafka's
``FileRecords.writeTo`` throws "has been truncated during write" and its processor
closes the channel); the frame is never padded or cut, so a client never reads a
frame that lies about its length.

``codec.encode_response(..., file_regions=True)`` writes a response around its
regions: a ``ResponseFrame`` whose ``parts`` are the encoded bytes before each region
(the records field's length prefix last: int32 up to Fetch v11, unsigned varint
length+1 from v12), the region, then the rest::

    [size|header|...|len] [region: sendfile] [...|len] [region] [...rest]

With ``file_regions=False`` (TLS, where bytes must go through the SSL object, or
``tidelog.network.sendfile.enable=false``) the regions are read into the frame as
before. A region owns a descriptor: whoever drops it unsent must ``close`` it;
``__del__`` closes a forgotten one so a response dropped by a closed connection
leaks nothing.
"""

from __future__ import annotations

import os

from tidelog.core.limits import SENDFILE_MIN_BYTES


class FileRegion:
    """``length`` bytes of a file from ``position``, through a descriptor of its own."""

    __slots__ = ("fd", "position", "length", "path")

    def __init__(self, fd: int, position: int, length: int, path: str = "?"):
        self.fd = fd
        self.position = position
        self.length = length
        self.path = path

    @classmethod
    def pin(cls, file_slice, min_bytes: int = SENDFILE_MIN_BYTES) -> "FileRegion | bytes":
        """What a response holds for ``file_slice`` (a ``FileSlice``): a region of at
        least ``min_bytes``, else (or when the file has no descriptor) its bytes."""
        length = len(file_slice)
        if length < min_bytes or not file_slice.on_file():
            return file_slice.read_bytes()     # small, or reaching into writes still queued
        try:
            fd = os.dup(file_slice.fileno())
        except (AttributeError, NotImplementedError, OSError):
            return file_slice.read_bytes()     # a file with no descriptor (or none to spare)
        return cls(fd, file_slice.position, length, getattr(file_slice.handle, "path", "?"))

    def read(self) -> bytes:
        """Its bytes (the regions of a TLS response); short: ``TruncatedRegionError``."""
        parts, got = [], 0
        while got < self.length:
            data = os.pread(self.fd, self.length - got, self.position + got)
            if not data:
                raise TruncatedRegionError(self, got)
            parts.append(data)
            got += len(data)
        self.close()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __len__(self) -> int:
        return self.length

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRegion({self.path!r}, position={self.position}, length={self.length})"


class TruncatedRegionError(Exception):
    """A region's file was truncated before it was sent: the response cannot be whole."""

    def __init__(self, region: FileRegion, sent: int):
        super().__init__(f"{region.path} was truncated during write: {sent} of {region.length} bytes "
                         f"at position {region.position}")


class ResponseFrame:
    """A response frame, size prefix included, as ``parts``: bytes and ``FileRegion``s in
    the order they go on the wire. ``size`` is the whole frame's length."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list):
        self.parts = parts
        self.size = sum(len(part) for part in parts)

    def close(self) -> None:
        """Give back the descriptors of the regions not sent."""
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()

    def __len__(self) -> int:
        return self.size
