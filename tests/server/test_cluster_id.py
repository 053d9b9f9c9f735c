"""A new cluster id is Kafka's textual Uuid and never starts with "-" (Kafka's
``Uuid.randomUuid`` draws again): ``kafka-storage format --cluster-id -x…`` takes such an
id for an option. One in 64 random ids did; the real-Kafka fixture failed on one."""

import base64
import uuid

from tidelog.server import storage_format


def test_an_id_starting_with_a_dash_is_drawn_again(monkeypatch):
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))            # base64 "-A…"
    assert base64.urlsafe_b64encode(dash.bytes).startswith(b"-")
    draws = iter([dash, uuid.UUID(int=1 << 120)])
    monkeypatch.setattr(storage_format.uuid, "uuid4", lambda: next(draws))
    text = storage_format.new_cluster_id()
    assert not text.startswith("-") and len(text) == 22
    assert uuid.UUID(bytes=base64.urlsafe_b64decode(text + "==")) == uuid.UUID(int=1 << 120)
