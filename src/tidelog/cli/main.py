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


def _skip_kio_hypothesis_hooks() -> None:
    """kio registers strategies for its types with hypothesis whenever hypothesis can be
    imported (it can in a test environment): half a second of imports no command uses.
    Import kio while ``hypothesis`` reads as absent, then forget that, so a later
    ``import hypothesis`` works as usual."""
    if "hypothesis" in sys.modules or "kio" in sys.modules:
        return
    sys.modules["hypothesis"] = None   # type: ignore[assignment]
    try:
        import kio.static._phantom  # noqa: F401  (the one kio module that looks for hypothesis)
    except ImportError:
        pass
    finally:
        if sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]


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
    _skip_kio_hypothesis_hooks()
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
