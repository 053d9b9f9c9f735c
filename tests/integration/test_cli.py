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
