"""``tidelog ui -b HOST:PORT [--port N]``: the live web view of a cluster (tidelog/ui)."""

from __future__ import annotations

import asyncio
import logging
import sys


def add_parser(commands) -> None:
    ui = commands.add_parser("ui", help="serve a live web view of a cluster (brokers, partitions, state changes)")
    ui.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                    help="HOST:PORT[,HOST:PORT…] of brokers to find the cluster through")
    ui.add_argument("--port", type=int, default=0, help="the page's port on --host (default: a free one)")
    ui.add_argument("--host", default="127.0.0.1", help="the address the page listens on (default 127.0.0.1)")
    ui.add_argument("--metrics-port-offset", type=int, default=100,
                    help="a broker's metrics port is its Kafka port + this (default 100, as tidelog cluster up)")
    ui.add_argument("--metrics-port", action="append", default=[], metavar="ID=PORT",
                    help="the metrics port of one node, instead of the offset (repeatable)")
    ui.add_argument("--interval", type=float, default=1.0, help="seconds between polls of the brokers (≥ 1)")
    ui.add_argument("--command-config", default=None, metavar="FILE",
                    help="client properties (security.protocol, ssl.*, sasl.*) to reach TLS/SASL brokers")
    ui.add_argument("--cluster-dir", default=None,
                    help="a cluster started by `tidelog cluster up`: read its nodes from cluster.json and offer "
                         "fault drills (kill/pause/resume/restart)")


def run(args) -> int:
    from tidelog.cli.client_config import load_command_config
    from tidelog.core.errors import KafkaError
    from tidelog.ui import UiServer, parse_address, serve
    try:
        security = load_command_config(args.command_config)
    except (OSError, KafkaError) as e:
        print(f"error: cannot use --command-config {args.command_config}: {e}", file=sys.stderr)
        return 2
    try:
        bootstrap = [parse_address(a) for a in args.bootstrap_server.split(",") if a.strip()]
        metrics_ports = {}
        for item in args.metrics_port:
            node, sep, port = item.partition("=")
            if not sep or not node.strip().isdigit() or not port.strip().isdigit():
                raise ValueError(f"--metrics-port expects ID=PORT, got {item!r}")
            metrics_ports[int(node)] = int(port)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = UiServer(bootstrap, args.host, args.port, args.metrics_port_offset, metrics_ports,
                      args.cluster_dir, args.interval, security)

    async def main() -> int:
        import signal
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(server)
        except OSError as e:
            print(f"error: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
            return 1
        except asyncio.CancelledError:
            pass
        return 0

    return asyncio.run(main())
