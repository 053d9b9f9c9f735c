"""The scenarios of the differential conformance test, each run against Kafka and tidelog.

A scenario is ``async def name(side, mode) -> {label: answer}``: the same requests, in
the same order, to one server; ``mode`` is "low" or "high", the lowest or highest version
of each API that both servers serve (Side.version). Topic names carry the mode, so the
two runs of a scenario do not meet. Waits (for a leader, a coordinator, a transaction to
settle) are not compared: only the answers a scenario returns are.
"""

from __future__ import annotations

import uuid

from tidelog.protocol.api_keys import ApiKey

from tests.conformance.differential import Side, assignment, batch, now_ms, subscription, wait_for

GROUP_SESSION_MS = 10_000
ZERO_UUID = uuid.UUID(int=0)


# -- helpers (not compared) ---------------------------------------------------------------


async def create_topic(side: Side, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> dict:
    answer = await side.call(ApiKey.CREATE_TOPICS, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 30_000, "validate_only": False})
    await wait_for(lambda: _has_leaders(side, name, partitions), f"{side.name}: leaders of {name}")
    return answer


async def _has_leaders(side: Side, name: str, partitions: int) -> bool:
    response = await side.raw(ApiKey.METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": False}, 12)
    topics = [t for t in response.topics if t.name == name]
    if not (bool(topics) and len(topics[0].partitions) == partitions and all(
            int(p.error_code.value) == 0 and p.leader_id >= 0 for p in topics[0].partitions)):
        return False
    return len(response.brokers) != 1 or await answers_as_leader(side, name, partitions)


async def answers_as_leader(at: Side, topic: str, partitions: int = 1, epoch: int = -1) -> bool:
    """Whether ``at`` answers as the leader of the topic's partitions (at ``epoch``; -1:
    any). A broker's metadata names a new leader before that leader has taken the role
    (Kafka publishes the metadata image, then applies the delta to its ReplicaManager),
    and a Produce meanwhile is answered NOT_LEADER_OR_FOLLOWER: wait on this instead."""
    answer = await at.raw(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
        "replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": i, "current_leader_epoch": epoch, "leader_epoch": max(epoch, 0)}
            for i in range(partitions)]}]}, at.version(ApiKey.OFFSET_FOR_LEADER_EPOCH, "high"))
    return all(int(p.error_code.value) == 0 for t in answer.topics for p in t.partitions)


async def topic_id(side: Side, name: str):
    response = await side.raw(ApiKey.METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": False}, 12)
    return response.topics[0].topic_id


async def produce(side: Side, topic: str, records: bytes, mode: str = "high", partition: int = 0,
                  transactional_id: str | None = None, acks: int = -1) -> dict:
    version = side.version(ApiKey.PRODUCE, mode)
    tid = await topic_id(side, topic) if version >= 13 else None
    return await side.call(ApiKey.PRODUCE, {
        "transactional_id": transactional_id, "acks": acks, "timeout": 30_000,
        "topic_data": [{"name": topic, "topic_id": tid, "partition_data": [{"index": partition, "records": records}]}]},
        version=version)


NOT_READY = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}


async def coordinator_ready(side: Side, key: str, key_type: int) -> None:
    """Until the group (0) or transaction (1) coordinator of ``key`` has loaded its
    partition: FindCoordinator answering is not enough on Kafka, whose coordinator loads
    the internal topic's partition after it becomes leader."""
    async def probe():
        found = await side.raw(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type,
                                                         "coordinator_keys": [key]}, 4)
        if any(c.error_code.name.upper() != "NONE" for c in found.coordinators):
            return False
        if key_type == 0:
            described = await side.raw(ApiKey.DESCRIBE_GROUPS, {"groups": [key]}, 0)
            return described.groups[0].error_code.name.upper() not in NOT_READY
        described = await side.raw(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [key]}, 0)
        return described.transaction_states[0].error_code.name.upper() not in NOT_READY
    await wait_for(probe, f"{side.name}: coordinator for {key}")


async def retried(side: Side, api: int, body: dict, version: int):
    """The answer once it is not "coordinator loading" (what a client retries; not compared)."""
    async def probe():
        response = await side.raw(api, body, version)
        return None if response.error_code.name.upper() in NOT_READY else response
    return await wait_for(probe, f"{side.name}: {ApiKey(api).name} beyond loading")


def fit(api: int, version: int, body: dict) -> dict:
    """``body`` without the fields that version of the request does not have."""
    import dataclasses
    from tidelog.protocol.codec import _request_class
    names = {f.name for f in dataclasses.fields(_request_class(api, version))}
    return {k: v for k, v in body.items() if k in names}


# -- scenarios ----------------------------------------------------------------------------


async def api_versions(side: Side, mode: str) -> dict:
    version = side.version(ApiKey.API_VERSIONS, mode)
    body = {"client_software_name": "conformance", "client_software_version": "1.0"}
    return {"api_versions": await side.call(ApiKey.API_VERSIONS, body, version=version)}


async def metadata(side: Side, mode: str) -> dict:
    topic = f"conformance-meta-{mode}"
    created = await create_topic(side, topic, partitions=3)
    body = {"topics": [{"name": topic}, {"name": f"conformance-absent-{mode}"}, {"name": "bad name!"}],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}
    return {"create": created, "metadata": await side.call(ApiKey.METADATA, body, mode)}


