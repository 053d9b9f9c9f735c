"""The consumer-group APIs over asyncio: decode, ask the request layer, encode (docs/groups.md).

Theory of operation. Each handler reads its kio request into a domain request
(``protocol/translate/group.py``), hands it to the request layer
(``tidelog.broker.requests.GroupRequests``, which the simulator's brokers call
too) and writes the layer's result as the version's response. A result the
layer gives through a callback may come much later (a JoinGroup waits for the
rebalance, an OffsetCommit for its record to commit): the handler then returns
an awaitable of the response. What is server-only stays here: the client's
address (``client_host``), and what ACLs add — ListGroups lists only the groups
the caller may DESCRIBE, DescribeGroups' authorized operations (KIP-430).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from tidelog.broker.requests.group import GroupRequests
from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.metadata.authorizer import ResourceType
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.translate import group as translate
from tidelog.server.authorized_operations import authorized_operations
from tidelog.server.dispatch import client_host

logger = logging.getLogger("tidelog.groups")


class GroupApis:
    def __init__(self, node, listener_name: str, clock,
                 create_topic: Callable[[CreatableTopic], ErrorCode]):
        self.node = node                              # a BrokerNode: its image and coordinator
        self.listener_name = listener_name
        self.clock = clock
        self.requests = GroupRequests(node, listener_name, create_topic)
        # With ACLs, ListGroups lists only the groups the caller may DESCRIBE (all of them
        # with DESCRIBE on the cluster), as Kafka's handleListGroupsRequest.
        self.may_describe: Callable[[str], bool] = lambda group_id: True
        self.authorizer = None                          # a RequestAuthorizer with ACLs (authorized operations)

    def register(self, dispatcher) -> None:
        handlers = {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator, ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group, ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group, ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit, ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete, ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups, ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.handle_consumer_group_describe}
        for api_key, handler in handlers.items():
            dispatcher.register(api_key, handler, *translate.SERVED[api_key])

    @property
    def coordinator(self):
        return self.node.group_coordinator

    def handle_find_coordinator(self, header, request):
        key_type, keys = translate.find_coordinator_keys(header.api_version, request)
        found = [dict(key=key, **self.requests.find_coordinator(key, key_type)) for key in keys]
        return translate.find_coordinator_response(header.api_version, found)

    def handle_join_group(self, header, request):
        join = translate.join_group_request(header.api_version, request, header.client_id, client_host.get())
        future, respond = _future()
        self.requests.join_group(join, respond)
        return _answer(future)

    def handle_sync_group(self, header, request):
        future, respond = _future()
        self.requests.sync_group(translate.sync_group_request(header.api_version, request), respond)
        return _answer(future)

    def handle_heartbeat(self, header, request):
        return {"throttle_time": 0,
                **self.requests.heartbeat(translate.heartbeat_request(header.api_version, request))}

    def handle_leave_group(self, header, request):
        result = self.requests.leave_group(translate.leave_group_request(header.api_version, request))
        return translate.leave_group_response(header.api_version, result)

    def handle_txn_offset_commit(self, header, request):
        """Offsets committed as part of a producer's transaction: they take effect when
        the transaction's COMMIT marker reaches the group's partition."""
        return self.handle_offset_commit(header, request,
                                         producer=(int(request.producer_id), int(request.producer_epoch)))

    def handle_offset_commit(self, header, request, producer: tuple[int, int] | None = None):
        commit = translate.offset_commit_request(header.api_version, request, producer)
        future, respond = _future()
        self.requests.offset_commit(commit, lambda errors: respond(translate.offset_commit_response(commit, errors)))
        return _answer(future)

    def handle_offset_fetch(self, header, request):
        groups = [self.requests.offset_fetch(fetch)
                  for fetch in translate.offset_fetch_requests(header.api_version, request)]
        return translate.offset_fetch_response(header.api_version, groups)

    def handle_offset_delete(self, header, request):
        delete = translate.offset_delete_request(header.api_version, request)
        future, respond = _future()
        self.requests.offset_delete(delete, lambda error, errors: respond(
            translate.offset_delete_response(delete, error, errors)))
        return _answer(future)

    def handle_list_groups(self, header, request):
        listed = self.requests.list_groups(translate.list_groups_request(header.api_version, request),
                                           self.may_describe)
        return {"throttle_time": 0, **listed}

    def handle_describe_groups(self, header, request):
        describe, with_operations = translate.describe_groups_request(header.api_version, request)
        groups = self.requests.describe_groups(describe)
        if with_operations:
            self._add_authorized_operations(groups)
        return {"throttle_time": 0, "groups": groups}

    def _add_authorized_operations(self, groups: list[dict]) -> None:
        """KIP-430: what the caller may do with each group described (not with one in error)."""
        for entry in groups:
            if entry["error_code"] == 0:
                entry["authorized_operations"] = authorized_operations(self.authorizer, ResourceType.GROUP,
                                                                       entry["group_id"])

    def handle_consumer_group_heartbeat(self, header, request):
        """KIP-848's protocol: the member heartbeats, the coordinator assigns."""
        heartbeat = translate.consumer_group_heartbeat_request(header.api_version, request, header.client_id,
                                                               client_host.get())
        future, respond = _future()
        self.requests.consumer_group_heartbeat(heartbeat, lambda answer: respond({"throttle_time": 0, **answer}))
        return _answer(future)

    def handle_consumer_group_describe(self, header, request):
        groups = [self.requests.consumer_group_describe(group_id) for group_id in request.group_ids]
        if request.include_authorized_operations:
            self._add_authorized_operations(groups)
        return {"throttle_time": 0, "groups": groups}

    def handle_delete_groups(self, header, request):
        names = list(request.groups_names)
        future, respond = _future()
        self.requests.delete_groups(tuple(names),
                                    lambda results: respond(translate.delete_groups_response(names, results)))
        return _answer(future)


def _future():
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def resolve(value) -> None:
        if not future.done():
            future.set_result(value)
    return future, resolve


def _answer(future):
    if future.done():
        return future.result()

    async def later():
        return await future
    return later()
