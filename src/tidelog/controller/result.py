"""What every controller operation returns: the records to write and the reply.

Controller managers never change their hard state while deciding; they return
``ControllerResult(records, response)``. The ``QuorumController`` appends the
records to the metadata log and replays them; only replay changes state (as in
Kafka's ``QuorumController``). Expected failures are replies carrying an
``ErrorCode`` (``ApiError``), never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import MetadataRecord

T = TypeVar("T")


@dataclass(frozen=True)
class ControllerResult(Generic[T]):
    records: tuple[MetadataRecord, ...]
    response: T

    def __init__(self, records: Sequence[MetadataRecord], response: T):
        object.__setattr__(self, "records", tuple(records))
        object.__setattr__(self, "response", response)


@dataclass(frozen=True)
class ApiError:
    """An error code with the message that explains it to a human."""

    error_code: ErrorCode = ErrorCode.NONE
    message: str | None = None

    @property
    def is_success(self) -> bool:
        return self.error_code == ErrorCode.NONE

    def __str__(self) -> str:
        return self.error_code.name + (f": {self.message}" if self.message else "")


NO_ERROR = ApiError()
