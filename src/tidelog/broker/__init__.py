"""The one broker: a sans-I/O ``BrokerNode`` (``node.py``) with its lifecycle table
(``lifecycle.py``), driven by ``tidelog.server`` over asyncio and by ``tidelog.sim``
over the simulator."""
