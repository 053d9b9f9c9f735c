"""The command line of ``tidelog``: every command, verb and option, with its help and default.

Theory of operation. This module imports nothing but ``argparse`` (no Kafka protocol
schemas, no asyncio), so ``tidelog --help``, ``tidelog topics --help`` and a
mistyped option answer at once; ``main.py`` imports the chosen command's module only
after the command line parsed. The commands that talk to brokers share their
connection options (``--bootstrap-server``/``-b``, ``--command-config``, and
``--timeout`` where there is one): they are accepted before the verb
(``tidelog topics -b H:P list``) or after it (``tidelog topics list -b H:P``); given
after, they win. The verb-level copies default to ``argparse.SUPPRESS`` so that an
option not repeated there leaves the command-level value alone. Kafka's spellings
are accepted where Kafka's tools take them: ``--bootstrap-server``, ``--topic`` for
a topic named by position, ``--group`` for a group, ``--admin.config`` for
``--command-config`` (``kafka-leader-election``'s name). ``finish`` folds those
aliases into one value after parsing.
"""

from __future__ import annotations

import argparse

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_CLUSTER_DIR = "./cluster"
CONTROLLER_ID = 1000                      # the first controller of a `cluster up` (tidelog.cluster)
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # Kafka's transaction.max.timeout.ms, in minutes
ACL_OPERATIONS = ("Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                  "IdempotentWrite, All")
BOOTSTRAP_HELP = (f"a broker to start from (default: the --command-config file's bootstrap.servers, else "
                  f"{DEFAULT_BOOTSTRAP})")
COMMAND_CONFIG_HELP = ("client properties for a secured cluster (security.protocol, ssl.ca.location or "
                       "ssl.truststore.location, sasl.mechanism, sasl.username/sasl.password or "
                       "sasl.jaas.config): the client.properties that `cluster up --secure` prints")


class Formatter(argparse.HelpFormatter):
    """Help that names each option's default when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or "default" in text or not action.option_strings or default is None
                or default is False or default is argparse.SUPPRESS or default == []):
            return text
        return f"{text} (default: %(default)s)"


class _Version(argparse.Action):
    """``--version``: read from the installed package only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version
        try:
            text = version("tidelog")
        except PackageNotFoundError:
            text = "(not installed)"
        print(f"tidelog {text}")
        parser.exit()


def _command(commands, name: str, text: str, description: str | None = None) -> argparse.ArgumentParser:
    return commands.add_parser(name, help=text, description=description or text, formatter_class=Formatter)


def _verb(verbs, name: str, text: str, parents=(), description: str | None = None) -> argparse.ArgumentParser:
    return verbs.add_parser(name, help=text, description=description or text, parents=list(parents),
                            formatter_class=Formatter)


def _connection(parser: argparse.ArgumentParser, *, after_verb: bool, timeout_ms: int | None = None,
                timeout_help: str = "") -> None:
    """The connection options, on the command (their defaults) or on a verb (given there, they win)."""
    suppress = after_verb
    parser.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT",
                        default=argparse.SUPPRESS if suppress else None, help=BOOTSTRAP_HELP)
    parser.add_argument("--command-config", metavar="FILE", default=argparse.SUPPRESS if suppress else None,
                        help=COMMAND_CONFIG_HELP)
    if timeout_ms is not None:
        parser.add_argument("--timeout", type=int, metavar="MS", default=argparse.SUPPRESS if suppress else timeout_ms,
                            help=f"{timeout_help} (default: {timeout_ms})")


def _connection_parent(timeout_ms: int | None = None, timeout_help: str = "") -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    _connection(parent, after_verb=True, timeout_ms=timeout_ms, timeout_help=timeout_help)
    return parent


def _names(parser: argparse.ArgumentParser, dest: str, flag: str, what: str, many: bool, required: bool = True,
           text: str = "") -> None:
    """A name given by position or, as Kafka's tools take it, with ``--topic``/``--group``
    (repeatable when ``many``); ``finish`` merges the two into ``dest``."""
    parser.add_argument(dest, nargs="*" if many else "?", metavar=what.upper(), help=text or f"the {what}")
    parser.add_argument(f"--{flag}", dest=f"{dest}_option", action="append" if many else "store",
                        default=[] if many else None, metavar=what.upper(),
                        help=f"the {what} (Kafka's spelling; same as naming it by position"
                             + ("; repeatable)" if many else ")"))
    parser.set_defaults(**{f"_names_{dest}": (many, required, what, flag)})


