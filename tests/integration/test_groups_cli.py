"""`tidelog groups …` as a user runs it, and the AdminClients' group calls, against real brokers.

Real confluent-kafka consumers join, commit and leave; the CLI runs as a
separate process, as a user would; confluent-kafka's AdminClient (librdkafka)
and kafka-python's KafkaAdminClient check the same group APIs from two more
implementations. Expected numbers are exact: each partition holds a known count
of records and each committed offset is chosen by the test.
"""

import datetime
import re
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             Producer)
from confluent_kafka import TopicPartition as Partition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonPartition

from tidelog.testing import Broker, Cluster, wait_until

SETTINGS = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000", "group.consumer.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides=SETTINGS) as running:
        yield running


# ---------------------------------------------------------------- helpers

def groups(bootstrap: str, *args, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "groups", "-b", bootstrap, *args],
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def table(output: str) -> list[dict[str, str]]:
    """The rows of the CLI's table (columns are separated by two or more spaces)."""
    lines = [line for line in output.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith(("GROUP  ", "TOPIC  "))), None)
    if start is None:
        return []
    header = re.split(r"\s{2,}", lines[start].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[start + 1:]]


def listed(bootstrap: str, *flags) -> dict[str, dict[str, str]]:
    return {row["GROUP"]: row for row in table(groups(bootstrap, "list", *flags).stdout)}


def described(bootstrap: str, group: str, *flags) -> dict[tuple[str, str], dict[str, str]]:
    return {(row["TOPIC"], row["PARTITION"]): row for row in table(groups(bootstrap, "describe", group, *flags).stdout)}


def new_group() -> str:
    return f"gcli-{uuid.uuid4().hex[:8]}"


def new_topic(bootstrap: str, counts: list[int], first_timestamp_ms: int | None = None) -> str:
    """A topic with ``counts[p]`` records in partition p; record i is stamped
    ``first_timestamp_ms + i`` seconds when a first timestamp is given."""
    name = f"gcli-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, len(counts), 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in enumerate(counts):
        for i in range(count):
            stamp = {} if first_timestamp_ms is None else {"timestamp": first_timestamp_ms + 1000 * i}
            producer.produce(name, b"%d" % i, partition=partition, **stamp)
    assert producer.flush(30) == 0
    return name


def consumer(bootstrap: str, group: str, client_id: str = "gcli-consumer", **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500, **extra})


def join(members: list[Consumer], topic: str, partitions: int) -> None:
    """Subscribe every member and poll until each owns a share and together they own everything."""
    for member in members:
        member.subscribe([topic])

    def settled() -> bool:
        for member in members:
            member.poll(0.1)
        owned = [{tp.partition for tp in member.assignment()} for member in members]
        return all(owned) and sum(map(len, owned)) == partitions == len(set().union(*owned))
    wait_until(settled, 30, "every member to own a share of the partitions")


