"""The sparklog broker: partition logs, the Flight server, replication and the controller."""
