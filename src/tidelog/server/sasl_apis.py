"""SaslHandshake and SaslAuthenticate on a SASL listener (the wire side of server/sasl.py).

Theory of operation. Each connection of a SASL listener carries a ``SaslSession``;
these handlers move it. A successful authentication sets the connection's
principal (``User:<name>``); a failed one is logged with the client's address
(never a secret), answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` (so guessing is slow), and the
connection closes after that answer, as Kafka's does.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.dispatch import current_connection
from tidelog.server.sasl import AUTHENTICATED, SaslAuthenticator

logger = logging.getLogger("tidelog.sasl")


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class SaslApis:
    def __init__(self, authenticator: SaslAuthenticator, failure_delay_ms: int):
        self.authenticator = authenticator
        self.failure_delay_ms = failure_delay_ms

    def register(self, dispatcher) -> None:
        # v0 too: clients (librdkafka) look for it in ApiVersions; all then authenticate with
        # SaslAuthenticate (KIP-152). Raw v0 tokens, without SaslAuthenticate, are not read.
        dispatcher.register(ApiKey.SASL_HANDSHAKE, self.handle_sasl_handshake, 0, 1)
        dispatcher.register(ApiKey.SASL_AUTHENTICATE, self.handle_sasl_authenticate, 0, 2)

    def handle_sasl_handshake(self, header, request):
        connection = current_connection.get()
        error = connection.sasl.handshake(str(request.mechanism))
        if error != ErrorCode.NONE:
            logger.info("SASL handshake from %s refused: %s (mechanism %r)", connection.peer, error.name,
                     str(request.mechanism)[:64])
        return {"error_code": int(error), "mechanisms": list(self.authenticator.mechanisms)}

    def handle_sasl_authenticate(self, header, request):
        connection = current_connection.get()
        reauthenticating = connection.sasl._first_principal is not None
        error, message, token = connection.sasl.authenticate(bytes(request.auth_bytes or b""), now_ms())
        answer = {"error_code": int(error), "error_message": message, "auth_bytes": token,
                  "session_lifetime": connection.sasl.session_lifetime_ms if error == ErrorCode.NONE else 0}
        if error == ErrorCode.NONE:
            if connection.sasl.state != AUTHENTICATED:
                return answer                     # a step of a multi-step exchange (SCRAM)
            connection.principal = connection.sasl.principal
            logger.info("%s %s as %s (SASL/%s)", connection.peer,
                     "re-authenticated" if reauthenticating else "authenticated", connection.principal,
                     connection.sasl.mechanism)
            return answer
        logger.warning("failed authentication from %s (SASL/%s): %s", connection.peer, connection.sasl.mechanism,
                    message)
        return self._refuse(connection, answer)

    async def _refuse(self, connection, answer: dict) -> dict:
        await asyncio.sleep(self.failure_delay_ms / 1000)
        connection.close_after_response = True        # this answer is the connection's last
        return answer
