"""`tidelog topics …` as a user runs it, against a real broker."""

import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource


def tidelog(broker, *args, check=True):
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "topics", "-b", broker.bootstrap, *args],
                            capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_topics_create_list_describe_alter_delete(broker):
    assert "created" in tidelog(broker, "create", "cli-t", "--partitions", "2",
                                "--config", "retention.ms=600000").stdout
    assert "cli-t" in tidelog(broker, "list").stdout.split()
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(5):
        producer.produce("cli-t", b"x", partition=1)
    producer.flush(10)
    described = tidelog(broker, "describe", "cli-t").stdout
    assert "PartitionCount: 2" in described
    assert "Partition: 1\tLeader: 1\tLeaderEpoch: 0\tReplicas: 1\tIsr: 1\tLogStartOffset: 0" in described
    assert "Replica: 1 (leader)\tLogEndOffset: 5\tHighWatermark: 5\tLag: 0" in described
    tidelog(broker, "alter-config", "cli-t", "--set", "retention.ms=1000", "--set", "max.message.bytes=5000")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cli-t")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "1000"
    assert configs["max.message.bytes"].value == "5000"
    bad = tidelog(broker, "alter-config", "cli-t", "--set", "retention.ms=soon", check=False)
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
    assert "deleted" in tidelog(broker, "delete", "cli-t").stdout
    assert "cli-t" not in tidelog(broker, "list").stdout.split()


def test_create_with_invalid_name_fails_with_a_clear_error(broker):
    result = tidelog(broker, "create", "no/slashes", check=False)
    assert result.returncode == 1
    assert "INVALID_TOPIC_EXCEPTION" in result.stderr



@pytest.mark.parametrize("command", ["topics", "groups", "transactions", "acls", "users"])
def test_a_missing_command_config_file_is_named_not_a_traceback(command, tmp_path):
    missing = str(tmp_path / "client.properties")
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", command, "--command-config", missing,
                             "list"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert missing in result.stderr and "Traceback" not in result.stderr, result.stderr


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=60)


def test_connection_options_after_the_verb_and_kafka_spellings(broker):
    created = cli("topics", "create", "--topic", "cli-kafka", "--partitions", "2", "--bootstrap-server",
                  broker.bootstrap)
    assert created.returncode == 0 and "topic cli-kafka created" in created.stdout, created.stderr
    assert "cli-kafka" in cli("topics", "list", "-b", broker.bootstrap).stdout.split()
    assert "PartitionCount: 2" in cli("topics", "describe", "--topic", "cli-kafka", "-b", broker.bootstrap).stdout
    for command in ("acls", "users"):      # parsed and sent: the broker's own answer, not a usage error
        result = cli(command, "list", "-b", broker.bootstrap)
        assert result.returncode in (0, 1) and "unrecognized arguments" not in result.stderr, result.stderr
    assert cli("users", "list", "-b", broker.bootstrap).returncode == 0
    acls = cli("acls", "list", "-b", broker.bootstrap)
    assert "SECURITY_DISABLED" in acls.stderr, acls.stderr      # no authorizer on this broker
    assert cli("topics", "delete", "--topic", "cli-kafka", "-b", broker.bootstrap).returncode == 0


def test_a_command_imports_no_test_library(broker):
    """kio registers hypothesis strategies when it can import hypothesis (half a second);
    the tools import kio without them."""
    result = subprocess.run([sys.executable, "-c", f"""
import sys
from tidelog.cli.main import main
status = main(["topics", "-b", {broker.bootstrap!r}, "list"])
print("hypothesis" in sys.modules, status)
import hypothesis.strategies                     # still importable afterwards
"""], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False 0", result.stdout


def test_leader_election_on_a_single_broker_has_nothing_to_elect(broker):
    assert cli("topics", "create", "cli-elect", "--partitions", "2", "-b", broker.bootstrap).returncode == 0
    result = cli("leader-election", "--bootstrap-server", broker.bootstrap, "--election-type", "PREFERRED",
                 "--topic", "cli-elect", "--partition", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Valid replica already elected for partitions cli-elect-1"
    missing = cli("leader-election", "-b", broker.bootstrap, "--election-type", "preferred", "--partition", "1",
                  "--all-topic-partitions")
    assert missing.returncode == 1 and "--partition needs --topic" in missing.stderr
