"""The ``tidelog`` command line (cli/options.py): parsed without importing the commands,
common options before or after the verb, Kafka's spellings, help for everything."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tidelog.cli.options import CONTROLLER_ID, build_parser, finish


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    return finish(parser, parser.parse_args(list(argv)))


def python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("argv", [["--help"], ["topics", "--help"], ["topics", "create", "--help"],
                                  ["cluster", "status", "--help"], ["groups", "describe", "--help"]])
def test_help_imports_no_command_and_no_protocol_schemas(argv):
    loaded = python(f"""
import sys
from tidelog.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print(sorted({{m.split('.')[0] for m in sys.modules}} & {{'kio', 'asyncio', 'hypothesis', 'rich'}}),
      sorted(m for m in sys.modules if m.startswith('tidelog.') and m not in
             ('tidelog.cli', 'tidelog.cli.main', 'tidelog.cli.options')))
""")
    assert loaded.splitlines()[-1] == "[] []", loaded


@pytest.mark.parametrize("command", ["topics", "acls", "users", "groups", "transactions"])
def test_connection_options_are_taken_before_or_after_the_verb(command):
    verb = "list"
    before = parse(command, "-b", "h1:1", "--command-config", "c.properties", verb)
    after = parse(command, verb, "--bootstrap-server", "h2:2", "--command-config", "d.properties")
    default = parse(command, verb)
    assert (before.bootstrap_server, before.command_config) == ("h1:1", "c.properties")
    assert (after.bootstrap_server, after.command_config) == ("h2:2", "d.properties")
    assert (default.bootstrap_server, default.command_config) == ("127.0.0.1:9092", None)
    assert parse(command, "-b", "h1:1", verb, "-b", "h2:2").bootstrap_server == "h2:2"   # after the verb wins


def test_cluster_dir_before_or_after_the_verb():
    assert parse("cluster", "--dir", "/a", "status").dir == "/a"
    assert parse("cluster", "status", "--dir", "/b").dir == "/b"
    assert parse("cluster", "status").dir == "./cluster"
    assert parse("cluster", "down", "--purge").purge is True


def test_kafka_spellings_name_topics_and_groups():
    assert parse("topics", "create", "--topic", "orders", "--partitions", "3").topic == "orders"
    assert parse("topics", "create", "orders").topic == "orders"
    assert parse("topics", "delete", "a", "--topic", "b").topic == ["a", "b"]
    assert parse("topics", "describe").topic == []
    assert parse("topics", "alter-config", "--topic", "t", "--set", "retention.ms=1").topic == "t"
    assert parse("groups", "describe", "--group", "g1", "--group", "g2").group == ["g1", "g2"]
    assert parse("groups", "delete-offsets", "--group", "g", "--topic", "t").group == "g"
    args = parse("leader-election", "--bootstrap-server", "h:1", "--admin.config", "a.properties",
                 "--election-type", "preferred", "--all-topic-partitions")
    assert (args.command_config, args.election_type, args.all_topic_partitions) == ("a.properties", "PREFERRED",
                                                                                     True)


@pytest.mark.parametrize("argv, says", [
    (["topics", "create"], "name the topic"),
    (["topics", "create", "a", "--topic", "b"], "two topics named"),
    (["topics", "delete"], "name at least one topic"),
    (["groups", "describe"], "name at least one group"),
])
def test_a_missing_or_doubled_name_is_a_usage_error(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def _parsers(parser: argparse.ArgumentParser, path=("tidelog",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_command_verb_and_option_has_help():
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{' '.join(path)} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help:
                missing.append(f"{' '.join(path)} {action.option_strings or action.dest}")
    assert missing == []


def test_help_names_defaults_and_has_no_stray_arguments(capsys):
    for argv in (["topics", "create", "--help"], ["bench", "--help"], ["bench", "storage", "--help"],
                 ["groups", "list", "--help"]):
        with pytest.raises(SystemExit):
            parse(*argv)
    out = capsys.readouterr().out
    assert "rest" not in out
    assert "else 127.0.0.1:9092" in out and "(default: 256)" in out and "(default: 10000)" in out
    assert "num.partitions" in out and "default.replication.factor" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("tidelog ")


def test_the_controller_id_is_the_cluster_tools():
    from tidelog.cluster import CONTROLLER_ID as cluster_controller_id
    assert CONTROLLER_ID == cluster_controller_id


def test_the_bootstrap_server_defaults_to_the_command_configs(tmp_path):
    settings = tmp_path / "client.properties"
    settings.write_text("# written by cluster up --secure\nbootstrap.servers=h1:1,h2:2\nsecurity.protocol=SSL\n")
    assert parse("topics", "--command-config", str(settings), "list").bootstrap_server == "h1:1,h2:2"
    assert parse("groups", "list", "--command-config", str(settings)).bootstrap_server == "h1:1,h2:2"
    assert parse("topics", "list", "--command-config", str(settings), "-b", "h3:3").bootstrap_server == "h3:3"
    assert parse("ui", "--command-config", str(settings)).bootstrap_server == "h1:1,h2:2"
    assert parse("topics", "list", "--command-config", str(tmp_path / "missing")).bootstrap_server == \
        "127.0.0.1:9092"          # the command reports the missing file itself


def test_client_settings_in_librdkafka_or_java_spelling():
    import ssl

    from tidelog.protocol.client_config import client_security
    from tidelog.core.errors import InvalidConfigError
    librdkafka = client_security({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256",
                                  "sasl.username": "u", "sasl.password": "p",
                                  "ssl.endpoint.identification.algorithm": "none"})
    assert (librdkafka.sasl_mechanism, librdkafka.username, librdkafka.password) == ("SCRAM-SHA-256", "u", "p")
    assert librdkafka.ssl_context.check_hostname is False
    java = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "ssl.truststore.type": "PEM",
                            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                                'username="a" password="b";'})
    assert (java.username, java.password) == ("a", "b") and java.ssl_context.check_hostname is True
    unchecked = client_security({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"})
    assert unchecked.ssl_context.verify_mode == ssl.CERT_NONE
    with pytest.raises(InvalidConfigError, match="only PEM"):
        client_security({"security.protocol": "SSL", "ssl.truststore.type": "JKS",
                         "ssl.truststore.location": "/x.jks"})