def finish(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Fold the ``--topic``/``--group`` aliases into the positional values; a bootstrap
    server not given is the ``--command-config`` file's ``bootstrap.servers``, else the default."""
    if "bootstrap_server" in vars(args) and args.bootstrap_server is None:
        args.bootstrap_server = _file_bootstrap(getattr(args, "command_config", None)) or DEFAULT_BOOTSTRAP
    for key in [k for k in vars(args) if k.startswith("_names_")]:
        dest = key[len("_names_"):]
        many, required, what, flag = getattr(args, key)
        delattr(args, key)
        positional, option = getattr(args, dest), getattr(args, f"{dest}_option")
        delattr(args, f"{dest}_option")
        if many:
            value = list(positional or []) + list(option or [])
            if required and not value:
                parser.error(f"name at least one {what} (by position or with --{flag})")
        else:
            if positional and option and positional != option:
                parser.error(f"two {what}s named: {positional!r} and --{flag} {option!r}")
            value = positional or option
            if required and not value:
                parser.error(f"name the {what} (by position or with --{flag})")
        setattr(args, dest, value)
    return args


def _file_bootstrap(path: str | None) -> str | None:
    """``bootstrap.servers`` of a client properties file (None: no file, no such line, or
    unreadable — the command itself reports a file it cannot use)."""
    if not path:
        return None
    from tidelog.broker.config import parse_properties
    from tidelog.core.errors import InvalidConfigError
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read(), path).get("bootstrap.servers") or None
    except (OSError, UnicodeDecodeError, InvalidConfigError):
        return None


# ---------------------------------------------------------------------- commands

def _node_settings(parser, file_help: str) -> None:
    """A node's settings: a server.properties file, then --override KEY=VALUE."""
    parser.add_argument("properties", nargs="?", metavar="SERVER.PROPERTIES", help=file_help)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, after the file (repeatable)")


def _serve(commands) -> None:
    serve = _command(commands, "serve", "run a broker (broker + controller in one process)",
                     "Run a tidelog node: by default a broker and controller in one process on 127.0.0.1:9092 with "
                     "its data in ./data. It prints one `tidelog ready: ...` line once it serves.")
    _node_settings(serve, "a server.properties file (Kafka's setting names); without one, the defaults")


def _format(commands) -> None:
    parser = _command(commands, "format", "format a node's log directories (kafka-storage format)",
                      "Write meta.properties into every log directory and, for a controller of a dynamic "
                      "quorum (KIP-853), its first voter set.")
    _node_settings(parser, "the node's server.properties file")
    parser.add_argument("--cluster-id", "-t", help="the cluster id (else cluster.id, else a new one)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--standalone", action="store_true",
                       help="this controller is the quorum's only voter; add others with add-controller")
    which.add_argument("--initial-controllers", metavar="ID@HOST:PORT:DIRECTORY_ID,...",
                       help="the first voters (the same list on each of them)")
    which.add_argument("--no-initial-controllers", action="store_true",
                       help="no voter set: the controller joins as an observer and waits to be added")


def _topics(commands) -> None:
    topics = _command(commands, "topics", "create, list, describe, alter and delete topics on any Kafka-compatible "
                                          "broker")
    _connection(topics, after_verb=False)
    common = _connection_parent()
    verbs = topics.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = _verb(verbs, "create", "create a topic and wait until every partition has a leader", [common])
    _names(create, "topic", "topic", "topic", many=False)
    create.add_argument("--partitions", type=int, default=-1, metavar="N",
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                        help="copies of each partition (default: the broker's default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic setting, e.g. retention.ms=600000 or cleanup.policy=compact (repeatable)")
    create.add_argument("--validate-only", action="store_true",
                        help="only check that the broker would create it")
    _verb(verbs, "list", "the names of the topics (internal ones left out)", [common])
    describe = _verb(verbs, "describe", "per partition: leader, epoch, replicas, ISR, log start and last stable "
                                        "offset; per replica: log end offset, high watermark and lag", [common])
    _names(describe, "topic", "topic", "topic", many=True, required=False,
           text="the topics to describe (default: every topic)")
    delete = _verb(verbs, "delete", "delete topics", [common])
    _names(delete, "topic", "topic", "topic", many=True)
    alter = _verb(verbs, "alter-config", "set or remove a topic's settings (IncrementalAlterConfigs)", [common])
    _names(alter, "topic", "topic", "topic", many=False)
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="set a setting (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY",
                       help="remove a setting: back to the broker's default (repeatable)")


