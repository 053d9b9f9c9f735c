"""``tidelog`` console script.

The command line is parsed by ``options`` (argparse only); the chosen command's
module — and with it the Kafka protocol schemas, asyncio and the rest — is
imported only then, so ``--help`` and a parse error cost no more than Python's
start. Output into a pipe that closes early (``tidelog cluster status | head``)
ends the command quietly, as it does for other Unix tools.
"""

from __future__ import annotations

import os
import sys

# command -> the module that runs it (``run(args)``; async for the Kafka-protocol tools)
_MODULES = {"topics": "topics", "groups": "groups", "transactions": "transactions", "acls": "acls",
            "users": "users", "quotas": "quotas", "leader-election": "leader_election", "reassign": "reassign",
            "cluster": "cluster", "ui": "ui", "format": "format"}
_ASYNC = {"topics", "groups", "transactions", "acls", "users", "quotas", "leader-election", "reassign"}


def main(argv: list[str] | None = None) -> int:
    from tidelog.cli.options import build_parser, finish
    parser = build_parser()
    args = finish(parser, parser.parse_args(argv))
    try:
        status = _run(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as if killed by SIGPIPE; point
        # stdout at /dev/null so the interpreter's last flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13


def _profiled(run, overrides) -> int:
    """``run()`` under cProfile, written to ``$TIDELOG_PROFILE/<node.id>.prof`` when it
    returns (a clean stop; a killed process writes none)."""
    import cProfile
    node_id = next((o.split("=", 1)[1] for o in overrides or [] if o.startswith("node.id=")), str(os.getpid()))
    profile = cProfile.Profile()
    try:
        return profile.runcall(run)
    finally:
        os.makedirs(os.environ["TIDELOG_PROFILE"], exist_ok=True)
        profile.dump_stats(os.path.join(os.environ["TIDELOG_PROFILE"], f"{node_id}.prof"))


def _run(args) -> int:
    if args.command == "serve":
        import logging
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from tidelog.server.runtime import run_server as run_broker
        if os.environ.get("TIDELOG_PROFILE"):     # a directory: cProfile of this node's run
            return _profiled(lambda: run_broker(args.properties, args.override), args.override)
        return run_broker(args.properties, args.override)
    if args.command == "bench":
        from tidelog.cli.storage_bench import report
        return report(args) or 0
    import importlib
    module = importlib.import_module(f"tidelog.cli.{_MODULES[args.command]}")
    if args.command in _ASYNC:
        import asyncio
        return asyncio.run(module.run(args))
    return module.run(args)


if __name__ == "__main__":
    sys.exit(main())
