"""Wire ↔ domain translation, one module per family of APIs.

Theory of operation. ``protocol.codec`` turns bytes into kio entities and
response dicts into bytes; this package turns a decoded kio request of any
version into the request layer's domain request (``tidelog.broker.requests``)
and the layer's version-free result into the response of the version asked.
Nothing here decides anything: what a request means is the request layer's;
which fields a version carries is here. Each module also writes its domain
requests back as request bodies (``*_body``), so a round trip
``decode(encode(x)) == x`` can be checked at every version the broker serves
(tests/server/test_translate_group.py).
"""
