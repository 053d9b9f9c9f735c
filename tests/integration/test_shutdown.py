"""A clean stop with a fetch still waiting: the waiting fetch is completed while the
logs are open (its records read then), never from an already-closed segment."""

import asyncio

from confluent_kafka import Producer

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker, wait_until


def test_a_waiting_fetch_at_shutdown_does_not_read_a_closed_segment():
    broker = Broker().start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("waiting", b"x" * 100, partition=0)
        assert producer.flush(15) == 0

        async def long_poll():
            connection = await KafkaConnection.connect("127.0.0.1", broker.port)
            # Data is there but below min_bytes: the fetch waits in the purgatory.
            request = asyncio.ensure_future(connection.request(ApiKey.FETCH, {
                "replica_id": -1, "max_wait": 30_000, "min_bytes": 10_000_000, "max_bytes": 50_000_000,
                "isolation_level": 0, "topics": [{"topic": "waiting", "partitions": [{
                    "partition": 0, "fetch_offset": 0, "partition_max_bytes": 50_000_000,
                    "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}]},
                version=12, timeout_s=60))
            await asyncio.sleep(1.0)
            broker.process.send_signal(15)           # SIGTERM while the fetch waits
            try:
                await request
            except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                pass
            connection.close()
        asyncio.run(long_poll())
        assert broker.process.wait(30) == 0
        wait_until(lambda: any("stopped" in line for line in broker.output), 10, "the final log line")
        output = "\n".join(broker.output)
        assert "Traceback" not in output and "closed file" not in output, output[-3000:]
    finally:
        broker.close()