def _new_topic(name: str, partitions: int = 1, replication: int = 1, configs: dict | None = None,
               assignments: list | None = None) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication,
            "assignments": assignments or [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


async def create_topics_invalid(side: Side, mode: str) -> dict:
    existing = f"conformance-exists-{mode}"
    await create_topic(side, existing)
    refused = [
        _new_topic(""), _new_topic("."), _new_topic(".."), _new_topic("a" * 250), _new_topic("bad/name"),
        _new_topic("has space"), _new_topic("conformance-ünïcode"),
        _new_topic(existing),
        _new_topic(f"conformance-zero-partitions-{mode}", partitions=0),
        _new_topic(f"conformance-negative-partitions-{mode}", partitions=-5),
        _new_topic(f"conformance-rf0-{mode}", replication=0),
        _new_topic(f"conformance-rf2-{mode}", replication=2),
        _new_topic(f"conformance-bad-policy-{mode}", configs={"cleanup.policy": "bogus"}),
        _new_topic(f"conformance-unknown-config-{mode}", configs={"no.such.config": "1"}),
        _new_topic(f"conformance-bad-retention-{mode}", configs={"retention.ms": "abc"}),
        _new_topic(f"conformance-bad-min-isr-{mode}", configs={"min.insync.replicas": "0"}),
        _new_topic(f"conformance-bad-segment-{mode}", configs={"segment.bytes": "10"}),
        _new_topic(f"conformance-bad-compression-{mode}", configs={"compression.type": "brotli"}),
        _new_topic(f"conformance-both-{mode}", partitions=2,
                   assignments=[{"partition_index": 0, "broker_ids": [1]}]),
        _new_topic(f"conformance-no-such-broker-{mode}", partitions=-1, replication=-1,
                   assignments=[{"partition_index": 0, "broker_ids": [42]}]),
        _new_topic(f"conformance-gap-{mode}", partitions=-1, replication=-1,
                   assignments=[{"partition_index": 1, "broker_ids": [1]}]),
        _new_topic(f"conformance-twice-{mode}"), _new_topic(f"conformance-twice-{mode}"),
    ]
    answers = {"refused": await side.call(ApiKey.CREATE_TOPICS, {"topics": refused, "timeout": 30_000,
                                                                 "validate_only": False}, mode)}
    huge = [_new_topic(f"conformance-huge-{mode}", partitions=100_000), _new_topic(f"conformance-beside-huge-{mode}")]
    answers["too_many_partitions"] = await side.call(ApiKey.CREATE_TOPICS, {"topics": huge, "timeout": 30_000,
                                                                           "validate_only": True}, mode)
    validate = [
        _new_topic(f"conformance-rf-huge-{mode}", replication=1000),
        _new_topic(f"conformance-valid-{mode}", partitions=2, configs={"cleanup.policy": "compact",
                                                                        "retention.ms": "60000"}),
    ]
    answers["validate_only"] = await side.call(ApiKey.CREATE_TOPICS, {"topics": validate, "timeout": 30_000,
                                                                      "validate_only": True}, mode)
    return answers


async def produce_refused(side: Side, mode: str) -> dict:
    topic = f"conformance-produce-{mode}"
    await create_topic(side, topic)
    small = f"conformance-small-{mode}"
    await create_topic(side, small, configs={"max.message.bytes": "1000"})
    answers = {"ok": await produce(side, topic, batch([b"a", b"b", b"c"]), mode),
               "unknown_partition": await produce(side, topic, batch([b"x"]), mode, partition=5),
               "too_large": await produce(side, small, batch([b"z" * 2000]), mode)}
    corrupt = bytearray(batch([b"damaged"]))
    corrupt[-1] ^= 0xFF                      # the CRC no longer matches
    answers["corrupt_crc"] = await produce(side, topic, bytes(corrupt), mode)
    if side.version(ApiKey.PRODUCE, mode) < 13:   # by name: a topic that does not exist
        answers["unknown_topic"] = await side.call(ApiKey.PRODUCE, {
            "acks": -1, "timeout": 30_000,
            "topic_data": [{"name": f"conformance-no-such-topic-{mode}",
                            "partition_data": [{"index": 0, "records": batch([b"x"])}]}]}, mode)
    return answers


async def _offsets_topic(side: Side, mode: str, name: str, count: int = 3) -> str:
    topic = f"conformance-{name}-{mode}"
    await create_topic(side, topic)
    await produce(side, topic, batch([f"r{i}".encode() for i in range(count)]), mode)
    return topic


def _list_offsets_body(topic: str, timestamp: int, partition: int = 0, epoch: int = -1) -> dict:
    return {"replica_id": -1, "isolation_level": 0, "timeout": 30_000,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                                      "current_leader_epoch": epoch}]}]}


async def list_offsets(side: Side, mode: str) -> dict:
    topic = await _offsets_topic(side, mode, "offsets")
    version = side.version(ApiKey.LIST_OFFSETS, mode)
    cases = {"latest": (-1, 0, -1), "earliest": (-2, 0, -1), "future_time": (now_ms() + 86_400_000, 0, -1),
             "time_zero": (0, 0, -1), "unknown_partition": (-1, 7, -1)}
    if version >= 4:
        cases.update({"future_epoch": (-1, 0, 5), "current_epoch": (-1, 0, 0)})
    if version >= 7:
        cases["max_timestamp"] = (-3, 0, -1)
    if version >= 8:
        cases["earliest_local"] = (-4, 0, -1)
    if version >= 9:
        cases["latest_tiered"] = (-5, 0, -1)
    answers = {}
    for label, (timestamp, partition, epoch) in cases.items():
        answers[label] = await side.call(ApiKey.LIST_OFFSETS, _list_offsets_body(topic, timestamp, partition, epoch),
                                         version=version)
    return answers