def _groups(commands) -> None:
    timeout_help = "how long to keep retrying an unavailable coordinator"
    groups = _command(commands, "groups", "inspect and manage consumer groups on any Kafka-compatible broker "
                                          "(kafka-consumer-groups.sh)")
    _connection(groups, after_verb=False, timeout_ms=10_000, timeout_help=timeout_help)
    common = _connection_parent(10_000, timeout_help)
    verbs = groups.add_subparsers(dest="verb", required=True, metavar="VERB")

    listing = _verb(verbs, "list", "every group of the cluster", [common])
    listing.add_argument("--state", metavar="STATE[,STATE...]",
                         help="only groups in these states (Empty, Stable, PreparingRebalance, ...)")

    describe = _verb(verbs, "describe", "committed offsets, log end offsets and lag per partition, and who "
                                        "consumes it", [common])
    _names(describe, "group", "group", "group", many=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one line per member")
    view.add_argument("--state", action="store_true", help="coordinator, assignor, state and size")

    reset = _verb(verbs, "reset-offsets", "show (or with --execute, commit) new offsets for an inactive group",
                  [common])
    _names(reset, "group", "group", "group", many=False)
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="this offset (clamped to the log)")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    to.add_argument("--to-datetime", metavar="ISO-8601",
                    help="the first offset at or after this time, e.g. 2024-05-01T12:00:00+00:00 "
                         "(local time if no zone)")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    run_mode.add_argument("--dry-run", action="store_true", help="only show them (what happens without --execute)")

    delete = _verb(verbs, "delete", "delete groups that have no members", [common])
    _names(delete, "group", "group", "group", many=True)

    delete_offsets = _verb(verbs, "delete-offsets", "delete a group's committed offsets of some topics", [common])
    _names(delete_offsets, "group", "group", "group", many=False)
    delete_offsets.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]",
                                help="a topic, or some of its partitions (repeatable)")


def _transactions(commands) -> None:
    timeout_help = "how long to keep retrying an unavailable coordinator or leader"
    txns = _command(commands, "transactions", "inspect transactions and abort hanging ones "
                                              "(kafka-transactions.sh) on any Kafka-compatible broker")
    _connection(txns, after_verb=False, timeout_ms=10_000, timeout_help=timeout_help)
    common = _connection_parent(10_000, timeout_help)
    verbs = txns.add_subparsers(dest="verb", required=True, metavar="VERB")

    _verb(verbs, "list", "every transactional id of the cluster and its state", [common])

    describe = _verb(verbs, "describe", "a transactional id's state at its coordinator", [common])
    describe.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id")

    producers = _verb(verbs, "describe-producers", "the producers a partition's leader remembers, and their open "
                                                   "transactions", [common])
    producers.add_argument("--topic", required=True, help="the partition's topic")
    producers.add_argument("--partition", type=int, required=True, metavar="N", help="the partition")

    hanging = _verb(verbs, "find-hanging", "open transactions that no coordinator will ever end", [common])
    hanging.add_argument("--topic", help="only this topic (default: every topic)")
    hanging.add_argument("--partition", type=int, metavar="N", help="only this partition of --topic")
    hanging.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                         metavar="MINUTES",
                         help="only transactions whose producer wrote last longer ago than this "
                              f"(default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN}, Kafka's transaction.max.timeout.ms)")

    abort = _verb(verbs, "abort", "abort a hanging transaction: write its ABORT marker to the partition", [common])
    abort.add_argument("--topic", required=True, help="the partition's topic")
    abort.add_argument("--partition", type=int, required=True, metavar="N", help="the partition")
    abort.add_argument("--start-offset", type=int, metavar="OFFSET",
                       help="the first offset of the open transaction to abort (see describe-producers)")
    abort.add_argument("--producer-id", type=int, metavar="ID", help="instead of --start-offset: the producer id ...")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH", help="... its epoch ...")
    abort.add_argument("--coordinator-epoch", type=int, metavar="EPOCH",
                       help="... and the coordinator epoch of the marker")


