"""ElectLeaders from confluent-kafka's AdminClient: after a broker restart its
partitions are led by the others; a PREFERRED election gives them back."""

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000"}


def test_a_preferred_election_returns_leadership_after_a_restart():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("elect", 3, 3)])["elect"].result(15)

        def partitions():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "elect", timeout=10).topics["elect"].partitions
        wait_until(lambda: all(len(p.isrs) == 3 for p in partitions().values()), 30, "all in sync")
        preferred = {i: p.replicas[0] for i, p in partitions().items()}
        victim = preferred[0]
        cluster.restart(victim)                          # a clean stop moves its leaderships away
        wait_until(lambda: all(len(p.isrs) == 3 for p in partitions().values()), 30, "the victim back in sync")
        moved = [i for i, p in partitions().items() if p.leader != preferred[i]]
        assert moved, "no leadership moved during the restart"
        asked = [TopicPartition("elect", i) for i in moved]
        result = admin.elect_leaders(ElectionType.PREFERRED, asked).result(30)
        assert all(error is None for error in result.values()), result
        wait_until(lambda: all(p.leader == preferred[i] for i, p in partitions().items()), 15,
                   "leadership back on the preferred replicas")
        again = admin.elect_leaders(ElectionType.PREFERRED, asked).result(30)
        assert all(error is not None and "ELECTION_NOT_NEEDED" in str(error) for error in again.values()), again


def test_the_controller_rebalances_leaders_by_itself():
    """auto.leader.rebalance.enable (default true), checked every
    leader.imbalance.check.interval.seconds: no admin call needed."""
    with Cluster(brokers=3, overrides={**FAST, "leader.imbalance.check.interval.seconds": "2"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("balance", 3, 3)])["balance"].result(15)

        def partitions():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "balance", timeout=10).topics["balance"].partitions
        wait_until(lambda: all(len(p.isrs) == 3 for p in partitions().values()), 30, "all in sync")
        preferred = {i: p.replicas[0] for i, p in partitions().items()}
        cluster.restart(preferred[0])
        wait_until(lambda: all(p.leader == preferred[i] and len(p.isrs) == 3 for i, p in partitions().items()),
                   30, "leadership back on the preferred replicas without an admin call")


def test_tidelog_leader_election_moves_leadership_back_as_kafkas_tool_does():
    import subprocess
    import sys

    def tool(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "leader-election", "--bootstrap-server",
                               cluster.bootstrap, *args], capture_output=True, text=True, timeout=60)
    with Cluster(brokers=3, overrides={**FAST, "auto.leader.rebalance.enable": "false"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("elect-cli", 3, 3)])["elect-cli"].result(15)

        def partitions():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "elect-cli", timeout=10).topics["elect-cli"].partitions
        wait_until(lambda: all(len(p.isrs) == 3 for p in partitions().values()), 30, "all in sync")
        preferred = {i: p.replicas[0] for i, p in partitions().items()}
        cluster.restart(preferred[0])                     # its leaderships move away and stay away
        wait_until(lambda: all(len(p.isrs) == 3 for p in partitions().values()), 30, "back in sync")
        moved = sorted(i for i, p in partitions().items() if p.leader != preferred[i])
        assert 0 in moved
        one = tool("--election-type", "PREFERRED", "--topic", "elect-cli", "--partition", "0")
        assert one.returncode == 0, one.stderr
        assert one.stdout.strip() == "Successfully completed leader election (PREFERRED) for partitions elect-cli-0"
        again = tool("--election-type", "preferred", "--topic", "elect-cli", "--partition", "0")
        assert again.stdout.strip() == "Valid replica already elected for partitions elect-cli-0"
        everything = tool("--election-type", "PREFERRED", "--all-topic-partitions")
        assert everything.returncode == 0, everything.stderr
        wait_until(lambda: all(p.leader == preferred[i] for i, p in partitions().items()), 15,
                   "every leadership back on its preferred replica")
        unclean = tool("--election-type", "UNCLEAN", "--topic", "elect-cli")     # every partition has a leader
        assert unclean.returncode == 0, unclean.stderr
        assert unclean.stdout.strip() == ("Valid replica already elected for partitions elect-cli-0, elect-cli-1, "
                                          "elect-cli-2")
