"""When the coordinators' answers to an in-doubt question may be partial
(docs/transactions.md, "Hanging transactions" and "Unclean elections"): a broker that did
not answer, an error code in a ListTransactions response, a coordinator still loading, or
a listing the asking principal could not fully see (ListTransactions lists only the ids
it may DESCRIBE) never reads as "no coordinator knows the producer" — which would abort
the transaction, perhaps a committed one — but as "ask again"."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from tidelog.broker.node import ResolveInDoubt
from tidelog.broker.requests.effects import SendListTransactions, SendTopicLeaders
from tidelog.broker.requests.txn import TxnRequests
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.authorizer import (
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from tidelog.server.txn_apis import MarkerChannel
from tidelog.txn.in_doubt import Verdict, decide, missing_describe_acl
from tests.admin_calls import connect_creating

PRINCIPAL = "User:node-1"
TP = TopicPartition("t0", 0)
PID, EPOCH = 7, 3


def acl(operation=AclOperation.DESCRIBE, name="*", pattern=PatternType.LITERAL, principal=PRINCIPAL,
        permission=AclPermissionType.ALLOW, host="*", resource_type=ResourceType.TRANSACTIONAL_ID):
    return SimpleNamespace(resource_type=resource_type, resource_name=name, pattern_type=pattern,
                           principal=principal, host=host, operation=operation, permission_type=permission)


STRICT = Authorizer(frozenset({"User:admin"}), False)


@pytest.mark.parametrize("authorizer, acls, principal", [
    (None, [], PRINCIPAL),                                                  # ACLs off
    (Authorizer(frozenset({PRINCIPAL}), False), [], PRINCIPAL),             # a super user
    (STRICT, [acl()], PRINCIPAL),                                           # ALLOW DESCRIBE on '*'
    (STRICT, [acl(AclOperation.WRITE)], PRINCIPAL),                         # WRITE implies DESCRIBE
    (STRICT, [acl(AclOperation.ALL, name="", pattern=PatternType.PREFIXED)], PRINCIPAL),
    (STRICT, [acl(principal="User:*")], PRINCIPAL),
    (Authorizer(frozenset(), True), [acl(resource_type=ResourceType.TOPIC)], PRINCIPAL),   # no id has an ACL
])
def test_a_principal_that_may_describe_every_transactional_id_sees_everything(authorizer, acls, principal):
    assert missing_describe_acl(authorizer, acls, principal) == ""


@pytest.mark.parametrize("authorizer, acls, principal, named", [
    (STRICT, [], PRINCIPAL, "no ALLOW DESCRIBE ACL on TRANSACTIONAL_ID '*'"),
    (STRICT, [acl(name="app-", pattern=PatternType.PREFIXED)], PRINCIPAL, "--transactional-id '*'"),
    (STRICT, [acl(host="10.0.0.1")], PRINCIPAL, "User:node-1"),
    (STRICT, [acl(AclOperation.IDEMPOTENT_WRITE)], PRINCIPAL, "User:node-1"),
    (STRICT, [acl(), acl(name="secret", permission=AclPermissionType.DENY)], PRINCIPAL, "DENY DESCRIBE"),
    (Authorizer(frozenset(), True), [acl(principal="User:app")], PRINCIPAL, "User:node-1"),
    (STRICT, [acl()], None, "super.users"),                                  # the principal is unknown
])
def test_a_principal_that_may_not_describe_some_id_is_named_with_the_missing_acl(authorizer, acls, principal,
                                                                                named):
    assert named in missing_describe_acl(authorizer, acls, principal)


def test_unknown_to_a_listing_that_may_hide_ids_is_blind_not_abort():
    decision = decide(PID, EPOCH, None, "the inter-broker principal User:node-1 is not a super user")
    assert decision.verdict == Verdict.BLIND and decision.marker_epoch == -1
    assert "User:node-1" in decision.reason
    assert decide(PID, EPOCH, None, "").verdict == Verdict.ABORT


# ------------------------------------------------- TxnRequests.resolve_in_doubt


class Fixture:
    """A leader (broker 1) of t0-0 holding producer 7's transaction at epoch 3 in question;
    __transaction_state partitions led by brokers 1 (itself) and 2."""

    def __init__(self, local_rows, remote_rows, missing_acl="", remote_leaders=None):
        self.sent, self.markers = [], []
        # What broker 2's Metadata names (partition index → leader, leader epoch): by
        # default what this broker's image says.
        self.remote_leaders = {0: (1, 5), 1: (2, 8)} if remote_leaders is None else remote_leaders
        partition = SimpleNamespace(is_leader=True, leader_epoch=4, in_question=lambda pid, epoch: True,
                                    in_doubt_coordinator_epoch=lambda pid: 0)
        coordinator = SimpleNamespace(topic="__transaction_state", transactions_of_producer=lambda pid: local_rows,
                                      describe_transaction=lambda tid: None)
        self.topic = topic = SimpleNamespace(partitions={0: SimpleNamespace(leader=1, leader_epoch=5),
                                                         1: SimpleNamespace(leader=2, leader_epoch=8)})
        node = SimpleNamespace(node_id=1, config={"request.timeout.ms": 1000}, txn_coordinator=coordinator,
                               image=SimpleNamespace(topic=lambda name: topic),
                               replica_manager=SimpleNamespace(get_partition=lambda tp: partition))
        self.clock = SimpleNamespace(now_ms=lambda: 1_700_000_000_000, monotonic_ms=lambda: self.now)
        self.now = 0
        self.requests = TxnRequests(node, self.clock, self.send)
        self.requests.missing_describe_acl = lambda: missing_acl
        self.requests.append_markers = lambda request, on_done: (self.markers.append(request),
                                                                 on_done({TP: ErrorCode.NONE}))
        self.remote_rows = remote_rows

    def send(self, effect):
        self.sent.append(effect)
        assert effect.broker_id == 2
        if isinstance(effect, SendTopicLeaders):
            assert effect.topic == "__transaction_state"
            return effect.on_done(self.remote_leaders)
        assert isinstance(effect, SendListTransactions)
        effect.on_done(self.remote_rows)

    def ask(self):
        outcome = []
        self.requests.resolve_in_doubt(ResolveInDoubt(TP, PID, EPOCH, 4), lambda *a: outcome.append(a))
        return outcome


def test_a_coordinator_that_does_not_answer_means_ask_again():
    fixture = Fixture(local_rows=[], remote_rows=None)          # broker 2: no answer (or an error code)
    [(answered, reason)] = fixture.ask()
    assert not answered and "[2]" in reason and fixture.markers == []


def test_a_coordinator_still_loading_means_ask_again():
    fixture = Fixture(local_rows=None, remote_rows=[])          # this broker: COORDINATOR_LOAD_IN_PROGRESS
    [(answered, reason)] = fixture.ask()
    assert not answered and "[1]" in reason and fixture.markers == []


def test_every_coordinator_answering_nothing_aborts_when_the_listing_sees_everything():
    fixture = Fixture(local_rows=[], remote_rows=[])
    [(answered, _)] = fixture.ask()
    assert answered and [(m.commit, m.producer_epoch) for m in fixture.markers] == [(False, EPOCH + 1)]


@pytest.mark.parametrize("remote_leaders, named", [
    ({0: (1, 5), 1: (3, 9)}, "broker 2 names (leader, epoch) (3, 9)"),      # broker 2 gave it up
    ({0: (1, 5), 1: (2, 9)}, "broker 2 names (leader, epoch) (2, 9)"),      # led again, a newer epoch
    ({0: (1, 5)}, "broker 2 names (leader, epoch) None"),
    ({}, "broker 2 names"),
])
def test_nothing_listed_by_a_broker_that_no_longer_leads_what_it_was_asked_for_means_ask_again(
        remote_leaders, named):
    """Broker 2 lists nothing, but its own metadata no longer names it leader of
    __transaction_state-1 at the epoch this broker asked with: it may have unloaded
    that partition's transactions (this broker's metadata lags), so nothing is aborted."""
    fixture = Fixture(local_rows=[], remote_rows=[], remote_leaders=remote_leaders)
    [(answered, reason)] = fixture.ask()
    assert not answered and named in reason and fixture.markers == []
    assert [type(e).__name__ for e in fixture.sent] == ["SendListTransactions", "SendTopicLeaders"]


def test_no_metadata_answer_or_leaders_changed_while_asking_means_ask_again():
    fixture = Fixture(local_rows=[], remote_rows=[])
    fixture.remote_leaders = None                                   # no answer, or a topic error
    [(answered, reason)] = fixture.ask()
    assert not answered and "no Metadata answer from broker 2" in reason and fixture.markers == []
    fixture = Fixture(local_rows=[], remote_rows=[])
    listed = fixture.requests.coordinator.transactions_of_producer

    def list_then_move(pid):                                        # this broker learns of a new leader
        fixture.topic.partitions[1] = SimpleNamespace(leader=3, leader_epoch=9)
        return listed(pid)
    fixture.requests.coordinator.transactions_of_producer = list_then_move
    [(answered, reason)] = fixture.ask()
    assert not answered and "changed while asking" in reason and fixture.markers == []


def test_every_coordinator_answering_nothing_is_not_trusted_without_describe_on_every_id(caplog):
    fixture = Fixture(local_rows=[], remote_rows=[], missing_acl="User:node-1 has no ALLOW DESCRIBE")
    with caplog.at_level(logging.ERROR, logger="tidelog.txn"):
        [(answered, reason)] = fixture.ask()
        fixture.now += 1000
        fixture.ask()                                           # asked again soon: no second ERROR
    assert not answered and "User:node-1 has no ALLOW DESCRIBE" in reason and fixture.markers == []
    assert not any(isinstance(e, SendTopicLeaders) for e in fixture.sent)     # blind: no Metadata round
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "User:node-1 has no ALLOW DESCRIBE" in errors[0].getMessage()
    fixture.now += 300_000
    with caplog.at_level(logging.ERROR, logger="tidelog.txn"):
        fixture.ask()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2    # repeated, rate-limited


@pytest.mark.parametrize("error", [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                   ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED])
def test_an_error_code_in_a_list_transactions_response_is_no_answer(error):
    """The wire driver's reading of a ListTransactions response: an error code is None
    (no answer), even with rows, never an empty (trusted) listing."""
    channel, seen = MarkerChannel.__new__(MarkerChannel), []
    channel._send = lambda effect, api_key, body, read: seen.append(read)
    channel.send_list_transactions(SendListTransactions(2, PID, 1000, lambda rows: None))
    row = SimpleNamespace(transactional_id="tx", producer_id=PID, transaction_state="CompleteCommit")
    response = SimpleNamespace(error_code=SimpleNamespace(value=int(error)), transaction_states=[row])
    assert seen[0](response) is None
    response.error_code = SimpleNamespace(value=0)
    assert seen[0](response) == [("tx", PID, "CompleteCommit")]


def test_the_wire_driver_reads_a_brokers_topic_leaders_from_its_metadata(tmp_path):
    """``SendTopicLeaders`` over a real socket (the server's own inter-broker channel,
    asking its own listener): the broker's (leader, leader epoch) per partition; an
    unknown topic (a topic error) is None, never an empty (agreeing) answer."""
    import asyncio

    from tidelog.broker.config import BrokerConfig
    from tidelog.server.runtime import Server

    async def main():
        server = Server(BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"),
                                      "listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "3"}))
        await server.start()
        try:
            connection = await connect_creating(server.bind_port, "t")
            connection.close()
            answers = {}
            for topic in ("t", "no-such-topic"):
                done = asyncio.get_running_loop().create_future()
                server.txn_apis.channel.send_topic_leaders(SendTopicLeaders(1, topic, 5000, done.set_result))
                answers[topic] = await asyncio.wait_for(done, 10)
            image = server.node.image.topic("t")
            assert answers["t"] == {index: (r.leader, r.leader_epoch) for index, r in image.partitions.items()}
            assert sorted(answers["t"]) == [0, 1, 2] and {leader for leader, _ in answers["t"].values()} == {1}
            assert answers["no-such-topic"] is None
        finally:
            server.txn_apis.channel.close()
            await server.stop()
    asyncio.run(main())