def _acls(commands) -> None:
    acls = _command(commands, "acls", "add, list and remove ACLs (kafka-acls.sh; brokers with authorizer.class.name "
                                      "set)")
    _connection(acls, after_verb=False)
    common = _connection_parent()
    verbs = acls.add_subparsers(dest="verb", required=True, metavar="VERB")
    texts = {"add": "allow or deny principals operations on a resource",
             "list": "the ACLs, all or those of a resource or principal",
             "remove": "remove the ACLs that match"}
    for name, text in texts.items():
        verb = _verb(verbs, name, text, [common])
        resource = verb.add_mutually_exclusive_group(required=name == "add")
        resource.add_argument("--topic", help="a topic (or, with --resource-pattern-type prefixed, a prefix; * for "
                                              "every topic)")
        resource.add_argument("--group", help="a consumer group (or a prefix, or *)")
        resource.add_argument("--transactional-id", metavar="ID", help="a transactional id (or a prefix, or *)")
        resource.add_argument("--cluster", action="store_true", help="the cluster")
        verb.add_argument("--resource-pattern-type", choices=["literal", "prefixed", "any", "match"],
                          default="literal" if name == "add" else "any",
                          help="how the resource name matches (Kafka's)")
        if name != "list":
            verb.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                              help="e.g. User:alice (repeatable)")
            verb.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                              help="e.g. User:mallory (repeatable)")
            verb.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                              help=f"{ACL_OPERATIONS} (repeatable; default All)")
            verb.add_argument("--host", default="*", help="the client address the ACL applies to")
        else:
            verb.add_argument("--principal", help="only the ACLs of this principal, e.g. User:alice")


def _users(commands) -> None:
    users = _command(commands, "users", "add, delete and list SCRAM users (SASL/SCRAM-SHA-256/512)")
    _connection(users, after_verb=False)
    common = _connection_parent()
    verbs = users.add_subparsers(dest="verb", required=True, metavar="VERB")
    add = _verb(verbs, "add", "create a user or change its password", [common])
    add.add_argument("user", help="the user name")
    add.add_argument("--password", help="the password (default: asked for, or read from TIDELOG_PASSWORD)")
    add.add_argument("--mechanism", choices=SCRAM_MECHANISMS, default="SCRAM-SHA-512", help="the SCRAM mechanism")
    add.add_argument("--iterations", type=int, default=4096, metavar="N", help="PBKDF2 iterations")
    delete = _verb(verbs, "delete", "remove a user's credential", [common])
    delete.add_argument("user", help="the user name")
    delete.add_argument("--mechanism", choices=SCRAM_MECHANISMS, default="SCRAM-SHA-512", help="the SCRAM mechanism")
    _verb(verbs, "list", "users, their mechanisms and iterations (never their keys)", [common])


def _quotas(commands) -> None:
    quotas = _command(commands, "quotas", "describe and alter client quotas (kafka-configs --entity-type "
                                          "users/clients)",
                      "Client quotas (KIP-13, KIP-124): producer_byte_rate, consumer_byte_rate, request_percentage "
                      "and controller_mutation_rate per user and/or client id, or their defaults "
                      "(DescribeClientQuotas / AlterClientQuotas).")
    _connection(quotas, after_verb=False)
    common = _connection_parent()
    verbs = quotas.add_subparsers(dest="verb", required=True, metavar="VERB")
    describe = _verb(verbs, "describe", "the quotas set, of every entity or of those the options name", [common])
    alter = _verb(verbs, "alter", "set or remove quotas of one entity", [common])
    for verb in (describe, alter):
        user = verb.add_mutually_exclusive_group()
        user.add_argument("--user", help="a user (its principal's name, e.g. alice)")
        user.add_argument("--user-default", action="store_true", help="the default user")
        client = verb.add_mutually_exclusive_group()
        client.add_argument("--client-id", help="a client id")
        client.add_argument("--client-default", action="store_true", help="the default client id")
    describe.add_argument("--strict", action="store_true",
                          help="only entities with exactly the named parts (not a user's client-id quotas too)")
    alter.add_argument("--add-config", metavar="K=V,...",
                       help="quotas to set, e.g. producer_byte_rate=1048576,consumer_byte_rate=2097152")
    alter.add_argument("--delete-config", metavar="K,...", help="quotas to remove")
    alter.add_argument("--validate-only", action="store_true", help="check only; change nothing")


