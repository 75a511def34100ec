"""Cluster coordination: ZooKeeper registry of brokers and topics, governor election,
capacity-aware topic assignment and failover."""
