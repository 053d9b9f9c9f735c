"""Request dispatch: supported versions, ApiVersions, and error answers.

Theory of operation. ``Dispatcher`` owns the table of handlers by API key; a
handler is a function ``(header, request) -> dict | Awaitable[dict] | None``
written once for every version (see protocol.codec). The supported range of
an API is the handler's declared range intersected with what kio can encode.

* An unknown API key or a version outside the range is answered with
  ``UNSUPPORTED_VERSION`` in the API's own response shape when kio can encode
  that version and the shape has a top-level error code (other fields empty,
  times -1, as Kafka's error responses); otherwise the connection is closed. An
  ApiVersions request of a too-new version is answered in v0 format (KIP-511)
  so the client can learn what we support. Such requests cost no authentication,
  so each listener logs them through one ``network.RateLimitedLog`` (after a
  burst, at most one line per ``REJECTED_LOG_INTERVAL_S``, with a count of the
  lines left out), never with a traceback. On a SASL listener, any request but
  the handshake's before authentication closes the connection first (Kafka's
  SaslServerAuthenticator).
* Bodies that do not decode raise ``ProtocolError``: the connection is closed.
* A handler that raises an unexpected exception is a bug: it is logged and the
  connection is closed (never a silent wrong answer).

An ``observer`` (``server/metrics.RequestMetrics`` when ``metrics.port`` is set)
is called once per answered request with ``(header, request, response body,
started)``: for a delayed response when it completes, so its time is the
request's total time (decode, handling, any wait in a purgatory, encode).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from time import monotonic, perf_counter
from typing import Callable

from tidelog.controller.feature_control import SUPPORTED_FEATURES
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import (
    ProtocolError,
    RequestHeader,
    decode_request,
    _response_class,
    encode_response,
    kio_versions,
)
from tidelog.server.network import RateLimitedLog

logger = logging.getLogger("tidelog.dispatch")

Handler = Callable[[RequestHeader, object], object]

# The client address ("host") of the request being handled, for the handlers that
# record it (a group member's client host); set around each synchronous call.
client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
# The connection of the request being handled (its SASL session, its principal).
current_connection: contextvars.ContextVar[object] = contextvars.ContextVar("current_connection", default=None)


class Dispatcher:
    def __init__(self, observer: Callable[[RequestHeader, object, dict | None, float], None] | None = None):
        self.handlers: dict[int, tuple[Handler, int, int]] = {}
        self.observer = observer
        # ACLs (server/authorization.py): (header, request) -> None to go on, a refusal
        # body, or a ``Partial`` (some items refused, the others served).
        self.gate: Callable[[RequestHeader, object], dict | None] | None = None
        # Requests answered UNSUPPORTED_VERSION, when the connection has no listener's log.
        self.rejected_log = RateLimitedLog(logger)
        # The node's committed metadata image, for ApiVersions' finalized features (runtime.py).
        self.metadata_image: Callable[[], object] | None = None
        # Client quotas (server/quotas.py QuotaEnforcer): records each request's usage and
        # throttles (throttle_time_ms in the answer, the connection muted); None: no quotas.
        self.quotas = None
        self.register(ApiKey.API_VERSIONS, self._api_versions, 0, 4)

    def register(self, api_key: int, handler: Handler, min_version: int, max_version: int) -> None:
        available = kio_versions(api_key)
        assert available is not None, f"kio has no schema for API key {api_key}"
        low, high = max(min_version, available[0]), min(max_version, available[1])
        assert low <= high, f"no version of API key {api_key} is both handled and encodable"
        self.handlers[api_key] = (handler, low, high)

    def supported_versions(self) -> list[dict]:
        return [{"api_key": key, "min_version": low, "max_version": high}
                for key, (_, low, high) in sorted(self.handlers.items())]

    def __call__(self, header: RequestHeader, frame: bytes, body_offset: int, connection):
        entry = self.handlers.get(header.api_key)
        session = getattr(connection, "sasl", None)
        if session is not None and not session.allows(header.api_key, int(monotonic() * 1000)):
            # Kafka's SaslServerAuthenticator: any other request before authentication (or
            # after the login expired, KIP-368) closes the connection; so does an unknown
            # API key or version there (the listener logs it, rate-limited).
            raise ProtocolError(f"{_api_name(header.api_key)} request without a valid SASL authentication")
        if entry is None or not entry[1] <= header.api_version <= entry[2]:
            return self._unsupported(header, connection)
        handler = entry[0]
        observer = self.observer
        started = perf_counter() if observer is not None else 0.0
        request = decode_request(header, frame, body_offset)
        quotas = self.quotas
        if quotas is not None:
            request = quotas.before(header, request, connection)
            handler = quotas.wrap(header, request, handler, connection)
            handling = perf_counter()
        token = client_host.set(getattr(connection, "host", ""))
        # Only SASL handlers and ACL checks ask for the connection: a plain listener's hot
        # path (Produce, Fetch) does not pay for setting it.
        connection_token = current_connection.set(connection) \
            if session is not None or self.gate is not None else None
        try:
            verdict = self.gate(header, request) if self.gate is not None else None
            if verdict is None:
                result = handler(header, request)
            elif isinstance(verdict, dict):             # the whole request refused
                result = verdict
            else:                                       # some items refused: the rest served
                result = verdict.answer(handler, header)
        finally:
            client_host.reset(token)
            if connection_token is not None:
                current_connection.reset(connection_token)
        if quotas is not None:
            handled_ms = (perf_counter() - handling) * 1000.0
            if result is None or isinstance(result, dict):
                result = quotas.after(header, request, len(frame), result, handled_ms, connection)
            else:
                result = _after(quotas, header, request, len(frame), result, handled_ms, connection)
        # A plaintext connection takes a Fetch's records as file regions, sent by sendfile.
        file_regions = getattr(connection, "sendfile", False)
        if result is None or isinstance(result, dict):
            response = None if result is None else encode_response(header, result, file_regions)
            if observer is not None:
                observer(header, request, result, started)
            return response
        return _encode_later(header, result, observer, request, started, file_regions)

    def _unsupported(self, header: RequestHeader, connection) -> bytes:
        """UNSUPPORTED_VERSION in the request's own response shape, or ProtocolError
        (the connection closes; the listener logs that, rate-limited)."""
        if header.api_key == ApiKey.API_VERSIONS:
            v0 = header._replace(api_version=0)
            response = encode_response(v0, {"error_code": int(ErrorCode.UNSUPPORTED_VERSION),
                                            "api_keys": self.supported_versions()})
        else:
            body = _unsupported_version_body(header.api_key, header.api_version)
            if body is None:
                # Kafka closes the connection when it cannot answer in the request's shape.
                raise ProtocolError(f"unsupported API key {header.api_key} version {header.api_version}")
            try:
                response = encode_response(header, body)
            except Exception as e:      # a shape we cannot fill: close rather than answer wrongly
                raise ProtocolError(f"unsupported API key {header.api_key} version {header.api_version} "
                                    f"(no error response: {type(e).__name__})") from None
        rejected = getattr(connection, "rejected_log", None) or self.rejected_log
        rejected.log(logging.INFO, "answered UNSUPPORTED_VERSION to %s v%d from %s (client id %r)",
                     _api_name(header.api_key), header.api_version, getattr(connection, "peer", "?"),
                     header.client_id)
        return response

    def _api_versions(self, header: RequestHeader, request) -> dict:
        """Versions, and (v3+, KIP-584) the feature levels tidelog supports, those the
        cluster finalized and their epoch (the offset of the last FeatureLevelRecord),
        as Kafka's broker answers (controller/feature_control.py)."""
        image = self.metadata_image() if self.metadata_image is not None else None
        finalized = dict(image.features) if image is not None else {}
        return {"error_code": 0, "api_keys": self.supported_versions(), "throttle_time": 0,
                "supported_features": [{"name": name, "min_version": low, "max_version": high}
                                       for name, (low, high) in sorted(SUPPORTED_FEATURES.items())],
                "finalized_features_epoch": image.features_epoch if image is not None and finalized else -1,
                "finalized_features": [{"name": name, "min_version_level": level, "max_version_level": level}
                                       for name, level in sorted(finalized.items())],
                "zk_migration_ready": False}


