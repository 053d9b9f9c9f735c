"""tidelog.testing's helpers for tests that drive real clusters."""

from types import SimpleNamespace

from tidelog.testing import topic_in_sync


class _Admin:
    """What ``topic_in_sync`` reads of confluent-kafka's AdminClient.list_topics."""

    def __init__(self, topics):
        self.topics = topics

    def list_topics(self, topic, timeout):
        return SimpleNamespace(topics=self.topics)


def _partition(isr):
    return SimpleNamespace(isrs=list(isr))


def test_a_topic_a_broker_does_not_show_yet_is_not_in_sync_rather_than_an_error():
    # Just after CreateTopics the broker asked may not know the topic: librdkafka then
    # lists it with an error and no partitions (test_replication.py once failed with
    # KeyError: 0 there).
    assert not topic_in_sync(_Admin({}), "t", 3)
    assert not topic_in_sync(_Admin({"t": SimpleNamespace(error="UNKNOWN_TOPIC_OR_PART", partitions={})}), "t", 3)
    assert not topic_in_sync(_Admin({"t": SimpleNamespace(error=None, partitions={})}), "t", 3)
    assert not topic_in_sync(_Admin({"t": SimpleNamespace(error=None, partitions={0: _partition([1, 2, 3])})}),
                             "t", 3, (0, 1))


def test_a_topic_is_in_sync_when_every_partition_listed_has_the_replicas_in_its_isr():
    partitions = {0: _partition([1, 2, 3]), 1: _partition([2, 3])}
    admin = _Admin({"t": SimpleNamespace(error=None, partitions=partitions)})
    assert topic_in_sync(admin, "t", 3)
    assert not topic_in_sync(admin, "t", 3, (0, 1))
    assert topic_in_sync(admin, "t", 2, (1,))
