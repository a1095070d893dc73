"""Where a client finds the cluster: ``bootstrap.servers`` (brokers only, Kafka's way) or a ZooKeeper
connect string (admin tools next to ZooKeeper, and the default until bootstrap servers are given).

Python clients take ``bootstrap_servers="host:port,..."`` or ``config={"bootstrap.servers": ...}``
(the names librdkafka / confluent-kafka users know); :func:`resolve` turns those and ``zookeeper``
into one :class:`ClusterAddress`. Given bootstrap servers win: such a client opens no ZooKeeper
session at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidConfig
from sparklog.security.client_config import KEYS as SECURITY_SETTINGS
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
BOOTSTRAP_SERVERS = "bootstrap.servers"
CLIENT_SETTINGS = (BOOTSTRAP_SERVERS, *SECURITY_SETTINGS)  # the keys ``config={...}`` accepts


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` -> [(host, port)] (IPv6 hosts in brackets: ``[::1]:9092``);
    :class:`InvalidConfig` naming the entry that is not ``host:port``."""
    if not isinstance(servers, str):
        raise InvalidConfig(f"{BOOTSTRAP_SERVERS} must be a string 'host:port,...', got {servers!r:.100}")
    out: list[tuple[str, int]] = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfig(f"{BOOTSTRAP_SERVERS}: {entry!r:.100} is not host:port (a port from 1 to 65535)")
        out.append((host, int(port)))
    if not out:
        raise InvalidConfig(f"{BOOTSTRAP_SERVERS} names no broker (expected 'host:port,...'), got {servers!r:.100}")
    return out


def location(host: str, port: int) -> str:
    """The Flight location of a broker address."""
    return f"grpc+tcp://[{host}]:{port}" if ":" in host else f"grpc+tcp://{host}:{port}"


@dataclasses.dataclass(frozen=True)
class ClusterAddress:
    """How to reach the cluster (picklable: the Spark data source sends it to executors)."""

    zookeeper: str = DEFAULT_ZOOKEEPER
    bootstrap_servers: str | None = None
    security: ClientSecurity = PLAINTEXT  # how the client authenticates (never printed: see its repr)


def resolve(
    zookeeper: str | None = None,
    bootstrap_servers: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> ClusterAddress:
    """The address a client was given: ``bootstrap_servers`` (or ``config["bootstrap.servers"]``;
    both given must agree) if any, else ``zookeeper`` (default ``127.0.0.1:2181``)."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(CLIENT_SETTINGS))
    if unknown:
        raise InvalidConfig(
            f"unknown client setting(s) {', '.join(map(repr, unknown))}; known: {', '.join(CLIENT_SETTINGS)}"
        )
    from_config = config.get(BOOTSTRAP_SERVERS)
    if from_config is not None and bootstrap_servers is not None and from_config != bootstrap_servers:
        raise InvalidConfig(
            f"bootstrap_servers={bootstrap_servers!r} and config['{BOOTSTRAP_SERVERS}']={from_config!r} contradict"
        )
    servers = bootstrap_servers if bootstrap_servers is not None else from_config
    security = ClientSecurity.from_config(config)
    if servers is not None:
        parse_bootstrap_servers(servers)
        return ClusterAddress(
            zookeeper or DEFAULT_ZOOKEEPER, ",".join(s.strip() for s in servers.split(",") if s.strip()), security
        )
    return ClusterAddress(zookeeper or DEFAULT_ZOOKEEPER, security=security)