async def fetch(side: Side, mode: str, topic: str, offset: int, partition: int = 0, epoch: int = -1,
                unknown_topic: bool = False) -> dict:
    import uuid
    version = side.version(ApiKey.FETCH, mode)
    tid = (uuid.uuid4() if unknown_topic else await topic_id(side, topic)) if version >= 13 else None
    return await side.call(ApiKey.FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "topic_id": tid, "partitions": [{
            "partition": partition, "current_leader_epoch": epoch, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}, version=version)


async def fetch_refused(side: Side, mode: str) -> dict:
    topic = await _offsets_topic(side, mode, "fetch")
    answers = {"ok": await fetch(side, mode, topic, 1),
               "beyond_end": await fetch(side, mode, topic, 100),
               "negative": await fetch(side, mode, topic, -5),
               "unknown_partition": await fetch(side, mode, topic, 0, partition=9)}
    if side.version(ApiKey.FETCH, mode) >= 9:
        answers["future_epoch"] = await fetch(side, mode, topic, 0, epoch=7)
    if side.version(ApiKey.FETCH, mode) >= 13:
        answers["unknown_topic_id"] = await fetch(side, mode, topic, 0, unknown_topic=True)
    return answers


def _describe_configs(resource_type: int, name: str, keys: list[str] | None = None) -> dict:
    return {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": True}


async def describe_configs_topic(side: Side, mode: str) -> dict:
    topic = f"conformance-configs-{mode}"
    await create_topic(side, topic, configs={"cleanup.policy": "compact", "retention.ms": "3600000",
                                             "max.message.bytes": "100000"})
    return {"all": await side.call(ApiKey.DESCRIBE_CONFIGS, _describe_configs(2, topic), mode),
            "some": await side.call(ApiKey.DESCRIBE_CONFIGS,
                                    _describe_configs(2, topic, ["retention.ms", "no.such.config"]), mode),
            "unknown_topic": await side.call(ApiKey.DESCRIBE_CONFIGS,
                                             _describe_configs(2, f"conformance-no-such-{mode}"), mode)}


async def describe_configs_broker(side: Side, mode: str) -> dict:
    return {"all": await side.call(ApiKey.DESCRIBE_CONFIGS, _describe_configs(4, "1"), mode),
            "some": await side.call(ApiKey.DESCRIBE_CONFIGS,
                                    _describe_configs(4, "1", ["log.retention.hours", "num.partitions"]), mode)}


async def group_stale(side: Side, mode: str) -> dict:
    group = f"conformance-group-{mode}"
    topic = f"conformance-group-topic-{mode}"
    await create_topic(side, topic, partitions=2)
    await coordinator_ready(side, group, 0)
    join_v = side.version(ApiKey.JOIN_GROUP, mode)

    def join(member_id: str) -> dict:
        return {"group_id": group, "session_timeout": GROUP_SESSION_MS, "rebalance_timeout": GROUP_SESSION_MS,
                "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": subscription([topic])}]}
    answers = {"find_coordinator": await side.call(ApiKey.FIND_COORDINATOR,
                                                   {"key": group, "key_type": 0, "coordinator_keys": [group]}, mode)}
    first = await side.raw(ApiKey.JOIN_GROUP, join(""), join_v)
    answers["join_first"] = {"version": join_v, **side.normalize(_plain(first))}
    member = first.member_id
    if first.error_code.name == "member_id_required":
        second = await side.raw(ApiKey.JOIN_GROUP, join(member), join_v)
        answers["join"] = {"version": join_v, **side.normalize(_plain(second))}
        generation = second.generation_id
    else:
        generation = first.generation_id
    sync = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": assignment(topic, [0, 1])}]}
    answers["sync"] = await side.call(ApiKey.SYNC_GROUP, sync, mode)
    answers["sync_stale_generation"] = await side.call(ApiKey.SYNC_GROUP, {**sync, "generation_id": generation + 5},
                                                       mode)
    heartbeat = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None}
    answers["heartbeat"] = await side.call(ApiKey.HEARTBEAT, heartbeat, mode)
    answers["heartbeat_stale_generation"] = await side.call(ApiKey.HEARTBEAT,
                                                            {**heartbeat, "generation_id": generation - 1}, mode)
    answers["heartbeat_unknown_member"] = await side.call(ApiKey.HEARTBEAT,
                                                          {**heartbeat, "member_id": "conformance-nobody"}, mode)
    answers["join_unknown_member"] = await side.call(ApiKey.JOIN_GROUP, join("conformance-nobody"), mode)
    commit = {"group_id": group, "member_id": member, "group_instance_id": None, "retention_time": -1,
              "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    answers["commit_stale_generation"] = await side.call(
        ApiKey.OFFSET_COMMIT, {**commit, "generation_id_or_member_epoch": generation + 3}, mode)
    answers["commit_unknown_member"] = await side.call(
        ApiKey.OFFSET_COMMIT, {**commit, "generation_id_or_member_epoch": generation,
                               "member_id": "conformance-nobody"}, mode)
    answers["commit"] = await side.call(ApiKey.OFFSET_COMMIT, {**commit, "generation_id_or_member_epoch": generation},
                                        mode)
    describe = {"groups": [group, f"conformance-no-group-{mode}"], "include_authorized_operations": True}
    answers["describe_stable"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    leave_v = side.version(ApiKey.LEAVE_GROUP, mode)
    leave = {"group_id": group, "member_id": "conformance-nobody",
             "members": [{"member_id": "conformance-nobody", "group_instance_id": None, "reason": None}]}
    answers["leave_unknown_member"] = await side.call(ApiKey.LEAVE_GROUP, leave, version=leave_v)
    answers["leave"] = await side.call(ApiKey.LEAVE_GROUP, {
        "group_id": group, "member_id": member,
        "members": [{"member_id": member, "group_instance_id": None, "reason": None}]}, version=leave_v)
    answers["describe_empty"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    return answers


def _plain(response):
    from tests.conformance.differential import plain
    return plain(response)


async def producer_fencing(side: Side, mode: str) -> dict:
    txn = f"conformance-txn-{mode}"
    topic = f"conformance-txn-topic-{mode}"
    await create_topic(side, topic)
    await coordinator_ready(side, txn, 1)
    init = {"transactional_id": txn, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    version = side.version(ApiKey.INIT_PRODUCER_ID, mode)
    # Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of producer ids came.
    answers = {"init": {"version": version, **side.normalize(_plain(
        await retried(side, ApiKey.INIT_PRODUCER_ID, init, version)))}}
    first = await side.raw(ApiKey.INIT_PRODUCER_ID, init, side.version(ApiKey.INIT_PRODUCER_ID, mode))
    answers["init_again"] = {"version": side.version(ApiKey.INIT_PRODUCER_ID, mode), **side.normalize(_plain(first))}
    pid, epoch = first.producer_id, first.producer_epoch
    add = {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}
    answers["add_partitions"] = await side.call(ApiKey.ADD_PARTITIONS_TO_TXN, add, mode)
    answers["add_partitions_fenced"] = await side.call(
        ApiKey.ADD_PARTITIONS_TO_TXN, {**add, "v3_and_below_producer_epoch": epoch - 1}, mode)
    answers["produce"] = await produce(side, topic, batch([b"t0"], producer_id=pid, producer_epoch=epoch,
                                                          base_sequence=0, transactional=True), mode,
                                       transactional_id=txn)
    answers["produce_fenced"] = await produce(side, topic, batch([b"zombie"], producer_id=pid,
                                                                 producer_epoch=epoch - 1, base_sequence=1,
                                                                 transactional=True), mode, transactional_id=txn)
    answers["describe_ongoing"] = await side.call(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn]}, mode)
    end = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch - 1, "committed": True}
    answers["end_fenced"] = await side.call(ApiKey.END_TXN, end, mode)
    answers["end_abort"] = await side.call(ApiKey.END_TXN, {**end, "producer_epoch": epoch, "committed": False}, mode)

    async def settled():
        response = await side.raw(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn]}, 0)
        return not response.transaction_states[0].transaction_state.startswith("Prepare")
    await wait_for(settled, f"{side.name}: {txn} settles")
    answers["describe_aborted"] = await side.call(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn]}, mode)
    answers["describe_unknown"] = await side.call(ApiKey.DESCRIBE_TRANSACTIONS,
                                                  {"transactional_ids": [f"conformance-no-txn-{mode}"]}, mode)
    idempotent = await retried(side, ApiKey.INIT_PRODUCER_ID, {**init, "transactional_id": None},
                               side.version(ApiKey.INIT_PRODUCER_ID, mode))
    answers["init_idempotent"] = {"version": side.version(ApiKey.INIT_PRODUCER_ID, mode),
                                  **side.normalize(_plain(idempotent))}
    answers["produce_out_of_order"] = await produce(
        side, topic, batch([b"gap"], producer_id=idempotent.producer_id, producer_epoch=idempotent.producer_epoch,
                           base_sequence=5), mode)
    answers["produce_unknown_producer"] = await produce(
        side, topic, batch([b"who"], producer_id=idempotent.producer_id + 77_777, producer_epoch=0,
                           base_sequence=3), mode)
    return answers


