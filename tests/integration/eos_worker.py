"""A consume-transform-produce loop with exactly-once semantics (confluent-kafka):
reads ``input`` in a group, writes each value upper-cased to ``output``, and commits
its input offsets in the same transaction. Run as a process so tests can kill -9 it.

    python eos_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID IDLE_EXIT_S
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> int:
    bootstrap, source, sink, group, transactional_id, idle_exit_s = sys.argv[1:7]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": transactional_id,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([source])
    idle_since = time.monotonic()
    processed = 0
    while time.monotonic() - idle_since < float(idle_exit_s):
        messages = [m for m in consumer.consume(200, 0.5) if m.error() is None]
        if not messages:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, message.value().upper(), key=message.key(), partition=message.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        try:
            producer.commit_transaction(30)
        except KafkaException as e:
            if e.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                # rewind to the committed offsets: the aborted records are read again
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:
                    if tp.offset >= 0:
                        consumer.seek(tp)
                continue
            raise
        processed += len(messages)
        print(f"committed {processed}", flush=True)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
