"""The local development stack: real S3 (moto), Apache Kafka (KRaft) and ZooKeeper.

Used by ``memq dev up|status|down|logs`` and by the pytest fixtures in
:mod:`memq.testing`: one code path for both.
"""

from memq.devstack.services import ServiceState
from memq.devstack.stack import DevStack, ServiceHealth, StackState, default_state_dir

__all__ = ["DevStack", "ServiceHealth", "ServiceState", "StackState", "default_state_dir"]
