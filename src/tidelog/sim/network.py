"""The simulated network: links that delay, lose, duplicate, reorder, cut and clog.

Theory of operation. Nodes are named (``b1``, ``ctl``, ``p0`` …). ``send``
turns a message into a delivery event after the link's delay; what can happen on
the way is decided by the one seeded ``random.Random``:

* delay: ``delay_ms_min`` + the link's own base latency (up to
  ``link_spread_ms``, fixed per directed link) + a random part up to
  ``jitter_ms`` per message, so two messages on one link may arrive out of order
  (reordering);
* loss (``loss``) and duplication (``duplicate``: a second copy with its own
  delay) while the fault phase runs;
* cuts: ``blocked`` holds directed pairs ``(src, dst)``; a message on a blocked
  link is dropped at send time and again at delivery time (a partition that
  starts while it is in flight). ``partition(a, b)`` cuts both directions,
  ``cut(a, b)`` one (asymmetric), ``isolate(n)`` every link of ``n``;
* clogs (FoundationDB's "swizzle-clog"): a clogged node's messages, in and out,
  are held — not dropped — until it is unclogged, then delivered;
* a message to a node that is down gets a connection-refused reply after one
  link delay (a TCP reset), so the sender fails fast.

``Rpc`` gives a node request/response calls on top: correlation ids, a timeout
per request, and replies matched to live requests only — a late or duplicated
reply is ignored, as a client ignores answers to requests it gave up on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from tidelog.sim.loop import EventLoop, Owned


@dataclass
class Message:
    src: str
    dst: str
    kind: str
    body: object
    correlation_id: int
    is_reply: bool = False
    refused: bool = False          # a connection-refused answer (the peer is down)

    def describe(self) -> str:
        arrow = "reply" if self.is_reply else "req"
        flag = " REFUSED" if self.refused else ""
        return f"{self.kind}#{self.correlation_id} {arrow} {self.src}->{self.dst}{flag}"


@dataclass
class LinkFaults:
    loss: float = 0.0
    duplicate: float = 0.0


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped_cut: int = 0
    dropped_loss: int = 0
    duplicated: int = 0
    refused: int = 0
    held_clog: int = 0


class Network:
    def __init__(self, loop: EventLoop, rng: random.Random, delay_ms_min: int = 1, jitter_ms: int = 4,
                 link_spread_ms: int = 0, seed: int = 0):
        self.loop = loop
        self.rng = rng
        self.delay_ms_min = delay_ms_min
        self.jitter_ms = jitter_ms
        self.link_spread_ms = link_spread_ms
        self.seed = seed
        self._link_base: dict[tuple[str, str], int] = {}
        self.faults = LinkFaults()
        self.blocked: set[tuple[str, str]] = set()
        self.clogged: set[str] = set()
        self._held: list[Message] = []
        self.nodes: dict[str, "NetworkNode"] = {}
        self.stats = NetworkStats()
        self._correlation_id = 0

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    # ------------------------------------------------------------ topology

    def attach(self, node: "NetworkNode") -> None:
        self.nodes[node.name] = node

    def partition(self, a: str, b: str) -> None:
        self.blocked |= {(a, b), (b, a)}

    def cut(self, src: str, dst: str) -> None:
        """Drop messages from ``src`` to ``dst`` only (an asymmetric partition)."""
        self.blocked.add((src, dst))

    def isolate(self, name: str) -> None:
        for other in self.nodes:
            if other != name:
                self.partition(name, other)

    def split(self, side: list[str]) -> None:
        """Cut every link between ``side`` and the rest."""
        rest = [n for n in self.nodes if n not in side]
        for a in side:
            for b in rest:
                self.partition(a, b)

    def clog(self, name: str) -> None:
        self.clogged.add(name)

    def unclog(self, name: str) -> None:
        self.clogged.discard(name)
        held, self._held = self._held, []
        for message in held:
            if message.src in self.clogged or message.dst in self.clogged:
                self._held.append(message)
            else:
                self._schedule(message)

    def heal(self) -> None:
        """Every cut and clog ends; loss and duplication stop."""
        self.blocked.clear()
        for name in sorted(self.clogged):
            self.unclog(name)
        self.faults = LinkFaults()

    def reachable(self, src: str, dst: str) -> bool:
        return (src, dst) not in self.blocked

    # ------------------------------------------------------------ delivery

    def send(self, message: Message) -> None:
        self.stats.sent += 1
        if (message.src, message.dst) in self.blocked:
            self.stats.dropped_cut += 1
            return
        if not message.refused and self.faults.loss and self.rng.random() < self.faults.loss:
            self.stats.dropped_loss += 1
            return
        self._schedule(message)
        if not message.refused and self.faults.duplicate and self.rng.random() < self.faults.duplicate:
            self.stats.duplicated += 1
            self._schedule(message)

    def _delay(self, src: str, dst: str) -> int:
        base = self._link_base.get((src, dst))
        if base is None:   # each link's own latency, fixed for the run (a function of the seed and link)
            base = random.Random(f"{self.seed}-link-{src}-{dst}").randint(0, self.link_spread_ms)
            self._link_base[(src, dst)] = base
        return self.delay_ms_min + base + (self.rng.randint(0, self.jitter_ms) if self.jitter_ms else 0)

    def _schedule(self, message: Message) -> None:
        if message.src in self.clogged or message.dst in self.clogged:
            self.stats.held_clog += 1
            self._held.append(message)
            return
        self.loop.after(self._delay(message.src, message.dst), lambda: self._deliver(message), transit=True)

    def _deliver(self, message: Message) -> None:
        if (message.src, message.dst) in self.blocked:
            self.stats.dropped_cut += 1
            return
        if message.src in self.clogged or message.dst in self.clogged:
            self.stats.held_clog += 1
            self._held.append(message)
            return
        node = self.nodes.get(message.dst)
        if node is None or not node.up:
            if not message.is_reply and not message.refused:
                self.stats.refused += 1
                self.send(Message(message.dst, message.src, message.kind, None, message.correlation_id,
                                  is_reply=True, refused=True))
            return
        self.stats.delivered += 1
        # Delivered into the node's incarnation: a paused node gets it on resume.
        self.loop.at(self.loop.now_ms, lambda: node.receive(message), message.describe(), node.owned)


class NetworkNode:
    """Base of every simulated process: a name, liveness, an ``Rpc``."""

    def __init__(self, name: str, loop: EventLoop, network: Network):
        self.name = name
        self.loop = loop
        self.network = network
        self.owned = Owned(name)
        self.up = False
        self.rpc = Rpc(self)
        network.attach(self)

    # Events this process schedules die with it (see loop.Owned).
    def after(self, delay_ms: int, action: Callable[[], None], label: str = ""):
        return self.loop.after(delay_ms, action, label, self.owned)

    def receive(self, message: Message) -> None:
        if message.is_reply:
            self.rpc.on_reply(message)
        else:
            self.on_request(message)

    def on_request(self, message: Message) -> None:
        raise NotImplementedError

    def reply(self, request: Message, body: object) -> None:
        self.network.send(Message(self.name, request.src, request.kind, body, request.correlation_id,
                                  is_reply=True))

    def process_started(self) -> None:
        self.owned.incarnation += 1
        self.owned.paused = False
        self.owned.backlog = []
        self.rpc = Rpc(self)
        self.up = True

    def process_ended(self) -> None:
        self.up = False
        self.owned.incarnation += 1
        self.owned.paused = False
        self.owned.backlog = []
        self.rpc = Rpc(self)


@dataclass
class _Pending:
    on_reply: Callable[[object], None]
    on_error: Callable[[str], None]
    timeout: object = None
    kind: str = ""


@dataclass
class Rpc:
    """Request/response calls of one process incarnation. Correlation ids are unique
    across the whole run, so a reply meant for a dead incarnation never matches a
    request of its successor."""

    node: NetworkNode
    pending: dict[int, _Pending] = field(default_factory=dict)

    def request(self, dst: str, kind: str, body: object, timeout_ms: int,
                on_reply: Callable[[object], None], on_error: Callable[[str], None]) -> int:
        correlation_id = self.node.network.next_correlation_id()
        entry = _Pending(on_reply, on_error, kind=kind)
        entry.timeout = self.node.after(timeout_ms, lambda: self._timed_out(correlation_id),
                                        f"{kind}#{correlation_id} to {dst} timed out")
        self.pending[correlation_id] = entry
        self.node.network.send(Message(self.node.name, dst, kind, body, correlation_id))
        return correlation_id

    def send_one_way(self, dst: str, kind: str, body: object) -> None:
        """A request nobody answers (acks=0)."""
        self.node.network.send(Message(self.node.name, dst, kind, body, self.node.network.next_correlation_id()))

    def _timed_out(self, correlation_id: int) -> None:
        entry = self.pending.pop(correlation_id, None)
        if entry is not None:
            entry.on_error("timeout")

    def on_reply(self, message: Message) -> None:
        entry = self.pending.pop(message.correlation_id, None)
        if entry is None:
            return   # late (we gave up) or a duplicate
        entry.timeout.cancel()
        if message.refused:
            entry.on_error("refused")
        else:
            entry.on_reply(message.body)