def _leader_election(commands) -> None:
    election = _command(commands, "leader-election", "elect partition leaders: the preferred replica, or an "
                                                     "out-of-sync one (kafka-leader-election.sh)",
                        "Elect partition leaders (ElectLeaders), as kafka-leader-election.sh does. PREFERRED moves "
                        "leadership back to each partition's first replica when it is in the ISR; UNCLEAN elects a "
                        "replica outside the ISR for a partition that has no leader (records may be lost). Name the "
                        "partitions with --topic [--partition], --path-to-json-file or --all-topic-partitions.")
    election.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT", default=None, help=BOOTSTRAP_HELP)
    election.add_argument("--command-config", "--admin.config", dest="command_config", metavar="FILE",
                          help=COMMAND_CONFIG_HELP + " (--admin.config is Kafka's name)")
    election.add_argument("--election-type", required=True, type=str.upper, choices=["PREFERRED", "UNCLEAN"],
                          help="PREFERRED or UNCLEAN (either case)")
    which = election.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the partitions of this topic (all of them, or --partition's)")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic (the brokers choose the ones needing an election)")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='a JSON file {"partitions": [{"topic": "t", "partition": 0}, ...]}')
    election.add_argument("--partition", type=int, metavar="N", help="with --topic: only this partition")
    election.add_argument("--timeout", type=int, default=30_000, metavar="MS",
                          help="how long the controller may take")


def _reassign(commands) -> None:
    reassign = _command(commands, "reassign", "move partitions between brokers (kafka-reassign-partitions.sh)",
                        "Move partition replicas between brokers (KIP-455), with kafka-reassign-partitions.sh's "
                        "JSON files: generate a plan, execute it, verify it, cancel it, list the moves under way.")
    _connection(reassign, after_verb=False)
    common = _connection_parent()
    verbs = reassign.add_subparsers(dest="verb", required=True, metavar="VERB")
    generate = _verb(verbs, "generate", "propose a plan spreading topics over brokers (changes nothing)", [common])
    generate.add_argument("--topics-to-move-json-file", required=True, metavar="FILE",
                          help='{"version": 1, "topics": [{"topic": "name"}, ...]}')
    generate.add_argument("--broker-list", required=True, metavar="IDS", help="the brokers to use, e.g. 2,3,4")
    plan_help = ('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}, ...]}')
    execute = _verb(verbs, "execute", "start the moves of a plan (prints the assignment that undoes it)", [common])
    execute.add_argument("--reassignment-json-file", required=True, metavar="FILE", help=plan_help)
    execute.add_argument("--disallow-replication-factor-change", action="store_true",
                         help="refuse moves that change a partition's number of replicas")
    execute.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                         help="how long to keep asking a broker to move a replica it does not host yet to the "
                              "log directory the plan names")
    execute.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                         help="bound the moves' replication traffic (leader and follower replication throttles; "
                              "verify removes them)")
    for name, text in (("verify", "say whether each move of a plan completed (exit 1 if not all did); once all "
                                  "did, remove the replication throttles"),
                       ("cancel", "revert the moves of a plan that are still running")):
        verb = _verb(verbs, name, text, [common])
        verb.add_argument("--reassignment-json-file", required=True, metavar="FILE", help=plan_help)
        if name == "verify":
            verb.add_argument("--preserve-throttles", action="store_true",
                              help="keep the replication throttles after the moves completed")
    _verb(verbs, "list", "the moves under way", [common])


