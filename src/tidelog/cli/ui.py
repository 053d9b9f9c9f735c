"""``tidelog ui -b HOST:PORT [--port N]``: the live web view of a cluster (tidelog/ui).

``--drills`` (with ``--cluster-dir``) turns the fault-drill buttons on; the URL
printed then carries the view's token. ``--state-token-file`` (or a secure
cluster's own, with ``--cluster-dir``) is sent to the brokers' ``/state`` and makes
the view itself need its token."""

from __future__ import annotations

import asyncio
import logging
import sys


def run(args) -> int:
    from tidelog.protocol.client_config import load_command_config
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
    if args.drills and args.cluster_dir is None:
        print("error: --drills needs --cluster-dir (a cluster started by tidelog cluster up)", file=sys.stderr)
        return 2
    try:
        state_token = _state_token(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = UiServer(bootstrap, args.host, args.port, args.metrics_port_offset, metrics_ports,
                      args.cluster_dir, args.interval, security, drills=args.drills, state_token=state_token)

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


def _state_token(args) -> str | None:
    """The token to send to /state: --state-token-file, else a secure cluster's own."""
    from tidelog.cluster import ClusterError, ProcessCluster, state_token_path
    path = args.state_token_file
    if path is None and args.cluster_dir is not None:
        try:
            secure = ProcessCluster.load(args.cluster_dir).layout.secure
        except (ClusterError, OSError, ValueError):
            secure = False                     # the view reports an unreadable cluster itself
        if secure:
            path = state_token_path(args.cluster_dir)
    if path is None:
        return None
    with open(path, "rb") as f:
        token = f.read(4096).split(b"\n", 1)[0].strip().decode("ascii", "replace")
    if len(token) < 16:
        raise ValueError(f"{path} holds no token of at least 16 characters")
    return token