async def delete_records(side: Side, mode: str) -> dict:
    topic = await _offsets_topic(side, mode, "delete", count=5)
    version = side.version(ApiKey.DELETE_RECORDS, mode)

    def body(offset: int, partition: int = 0) -> dict:
        return {"timeout": 30_000, "topics": [{"name": topic, "partitions": [{"partition_index": partition,
                                                                             "offset": offset}]}]}
    answers = {"beyond_high_watermark": await side.call(ApiKey.DELETE_RECORDS, body(10), version=version),
               "negative": await side.call(ApiKey.DELETE_RECORDS, body(-7), version=version),
               "unknown_partition": await side.call(ApiKey.DELETE_RECORDS, body(1, partition=4), version=version),
               "to_2": await side.call(ApiKey.DELETE_RECORDS, body(2), version=version),
               "back_to_1": await side.call(ApiKey.DELETE_RECORDS, body(1), version=version),
               "to_high_watermark": await side.call(ApiKey.DELETE_RECORDS, body(-1), version=version)}
    answers["list_earliest"] = await side.call(ApiKey.LIST_OFFSETS, _list_offsets_body(topic, -2), mode)
    answers["list_latest"] = await side.call(ApiKey.LIST_OFFSETS, _list_offsets_body(topic, -1), mode)
    answers["fetch_below_start"] = await fetch(side, mode, topic, 1)

    def epochs(leader_epoch: int, current: int = -1, partition: int = 0) -> dict:
        return {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]}
    answers["epoch_0"] = await side.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(0), mode)
    answers["epoch_future"] = await side.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(3), mode)
    answers["epoch_current_wrong"] = await side.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(0, current=9), mode)
    answers["epoch_unknown_partition"] = await side.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(0, partition=3),
                                                         mode)
    return answers


async def delete_topics_invalid(side: Side, mode: str) -> dict:
    """DeleteTopics of what does not exist or cannot be deleted, by name and (v6+) by id."""
    version = side.version(ApiKey.DELETE_TOPICS, mode)
    existing = f"conformance-delete-me-{mode}"
    await create_topic(side, existing)
    answers = {}
    if version < 6:
        answers["unknown_name"] = await side.call(ApiKey.DELETE_TOPICS, {
            "topic_names": [f"conformance-never-{mode}"], "timeout": 30_000}, version=version)
        answers["internal"] = await side.call(ApiKey.DELETE_TOPICS, {
            "topic_names": ["__consumer_offsets"], "timeout": 30_000}, version=version)
        answers["twice"] = await side.call(ApiKey.DELETE_TOPICS, {
            "topic_names": [existing, existing], "timeout": 30_000}, version=version)
        return answers
    tid = await topic_id(side, existing)

    def delete(name, topic_id_) -> dict:
        return {"topics": [{"name": name, "topic_id": topic_id_}], "timeout": 30_000}
    answers["unknown_name"] = await side.call(ApiKey.DELETE_TOPICS, delete(f"conformance-never-{mode}", ZERO_UUID),
                                              version=version)
    answers["unknown_id"] = await side.call(ApiKey.DELETE_TOPICS, delete(None, uuid.UUID(int=12345)), version=version)
    answers["name_and_id"] = await side.call(ApiKey.DELETE_TOPICS, delete(existing, tid), version=version)
    answers["neither"] = await side.call(ApiKey.DELETE_TOPICS, delete(None, ZERO_UUID), version=version)
    answers["internal"] = await side.call(ApiKey.DELETE_TOPICS, delete("__consumer_offsets", ZERO_UUID),
                                          version=version)
    answers["twice"] = await side.call(ApiKey.DELETE_TOPICS, {"topics": [
        {"name": existing, "topic_id": ZERO_UUID}, {"name": existing, "topic_id": ZERO_UUID}], "timeout": 30_000},
        version=version)
    answers["twice_by_id"] = await side.call(ApiKey.DELETE_TOPICS, {"topics": [
        {"name": None, "topic_id": tid}, {"name": None, "topic_id": tid}], "timeout": 30_000}, version=version)
    answers["still_there"] = await side.call(ApiKey.METADATA, {"topics": [{"name": existing}],
                                                               "allow_auto_topic_creation": False}, mode)
    return answers


def _sorted_partitions(described: dict) -> dict:
    """A transaction's partitions are a set (Kafka lists them in its HashSet's order)."""
    for state in described.get("transaction_states", []):
        for topic in state.get("topics", []):
            topic["partitions"] = sorted(topic["partitions"])
    return described