def _cluster(commands) -> None:
    cluster = _command(commands, "cluster", "run a local multi-broker cluster (separate processes) and drill its "
                                            "faults")
    cluster.add_argument("--dir", default=DEFAULT_CLUSTER_DIR, help="the cluster directory")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS, help=f"the cluster directory (default: "
                                                                   f"{DEFAULT_CLUSTER_DIR})")
    verbs = cluster.add_subparsers(dest="verb", required=True, metavar="VERB")
    up = _verb(verbs, "up", "start the controllers and N brokers; returns once all are RUNNING", [common])
    up.add_argument("-n", "--brokers", type=int, default=None, metavar="N",
                    help="broker processes, ids 1..N (default: 3 for a new cluster, else the stopped cluster's)")
    up.add_argument("--secure", action="store_true", default=None,
                    help="TLS + SASL on every listener (SCRAM for clients), ACLs on; prints the client settings "
                         "(default: off for a new cluster, else as the stopped cluster was)")
    up.add_argument("--controllers", type=int, default=None, metavar="N",
                    help="controller processes: a Raft quorum, 3 survives the death of one; ids 1000, 1001, ... "
                         "(default: 1 for a new cluster, else the stopped cluster's)")
    up.add_argument("--base-port", type=int, default=9092, metavar="PORT",
                    help="brokers on PORT, PORT+1, ..., the controllers after them (0 picks free ports)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every node (repeatable)")
    up.add_argument("--metrics-base-port", type=int, default=None, metavar="PORT",
                    help="Prometheus /metrics of broker 1 on PORT, broker 2 on PORT+1, ..., the controllers after "
                         "them (default: the Kafka base port + 100; 0 picks free ports)")
    up.add_argument("--no-metrics", action="store_true", help="serve no /metrics")
    up.add_argument("--ui-port", type=int, default=None, metavar="PORT",
                    help="the live web view (tidelog ui) on PORT (default: the Kafka base port + 200; 0 picks a "
                         "free port)")
    up.add_argument("--no-ui", action="store_true", help="do not start the web view (it needs metrics)")
    up.add_argument("--ui-drills", action="store_true",
                    help="give the web view its fault-drill buttons (kill/pause/resume/restart a node); off by "
                         "default. A drill then needs the view's per-run token, which is in the printed URL")
    up.add_argument("--link-proxy", action="store_true",
                    help="put a TCP proxy in front of every node so links can be cut (partition/cut/isolate/heal)")
    down = _verb(verbs, "down", "stop every node (controlled shutdown) and the web view; the data stays for the "
                                "next `up` unless --purge", [common])
    down.add_argument("--purge", action="store_true",
                      help="also delete the cluster directory (its data, logs, certificates and settings), so the "
                           "next `up` there starts a new cluster of any shape")
    _verb(verbs, "status", "each node's process and registration, the controller quorum, and partitions that are "
                           "under-replicated, under min ISR or leaderless", [common])
    add = _verb(verbs, "add-broker", "start one more broker (the next id) in the running cluster; move partitions "
                                     "onto it with `tidelog reassign`", [common])
    add.add_argument("--port", type=int, default=None, metavar="PORT", help="its port (default: a free one)")
    _verb(verbs, "add-controller", "start one more controller (the next id) as an observer, wait until it caught "
                                   "up, and make it a voter (AddRaftVoter, as kafka-metadata-quorum "
                                   "add-controller)", [common])
    remove = _verb(verbs, "remove-controller", "remove a controller from the quorum's voters (RemoveRaftVoter), "
                                               "then stop it and delete its directory; not the last voter",
                   [common])
    remove.add_argument("node_id", type=int, metavar="ID", help=f"the controller's id ({CONTROLLER_ID}, ...)")
    node_help = f"broker id, or a controller's ({CONTROLLER_ID}, {CONTROLLER_ID + 1}, ...)"
    for name, text in (("kill", "SIGKILL a node: it dies at once"),
                       ("pause", "SIGSTOP a node: it stops answering, its sessions expire"),
                       ("resume", "SIGCONT a paused node"),
                       ("restart", "stop a node cleanly (SIGTERM, controlled shutdown) and start it again")):
        verb = _verb(verbs, name, text, [common])
        verb.add_argument("node_id", type=int, metavar="NODE", help=node_help)
    links = {"partition": "cut both directions between two nodes (broker ids, 1000, or 'client')",
             "cut": "cut traffic from the first node to the second",
             "isolate": "cut a node from every other node and from clients",
             "heal": "end every cut", "links": "show the cut links"}
    for name, text in links.items():
        verb = _verb(verbs, name, text + " (needs up --link-proxy)", [common])
        if name in ("partition", "cut"):
            verb.add_argument("a", metavar="NODE", help="a broker id, 1000 (the controller) or 'client'")
            verb.add_argument("b", metavar="NODE", help="a broker id, 1000 (the controller) or 'client'")
        elif name == "isolate":
            verb.add_argument("a", metavar="NODE", help="a broker id or 1000 (the controller)")


