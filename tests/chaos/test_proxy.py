"""The loopback proxy: traffic flows, a cut stops it (refused and closed), heal restores it."""

import socket
import socketserver
import threading

import pytest

from tidelog.chaos.proxy import CLIENT, LinkProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _roundtrip(port: int) -> bytes | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"ping")
            return s.recv(4) or None
    except OSError:
        return None


def test_cut_refuses_and_heal_restores(echo):
    proxy = LinkProxy([7], target_port=lambda node: echo, node_pids=lambda: {}).start()
    try:
        port = proxy.port(7)
        assert _roundtrip(port) == b"ping"
        held = socket.create_connection(("127.0.0.1", port), timeout=2)
        held.sendall(b"ping")
        assert held.recv(4) == b"ping"
        proxy.partition(CLIENT, 7)
        assert _roundtrip(port) is None                 # new connections refused
        held.settimeout(2)
        assert held.recv(4) == b""                      # the open one was closed
        proxy.heal()
        assert _roundtrip(port) == b"ping"
        assert proxy.connections >= 3
    finally:
        proxy.close()


def test_the_source_of_a_connection_from_this_process_is_a_client(echo):
    proxy = LinkProxy([7], target_port=lambda node: echo, node_pids=lambda: {}).start()
    try:
        proxy.cut(3, 7)                                 # some other node's link: ours still works
        assert _roundtrip(proxy.port(7)) == b"ping"
    finally:
        proxy.close()
