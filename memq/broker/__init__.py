"""The MemQ broker: asyncio TCP server, topic processors, acks, metrics, shutdown.

Run one with :func:`memq.run.broker.run_broker` (``memq broker``) or
:class:`memq.run.broker.BrokerThread` (tests, embedding).
"""

from memq.broker.cluster import ClusterView, StandaloneView, TopicHost
from memq.broker.server import BrokerServer

__all__ = ["BrokerServer", "ClusterView", "StandaloneView", "TopicHost"]
