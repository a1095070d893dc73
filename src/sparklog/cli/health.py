"""``sparklog cluster health``: whether the cluster is whole, for scripts and probes.

Exits 0 when every broker that holds replicas is live, a controller is active, every partition
has a live leader and a full ISR; else 1, printing each problem on its own line. It reads the
same metadata a client gets (through ``--bootstrap-server`` brokers, or ``--zookeeper``), so it
needs no broker metrics endpoint."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Protocol

from sparklog.cli.common import add_cluster_options, cluster_client
from sparklog.coordination.cluster import BrokerInfo, PartitionState, TopicMetadata
from sparklog.errors import UnknownTopic


class HealthView(Protocol):
    """The metadata a health check reads (:class:`~sparklog.client.cluster_view.ClusterView`)."""

    def brokers(self) -> dict[int, BrokerInfo]: ...

    def topics(self) -> list[str]: ...

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata: ...

    def partition_states(self, topic: str) -> dict[int, PartitionState]: ...

    def controller_id(self) -> int: ...


def add_cluster(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser("cluster", help="the cluster as a whole: its health")
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    p = csub.add_parser(
        "health",
        help="exit 0 if the cluster is healthy, else 1 and say why",
        description="Checks that every broker holding replicas is live, a controller is active, and every "
        "partition has a live leader (else it is offline) and all its replicas in sync (else it is "
        "under-replicated). Exits 0 and prints 'healthy' if so; else exits 1, printing one line per problem.",
    )
    add_cluster_options(p)
    p.set_defaults(handler=run_health)


def cluster_problems(view: HealthView) -> tuple[list[str], str]:
    """Every problem found (empty: healthy), and a one-line summary of what was checked."""
    live = view.brokers()
    problems: list[str] = []
    controller = view.controller_id()
    if controller < 0:
        problems.append("no controller: no broker holds the controller role")
    elif controller not in live:
        problems.append(f"no controller: broker {controller} holds the role but is not live")
    holders: dict[int, set[str]] = {}
    offline: list[str] = []
    under: list[str] = []
    partitions = 0
    topics = view.topics()
    for name in topics:
        try:
            meta = view.topic(name, refresh=True)
            states = view.partition_states(name)
        except UnknownTopic:  # deleted meanwhile
            continue
        for p, replicas in enumerate(meta.replicas):
            partitions += 1
            for broker in replicas:
                holders.setdefault(broker, set()).add(name)
            _check_partition(f"{name}-{p}", replicas, states.get(p), live, offline, under)
    for broker in sorted(set(holders) - set(live)):
        held = sorted(holders[broker])
        problems.append(
            f"broker {broker} down (holds replicas of {', '.join(held[:5])}{'...' if len(held) > 5 else ''})"
        )
    problems += offline + under
    summary = f"{len(live)} live broker(s), controller {controller}, {len(topics)} topic(s), {partitions} partition(s)"
    return problems, summary


def _check_partition(
    name: str,
    replicas: list[int],
    state: PartitionState | None,
    live: Mapping[int, BrokerInfo],
    offline: list[str],
    under: list[str],
) -> None:
    if state is None:
        offline.append(f"partition {name} offline: it has no state yet (being created?)")
    elif state.leader < 0:
        offline.append(f"partition {name} offline: no leader (replicas {replicas}, last ISR {state.isr})")
    elif state.leader not in live:
        offline.append(f"partition {name} offline: its leader, broker {state.leader}, is not live")
    elif len(set(state.isr) & set(replicas)) < len(replicas):
        under.append(f"partition {name} under-replicated: ISR {state.isr} of replicas {replicas}")


def run_health(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    client = cluster_client(args)
    try:
        problems, summary = cluster_problems(client.view)
    finally:
        client.close()
    if not problems:
        out(f"healthy: {summary}")
        return 0
    for problem in problems:
        out(problem)
    out(f"unhealthy: {len(problems)} problem(s); {summary}")
    return 1
