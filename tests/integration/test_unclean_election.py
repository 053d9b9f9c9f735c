"""``unclean.leader.election.enable=true`` in the nodes' properties (not as a topic
config) is honoured by the controller: with the only in-sync replica gone, the
out-of-sync one that comes back is elected."""

from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000", "unclean.leader.election.enable": "true"}


def test_a_static_unclean_setting_elects_an_out_of_sync_replica():
    with Cluster(brokers=2, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("dirty", 1, 2)])["dirty"].result(15)

        def partition():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "dirty", timeout=10).topics["dirty"].partitions[0]
        wait_until(lambda: len(partition().isrs) == 2, 30, "both replicas in sync")
        leader = partition().leader
        follower = next(b for b in partition().replicas if b != leader)
        cluster.kill(follower)
        wait_until(lambda: partition().isrs == [leader], 30, "the follower out of the ISR")
        cluster.kill(leader)
        cluster.start_node(follower)
        wait_until(lambda: partition().leader == follower, 30, "the out-of-sync replica elected")