def _unsupported_version_body(api_key: int, api_version: int) -> dict | None:
    """The error response of an API version kio can encode whose shape has a top-level
    error code: that code UNSUPPORTED_VERSION, collections empty, times -1 (as Kafka's
    error responses, e.g. CreateDelegationToken's issue/expiry timestamps); else None."""
    versions = kio_versions(api_key)
    if not versions or not versions[0] <= api_version <= versions[1]:
        return None
    try:
        cls = _response_class(api_key, api_version)
    except Exception:                   # a gap in kio's versions
        return None
    fields = dataclasses.fields(cls)
    if "error_code" not in {f.name for f in fields}:
        return None
    body: dict = {"error_code": int(ErrorCode.UNSUPPORTED_VERSION)}
    for f in fields:
        if f.metadata.get("kafka_type") == "datetime_i64":
            body[f.name] = -1
    return body


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"


async def _after(quotas, header, request, request_bytes, awaitable, handled_ms, connection):
    """A delayed answer's quotas, once it is there (its wait in a purgatory is not handling time)."""
    return quotas.after(header, request, request_bytes, await awaitable, handled_ms, connection)


async def _encode_later(header: RequestHeader, awaitable, observer=None, request=None,
                        started: float = 0.0, file_regions: bool = False):
    body = await awaitable
    response = None if body is None else encode_response(header, body, file_regions)
    if observer is not None:
        observer(header, request, body, started)
    return response
