"""Admin calls tests share: through confluent-kafka's AdminClient, or tidelog's own
protocol client."""

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigEntry, ConfigResource


def incremental_alter(admin, resource_type: str, name: str, changes) -> tuple[int, str] | None:
    """IncrementalAlterConfigs of ``(op, key, value)`` changes on one resource: None when it
    was applied, else the refusal as (error code, message)."""
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for op, key, value in changes])
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
    except KafkaException as e:
        return e.args[0].code(), e.args[0].str()
    return None


async def connect_creating(port: int, topic: str):
    """A tidelog protocol connection to the broker at ``port`` that has created ``topic``
    by asking Metadata for it (auto-creation, the broker's defaults)."""
    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection
    connection = await KafkaConnection.connect("127.0.0.1", port)
    await connection.request(ApiKey.METADATA, {"topics": [{"name": topic, "topic_id": None}],
                                               "allow_auto_topic_creation": True,
                                               "include_topic_authorized_operations": False}, version=12)
    return connection
