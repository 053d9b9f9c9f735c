"""Issue 24 item 10: without ``authorizer.class.name`` nothing enforces ACLs, so, as
Kafka's brokers do, CreateAcls / DescribeAcls / DeleteAcls answer SECURITY_DISABLED
("No Authorizer is configured.") and store nothing — before, a DENY WRITE was
accepted, listed and ignored. A broker without an authorizer answers itself, never
forwarding to the controller."""

import asyncio
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.admin import AdminApis, ForwardingAdminApis
from tidelog.testing import Broker

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
DENY_WRITE = AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                        AclOperation.WRITE, AclPermissionType.DENY)
ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)


def kafka_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(15)
    return raised.value.args[0]


def describe_acls_error(broker) -> tuple[int, str]:
    from tidelog.protocol.client import KafkaConnection

    async def go():
        connection = await KafkaConnection.connect("127.0.0.1", broker.port)
        try:
            response = await connection.request(ApiKey.DESCRIBE_ACLS, {
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            return int(response.error_code.value), response.error_message
        finally:
            connection.close()
    return asyncio.run(go())


def produce(bootstrap: str, topic: str):
    outcome = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    producer.produce(topic, b"x", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(15)
    return None if outcome[0] is None else outcome[0].name()


def test_acl_apis_answer_security_disabled_and_store_nothing(tmp_path):
    data = str(tmp_path / "node")
    with Broker(data_dir=data) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = kafka_error(admin.create_acls([DENY_WRITE])[DENY_WRITE])
        assert created.code() == KafkaError.SECURITY_DISABLED and "No Authorizer is configured" in created.str()
        # librdkafka drops DescribeAcls' top-level error code (rd_kafka_DescribeAclsResponse_parse):
        # an empty list there; kafka-python (below) and the raw answer show SECURITY_DISABLED.
        assert admin.describe_acls(ANY).result(15) == []
        assert describe_acls_error(broker) == (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
        deleted = kafka_error(admin.delete_acls([ANY])[ANY])
        assert deleted.code() == KafkaError.SECURITY_DISABLED

        from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                                 KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
        from kafka.admin import ResourceType as KResourceType
        from kafka.errors import SecurityDisabledError
        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            acl = ACL("User:ANONYMOUS", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                      ResourcePattern(KResourceType.TOPIC, "guarded", ACLResourcePatternType.LITERAL))
            result = client.create_acls([acl])
            assert not result["succeeded"] and result["failed"] == [SecurityDisabledError]
            with pytest.raises(SecurityDisabledError):
                client.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                               ResourcePatternFilter(KResourceType.ANY, None,
                                                                     ACLResourcePatternType.ANY)))
        finally:
            client.close()
        assert produce(broker.bootstrap, "guarded") is None

    # Nothing was stored: with an authorizer now on, the refused DENY is not there.
    with Broker(data_dir=data, overrides={"authorizer.class.name": AUTHORIZER,
                                          "allow.everyone.if.no.acl.found": "true"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.describe_acls(ANY).result(15) == []
        assert produce(broker.bootstrap, "guarded") is None


class _Host:
    """An AdminApis owner: a broker-only node or the controller, by its settings."""

    def __init__(self, authorizer_class_name: str):
        self.node_id = 1
        self.config = {"authorizer.class.name": authorizer_class_name}
        self.forwarded = []
        self.channel = SimpleNamespace(forward=lambda *args: self.forwarded.append(args))

    @property
    def controller(self):
        raise AssertionError("nothing may reach the controller")


CREATE = SimpleNamespace(creations=[SimpleNamespace(resource_type=2, resource_name="t", resource_pattern_type=3,
                                                    principal="User:x", host="*", operation=4, permission_type=2)])
DELETE = SimpleNamespace(filters=[SimpleNamespace(resource_type_filter=1, resource_name_filter=None,
                                                  pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                  operation=1, permission_type=1)])
DESCRIBE = SimpleNamespace(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                           principal_filter=None, host_filter=None, operation=1, permission_type=1)


@pytest.mark.parametrize("apis", [ForwardingAdminApis, AdminApis])
def test_a_node_without_an_authorizer_answers_itself_and_forwards_nothing(apis):
    host = _Host("")
    admin = apis(host)
    created = admin.handle_create_acls(SimpleNamespace(api_key=ApiKey.CREATE_ACLS, api_version=3), CREATE)
    assert [(r["error_code"], r["error_message"]) for r in created["results"]] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")]
    deleted = admin.handle_delete_acls(SimpleNamespace(api_key=ApiKey.DELETE_ACLS, api_version=3), DELETE)
    assert [(r["error_code"], r["matching_acls"]) for r in deleted["filter_results"]] == [
        (ErrorCode.SECURITY_DISABLED, [])]
    described = admin.handle_describe_acls(SimpleNamespace(api_key=ApiKey.DESCRIBE_ACLS, api_version=3), DESCRIBE)
    assert (described["error_code"], described["resources"]) == (ErrorCode.SECURITY_DISABLED, [])
    assert host.forwarded == []


def test_a_broker_with_an_authorizer_still_forwards_acl_writes():
    host = _Host(AUTHORIZER)

    async def go():
        forwarding = ForwardingAdminApis(host).handle_create_acls(
            SimpleNamespace(api_key=ApiKey.CREATE_ACLS, api_version=3), CREATE)
        assert asyncio.iscoroutine(forwarding)
        forwarding.close()
    asyncio.run(go())