async def describe_states(side: Side, mode: str) -> dict:
    """A classic group through its states (Stable with one member; PreparingRebalance
    when a second joins; CompletingRebalance once both joined; Stable again; Empty after
    both left; Dead once deleted), described at each, and ListGroups filtered by state;
    a transaction through Empty, Ongoing and CompleteCommit, described and listed."""
    import asyncio
    group = f"conformance-states-{mode}"
    topic = f"conformance-states-topic-{mode}"
    await create_topic(side, topic, partitions=2)
    await coordinator_ready(side, group, 0)
    join_v = side.version(ApiKey.JOIN_GROUP, mode)
    describe = {"groups": [group], "include_authorized_operations": False}

    def join(member_id: str) -> dict:
        return {"group_id": group, "session_timeout": GROUP_SESSION_MS, "rebalance_timeout": GROUP_SESSION_MS,
                "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": subscription([topic])}]}

    async def joined(s: Side, member_id: str = ""):
        answer = await s.raw(ApiKey.JOIN_GROUP, join(member_id), join_v)
        if answer.error_code.name == "member_id_required":
            answer = await s.raw(ApiKey.JOIN_GROUP, join(answer.member_id), join_v)
        return answer

    async def state(expected: str):
        async def probe():
            described = await side.raw(ApiKey.DESCRIBE_GROUPS, describe, 0)
            return described.groups[0].group_state == expected
        await wait_for(probe, f"{side.name}: {group} {expected}")

    def sync(member_id: str, generation: int, assignments: list) -> dict:
        return {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
                "protocol_type": "consumer", "protocol_name": "range", "assignments": assignments}
    answers = {}
    first = await joined(side)
    a = first.member_id
    await side.raw(ApiKey.SYNC_GROUP, sync(a, first.generation_id, [
        {"member_id": a, "assignment": assignment(topic, [0, 1])}]), side.version(ApiKey.SYNC_GROUP, mode))
    answers["describe_stable_one"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    other = await side.login()
    second = asyncio.ensure_future(joined(other))          # held until the first member rejoins
    await state("PreparingRebalance")
    answers["describe_preparing"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    rejoin = await side.raw(ApiKey.JOIN_GROUP, join(a), join_v)
    b_join = await second
    answers["rejoin_leader_members"] = len(rejoin.members)
    answers["describe_completing"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    b = b_join.member_id
    sync_v = side.version(ApiKey.SYNC_GROUP, mode)
    await side.raw(ApiKey.SYNC_GROUP, sync(a, rejoin.generation_id, [
        {"member_id": a, "assignment": assignment(topic, [0])},
        {"member_id": b, "assignment": assignment(topic, [1])}]), sync_v)
    await other.raw(ApiKey.SYNC_GROUP, sync(b, b_join.generation_id, []), sync_v)
    answers["describe_stable_two"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    list_v = side.version(ApiKey.LIST_GROUPS, mode)
    if list_v >= 4:
        for wanted in ("Stable", "Empty"):
            listed = await side.call(ApiKey.LIST_GROUPS, fit(ApiKey.LIST_GROUPS, list_v, {
                "states_filter": [wanted], "types_filter": []}), mode)
            listed["groups"] = [g for g in listed["groups"] if g["group_id"].startswith("conformance-states")]
            answers[f"list_{wanted.lower()}"] = listed
    leave_v = side.version(ApiKey.LEAVE_GROUP, mode)
    for s, member in ((other, b), (side, a)):
        await s.raw(ApiKey.LEAVE_GROUP, {"group_id": group, "member_id": member, "members": [
            {"member_id": member, "group_instance_id": None, "reason": None}]}, leave_v)
    answers["describe_empty"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)
    answers["delete"] = await side.call(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, mode)
    answers["describe_deleted"] = await side.call(ApiKey.DESCRIBE_GROUPS, describe, mode)

    # A transaction: Empty after InitProducerId, Ongoing once it has a partition, CompleteCommit.
    txn = f"conformance-states-txn-{mode}"
    await coordinator_ready(side, txn, 1)
    init_v = side.version(ApiKey.INIT_PRODUCER_ID, mode)
    init = await retried(side, ApiKey.INIT_PRODUCER_ID, {"transactional_id": txn, "transaction_timeout": 60_000,
                                                         "producer_id": -1, "producer_epoch": -1}, init_v)
    pid, epoch = init.producer_id, init.producer_epoch
    describe_txn = {"transactional_ids": [txn]}
    answers["txn_empty"] = await side.call(ApiKey.DESCRIBE_TRANSACTIONS, describe_txn, mode)
    await side.raw(ApiKey.ADD_PARTITIONS_TO_TXN, {
        "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0, 1]}]}, side.version(ApiKey.ADD_PARTITIONS_TO_TXN, mode))
    await produce(side, topic, batch([b"t"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                     transactional=True), mode, transactional_id=txn)
    answers["txn_ongoing"] = _sorted_partitions(await side.call(ApiKey.DESCRIBE_TRANSACTIONS, describe_txn, mode))
    list_txn = fit(ApiKey.LIST_TRANSACTIONS, side.version(ApiKey.LIST_TRANSACTIONS, mode), {
        "state_filters": ["Ongoing"], "producer_id_filters": [pid], "duration_filter": -1})
    answers["list_ongoing"] = await side.call(ApiKey.LIST_TRANSACTIONS, list_txn, mode)
    await side.raw(ApiKey.END_TXN, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                    "committed": True}, side.version(ApiKey.END_TXN, mode))

    async def settled():
        response = await side.raw(ApiKey.DESCRIBE_TRANSACTIONS, describe_txn, 0)
        return response.transaction_states[0].transaction_state == "CompleteCommit"
    await wait_for(settled, f"{side.name}: {txn} commits")
    answers["txn_committed"] = await side.call(ApiKey.DESCRIBE_TRANSACTIONS, describe_txn, mode)
    answers["list_committed"] = await side.call(ApiKey.LIST_TRANSACTIONS,
                                                {**list_txn, "state_filters": ["CompleteCommit"]}, mode)
    return answers


# -- on the three-broker pair (a side's ``cluster``: ports by node id, stop and start) -----


async def _partition(side: Side, topic: str):
    response = await side.raw(ApiKey.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, 12)
    topics = [t for t in response.topics if t.name == topic]
    if not topics or not topics[0].partitions or int(topics[0].partitions[0].error_code.value) != 0:
        return None
    return topics[0].partitions[0]


async def leader_change(side: Side, mode: str) -> dict:
    """A partition replicated 3 times: 3 records in the first leader's epoch, its broker
    stopped (a controlled shutdown moves the leadership), 2 records in the new leader's
    epoch; then OffsetsForLeaderEpoch and ListOffsets at the new leader (with the current
    epoch, a stale one, none) and at a follower; the old leader restarted and back in the
    ISR, the same again (its log now ends where the new leader's does)."""
    import asyncio
    cluster = side.cluster
    topic = f"conformance-epochs-{mode}"
    answers = {"create": await side.call(ApiKey.CREATE_TOPICS, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 3, "assignments": [],
                    "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
        "timeout": 30_000, "validate_only": False}, mode)}

    async def in_sync(count: int, not_leader: int | None = None):
        async def probe():
            p = await _partition(side, topic)
            return p is not None and p.leader_id >= 0 and len(p.isr_nodes) == count \
                and p.leader_id != not_leader and p
        return await wait_for(probe, f"{side.name}: {topic} with {count} in sync", timeout_s=90)
    first = await in_sync(3)
    leader = await side.on(cluster.port(first.leader_id))
    # An idempotent producer: its first batch is re-sent to the new leader after the move,
    # as a client does whose answer was lost with the old leader.
    init_v = side.version(ApiKey.INIT_PRODUCER_ID, mode)
    producer = await retried(leader, ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60_000,
                                                              "producer_id": -1, "producer_epoch": -1}, init_v)
    pid, epoch = producer.producer_id, producer.producer_epoch
    first_batch = batch([b"e0-a", b"e0-b", b"e0-c"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    answers["produce_first_epoch"] = await produce(leader, topic, first_batch, mode)
    await asyncio.to_thread(cluster.stop, first.leader_id)
    survivor = next(n for n in cluster.broker_ids if n != first.leader_id)
    side = await side.on(cluster.port(survivor))
    moved = await in_sync(2, not_leader=first.leader_id)
    answers["after_move"] = {"leader_epoch": moved.leader_epoch, "isr": len(moved.isr_nodes),
                             "replicas": len(moved.replica_nodes), "leader_moved": moved.leader_id != first.leader_id}
    leader = await side.on(cluster.port(moved.leader_id))
    follower = await side.on(cluster.port(next(n for n in moved.isr_nodes if n != moved.leader_id)))
    answers["produce_retry_at_new_leader"] = await produce(leader, topic, first_batch, mode)
    answers["produce_second_epoch"] = await produce(leader, topic, batch(
        [b"e1-a", b"e1-b"], producer_id=pid, producer_epoch=epoch, base_sequence=3), mode)

    def epochs(leader_epoch: int, current: int = -1) -> dict:
        return {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]}

    async def ask(at: Side, label: str) -> None:
        current = moved.leader_epoch
        for e in (0, current, current + 1):
            answers[f"{label}_epoch_{'first' if e == 0 else 'current' if e == current else 'future'}"] = \
                await at.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(e), mode)
        answers[f"{label}_epoch_fenced"] = await at.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, epochs(0, current=0), mode)
        answers[f"{label}_epoch_with_current"] = await at.call(ApiKey.OFFSET_FOR_LEADER_EPOCH,
                                                               epochs(0, current=current), mode)
        version = at.version(ApiKey.LIST_OFFSETS, mode)
        for name, timestamp in (("latest", -1), ("earliest", -2)):
            answers[f"{label}_list_{name}"] = await at.call(ApiKey.LIST_OFFSETS,
                                                            _list_offsets_body(topic, timestamp), version=version)
        if version >= 4:
            answers[f"{label}_list_fenced"] = await at.call(ApiKey.LIST_OFFSETS,
                                                            _list_offsets_body(topic, -1, epoch=0), version=version)
            answers[f"{label}_list_current"] = await at.call(
                ApiKey.LIST_OFFSETS, _list_offsets_body(topic, -1, epoch=current), version=version)
    await ask(leader, "leader")
    await ask(follower, "follower")
    await asyncio.to_thread(cluster.start, first.leader_id)
    await in_sync(3)
    back = await side.on(cluster.port(first.leader_id))
    await ask(back, "restarted")
    again = await _partition(side, topic)
    answers["after_restart"] = {"leader_epoch": again.leader_epoch, "isr": len(again.isr_nodes)}
    return answers


async def follower_truncation(side: Side, mode: str) -> dict:
    """Two logs that diverge, and the one that must give way: a partition on two of the
    three brokers (the first listed, A, leads; B follows), min ISR 1. Two records both
    have; B stopped; three records only A has; A stopped; B started and elected UNCLEAN
    (ElectLeaders v1+, asked at the third broker); two records in B's new epoch; A
    started: it must truncate its three records away (OffsetsForLeaderEpoch to B) and
    rejoin the ISR. Then A is made leader again (a PREFERRED election) and its log is read
    (Fetch), listed (ListOffsets latest, earliest and max timestamp) and asked for each
    epoch's end (OffsetsForLeaderEpoch), as B's was before."""
    import asyncio
    cluster = side.cluster
    a, b, third = cluster.broker_ids[:3]
    topic = f"conformance-truncation-{mode}"
    control = await side.on(cluster.port(third))
    answers = {"create": await control.call(ApiKey.CREATE_TOPICS, {
        "topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [a, b]}],
                    "configs": [{"name": "min.insync.replicas", "value": "1"}]}],
        "timeout": 30_000, "validate_only": False}, mode)}

    async def state(leader: int, isr: int | None):
        async def probe():
            response = await control.raw(ApiKey.METADATA, {"topics": [{"name": topic}],
                                                           "allow_auto_topic_creation": False}, 12)
            partitions = [p for t in response.topics if t.name == topic for p in t.partitions]
            p = partitions[0] if partitions else None     # LEADER_NOT_AVAILABLE while leaderless
            return p is not None and p.leader_id == leader and (isr is None or len(p.isr_nodes) == isr) and p
        return await wait_for(probe, f"{side.name}: {topic} led by {leader} with {isr} in sync", timeout_s=90)

    def described(p) -> dict:
        named = {a: "A", b: "B"}
        return {"error_code": p.error_code.name.upper(), "leader": named.get(p.leader_id, p.leader_id),
                "leader_epoch": p.leader_epoch,
                "isr": sorted(named[n] for n in p.isr_nodes),
                "offline": sorted(named[n] for n in p.offline_replicas)}
    async def leading(at: Side, label: str, epoch: int) -> None:
        await wait_for(lambda: answers_as_leader(at, topic, 1, epoch),
                       f"{side.name}: {label} answering as leader of {topic}", timeout_s=30)

    created = await state(a, 2)
    answers["created"] = described(created)
    leader_a = await control.on(cluster.port(a))
    await leading(leader_a, "A", created.leader_epoch)
    answers["produce_both"] = await produce(leader_a, topic, batch([b"both-0", b"both-1"]), mode)
    await asyncio.to_thread(cluster.stop, b)
    answers["b_stopped"] = described(await state(a, 1))
    answers["produce_a_only"] = await produce(await control.on(cluster.port(a)), topic,
                                              batch([b"a-only-0", b"a-only-1", b"a-only-2"]), mode)
    await asyncio.to_thread(cluster.stop, a)
    answers["a_stopped"] = described(await state(-1, None))
    await asyncio.to_thread(cluster.start, b)

    async def elected():
        version = max(1, control.version(ApiKey.ELECT_LEADERS, mode))
        answer = await control.call(ApiKey.ELECT_LEADERS, {
            "election_type": 1, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout_ms": 30_000},
            version=version)
        codes = [p["error_code"] for r in answer.get("replica_election_results", [])
                 for p in r.get("partition_result", [])]
        # Until B has registered again, nothing is eligible (ELIGIBLE_LEADERS_NOT_AVAILABLE).
        return answer if codes and all(str(c).upper() == "NONE" for c in codes) else None
    answers["unclean_election"] = await wait_for(elected, f"{side.name}: {topic} elected unclean", timeout_s=90)
    b_elected = await state(b, 1)
    answers["b_elected"] = described(b_elected)
    leader_b = await control.on(cluster.port(b))
    await leading(leader_b, "B", b_elected.leader_epoch)
    answers["produce_b_epoch"] = await produce(leader_b, topic, batch([b"b-0", b"b-1"]), mode)
    await asyncio.to_thread(cluster.start, a)
    rejoined = await state(b, 2)
    answers["a_rejoined"] = described(rejoined)

    async def ask(at: Side, label: str, epoch_now: int) -> None:
        await leading(at, label, epoch_now)
        for e in sorted({0, epoch_now} | {rejoined.leader_epoch}):
            answers[f"{label}_end_of_epoch_{e}"] = await at.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
                "replica_id": -1, "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": e}]}]}, mode)
        version = at.version(ApiKey.LIST_OFFSETS, mode)
        for name, timestamp in (("latest", -1), ("earliest", -2), ("max_timestamp", -3)):
            if timestamp == -3 and version < 7:
                continue
            answers[f"{label}_list_{name}"] = await at.call(ApiKey.LIST_OFFSETS, _list_offsets_body(topic, timestamp),
                                                            version=version)
        answers[f"{label}_fetch"] = await fetch(at, mode, topic, 0)
    await ask(leader_b, "b_leading", rejoined.leader_epoch)
    version = control.version(ApiKey.ELECT_LEADERS, mode)
    answers["preferred_election"] = await control.call(ApiKey.ELECT_LEADERS, {
        "election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout_ms": 30_000},
        version=version)
    back = await state(a, 2)
    answers["a_leading_again"] = described(back)
    await ask(await control.on(cluster.port(a)), "a_leading", back.leader_epoch)
    return answers


