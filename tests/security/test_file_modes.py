"""Issue 24 item 9: a broker's data (the metadata log with the SCRAM keys, records,
checkpoints, snapshots) is its user's alone. `tidelog serve` runs with umask 077
whatever its caller's, creates its log directories 0700 and takes group/other
permissions off an existing one; `tidelog cluster up` keeps its cluster and node
directories 0700."""

import os
import stat
import subprocess
import sys

from confluent_kafka import Consumer, Producer

from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')


def shared_paths(root: str) -> list[str]:
    """Every path under ``root`` (``root`` too) that group or others may read, write or enter."""
    found = []
    for directory, dirs, files in os.walk(root):
        for path in [directory, *(os.path.join(directory, name) for name in dirs + files)]:
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & 0o077:
                found.append(f"{oct(mode)} {path}")
    return sorted(set(found))


class _Umask:
    """Start processes with a permissive umask, as an operator's shell usually has."""

    def __init__(self, mask):
        self.mask = mask

    def __enter__(self):
        self.saved = os.umask(self.mask)

    def __exit__(self, *exc):
        os.umask(self.saved)


def test_nothing_a_broker_with_scram_users_writes_is_readable_by_others(tmp_path):
    properties = tmp_path / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          "sasl.username=admin\nsasl.password=admin-secret\n")
    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
                 "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "group.initial.rebalance.delay.ms": "0",
                 "metadata.log.max.record.bytes.between.snapshots": "1"}     # a snapshot with the keys, too
    with _Umask(0o022), Broker(data_dir=str(tmp_path / "node"), overrides=overrides) as broker:
        added = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "users", "-b", broker.bootstrap,
                                "--command-config", str(properties), "add", "carol", "--password", "carol-secret"],
                               capture_output=True, text=True, timeout=60)
        assert added.returncode == 0, added.stderr
        carol = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret"}
        producer = Producer(carol)
        producer.produce("modes", b"x")
        assert producer.flush(15) == 0
        consumer = Consumer({**carol, "group.id": "modes", "auto.offset.reset": "earliest"})
        consumer.subscribe(["modes"])
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"x"
        consumer.commit(asynchronous=False)
        consumer.close()
        del producer
        broker.stop()                                   # clean shutdown: checkpoints, snapshots
    log_dir = str(tmp_path / "node" / "data")
    names = os.listdir(log_dir)
    assert "meta.properties" in names and any(n.startswith("__cluster_metadata") for n in names), names
    assert shared_paths(log_dir) == []


def test_an_existing_log_dir_open_to_others_is_made_private_and_logged(tmp_path):
    log_dir = tmp_path / "node" / "data"
    log_dir.mkdir(parents=True)
    os.chmod(log_dir, 0o755)
    with _Umask(0o022), Broker(data_dir=str(tmp_path / "node")) as broker:
        assert stat.S_IMODE(os.stat(log_dir).st_mode) == 0o700
        assert sum(f"log directory {log_dir} was mode 755" in line for line in broker.output) == 1
        broker.restart()
        assert not any("was mode" in line for line in broker.output)     # once, not at every start
    assert shared_paths(str(log_dir)) == []


def test_cluster_up_keeps_its_directories_private(tmp_path):
    directory = str(tmp_path / "c")

    def cluster(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args, "--dir", directory],
                              capture_output=True, text=True, timeout=120)
    with _Umask(0o022):
        up = cluster("up", "-n", "1", "--base-port", "0", "--no-ui", "--no-metrics")
    try:
        assert up.returncode == 0, up.stderr
    finally:
        cluster("down")
    directories = [d for d, _, _ in os.walk(directory)]
    assert len(directories) > 3
    assert [d for d in directories if stat.S_IMODE(os.stat(d).st_mode) & 0o077] == []
    for node in os.listdir(directory):
        data = os.path.join(directory, node, "data")
        if os.path.isdir(data):
            assert shared_paths(data) == []
