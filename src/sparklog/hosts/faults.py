"""The faults a deployment on several hosts meets, injected into a running :class:`HostCluster` one
at a time: each is injected, held while the workload runs on, healed, and the cluster waited for
until it is whole again (every broker registered, every replica of the topic in sync, each
partition led by its preferred replica).

:data:`FAULTS` names them; :func:`inject` runs one and returns what happened with its timings:

- ``leader-host-cut-off``: the host of partition 0's leader loses its network (its ZooKeeper
  session expires, the controller elects another leader; the old one must not acknowledge
  anything meanwhile), then comes back as a follower;
- ``leader-partitioned``: that leader's host still reaches the clients but neither ZooKeeper nor the
  other brokers (the split-brain case: clients can still send to it, it must not acknowledge);
- ``leader-paused``: that leader's process frozen (``SIGSTOP``, as a long GC pause or a swapping
  host freezes it), its session expiring meanwhile, then let run on (``SIGCONT``): a zombie leader
  that wakes up must find it is one and acknowledge nothing;
- ``zookeeper-node-lost``: ``kill -9`` of a ZooKeeper server that is not the leader, restarted later;
- ``zookeeper-leader-cut-off``: the ensemble leader's host loses its network (the others elect one);
- ``packet-loss-between-brokers``: every broker host drops 5 % of the packets the other brokers send;
- ``rolling-restart``: every broker in turn stopped (SIGTERM) and started, the next one only once
  the topic is fully in sync again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sparklog.errors import InvalidRequest
from sparklog.hosts.cluster import HostCluster

HOLD_S = 12.0  # how long a fault lasts: three ZooKeeper session timeouts of a broker (4 s)
RECOVERY_TIMEOUT_S = 120.0
PACKET_LOSS_PERCENT = 5


def _leader_host(cluster: HostCluster, topic: str, partition: int = 0) -> tuple[int, int]:
    leader = cluster.partition_states(topic)[partition].leader
    return leader, cluster.host_of_broker(leader)


def _recover(cluster: HostCluster, topic: str) -> float:
    """Seconds until every broker serves again and the topic is fully in sync under its preferred
    leaders (the next fault then meets a settled cluster)."""
    start = time.monotonic()
    cluster.wait(lambda: cluster.live_brokers() >= set(cluster.brokers), RECOVERY_TIMEOUT_S, "every broker registered")
    cluster.wait_settled(topic, RECOVERY_TIMEOUT_S)
    return time.monotonic() - start


def _leader_lost(
    cluster: HostCluster, topic: str, hold_s: float, isolate: Callable[[int, int], None], restore: Callable[[int], None]
) -> dict[str, Any]:
    """Partition 0's leader ``isolate``d (its id, its host), a new leader awaited, ``restore``d
    after ``hold_s``, the cluster whole again."""
    leader, host = _leader_host(cluster, topic)
    isolate(leader, host)
    at = time.time()
    elected = cluster.wait(
        lambda: cluster.partition_states(topic)[0].leader not in (leader, -1), RECOVERY_TIMEOUT_S, "a new leader"
    )
    time.sleep(max(0.0, hold_s - elected))
    restore(host)
    recovered = _recover(cluster, topic)
    return {"broker": leader, "at": at, "new_leader_after_s": round(elected, 2), "recovered_s": recovered}


def leader_host_cut_off(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    return _leader_lost(cluster, topic, hold_s, lambda _b, host: cluster.net.cut_off(host), cluster.net.reconnect)


def leader_partitioned(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    def isolate(leader: int, host: int) -> None:
        others = [*cluster.zookeeper_hosts, *(h for b, h in cluster.broker_hosts.items() if b != leader)]
        cluster.net.partition([host], others)

    return _leader_lost(cluster, topic, hold_s, isolate, lambda _host: cluster.net.heal())


def leader_paused(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    def pause(leader: int, _host: int) -> None:
        cluster.brokers[leader].pause()

    return _leader_lost(cluster, topic, hold_s, pause, lambda host: cluster.broker_on(host).resume())


def zookeeper_node_lost(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    leader = cluster.zookeeper_leader()
    host = next(h for h in cluster.zookeeper_hosts if h != leader)
    cluster.zookeepers[host].kill()
    at = time.time()
    time.sleep(hold_s)
    cluster.zookeepers[host].start(wait=True, timeout=60)
    return {"zookeeper_host": host, "at": at, "recovered_s": _recover(cluster, topic)}


def zookeeper_leader_cut_off(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    host = cluster.zookeeper_leader()
    cluster.net.cut_off(host)
    at = time.time()
    time.sleep(hold_s)
    cluster.net.reconnect(host)
    rejoined = cluster.wait(lambda: cluster.zookeeper_mode(host) == "follower", RECOVERY_TIMEOUT_S, "the old leader")
    return {"zookeeper_host": host, "at": at, "rejoined_s": round(rejoined, 2), "recovered_s": _recover(cluster, topic)}


def packet_loss_between_brokers(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    hosts = list(cluster.broker_hosts.values())
    for host in hosts:
        cluster.net.lose_packets(host, PACKET_LOSS_PERCENT, sources=[h for h in hosts if h != host])
    at = time.time()
    time.sleep(hold_s)
    cluster.net.heal()
    return {"percent": PACKET_LOSS_PERCENT, "at": at, "recovered_s": _recover(cluster, topic)}


def rolling_restart(cluster: HostCluster, topic: str, hold_s: float) -> dict[str, Any]:
    at = time.time()
    took = {}
    for broker_id, broker in cluster.brokers.items():
        start = time.monotonic()
        broker.stop()
        broker.start()
        cluster.wait_for_brokers([broker_id])
        cluster.wait_full_isr(topic, RECOVERY_TIMEOUT_S)
        took[broker_id] = round(time.monotonic() - start, 2)
    return {"at": at, "restart_s": took, "recovered_s": _recover(cluster, topic)}


FAULTS: dict[str, Callable[[HostCluster, str, float], dict[str, Any]]] = {
    "leader-host-cut-off": leader_host_cut_off,
    "leader-partitioned": leader_partitioned,
    "leader-paused": leader_paused,
    "zookeeper-node-lost": zookeeper_node_lost,
    "zookeeper-leader-cut-off": zookeeper_leader_cut_off,
    "packet-loss-between-brokers": packet_loss_between_brokers,
    "rolling-restart": rolling_restart,
}


def inject(cluster: HostCluster, topic: str, name: str, hold_s: float = HOLD_S) -> dict[str, Any]:
    """Fault ``name`` (one of :data:`FAULTS`) on ``topic``'s cluster: injected, held ``hold_s``,
    healed, recovered from; what happened, with ``fault`` its name."""
    fault = FAULTS.get(name)
    if fault is None:
        raise InvalidRequest(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    happened = fault(cluster, topic, hold_s)
    happened["recovered_s"] = round(happened["recovered_s"], 2)
    return {"fault": name, **happened}