def consume(member: Consumer, count: int) -> list[tuple[int, int]]:
    """(partition, offset) of the next ``count`` records."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for message in member.consume(count - len(got), 0.3):
            assert message.error() is None, message.error()
            got.append((message.partition(), message.offset()))
    assert len(got) == count, got
    return got


def commit_at_current_epoch(member: Consumer, offset: Partition) -> None:
    """KIP-848: a commit sent while the member's epoch moves on is refused (STALE_MEMBER_EPOCH);
    the member commits again once a heartbeat brought it the new epoch."""
    deadline = time.monotonic() + 10
    while True:
        try:
            member.commit(offsets=[offset], asynchronous=False)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                raise
            member.poll(0.2)


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as confluent-kafka's AdminClient reads them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat()


# ---------------------------------------------------------------- tidelog groups

def test_list_and_describe_an_active_group(broker):
    bootstrap = broker.bootstrap
    ends = [5, 7, 9, 11]
    topic, other = new_topic(bootstrap, ends), new_topic(bootstrap, [3])
    group = new_group()
    members = [consumer(bootstrap, group, client_id=f"gcli-{i}") for i in range(2)]
    try:
        join(members, topic, len(ends))
        owner = {tp.partition: m for m in members for tp in m.assignment()}
        offsets = {0: 2, 1: 7, 2: 4}                       # partition 3: nothing committed
        for partition, offset in offsets.items():
            owner[partition].commit(offsets=[Partition(topic, partition, offset)], asynchronous=False)
        members[0].commit(offsets=[Partition(other, 0, 1)], asynchronous=False)     # no member owns it

        assert listed(bootstrap)[group] == {"GROUP": group, "STATE": "Stable", "PROTOCOL-TYPE": "consumer"}
        assert group in listed(bootstrap, "--state", "stable,Empty")
        assert group not in listed(bootstrap, "--state", "Empty")
        bad = groups(bootstrap, "list", "--state", "Sleeping", check=False)
        assert bad.returncode == 1 and "unknown group state 'Sleeping'" in bad.stderr

        rows = described(bootstrap, group)
        assert len(rows) == len(ends) + 1
        for partition, end in enumerate(ends):
            member = owner[partition]
            assert rows[(topic, str(partition))] == {
                "GROUP": group, "TOPIC": topic, "PARTITION": str(partition),
                "CURRENT-OFFSET": str(offsets[partition]) if partition in offsets else "-",
                "LOG-END-OFFSET": str(end),
                "LAG": str(end - offsets[partition]) if partition in offsets else "-",
                "CONSUMER-ID": member.memberid(), "HOST": "/127.0.0.1",
                "CLIENT-ID": f"gcli-{members.index(member)}"}
        assert rows[(other, "0")] == {
            "GROUP": group, "TOPIC": other, "PARTITION": "0", "CURRENT-OFFSET": "1", "LOG-END-OFFSET": "3",
            "LAG": "2", "CONSUMER-ID": "-", "HOST": "-", "CLIENT-ID": "-"}

        by_member = {row["CONSUMER-ID"]: row for row in table(groups(bootstrap, "describe", group, "--members").stdout)}
        assert by_member == {m.memberid(): {"GROUP": group, "CONSUMER-ID": m.memberid(), "HOST": "/127.0.0.1",
                                            "CLIENT-ID": f"gcli-{i}", "#PARTITIONS": str(len(m.assignment()))}
                             for i, m in enumerate(members)}

        assert table(groups(bootstrap, "describe", group, "--state").stdout) == [{
            "GROUP": group, "COORDINATOR (ID)": f"{broker.host}:{broker.port} (1)",
            "ASSIGNMENT-STRATEGY": "range", "STATE": "Stable", "#MEMBERS": "2"}]
    finally:
        for member in members:
            member.close()
    after = groups(bootstrap, "describe", group)
    assert f"Consumer group '{group}' has no active members." in after.stdout
    mine = [r for r in table(after.stdout) if r["TOPIC"] == topic]
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["CONSUMER-ID"]) for r in mine] == \
        [("0", "2", "-"), ("1", "7", "-"), ("2", "4", "-")]
    assert listed(bootstrap)[group]["STATE"] == "Empty"


def test_describe_a_kip_848_group(broker):
    """A group of the new protocol is described by ConsumerGroupDescribe (its members'
    assignments are partitions by topic id and name, not classic assignment bytes)."""
    bootstrap = broker.bootstrap
    ends = [4, 5, 6]
    topic, group = new_topic(bootstrap, ends), new_group()
    members = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "client.id": f"gcli-848-{i}", "enable.auto.commit": False}) for i in range(2)]
    try:
        join(members, topic, len(ends))
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def stable() -> bool:
            for member in members:
                member.poll(0.1)
            return admin.describe_consumer_groups([group])[group].result(10).state == ConsumerGroupState.STABLE
        wait_until(stable, 30, "the group to be Stable")
        owner = {tp.partition: m for m in members for tp in m.assignment()}
        for partition in range(len(ends)):
            commit_at_current_epoch(owner[partition], Partition(topic, partition, partition + 1))
        rows = described(bootstrap, group)
        assert {key: (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"], row["CONSUMER-ID"])
                for key, row in rows.items()} == {
            (topic, str(p)): (str(p + 1), str(end), str(end - p - 1), owner[p].memberid())
            for p, end in enumerate(ends)}
        [state] = table(groups(bootstrap, "describe", group, "--state").stdout)
        assert (state["ASSIGNMENT-STRATEGY"], state["STATE"], state["#MEMBERS"]) == ("uniform", "Stable", "2")

        description = admin.describe_consumer_groups([group])[group].result(10)
        assert {(tp.topic, tp.partition): m.member_id
                for m in description.members for tp in m.assignment.topic_partitions} == \
            {(topic, p): owner[p].memberid() for p in range(len(ends))}
    finally:
        for member in members:
            member.close()


def test_describe_an_unknown_group_fails_clearly(broker):
    result = groups(broker.bootstrap, "describe", "gcli-nobody", check=False)
    assert result.returncode == 1
    assert "consumer group 'gcli-nobody' does not exist" in result.stderr


def test_reset_offsets_dry_run_then_execute(broker):
    bootstrap = broker.bootstrap
    first = int(time.time() * 1000) - 3_600_000
    topic = new_topic(bootstrap, [6, 4], first_timestamp_ms=first)      # record i at first + i s
    group = new_group()
    member = consumer(bootstrap, group)
    member.subscribe([topic])
    consume(member, 10)
    member.commit(offsets=[Partition(topic, 0, 5), Partition(topic, 1, 3)], asynchronous=False)
    assert committed(bootstrap, group) == {(topic, 0): 5, (topic, 1): 3}

    dry = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert table(dry.stdout) == [{"GROUP": group, "TOPIC": topic, "PARTITION": "0", "NEW-OFFSET": "0"},
                                 {"GROUP": group, "TOPIC": topic, "PARTITION": "1", "NEW-OFFSET": "0"}]
    assert "dry run" in dry.stderr
    refused = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", check=False)
    assert refused.returncode == 1
    assert f"cannot reset the offsets of group '{group}': it is Stable with 1 active member" in refused.stderr
    assert committed(bootstrap, group) == {(topic, 0): 5, (topic, 1): 3}
    member.close()

    for flags, expected in [
            (["--to-latest"], (6, 4)),
            (["--to-offset", "3"], (3, 3)),
            (["--to-offset", "5"], (5, 4)),              # beyond partition 1's log end: its end
            (["--shift-by", "-2"], (3, 1)),
            (["--shift-by", "-10"], (0, 0)),             # before the log start: the start
            (["--to-datetime", iso(first + 2500)], (3, 3)),
            (["--to-datetime", iso(first + 4500)], (5, 4))]:   # no record that late in partition 1
        dry = groups(bootstrap, "reset-offsets", group, "--topic", topic, *flags)
        assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(dry.stdout)] == \
            [("0", str(expected[0])), ("1", str(expected[1]))], flags
    assert committed(bootstrap, group) == {(topic, 0): 5, (topic, 1): 3}

    groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert committed(bootstrap, group) == {(topic, 0): 0, (topic, 1): 0}
    groups(bootstrap, "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "2", "--execute")
    assert committed(bootstrap, group) == {(topic, 0): 2, (topic, 1): 0}
    groups(bootstrap, "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "3", "--execute")
    assert committed(bootstrap, group) == {(topic, 0): 2, (topic, 1): 3}

    # A new member starts where the offsets were reset to (not at the log end it would
    # otherwise jump to).
    successor = consumer(bootstrap, group, **{"auto.offset.reset": "latest"})
    try:
        successor.subscribe([topic])
        assert sorted(consume(successor, 5)) == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 3)]
    finally:
        successor.close()


def test_reset_offsets_of_a_new_group_creates_it(broker):
    bootstrap = broker.bootstrap
    topic, group = new_topic(bootstrap, [4, 4]), new_group()
    groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "1", "--execute")
    assert committed(bootstrap, group) == {(topic, 0): 1, (topic, 1): 1}
    assert listed(bootstrap)[group] == {"GROUP": group, "STATE": "Empty", "PROTOCOL-TYPE": "-"}


def test_delete_is_refused_while_the_group_has_members_then_deletes_it(broker):
    bootstrap = broker.bootstrap
    topic, group = new_topic(bootstrap, [3]), new_group()
    member = consumer(bootstrap, group)
    member.subscribe([topic])
    consume(member, 3)
    member.commit(asynchronous=False)
    refused = groups(bootstrap, "delete", group, check=False)
    assert refused.returncode == 1
    assert f"cannot delete consumer group '{group}': it has active members" in refused.stderr
    assert group in listed(bootstrap)
    member.close()

    also = new_group()
    groups(bootstrap, "reset-offsets", also, "--topic", topic, "--to-earliest", "--execute")
    deleted = groups(bootstrap, "delete", group, also)
    assert deleted.stdout.splitlines() == [f"Deleted consumer group '{group}'.", f"Deleted consumer group '{also}'."]
    assert group not in listed(bootstrap) and also not in listed(bootstrap)
    assert committed(bootstrap, group) == {}
    gone = groups(bootstrap, "describe", group, check=False)
    assert gone.returncode == 1 and f"consumer group '{group}' does not exist" in gone.stderr
    again = groups(bootstrap, "delete", group, check=False)
    assert again.returncode == 1 and f"cannot delete consumer group '{group}': it does not exist" in again.stderr


def test_delete_offsets(broker):
    bootstrap = broker.bootstrap
    subscribed, other = new_topic(bootstrap, [2, 2]), new_topic(bootstrap, [2])
    group = new_group()
    member = consumer(bootstrap, group)
    try:
        join([member], subscribed, 2)
        member.commit(offsets=[Partition(subscribed, 0, 1), Partition(subscribed, 1, 2), Partition(other, 0, 2)],
                      asynchronous=False)
        refused = groups(bootstrap, "delete-offsets", group, "--topic", subscribed, check=False)
        assert refused.returncode == 1
        assert [(r["PARTITION"], r["STATUS"].split(":")[0]) for r in table(refused.stdout)] == \
            [("0", "Error"), ("1", "Error")]
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in refused.stdout
        done = groups(bootstrap, "delete-offsets", group, "--topic", other)
        assert table(done.stdout) == [{"TOPIC": other, "PARTITION": "0", "STATUS": "Successful"}]
        assert committed(bootstrap, group) == {(subscribed, 0): 1, (subscribed, 1): 2}
    finally:
        member.close()
    groups(bootstrap, "delete-offsets", group, "--topic", f"{subscribed}:1")
    assert committed(bootstrap, group) == {(subscribed, 0): 1}
    assert set(described(bootstrap, group)) == {(subscribed, "0")}
    unknown = groups(bootstrap, "delete-offsets", "gcli-nobody", "--topic", other, check=False)
    assert unknown.returncode == 1 and "consumer group 'gcli-nobody' does not exist" in unknown.stderr


# ---------------------------------------------------------------- AdminClients

def test_confluent_admin_client(broker):
    bootstrap = broker.bootstrap
    topic, group = new_topic(bootstrap, [4, 6]), new_group()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = consumer(bootstrap, group, client_id="gcli-confluent")
    try:
        join([member], topic, 2)
        member.commit(offsets=[Partition(topic, 0, 1), Partition(topic, 1, 5)], asynchronous=False)

        stable = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
        assert stable[group].state == ConsumerGroupState.STABLE and not stable[group].is_simple_consumer_group
        assert group in {g.group_id for g in admin.list_consumer_groups(
            states={ConsumerGroupState.STABLE}).result(10).valid}
        assert group not in {g.group_id for g in admin.list_consumer_groups(
            states={ConsumerGroupState.EMPTY}).result(10).valid}

        description = admin.describe_consumer_groups([group])[group].result(10)
        assert (description.state, description.partition_assignor, description.coordinator.id) == \
            (ConsumerGroupState.STABLE, "range", 1)
        [described_member] = description.members
        assert (described_member.member_id, described_member.client_id, described_member.host) == \
            (member.memberid(), "gcli-confluent", "/127.0.0.1")
        assert {(tp.topic, tp.partition) for tp in described_member.assignment.topic_partitions} == \
            {(topic, 0), (topic, 1)}

        assert committed(bootstrap, group) == {(topic, 0): 1, (topic, 1): 5}

        altered = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [Partition(topic, 0, 3)])])[group].result(10)
        assert altered.topic_partitions[0].error.name() == "UNKNOWN_MEMBER_ID"      # the group is active
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups([group])[group].result(10)
    finally:
        member.close()
    assert admin.describe_consumer_groups([group])[group].result(10).state == ConsumerGroupState.EMPTY
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [Partition(topic, 0, 3)])])[group].result(10)
    assert altered.topic_partitions[0].error is None
    assert committed(bootstrap, group) == {(topic, 0): 3, (topic, 1): 5}
    assert described(bootstrap, group)[(topic, "0")]["CURRENT-OFFSET"] == "3"

    assert admin.delete_consumer_groups([group])[group].result(10) is None
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert admin.describe_consumer_groups([group])[group].result(10).state == ConsumerGroupState.DEAD
    with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_groups([group])[group].result(10)


@pytest.mark.parametrize("api_version", [None, (2, 0)], ids=["newest", "kafka-2.0"])
def test_kafka_python_admin_client(broker, api_version):
    """Newest: ListGroups v5, DescribeGroups v5, OffsetFetch v8; as for Kafka 2.0: v2, v2, v4."""
    bootstrap = broker.bootstrap
    topic, group = new_topic(bootstrap, [3, 3]), new_group()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, api_version=api_version)
    member = consumer(bootstrap, group, client_id="gcli-kafka-python")
    try:
        join([member], topic, 2)
        member.commit(offsets=[Partition(topic, 0, 2), Partition(topic, 1, 3)], asynchronous=False)

        found = {g["group_id"]: g for g in admin.list_groups()}
        newest = {"group_state": "Stable", "group_type": "classic"} if api_version is None else {}
        assert found[group] == {"group_id": group, "protocol_type": "consumer", **newest}

        description = admin.describe_groups([group])[group]
        assert (description["group_state"], description["protocol_type"], description["protocol_data"]) == \
            ("Stable", "consumer", "range")
        [described_member] = description["members"]
        assert (described_member["member_id"], described_member["client_id"], described_member["client_host"]) == \
            (member.memberid(), "gcli-kafka-python", "/127.0.0.1")
        assert described_member["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1]}]
        assert described_member["member_metadata"]["topics"] == [topic]

        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp: o.offset for tp, o in offsets.items()} == {
            KafkaPythonPartition(topic, 0): 2, KafkaPythonPartition(topic, 1): 3}
    finally:
        member.close()
        admin.close()


# ---------------------------------------------------------------- a cluster

FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300",
        "offsets.topic.num.partitions": "4", "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0"}


def test_list_asks_every_broker_and_a_lost_coordinator_is_reported():
    with Cluster(brokers=2, overrides=FAST) as cluster:
        at = {node: f"127.0.0.1:{cluster.port(node)}" for node in (1, 2)}
        topic = new_topic(cluster.bootstrap, [3, 3])
        names = [f"spread-{i}" for i in range(8)]
        # The first of these finds no __consumer_offsets yet: the CLI retries while it is created.
        for i, name in enumerate(names):
            groups(at[1 + i % 2], "reset-offsets", name, "--topic", topic, "--to-offset", "1", "--execute")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        coordinator = {name: admin.describe_consumer_groups([name])[name].result(10).coordinator.id for name in names}
        assert set(coordinator.values()) == {1, 2}          # the groups live on both brokers

        for node in (1, 2):
            assert set(names) <= set(listed(at[node]))

        # Asked at broker 1, about a group broker 2 coordinates, with partitions led by both.
        leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
        assert set(leaders.values()) == {1, 2}
        victim = next(name for name in names if coordinator[name] == 2)
        rows = described(at[1], victim)
        assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows.values()] == \
            [("0", "1", "3", "2"), ("1", "1", "3", "2")]

        cluster.stop(2)
        lost = groups(at[1], "describe", victim, "--timeout", "2000", check=False)
        assert lost.returncode == 1
        assert re.search(rf"the coordinator of group '{victim}' is not available after \d+ attempts", lost.stderr)
