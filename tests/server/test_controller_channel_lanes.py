"""A broker's channel to the controller: a metadata fetch long-polling on its connection
does not hold the broker's other requests (forwarded admin requests, heartbeats) behind
it, as Kafka's broker has separate channels for them (server/controller_channel.py)."""

import asyncio

from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.controller_channel import RemoteController
from tidelog.testing import Cluster

LONG_POLL_MS = 20_000


def test_a_long_polling_metadata_fetch_holds_no_other_request_behind_it():
    with Cluster(brokers=1) as cluster:
        controller = cluster.processes.layout.controllers[0]

        async def go():
            channel = RemoteController([(controller.node_id, "127.0.0.1", controller.port)], "lanes-test")
            try:
                # Where the metadata log ends now; a fetch from there waits for new records.
                _, _, end, _ = await channel.fetch_metadata(-1, -1, 0, 0)
                fetch = asyncio.ensure_future(channel.fetch_metadata(-1, -1, end, LONG_POLL_MS))
                await asyncio.sleep(0.2)
                assert not fetch.done(), "the metadata fetch did not long-poll"
                answer = await channel.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                    {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, timeout_s=10)
                # Answered while the fetch still waits (on one connection it would come after it).
                assert not fetch.done(), "DescribeQuorum was answered only after the metadata fetch"
                assert answer.topics[0].partitions[0].leader_id == controller.node_id
                fetch.cancel()
            finally:
                channel.close()
        asyncio.run(go())
