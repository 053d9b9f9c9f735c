"""tidelog.sim — a deterministic simulator of a whole tidelog cluster.

One seed decides everything: the cluster's shape and settings (``config.py``),
every network delay and loss (``network.py``), every fault (``nemesis.py``) and
every client request (``clients.py``). The brokers and the controllers (a
KRaft quorum of 1, 3 or 5) are the production core (``tidelog.replication``,
``tidelog.controller``, ``tidelog.raft``, ``tidelog.metadata``,
``tidelog.storage``) glued by events (``broker.py``, ``controller.py``) on a
discrete-event loop (``loop.py``); the invariants
listed in docs/simulation.md are checked after every event (``checker.py``).
``python -m tidelog.sim --seed N`` replays seed N exactly. docs/simulation.md draws it.
"""

from tidelog.sim.config import SimConfig
from tidelog.sim.simulation import SimResult, Simulation, run_seed

__all__ = ["SimConfig", "SimResult", "Simulation", "run_seed"]
