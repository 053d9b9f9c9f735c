"""Kafka's own kafka-features (org.apache.kafka.tools.FeatureCommand) against tidelog:
what a new cluster finalizes, what tidelog supports, and eligible.leader.replicas.version
(KIP-966) turned off and on again, on one node and through a broker that forwards to a
separate controller."""

import re
import time

import pytest

from tidelog.testing import Broker, Cluster


def run(java, *args, expect=0):
    result = java.tool("FeatureCommand", *args)
    assert result.exit_code == expect, f"kafka-features {args} exited {result.exit_code}:\n" \
                                       f"{result.stdout}\n{result.stderr}"
    return result


def describe(java, bootstrap: str) -> dict[str, dict[str, str]]:
    """feature -> {SupportedMinVersion, SupportedMaxVersion, FinalizedVersionLevel, Epoch}."""
    features = {}
    for line in run(java, "--bootstrap-server", bootstrap, "describe").stdout.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        features[fields.pop("Feature")] = fields
    return features


def test_a_new_cluster_finalizes_kafka_4_4_defaults_capped_at_what_tidelog_implements(java):
    with Broker() as broker:
        features = describe(java, broker.bootstrap)
        levels = {name: (f["SupportedMinVersion"], f["SupportedMaxVersion"], f["FinalizedVersionLevel"])
                  for name, f in features.items()}
        assert levels == {
            "eligible.leader.replicas.version": ("0", "1", "1"),
            "group.version": ("0", "1", "1"),
            "kraft.version": ("0", "0", "0"),
            "metadata.version": ("3.3-IV3", "4.4-IV2", "4.4-IV2"),
            "share.version": ("0", "0", "0"),
            "streams.version": ("0", "0", "0"),
            "transaction.version": ("0", "2", "2"),            # KIP-890 part 2, as Kafka 4.4
        }
        assert len({f["Epoch"] for f in features.values()}) == 1 and int(features["group.version"]["Epoch"]) > 0


def test_eligible_leader_replicas_can_be_turned_off_and_on_and_unsupported_levels_are_refused(java):
    with Broker() as broker:
        b = broker.bootstrap
        epoch = int(describe(java, b)["eligible.leader.replicas.version"]["Epoch"])
        assert run(java, "--bootstrap-server", b, "downgrade", "--feature",
                   "eligible.leader.replicas.version=0").stdout.strip() == \
            "eligible.leader.replicas.version was downgraded to 0."
        after = describe(java, b)["eligible.leader.replicas.version"]
        assert after["FinalizedVersionLevel"] == "0" and int(after["Epoch"]) > epoch
        assert run(java, "--bootstrap-server", b, "upgrade", "--feature",
                   "eligible.leader.replicas.version=1").stdout.strip() == \
            "eligible.leader.replicas.version was upgraded to 1."
        assert describe(java, b)["eligible.leader.replicas.version"]["FinalizedVersionLevel"] == "1"
        refused = run(java, "--bootstrap-server", b, "upgrade", "--feature", "share.version=1", expect=1)
        assert "Invalid update version 1 for feature share.version. Local controller 1 only supports " \
               "versions 0-0" in refused.stdout
        assert describe(java, b)["share.version"]["FinalizedVersionLevel"] == "0"


@pytest.mark.slow
def test_a_broker_forwards_the_update_to_the_controller_quorum(java):
    with Cluster(brokers=2) as cluster:
        first = f"127.0.0.1:{cluster.port(cluster.brokers[0].node_id)}"
        run(java, "--bootstrap-server", first, "downgrade", "--feature", "eligible.leader.replicas.version=0")
        # Each broker learns the new level from the metadata log (the forwarding broker
        # waited for it before answering; the other follows within a fetch or two).
        for broker in cluster.brokers:
            bootstrap = f"127.0.0.1:{cluster.port(broker.node_id)}"
            deadline = time.monotonic() + 30
            while describe(java, bootstrap)["eligible.leader.replicas.version"]["FinalizedVersionLevel"] != "0":
                assert time.monotonic() < deadline, f"broker {broker.node_id} never showed level 0"
                time.sleep(0.5)
