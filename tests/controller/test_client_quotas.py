"""Client quotas on the controller: AlterClientQuotas' records and refusals (Kafka's
ClientQuotaControlManager), the image they build, and DescribeClientQuotas' filter
(Kafka's ClientQuotasImage.describe)."""

from __future__ import annotations

import pytest

from tidelog.controller.client_quota_control import ClientQuotaAlteration
from tidelog.testing.controller import ControllerTestEnv
from tidelog.core.errors import ErrorCode
from tidelog.metadata.client_quotas import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    QuotaFilterError,
    describe,
)
from tidelog.metadata.delta import replay_all
from tidelog.metadata.loader import snapshot_of
from tidelog.metadata.records import decode, encode


def alteration(entity: dict, **ops) -> ClientQuotaAlteration:
    return ClientQuotaAlteration(tuple(entity.items()), tuple(ops.items()))


def alter(env, *alterations, validate_only=False):
    start = env.log.end_offset
    results = env.controller.alter_client_quotas(list(alterations), validate_only)
    return [(dict(e), r.error_code, r.message) for e, r in results], [env.format(r) for r in env.records_from(start)]


def test_set_change_and_remove_write_one_record_per_changed_key():
    env = ControllerTestEnv()
    results, records = alter(env, alteration({"user": "alice", "client-id": None},
                                             producer_byte_rate=1024, request_percentage=12.5))
    assert results == [({"client-id": None, "user": "alice"}, ErrorCode.NONE, None)]
    assert records == [
        "ClientQuota entity=[client-id=<default>,user=alice] key=producer_byte_rate value=1024.0",
        "ClientQuota entity=[client-id=<default>,user=alice] key=request_percentage value=12.5"]
    # The same value again writes nothing; a new value and a removal write one each.
    _, records = alter(env, alteration({"client-id": None, "user": "alice"},
                                       producer_byte_rate=1024, request_percentage=None))
    assert records == ["ClientQuota entity=[client-id=<default>,user=alice] key=request_percentage "
                       "value=0.0 remove=true"]
    # Removing a key that is not set writes nothing and is not an error.
    results, records = alter(env, alteration({"user": "bob"}, consumer_byte_rate=None))
    assert results == [({"user": "bob"}, ErrorCode.NONE, None)] and records == []
    image = env.controller.image
    assert dict(image.client_quotas) == {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0}}
    assert env.controller.client_quotas.quotas == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0}}
    # Removing the last key removes the entity.
    alter(env, alteration({"user": "alice", "client-id": None}, producer_byte_rate=None))
    assert dict(env.controller.image.client_quotas) == {} and env.controller.client_quotas.quotas == {}
    env.check_consistent()


