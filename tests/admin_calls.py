"""Admin calls the config tests share, through confluent-kafka's AdminClient."""

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
