"""The MemQ consumer: notification polling, direct object fetch with prefetch, commits, seeks.

``memq.Consumer`` is :class:`consumer.consumer.Consumer`.
"""

from consumer.config import ConsumerConfig
from consumer.consumer import Consumer, Lag
from consumer.message import Message, MessageId

__all__ = ["Consumer", "ConsumerConfig", "Lag", "Message", "MessageId"]
