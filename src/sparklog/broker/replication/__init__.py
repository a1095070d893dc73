"""Replication between brokers: a follower fetches all the partitions one leader broker leads for it
in one request (``fetch_request``), answered by ``replica_fetch_server`` on the leader; on the
follower, ``fetcher_manager`` keeps one ``leader_fetcher`` thread per leader broker, which sees the
leader only through a ``leader_endpoint``."""