# -- on the secure nodes (SASL/PLAIN, Kafka's StandardAuthorizer; the side logs in as the
# super user "admin"; "alice" has no ACL) -------------------------------------------------

# Not refused to anyone who logged in (nothing to authorize), or not a client's call.
_UNGUARDED = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
# A valid ACL filter (topics, any pattern): Kafka refuses to parse UNKNOWN (0) types.
_ACL_FILTER = {"resource_type_filter": 2, "pattern_type_filter": 1}


async def unauthorized(side: Side, mode: str) -> dict:
    """Every API both serve, at the mode's version, called by a user without any ACL on
    things that exist (a topic with records and a group with committed offsets, named
    alike; the transactional id of that name does not exist): the error codes found
    anywhere in each answer are compared (tests/security/probe.py builds the bodies)."""
    from tests.security.probe import CLOSED, TIMED_OUT, call, probe_body
    name = f"conformance-acl-{mode}"
    await create_topic(side, name)
    await produce(side, name, batch([b"secret"]), mode)
    await coordinator_ready(side, name, 0)
    commit = await side.raw(ApiKey.OFFSET_COMMIT, {
        "group_id": name, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time": -1, "topics": [{"name": name, "partitions": [{
            "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]}, side.version(ApiKey.OFFSET_COMMIT, "low"))
    assert commit.topics[0].partitions[0].error_code.name.upper() == "NONE", commit
    tid = await topic_id(side, name)
    alice = await side.login("alice")
    answers = {}
    for api in sorted(side.versions):
        if api in _UNGUARDED:
            continue
        version = side.version(api, mode)
        # By name (a DeleteTopics entry naming both a name and an id is invalid in Kafka).
        by = {"topic_id": ZERO_UUID} if api == ApiKey.DELETE_TOPICS else {"topic_id": tid}
        body = probe_body(api, version, name, timeout=30_000, **by, **_ACL_FILTER)
        codes = await call(alice.conn, api, version, body, timeout_s=15)
        if codes in (CLOSED, TIMED_OUT):
            answers[ApiKey(api).name.lower()] = {"version": version, "answer": codes}
            alice = await side.login("alice")
            continue
        answers[ApiKey(api).name.lower()] = {"version": version,
                                             "error_codes": sorted(c.name.upper() for c in codes)}
    return answers


# -- config resources and authorized operations under ACLs (issue 32's surfaces attacked) ---

_CONFIG_TARGETS = {"broker": (4, "1"), "default_broker": (4, ""), "group": (32, "<group>"), "topic": (2, "<topic>"),
                   "broker_logger": (8, "1"), "client_metrics": (16, "m"), "other_broker": (4, "2"),
                   "not_a_broker_id": (4, "abc"), "empty_topic": (2, ""), "empty_group": (32, "")}
_CONFIG_VALUES = {2: ("retention.ms", "1000"), 4: ("message.max.bytes", "2000000"), 8: ("root", "DEBUG"),
                  16: ("interval.ms", "1000"), 32: ("consumer.session.timeout.ms", "50000")}


def _config_resources(api: int, targets: list[tuple[int, str]]) -> dict:
    if api == ApiKey.DESCRIBE_CONFIGS:
        return {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None}
                              for t, n in targets], "include_synonyms": True, "include_documentation": False}
    op = {"config_operation": 0} if api == ApiKey.INCREMENTAL_ALTER_CONFIGS else {}
    return {"validate_only": False, "resources": [{"resource_type": t, "resource_name": n, "configs": [
        {"name": _CONFIG_VALUES.get(t, ("a", "b"))[0], "value": _CONFIG_VALUES.get(t, ("a", "b"))[1], **op}]}
        for t, n in targets]}