def test_validate_only_answers_the_same_and_writes_nothing():
    env = ControllerTestEnv()
    end = env.log.end_offset
    results, records = alter(env, alteration({"user": "alice"}, producer_byte_rate=10),
                             alteration({"user": "bob"}, producer_byte_rate=-1), validate_only=True)
    assert [r[1] for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    assert records == [] and env.log.end_offset == end and dict(env.controller.image.client_quotas) == {}


@pytest.mark.parametrize("entity, ops, message", [
    ({"user": "a"}, {"producer_byte_rate": -1}, "Quota producer_byte_rate must be greater than 0"),
    ({"user": "a"}, {"controller_mutation_rate": 0}, "Quota controller_mutation_rate must be greater than 0"),
    ({"user": "a"}, {"no_such_quota": 5}, "Invalid configuration key no_such_quota"),
    ({"user": "a"}, {"connection_creation_rate": 5}, "Invalid configuration key connection_creation_rate"),
    ({"ip": "10.0.0.1"}, {"producer_byte_rate": 5}, "Invalid configuration key producer_byte_rate"),
    ({"user": "a"}, {"producer_byte_rate": 10.5}, "producer_byte_rate cannot be a fractional value."),
    ({"user": "a"}, {"consumer_byte_rate": 2.0 ** 64}, "Proposed value for consumer_byte_rate is too large for a LONG."),
    ({"ip": None}, {"connection_creation_rate": 2.0 ** 31},
     "Proposed value for connection_creation_rate is too large for an INT."),
    ({}, {"producer_byte_rate": 5}, "Invalid empty client quota entity"),
    ({"group": "g"}, {"producer_byte_rate": 5}, "Unhandled client quota entity type: group"),
    ({"user": ""}, {"producer_byte_rate": 5}, "Empty user not supported"),
    ({"user": "a", "ip": "10.0.0.1"}, {"connection_creation_rate": 5},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({"ip": "not-an-ip"}, {"connection_creation_rate": 5}, "not-an-ip is not a valid IP or resolvable host."),
])
def test_bad_input_is_invalid_request_with_kafkas_message_and_changes_nothing(entity, ops, message):
    env = ControllerTestEnv()
    alter(env, alteration({"user": "a"}, producer_byte_rate=100))
    before, end = env.controller.image, env.log.end_offset
    # A good key next to the bad one is not written either: the entity is refused whole.
    results, records = alter(env, alteration(entity, **{"request_percentage": 7, **ops}
                                             if "ip" not in entity else ops))
    assert results == [(entity, ErrorCode.INVALID_REQUEST, message)]
    assert records == [] and env.log.end_offset == end and env.controller.image == before


def test_a_refused_entity_does_not_stop_the_others():
    env = ControllerTestEnv()
    results, records = alter(env, alteration({"user": "a"}, producer_byte_rate=-5),
                             alteration({"client-id": "c"}, consumer_byte_rate=2048))
    assert [r[1] for r in results] == [ErrorCode.INVALID_REQUEST, ErrorCode.NONE]
    assert records == ["ClientQuota entity=[client-id=c] key=consumer_byte_rate value=2048.0"]


def test_a_key_or_an_entity_given_twice_is_refused_as_kafka_does():
    env = ControllerTestEnv()
    results, records = alter(env, ClientQuotaAlteration((("user", "a"),), (("producer_byte_rate", 1.0),
                                                                          ("producer_byte_rate", 2.0))))
    assert results == [({"user": "a"}, ErrorCode.INVALID_REQUEST,
                        "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})")] and records == []
    results, _ = alter(env, alteration({"user": "b"}, producer_byte_rate=1),
                       alteration({"user": "b"}, producer_byte_rate=2))
    assert results == [({"user": "b"}, ErrorCode.INVALID_REQUEST,
                        "Ignoring duplicate entity ClientQuotaEntity(entries={user=b})")]


def test_records_round_trip_and_the_image_survives_a_snapshot():
    env = ControllerTestEnv()
    alter(env, alteration({"user": "alice", "client-id": "app"}, producer_byte_rate=1 << 40,
                          request_percentage=0.25),
          alteration({"client-id": None}, consumer_byte_rate=1),
          alteration({"ip": "::1"}, connection_creation_rate=3))
    for _, record in env.log.read(0):
        assert decode(encode(record)) == record
    image = env.controller.image
    assert replay_all(enumerate(snapshot_of(image).records)).client_quotas == image.client_quotas
    assert image.client_quotas[(("client-id", "app"), ("user", "alice"))] == {
        "producer_byte_rate": float(1 << 40), "request_percentage": 0.25}
    env.check_consistent()


QUOTAS = {
    (("user", "alice"),): {"producer_byte_rate": 1.0},
    (("user", None),): {"producer_byte_rate": 2.0},
    (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 3.0},
    (("client-id", None), ("user", "alice")): {"producer_byte_rate": 4.0},
    (("client-id", "app"),): {"producer_byte_rate": 5.0},
    (("ip", "10.0.0.1"),): {"connection_creation_rate": 6.0},
}


def _matched(components, strict=False):
    return sorted(values["producer_byte_rate" if "producer_byte_rate" in values else "connection_creation_rate"]
                  for _, values in describe(QUOTAS, components, strict))


def test_describe_filters_match_exact_default_and_specified_strict_or_not():
    assert _matched([]) == [1, 2, 3, 4, 5, 6]
    assert _matched([], strict=True) == []
    assert _matched([("user", MATCH_TYPE_EXACT, "alice")]) == [1, 3, 4]
    assert _matched([("user", MATCH_TYPE_EXACT, "alice")], strict=True) == [1]
    assert _matched([("user", MATCH_TYPE_DEFAULT, None)]) == [2]
    assert _matched([("user", MATCH_TYPE_SPECIFIED, None)]) == [1, 2, 3, 4]
    assert _matched([("user", MATCH_TYPE_SPECIFIED, None)], strict=True) == [1, 2]
    assert _matched([("user", MATCH_TYPE_EXACT, "alice"), ("client-id", MATCH_TYPE_DEFAULT, None)]) == [4]
    assert _matched([("client-id", MATCH_TYPE_EXACT, "app")]) == [3, 5]
    assert _matched([("client-id", MATCH_TYPE_EXACT, "app")], strict=True) == [5]
    assert _matched([("ip", MATCH_TYPE_SPECIFIED, None)]) == [6]


@pytest.mark.parametrize("components, code, message", [
    ([("", MATCH_TYPE_SPECIFIED, None)], ErrorCode.INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", MATCH_TYPE_SPECIFIED, None), ("user", MATCH_TYPE_EXACT, "a")], ErrorCode.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", MATCH_TYPE_SPECIFIED, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", MATCH_TYPE_EXACT, None)], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", MATCH_TYPE_DEFAULT, "a")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", MATCH_TYPE_SPECIFIED, "a")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", MATCH_TYPE_SPECIFIED, None), ("user", MATCH_TYPE_SPECIFIED, None)], ErrorCode.INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe_refuses_bad_filters_with_kafkas_codes(components, code, message):
    with pytest.raises(QuotaFilterError) as refused:
        describe(QUOTAS, components, False)
    assert (refused.value.error_code, refused.value.message) == (code, message)
