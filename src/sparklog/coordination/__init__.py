"""Cluster coordination for sparklog (ZooKeeper)."""
