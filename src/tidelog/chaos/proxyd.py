"""The link proxy as a daemon for a ``tidelog cluster`` directory (``up --link-proxy``).

``python -m tidelog.chaos.proxyd --dir DIR`` runs a ``LinkProxy`` in front of the
controller and every broker of the cluster in ``DIR``, writes ``links.json``
(its pid, control port and the proxy port of each node) and then serves one-line
commands on its control port (127.0.0.1), one JSON line back each:

    partition A B | cut A B | isolate A | heal | status

Node ids are the cluster's (brokers 1..N, controller 1000); ``client`` names
every other process. Node ports and pids are read from ``cluster.json`` at each
connection, so restarts done with ``tidelog cluster`` are followed. The CLI verbs
``tidelog cluster partition|cut|isolate|heal|links`` send these commands.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import socketserver
import sys
import threading

from tidelog.chaos.proxy import CLIENT, LinkProxy
from tidelog.cluster import LINKS_FILE


def _node(text: str) -> int:
    return CLIENT if text == "client" else int(text)


def _layout(directory: str) -> dict:
    with open(os.path.join(directory, "cluster.json")) as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.chaos.proxyd")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mode", choices=("drop", "blackhole"), default="drop")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)     # kill -USR1 prints every thread's stack to the log
    directory = os.path.abspath(args.dir)
    nodes = [n["node_id"] for n in _layout(directory)["nodes"]]

    def port_of(node_id: int) -> int:
        return next(n["port"] for n in _layout(directory)["nodes"] if n["node_id"] == node_id)

    def pids() -> dict[int, int]:
        return {n["pid"]: n["node_id"] for n in _layout(directory)["nodes"] if n.get("pid")}

    proxy = LinkProxy(nodes, port_of, pids, mode=args.mode).start()

    class Control(socketserver.StreamRequestHandler):
        def handle(self):
            for raw in self.rfile:
                words = raw.decode().split()
                try:
                    answer = _command(proxy, words)
                except (ValueError, IndexError, KeyError) as e:
                    answer = {"error": f"{type(e).__name__}: {e}"}
                self.wfile.write((json.dumps(answer) + "\n").encode())

    control = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Control)
    control.daemon_threads = True
    info = {"pid": os.getpid(), "control_port": control.server_address[1],
            "ports": {str(k): v for k, v in proxy.ports.items()}, "mode": args.mode}
    with open(os.path.join(directory, LINKS_FILE + ".tmp"), "w") as f:
        json.dump(info, f)
    os.replace(os.path.join(directory, LINKS_FILE + ".tmp"), os.path.join(directory, LINKS_FILE))
    # shutdown() waits for serve_forever, which runs in this thread: call it from another.
    signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=control.shutdown).start())
    print(f"link proxy ready: control port {info['control_port']}", flush=True)
    try:
        control.serve_forever()
    finally:
        proxy.close()
    return 0


def _command(proxy: LinkProxy, words: list[str]) -> dict:
    verb = words[0]
    if verb == "partition":
        proxy.partition(_node(words[1]), _node(words[2]))
    elif verb == "cut":
        proxy.cut(_node(words[1]), _node(words[2]))
    elif verb == "isolate":
        proxy.isolate(_node(words[1]))
    elif verb == "heal":
        proxy.heal()
    elif verb != "status":
        raise ValueError(f"unknown command {verb!r}")
    name = lambda n: "client" if n == CLIENT else str(n)
    return {"ok": True, "cut": sorted(f"{name(a)}->{name(b)}" for a, b in proxy.blocked),
            "connections": proxy.connections}


def send(directory: str, command: str) -> dict:
    """Send one command to the daemon of the cluster in ``directory``."""
    with open(os.path.join(directory, LINKS_FILE)) as f:
        port = json.load(f)["control_port"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((command + "\n").encode())
        return json.loads(s.makefile().readline())


if __name__ == "__main__":
    sys.exit(main())
