"""The client side of SASL/PLAIN and SASL/SCRAM (RFC 4616, RFC 5802/7677), sans-I/O.

Used by every tidelog client that authenticates — a node's own connections, the
CLI tools and the Spark source and sink — over SaslHandshake + SaslAuthenticate:
``tokens(security)`` yields the client's messages; each is sent in a
SaslAuthenticate request, and the server's answer is sent back into the generator
(the SCRAM server signature is checked at the end)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Generator

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *_HASHES)


class SaslClientError(Exception):
    pass


def tokens(mechanism: str, username: str, password: str,
           nonce: bytes | None = None) -> Generator[bytes, bytes, None]:
    """Messages to send; ``send()`` each server answer back in."""
    if mechanism == "PLAIN":
        yield b"\x00" + username.encode() + b"\x00" + password.encode()
        return
    hash_name = _HASHES.get(mechanism)
    if hash_name is None:
        raise SaslClientError(f"SASL mechanism {mechanism} is not supported (supported: {', '.join(MECHANISMS)})")
    client_nonce = base64.b64encode(nonce or os.urandom(24)).decode()
    name = username.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={client_nonce}"
    server_first = (yield f"n,,{first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
    if not fields.get("r", "").startswith(client_nonce) or "s" not in fields or "i" not in fields:
        raise SaslClientError("the server's SCRAM first message is invalid")
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_final = (yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    expected = "v=" + base64.b64encode(hmac.new(server_key, auth_message, hash_name).digest()).decode()
    if not hmac.compare_digest(server_final.encode(), expected.encode()):
        raise SaslClientError("the server's SCRAM signature does not match: it does not know the password")
