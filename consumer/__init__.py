"""The MemQ consumer: notification polling, direct object fetch with prefetch, commits, seeks.

``memq.Consumer`` is :class:`consumer.consumer.Consumer`.
"""

from memq.consumer.config import ConsumerConfig
from memq.consumer.consumer import Consumer
from memq.consumer.expiry import ObjectExpiredError
from memq.consumer.message import Message, MessageId
from memq.consumer.positions import Lag

__all__ = ["Consumer", "ConsumerConfig", "Lag", "Message", "MessageId", "ObjectExpiredError"]
