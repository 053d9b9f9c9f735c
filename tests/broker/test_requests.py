"""The request layer (tidelog.broker.requests) on a stand-in node: what a produce,
a fetch and the transaction requests mean, without a broker process around them."""

from types import SimpleNamespace

from tidelog.broker.requests import (
    AddPartitionsToTxn,
    FetchRequest,
    ProduceRequest,
    ProduceRequests,
    SendAddPartitionsToTxn,
    SendMarkers,
    TxnRequests,
    fetch_params,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import build_batch
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.replication.partition import Isolation

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
PRODUCER_ID, EPOCH = 7, 3


class Shard:
    def __init__(self, verdict=ErrorCode.NONE):
        self.verdict = verdict
        self.calls = []

    def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        self.calls.append(("verify", producer_id, producer_epoch, tuple(partitions)))
        return {tp: self.verdict for tp in partitions}

    def add_partitions(self, transactional_id, producer_id, producer_epoch, partitions, now_ms, respond,
                       client_transaction_version=0):
        self.calls.append(("add", producer_id, producer_epoch, tuple(sorted(partitions)),
                           client_transaction_version))
        respond(self.verdict)


class Coordinator:
    topic = "__transaction_state"

    def __init__(self, shard):
        self.shard = shard
        self.write_markers = None

    def shard_for(self, transactional_id):
        return self.shard

    def partition_for(self, transactional_id):
        return 0

    def now_ms(self):
        return 0


def node(shard, leader_of_coordinator=1, ongoing=()):
    appended = []
    # ongoing: the (producer id, epoch) of each transaction open in the partition
    log = SimpleNamespace(has_ongoing_transaction=lambda producer_id, epoch: (producer_id, epoch) in ongoing)
    partition = SimpleNamespace(log=log, is_leader=True)
    replica_manager = SimpleNamespace(
        get_partition=lambda tp: partition, appended=appended,
        append_records=lambda acks, timeout_ms, entries, on_done, **kw: (
            appended.append((acks, timeout_ms, dict(entries), kw)),
            on_done({tp: {"error_code": 0, "base_offset": 0, "log_append_time": -1, "log_start_offset": 0}
                     for tp in entries})))
    image = SimpleNamespace(partition=lambda tp: SimpleNamespace(leader=leader_of_coordinator))
    return SimpleNamespace(node_id=1, config={"transaction.partition.verification.enable": True,
                                              "request.timeout.ms": 30_000},
                           txn_coordinator=Coordinator(shard), replica_manager=replica_manager, image=image)


def produce(layer, records, transactional_id="app", add_partitions=False):
    answers = []
    layer.handle_produce(ProduceRequest(-1, 1000, records, transactional_id, add_partitions=add_partitions),
                         answers.append)
    return answers


def txn_batch(epoch=EPOCH):
    return build_batch([b"v"], producer_id=PRODUCER_ID, producer_epoch=epoch, base_sequence=0,
                       is_transactional=True)


def layers(shard, **kw):
    n = node(shard, **kw)
    sent = []
    txn = TxnRequests(n, SimpleNamespace(now_ms=lambda: 1234), sent.append)
    return n, ProduceRequests(n, txn), txn, sent


def test_a_transactional_batch_outside_an_open_transaction_is_verified_before_the_append():
    shard = Shard()
    n, layer, _, _ = layers(shard)
    answers = produce(layer, {TP: txn_batch()})
    assert shard.calls == [("verify", PRODUCER_ID, EPOCH, (TP,))]
    assert answers[0][TP]["error_code"] == 0 and n.replica_manager.appended


def test_a_refused_verification_is_not_appended_and_a_fenced_producer_hears_invalid_producer_epoch():
    n, layer, _, _ = layers(Shard(ErrorCode.PRODUCER_FENCED))
    answers = produce(layer, {TP: txn_batch()})
    assert answers[0][TP] == {"error_code": int(ErrorCode.INVALID_PRODUCER_EPOCH), "base_offset": -1,
                              "log_append_time": -1, "log_start_offset": -1}
    assert n.replica_manager.appended == [(-1, 1000, {}, {})]


def test_a_partition_outside_the_transaction_is_transaction_abortable_from_produce_v11():
    # The coordinator's TRANSACTION_ABORTABLE reaches clients that know it (Produce v11+,
    # which abort the transaction and go on); older ones hear INVALID_TXN_STATE, as Kafka.
    for knows, expected in ((True, ErrorCode.TRANSACTION_ABORTABLE), (False, ErrorCode.INVALID_TXN_STATE)):
        n, layer, _, _ = layers(Shard(ErrorCode.TRANSACTION_ABORTABLE))
        answers = []
        layer.handle_produce(ProduceRequest(-1, 1000, {TP: txn_batch()}, "app", transaction_abortable=knows),
                             answers.append)
        assert answers[0][TP]["error_code"] == int(expected) and n.replica_manager.appended == [(-1, 1000, {}, {})]


def test_short_or_unreadable_batches_are_left_to_the_append_not_verified():
    shard = Shard(ErrorCode.INVALID_TXN_STATE)
    n, layer, _, _ = layers(shard)
    batch = txn_batch()
    unreadable = batch[:16] + bytes([99]) + batch[17:]          # magic 99
    produce(layer, {TP: batch[:20], OTHER: unreadable})
    assert shard.calls == []
    assert set(n.replica_manager.appended[0][2]) == {TP, OTHER}


def test_an_open_transaction_in_the_partition_needs_no_verification():
    shard = Shard(ErrorCode.INVALID_TXN_STATE)
    _, layer, _, _ = layers(shard, ongoing={(PRODUCER_ID, EPOCH)})
    assert produce(layer, {TP: txn_batch()})[0][TP]["error_code"] == 0 and shard.calls == []
    assert produce(layer, {TP: txn_batch()}, add_partitions=True)[0][TP]["error_code"] == 0 and shard.calls == []


def test_a_transaction_version_2_produce_has_the_coordinator_add_the_partition():
    # Produce v12+ (KIP-890 part 2): the client sent no AddPartitionsToTxn; the leader adds
    # the partition, also with verification switched off. A transaction open at an older
    # epoch is the previous one (its marker not written yet), not this batch's.
    shard = Shard()
    n, layer, _, _ = layers(shard, ongoing={(PRODUCER_ID, EPOCH - 1)})
    n.config["transaction.partition.verification.enable"] = False
    assert produce(layer, {TP: txn_batch()})[0][TP]["error_code"] == 0 and shard.calls == []
    assert produce(layer, {TP: txn_batch()}, add_partitions=True)[0][TP]["error_code"] == 0
    assert shard.calls == [("add", PRODUCER_ID, EPOCH, (TP,), 2)]


def test_an_add_the_coordinator_cannot_do_yet_is_retriable_for_the_producer():
    # CONCURRENT_TRANSACTIONS: the previous transaction's markers are being written.
    n, layer, _, _ = layers(Shard(ErrorCode.CONCURRENT_TRANSACTIONS))
    answers = produce(layer, {TP: txn_batch()}, add_partitions=True)
    assert answers[0][TP]["error_code"] == int(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert n.replica_manager.appended == [(-1, 1000, {}, {})]
    # A verification (part 1) passes the coordinator's answer on.
    n, layer, _, _ = layers(Shard(ErrorCode.CONCURRENT_TRANSACTIONS))
    assert produce(layer, {TP: txn_batch()})[0][TP]["error_code"] == int(ErrorCode.CONCURRENT_TRANSACTIONS)


def test_txn_offset_commit_v5_adds_the_offsets_partition_and_maps_the_errors():
    offsets = TopicPartition("__consumer_offsets", 3)
    for verdict, expected in ((ErrorCode.NONE, ErrorCode.NONE),
                              (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
                              (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE)):
        shard = Shard(verdict)
        _, _, txn, _ = layers(shard)
        answers = []
        txn.add_offsets_partition("app", PRODUCER_ID, EPOCH, offsets, answers.append)
        assert shard.calls == [("add", PRODUCER_ID, EPOCH, (offsets,), 2)] and answers == [expected]


def test_a_remote_coordinator_is_asked_through_an_effect_and_silence_is_retriable():
    n, layer, _, sent = layers(ErrorCode.NOT_COORDINATOR, leader_of_coordinator=2)
    answers = produce(layer, {TP: txn_batch()})
    (effect,) = sent
    assert isinstance(effect, SendAddPartitionsToTxn) and effect.broker_id == 2
    assert effect.request == AddPartitionsToTxn("app", PRODUCER_ID, EPOCH, (TP,), verify_only=True)
    assert effect.timeout_ms == 30_000 and answers == []
    effect.on_done(None)
    assert answers[0][TP]["error_code"] == int(ErrorCode.NOT_ENOUGH_REPLICAS)


def test_a_partitions_requests_are_appended_in_arrival_order_while_one_waits_for_its_verdict():
    # A transactional producer's first batch in TP waits for the (remote) coordinator;
    # its next requests, pipelined on the connection, must not overtake it there
    # (they would be refused with OUT_OF_ORDER_SEQUENCE_NUMBER), while a request for a
    # partition nobody waits on goes ahead.
    n, layer, _, sent = layers(ErrorCode.NOT_COORDINATOR, leader_of_coordinator=2)
    first = produce(layer, {TP: txn_batch(), OTHER: b"first-other"})
    second = produce(layer, {TP: txn_batch()})         # also unverified: the first is not appended yet
    plain = produce(layer, {TP: b"not transactional"}, transactional_id=None)
    elsewhere = produce(layer, {TopicPartition("u", 0): b"unrelated"}, transactional_id=None)
    appended = n.replica_manager.appended
    assert [set(a[2]) for a in appended] == [{TopicPartition("u", 0)}] and elsewhere and not first
    first_effect, second_effect = sent
    second_effect.on_done({TP: ErrorCode.NONE})        # the later verdict arrives first
    assert len(appended) == 1 and not second
    first_effect.on_done({TP: ErrorCode.NONE, OTHER: ErrorCode.NONE})
    assert [a[2] for a in appended[1:]] == [{TP: txn_batch(), OTHER: b"first-other"}, {TP: txn_batch()},
                                             {TP: b"not transactional"}]
    assert first and second and plain and not layer._queued


def test_a_refused_verdict_releases_the_requests_behind_it():
    n, layer, _, sent = layers(ErrorCode.NOT_COORDINATOR, leader_of_coordinator=2)
    first = produce(layer, {TP: txn_batch()})
    behind = produce(layer, {TP: b"not transactional"}, transactional_id=None)
    sent[0].on_done({TP: ErrorCode.PRODUCER_FENCED})
    assert first[0][TP]["error_code"] == int(ErrorCode.INVALID_PRODUCER_EPOCH)
    assert behind[0][TP]["error_code"] == 0
    assert [a[2] for a in n.replica_manager.appended] == [{}, {TP: b"not transactional"}]


def test_verify_only_false_has_the_coordinator_add_the_partitions():
    shard = Shard()
    _, _, txn, _ = layers(shard)
    verdicts = []
    txn.verify("app", {TP: (PRODUCER_ID, EPOCH)}, verdicts.append, verify_only=False)
    assert shard.calls == [("add", PRODUCER_ID, EPOCH, (TP,), 2)] and verdicts == [{TP: ErrorCode.NONE}]


def test_markers_for_another_leader_leave_as_an_effect_with_the_request_timeout():
    n, _, txn, sent = layers(Shard())
    answers = []
    n.txn_coordinator.write_markers(2, PRODUCER_ID, EPOCH, True, 5, [TP], answers.append)
    (effect,) = sent
    assert isinstance(effect, SendMarkers) and effect.broker_id == 2 and effect.timeout_ms == 30_500
    effect.on_done(None)
    assert answers == [{TP: ErrorCode.COORDINATOR_NOT_AVAILABLE}]
    n.txn_coordinator.write_markers(1, PRODUCER_ID, EPOCH, True, 5, [OTHER], answers.append)
    acks, timeout_ms, entries, kw = n.replica_manager.appended[-1]
    assert (acks, timeout_ms, list(entries), kw) == (-1, 30_000, [OTHER], {"internal": True,
                                                                          "from_coordinator": True})


def test_fetch_parameters_come_from_the_request():
    partitions = {TP: FetchPartitionRequest(5, 1000)}
    consumer = fetch_params(FetchRequest(-1, 100, partitions, min_bytes=10, max_bytes=2000))
    assert (consumer.isolation, consumer.min_bytes, consumer.max_bytes, consumer.max_wait_ms) == (
        Isolation.HIGH_WATERMARK, 10, 2000, 100)
    assert fetch_params(FetchRequest(-1, 100, partitions, isolation_level=1)).isolation == Isolation.TXN_COMMITTED
    assert fetch_params(FetchRequest(3, 100, partitions, isolation_level=1)).isolation == Isolation.LOG_END