def _ui(commands) -> None:
    ui = _command(commands, "ui", "serve a live web view of a cluster (brokers, controllers, partitions, state "
                                  "changes)")
    ui.add_argument("--bootstrap-server", "-b", default=None, metavar="HOST:PORT[,HOST:PORT...]",
                    help="brokers to find the cluster through (default: the --command-config file's "
                         f"bootstrap.servers, else {DEFAULT_BOOTSTRAP})")
    ui.add_argument("--port", type=int, default=0, help="the page's port on --host (default: a free one)")
    ui.add_argument("--host", default="127.0.0.1", help="the address the page listens on")
    ui.add_argument("--metrics-port-offset", type=int, default=100, metavar="N",
                    help="a node's metrics port is its Kafka (or controller) port + N, as tidelog cluster up has it")
    ui.add_argument("--metrics-port", action="append", default=[], metavar="ID=PORT",
                    help="the metrics port of one node, instead of the offset (repeatable)")
    ui.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                    help="seconds between polls of the nodes (at least 1)")
    ui.add_argument("--command-config", default=None, metavar="FILE", help=COMMAND_CONFIG_HELP)
    ui.add_argument("--cluster-dir", default=None, metavar="DIR",
                    help="a cluster started by `tidelog cluster up`: read its nodes and their processes from "
                         "cluster.json (and, for a --secure one, the token of its brokers' /state)")
    ui.add_argument("--drills", action="store_true",
                    help="with --cluster-dir: offer fault drills (kill/pause/resume/restart a node). Off by "
                         "default; when on, a drill needs the per-run token of the printed URL, sent by the page "
                         "as X-Tidelog-Token, and an Origin and Host of this view")
    ui.add_argument("--state-token-file", default=None, metavar="FILE",
                    help="a file holding the brokers' metrics.state.token.file token, sent to /state as "
                         "Authorization: Bearer; the view then needs its own token (in the printed URL)")


def storage_bench_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``tidelog bench storage`` (also ``benchmarks/storage_bench.py``'s)."""
    parser.add_argument("--mb", type=int, default=256, help="data written per round, MiB")
    parser.add_argument("--batch-kib", type=int, default=64, help="batch size, KiB")
    parser.add_argument("--record-bytes", type=int, default=1024, help="record value size, bytes")
    parser.add_argument("--read-kib", type=int, default=1024, help="bytes per fetch, KiB")
    parser.add_argument("--rounds", type=int, default=2, help="repetitions, the best kept")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")


def _bench(commands) -> None:
    bench = _command(commands, "bench", "run a benchmark (benchmarks/ has the others)")
    kinds = bench.add_subparsers(dest="what", required=True, metavar="BENCHMARK")
    storage = _verb(kinds, "storage", "the log's append and read speed against raw os.write / os.pread")
    storage_bench_options(storage)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidelog", formatter_class=Formatter,
                                     description="tidelog: a Kafka-compatible, replicated commit log. "
                                                 "`tidelog COMMAND --help` shows a command's verbs and options.")
    parser.add_argument("--version", action=_Version, help="print tidelog's version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_serve, _format, _topics, _groups, _transactions, _acls, _users, _quotas, _leader_election,
                _reassign, _cluster, _ui, _bench):
        add(commands)
    return parser


async def connect(args, client_id: str):
    """The connection of a CLI tool: ``--bootstrap-server`` (the first) with
    ``--command-config``; None, with the reason on standard error, if it fails."""
    import sys
    from tidelog.core.errors import KafkaError
    from tidelog.protocol.client import KafkaConnection
    from tidelog.protocol.client_config import load_command_config
    host, _, port = args.bootstrap_server.split(",")[0].rpartition(":")
    try:
        return await KafkaConnection.connect(host or "127.0.0.1", int(port), client_id=client_id,
                                             security=load_command_config(args.command_config))
    except (OSError, ValueError, KafkaError) as e:
        print(f"cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return None
