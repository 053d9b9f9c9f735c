"""What a simulated process sees of the run it belongs to.

Brokers, the controllers, clients, the nemesis and the checker are built by
``Simulation`` and handed the run itself; they know it only through this
protocol, so none of them imports ``simulation.py`` (which imports them all).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Protocol


class World(Protocol):
    config: Any                    # SimConfig
    directory: str
    rng: random.Random
    loop: Any                      # EventLoop
    network: Any                   # Network
    stats: Any                     # RunStats
    controller: Any                # SimController: the active one (else the most advanced)
    controllers: dict[int, Any]    # voter id → SimController
    controller_ids: list[int]
    controller_names: list[str]
    brokers: dict[int, Any]        # id → SimBroker
    broker_ids: list[int]
    checker: Any                   # Checker
    healed: bool

    def fault(self, label: str, action: Callable[[], None]) -> None: ...
    def start(self, broker_id: int) -> None: ...
    def stop(self, broker_id: int) -> None: ...
    def kill(self, broker_id: int) -> None: ...
    def power_cut(self, broker_id: int, tear: bool = False) -> None: ...
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def start_controller(self, node_id: int | None = None) -> None: ...
    def kill_controller(self, node_id: int | None = None) -> None: ...
    def active_controller(self) -> Any: ...
    def disk_fault(self, broker_id: int, log_dir: str, kind: str) -> None: ...
    def heal_disk(self, broker_id: int, log_dir: str) -> None: ...