def _codes(answer: dict) -> dict:
    """``{resource: error code}`` of a config answer (messages differ where Kafka's are generic)."""
    items = answer.get("results") or answer.get("responses") or []
    return {f"{r['resource_type']}:{r['resource_name']}": r["error_code"] for r in items} | {
        "count": len(items)}


async def unauthorized_configs(side: Side, mode: str) -> dict:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on every config resource
    type (broker by id and "", group, topic, broker logger, client metrics, an unknown
    type, a resource named twice, a broker id that is not a number) by "alice" without any
    ACL; then with READ on one topic and one group and DESCRIBE_CONFIGS on the cluster,
    the authorized operations Metadata, DescribeCluster, DescribeGroups and
    ConsumerGroupDescribe give her (KIP-430). The error codes are compared; the ACLs are
    removed at the end."""
    topic, group, secret = f"conformance-cfg-{mode}", f"conformance-cfg-group-{mode}", f"conformance-cfg-secret-{mode}"
    for name in (topic, secret):
        await create_topic(side, name)
    await coordinator_ready(side, group, 0)
    commit = await side.raw(ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time": -1, "topics": [{"name": topic, "partitions": [{
            "partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]}, side.version(ApiKey.OFFSET_COMMIT, "low"))
    assert commit.topics[0].partitions[0].error_code.name.upper() == "NONE", commit
    alice = await side.login("alice")
    names = {"<group>": group, "<topic>": secret}
    targets = {label: (t, names.get(n, n)) for label, (t, n) in _CONFIG_TARGETS.items()}
    answers = {}
    for api in (ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        label = ApiKey(api).name.lower()
        for target, resource in targets.items():
            answers[f"{label}_{target}"] = _codes(await alice.call(api, _config_resources(api, [resource]), mode))
        for odd, resources in {"unknown_type": [(99, "x")], "negative_type": [(-1, "x")],
                               "unknown_and_topic": [(99, "x"), (2, secret)],
                               "twice": [(2, secret), (2, secret)]}.items():
            if odd == "twice" and api == ApiKey.ALTER_CONFIGS:
                continue    # Kafka 4.4 never answers it (an IllegalStateException merging the two refusals)
            answers[f"{label}_{odd}"] = _codes(await alice.call(api, _config_resources(api, resources), mode))

    acl = {"resource_pattern_type": 3, "principal": "User:alice", "host": "*", "permission_type": 3}
    granted = [{**acl, "resource_type": 2, "resource_name": topic, "operation": 3},        # READ topic
               {**acl, "resource_type": 3, "resource_name": group, "operation": 3},        # READ group
               {**acl, "resource_type": 4, "resource_name": "kafka-cluster", "operation": 10}]  # DESCRIBE_CONFIGS
    created = await side.call(ApiKey.CREATE_ACLS, {"creations": granted}, "high")
    assert all(r["error_code"] == "NONE" for r in created["results"]), created

    async def sees_topic():
        listed = await alice.raw(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False}, 12)
        return any(t.name == topic for t in listed.topics)
    await wait_for(sees_topic, f"{side.name}: alice's ACLs in effect")
    try:
        version = side.version(ApiKey.METADATA, mode)
        asked = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
                 "include_cluster_authorized_operations": True}
        answers["metadata_named"] = await alice.call(ApiKey.METADATA, {**asked, "topics": [
            {"name": topic, "topic_id": None}, {"name": secret, "topic_id": None}]}, mode)
        if version >= 8:
            listed = await alice.call(ApiKey.METADATA, {**asked, "topics": None}, mode)
            answers["metadata_listed_operations"] = {
                t["name"]: t.get("topic_authorized_operations") for t in listed["topics"]
                if t["name"].startswith("conformance-cfg")}
        answers["describe_cluster"] = await alice.call(ApiKey.DESCRIBE_CLUSTER,
                                                       {"include_cluster_authorized_operations": True}, mode)
        answers["describe_groups"] = await alice.call(ApiKey.DESCRIBE_GROUPS, {
            "groups": [group, f"conformance-cfg-other-{mode}"], "include_authorized_operations": True}, mode)
        answers["describe_configs_cluster"] = _codes(await alice.call(
            ApiKey.DESCRIBE_CONFIGS, _config_resources(ApiKey.DESCRIBE_CONFIGS, [(4, "1"), (4, "")]), mode))
        answers["alter_still_refused"] = _codes(await alice.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, _config_resources(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, [(4, "1"), (32, group), (2, topic)]), mode))
    finally:
        deleted = await side.call(ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": g["resource_type"], "resource_name_filter": g["resource_name"],
             "pattern_type_filter": 3, "principal_filter": "User:alice", "host_filter": "*",
             "operation": g["operation"], "permission_type": 3} for g in granted]}, "high")
        assert all(r["error_code"] == "NONE" for r in deleted["filter_results"]), deleted
    answers["describe_cluster"].pop("brokers", None)            # the nodes' addresses and ids differ by side
    answers["describe_cluster"].pop("controller_id", None)
    for label in ("metadata_named",):
        answers[label].pop("brokers", None)
        answers[label].pop("controller_id", None)
        for t in answers[label]["topics"]:
            t.pop("partitions", None)
    return answers


SCENARIOS = {f.__name__: f for f in (api_versions, metadata, create_topics_invalid, produce_refused, list_offsets,
                                     fetch_refused, describe_configs_topic, describe_configs_broker, group_stale,
                                     producer_fencing, delete_records, delete_topics_invalid, describe_states,
                                     unauthorized, unauthorized_configs, leader_change, follower_truncation)}
# Scenarios run against the secure pair (SASL/PLAIN with an authorizer), logged in as "admin".
SECURE_SCENARIOS = {"unauthorized", "unauthorized_configs"}
# Scenarios run against three brokers on each side.
CLUSTER_SCENARIOS = {"leader_change", "follower_truncation"}

# The main API of each scenario: its versions are what "low" and "high" mean in the report.
MAIN_API = {"api_versions": ApiKey.API_VERSIONS, "metadata": ApiKey.METADATA,
            "create_topics_invalid": ApiKey.CREATE_TOPICS, "produce_refused": ApiKey.PRODUCE,
            "list_offsets": ApiKey.LIST_OFFSETS, "fetch_refused": ApiKey.FETCH,
            "describe_configs_topic": ApiKey.DESCRIBE_CONFIGS, "describe_configs_broker": ApiKey.DESCRIBE_CONFIGS,
            "group_stale": ApiKey.JOIN_GROUP, "producer_fencing": ApiKey.INIT_PRODUCER_ID,
            "delete_records": ApiKey.DELETE_RECORDS, "describe_states": ApiKey.DESCRIBE_GROUPS,
            "delete_topics_invalid": ApiKey.DELETE_TOPICS,
            "unauthorized": ApiKey.METADATA, "unauthorized_configs": ApiKey.INCREMENTAL_ALTER_CONFIGS,
            "leader_change": ApiKey.OFFSET_FOR_LEADER_EPOCH,
            "follower_truncation": ApiKey.OFFSET_FOR_LEADER_EPOCH}

