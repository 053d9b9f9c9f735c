"""``tidelog`` console script."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidelog", description="tidelog: a Kafka-compatible commit log")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a broker (broker + controller in one process)")
    serve.add_argument("properties", nargs="?", help="server.properties file (Kafka's names)")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override one setting (repeatable)")

    bench = commands.add_parser("bench", help="run a benchmark")
    bench.add_argument("what", choices=["storage"])
    bench.add_argument("rest", nargs=argparse.REMAINDER)

    from tidelog.cli import acls, cluster, groups, topics, transactions, ui, users
    topics.add_parser(commands)
    acls.add_parser(commands)
    users.add_parser(commands)
    groups.add_parser(commands)
    transactions.add_parser(commands)
    cluster.add_parser(commands)
    ui.add_parser(commands)

    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from tidelog.server.runtime import run_server as run_broker
        return run_broker(args.properties, args.override)
    if args.command == "bench":
        from tidelog.cli.storage_bench import main as storage_bench
        return storage_bench(args.rest) or 0
    if args.command == "cluster":
        return cluster.run(args)
    if args.command == "topics":
        return asyncio.run(topics.run(args))
    if args.command == "groups":
        return asyncio.run(groups.run(args))
    if args.command == "transactions":
        return asyncio.run(transactions.run(args))
    if args.command == "acls":
        return asyncio.run(acls.run(args))
    if args.command == "users":
        return asyncio.run(users.run(args))
    if args.command == "ui":
        return ui.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
