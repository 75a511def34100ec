"""The MemQ broker: asyncio TCP server, topic processors, acks, metrics, shutdown."""

from memq.broker.runner import BrokerThread, run_broker
from memq.broker.server import BrokerServer, ClusterView

__all__ = ["BrokerServer", "BrokerThread", "ClusterView", "run_broker"]
