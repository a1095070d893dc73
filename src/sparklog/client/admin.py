"""The Admin client: topics, consumer groups, users, ACLs, client quotas and partition reassignment
(what the CLI's ``topics``, ``groups``, ``users``, ``acls``, ``quotas`` and ``partitions`` use).

Given ``bootstrap_servers`` every call goes through brokers (no ZooKeeper session, no ZooKeeper
digest: Kafka's Admin APIs, authorized by the broker's ACLs); given a ZooKeeper connect string it
reads and writes ZooKeeper itself, as before (:mod:`sparklog.client.cluster_admin`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sparklog.client.broker_view import BrokerView
from sparklog.client.cluster_address import resolve
from sparklog.client.cluster_admin import BrokerAdmin, ClusterAdmin, ZooKeeperAdmin
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient, no_leader_message
from sparklog.coordination.cluster import (
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    ClusterMetadata,
    TopicMetadata,
)
from sparklog.errors import GroupNotEmpty, InvalidRequest, UnknownGroup, UnknownTopic
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.acls import AclBinding, AclFilter
from sparklog.security.credential_store import check_iterations
from sparklog.security.credentials import DEFAULT_ITERATIONS, new_salt, salted_password
from sparklog.security.quotas import Quota


class Admin:
    """Creates, describes, alters and deletes topics; describes and resets consumer groups;
    administers users, ACLs, client quotas and moves partitions."""

    def __init__(
        self,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        *,
        bootstrap_servers: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        address = resolve(zookeeper, bootstrap_servers, config)
        self._client = ClusterClient.connect(address, retries=3, retry_timeout_s=5.0)
        self.view = self._client.view
        self._admin: ClusterAdmin | None = None

    @property
    def cluster(self) -> ClusterMetadata:
        """ZooKeeper itself (InvalidRequest for an admin given bootstrap servers)."""
        return self._client.cluster

    @property
    def administration(self) -> ClusterAdmin:
        """Users, ACLs, quotas and reassignments: through brokers (given bootstrap servers) or
        ZooKeeper."""
        if self._admin is None:
            view = self.view
            self._admin = BrokerAdmin(view) if isinstance(view, BrokerView) else ZooKeeperAdmin(self.cluster)
        return self._admin

    def topic(self, name: str) -> TopicMetadata:
        """A topic's partitions, replicas and configs (UnknownTopic if there is none)."""
        return self.view.topic(name, refresh=True)

    def create_topic(
        self,
        name: str,
        partitions: int = DEFAULT_NUM_PARTITIONS,
        replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        configs: Mapping[str, Any] | None = None,
        value_schema: Any = None,
    ) -> TopicMetadata:
        """Create a topic; with ``value_schema`` (Avro record schema, JSON text or dict) a typed one.
        Refused: names breaking the naming rule or starting ``__sparklog`` (reserved for sparklog's
        internal topics; also for :meth:`alter_topic` and :meth:`delete_topic`) with
        :class:`~sparklog.errors.InvalidTopic`, and more than ``num.partitions.max`` (10,000)
        partitions with :class:`~sparklog.errors.InvalidPartitions`."""
        return self.view.create_topic(name, partitions, replication_factor, configs, value_schema)

    def register_schema(self, topic: str, schema: Any) -> ValueSchema:
        """Add a value schema version to a topic (checked under its ``schema.compatibility``)."""
        return self.view.register_schema(topic, schema)

    def schemas(self, topic: str) -> list[ValueSchema]:
        """Every value schema version of a topic, oldest first ([] for a plain topic)."""
        return self.view.schemas(topic)

    def list_topics(self) -> list[str]:
        return self.view.topics()

    def delete_topic(self, name: str) -> None:
        self.view.delete_topic(name)

    def alter_topic(
        self, name: str, configs: Mapping[str, Any] | None = None, *, delete: Sequence[str] = ()
    ) -> TopicMetadata:
        """Set ``configs`` of a topic and remove its overrides named in ``delete`` (the topic then
        has the default; ``partitioner`` cannot be removed). Through brokers: Alter on the topic."""
        return self.view.alter_topic_configs(name, configs or {}, delete=list(delete))

    def create_partitions(self, name: str, total: int) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka's ``createPartitions``): the new ones get its
        replication factor on the live brokers. As many as now or fewer is
        :class:`~sparklog.errors.InvalidPartitions` (partitions are never removed). Keyed records
        are placed by the new count from then on, so a key's later records may land in another
        partition than its earlier ones. Through brokers: Alter on the topic."""
        return self.view.create_partitions(name, total)

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Per partition: leader, replicas, in-sync replicas, log start and end offsets, and for a
        lake-enabled topic ``lake_offset`` (everything below it is in the Delta table; None until its
        leader's tierer has read the table), ``lake_lag`` (log end - lake offset) and
        ``local_log_start_offset`` (the log start is then the table's first offset once the lake
        reaches the local log: the union read); and the topic's
        configs and ``partitioner`` (the one its keys are placed with, also for a topic whose configs
        name none: ``fnv1a``, it was created before murmur2)."""
        meta = self.view.topic(name, refresh=True)
        states = self.view.partition_states(name)
        partitions = []
        for p, replicas in enumerate(meta.replicas):
            state = states.get(p)
            if state is None:
                raise UnknownTopic(f"unknown partition {name}-{p}")
            entry: dict[str, Any] = {
                "partition": p,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "replicas": replicas,
                "isr": state.isr,
            }
            if state.leader < 0:  # nothing to ask (and no use retrying): say why once
                entry.update(log_start_offset=None, log_end_offset=None, error=no_leader_message(name, p, replicas))
                partitions.append(entry)
                continue
            try:
                offsets = self._client.list_offsets(name, p)
                entry.update(log_start_offset=offsets["log_start_offset"], log_end_offset=offsets["log_end_offset"])
                if "lake_offset" in offsets:
                    entry.update(local_log_start_offset=offsets.get("local_log_start_offset"))
                    lake = offsets["lake_offset"]
                    entry.update(lake_offset=lake, lake_lag=None if lake is None else offsets["log_end_offset"] - lake)
            except Exception as exc:  # a partition whose leader is down still gets described
                entry.update(log_start_offset=None, log_end_offset=None, error=str(exc).splitlines()[0])
            partitions.append(entry)
        return {
            "topic": name,
            "partitions": partitions,
            "configs": meta.configs,
            "partitioner": meta.config.partitioner,
        }

    def reassign_partitions(
        self, topic: str, targets: Mapping[int, list[int]], wait: bool = False, timeout_s: float = 300.0
    ) -> dict[int, list[int]]:
        """Move partitions onto new replicas while producers and consumers keep running; with
        ``wait``, return once the controller has finished (the new replicas are in sync and the old
        ones gone). Returns the topic's replica assignment. Through brokers this needs Alter on the
        cluster (Kafka's AlterPartitionReassignments; waiting, Describe on it too)."""
        admin = self.administration
        admin.request_reassignment(topic, targets)
        deadline = time.monotonic() + timeout_s
        while wait and admin.pending_reassignment(topic) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the reassignment of {topic!r} did not finish in {timeout_s:.0f} s")
            time.sleep(0.2)
        return dict(enumerate(self.view.topic(topic, refresh=True).replicas))

    # ----------------------------------------------------------------- users (SCRAM credentials)
    def upsert_scram_credential(self, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> bool:
        """Set ``user``'s SCRAM-SHA-256 password (adds the user if new; True then). The salted
        password is computed here, with a new random salt, and only it is sent (Kafka's
        AlterUserScramCredentials): the password never leaves this process. Sessions made with
        the user's previous credential end. Through brokers: Alter on the cluster."""
        check_iterations(iterations)
        salt = new_salt()
        return self.administration.upsert_scram_credential(
            user, salt, salted_password(password, salt, iterations), iterations
        )

    def delete_scram_credential(self, user: str) -> bool:
        """Remove ``user`` (its sessions end at once); whether there was one. Through brokers:
        Alter on the cluster."""
        return self.administration.delete_scram_credential(user)

    def describe_scram_credentials(self, users: list[str] | None = None) -> dict[str, int]:
        """Each user's SCRAM-SHA-256 iteration count, by name (every user, or those of ``users``
        that exist; never a salt or key). Through brokers: Describe on the cluster."""
        return self.administration.scram_iterations(users)

    # ----------------------------------------------------------------- ACLs
    def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (every ACL without one), sorted. Through brokers:
        Describe on the cluster."""
        return self.administration.describe_acls(acl_filter or AclFilter())

    def create_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        """Store ``bindings``; returns those that were not there yet. Through brokers: Alter on
        the cluster."""
        return self.administration.create_acls(list(dict.fromkeys(bindings)))

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        """Remove every ACL a filter matches (each filter names its resource pattern:
        :meth:`AclFilter.of` one binding, :meth:`AclFilter.of_pattern` all of a pattern's);
        returns those removed. Through brokers: Alter on the cluster."""
        return self.administration.delete_acls(list(filters))

    # ----------------------------------------------------------------- client quotas
    def describe_client_quotas(self) -> dict[str, Quota]:
        """Every user's quota by name (``<default>``: every user without its own). Through brokers:
        DescribeConfigs on the cluster."""
        return self.administration.client_quotas()

    def set_client_quota(self, user: str, quota: Quota) -> None:
        """Replace ``user``'s (or ``<default>``'s) quota (an empty one removes it). Through
        brokers: AlterConfigs on the cluster."""
        self.administration.set_client_quota(user, quota)

    def remove_client_quota(self, user: str) -> bool:
        """Remove ``user``'s (or ``<default>``'s) quota; whether there was one."""
        return self.administration.remove_client_quota(user)

    def list_groups(self) -> list[str]:
        return self.view.groups()

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        """The group's live members (member ids) by the topics they read: ZooKeeper-native
        consumers and the members brokers host for bootstrap consumers alike. A consumer reading
        assigned partitions (``partitions=``) is no member, as in Kafka."""
        return self.view.group_members(group)

    def describe_group(self, group: str) -> list[dict[str, Any]]:
        """Per partition the group committed: committed offset, log end offset, lag."""
        committed = self.view.committed_offsets(group)
        if not committed:
            raise UnknownGroup(f"consumer group {group!r} has no committed offsets")
        rows = []
        for (topic, p), offset in sorted(committed.items()):
            end = self._client.list_offsets(topic, p)["high_watermark"]
            rows.append(
                {
                    "topic": topic,
                    "partition": p,
                    "committed_offset": offset,
                    "log_end_offset": end,
                    "lag": max(0, end - offset),
                }
            )
        return rows

    def reset_group(
        self,
        group: str,
        topic: str | Sequence[str] | None = None,
        *,
        all_topics: bool = False,
        to_earliest: bool = False,
        to_latest: bool = False,
        to_offset: int | None = None,
        to_time: int | None = None,
        dry_run: bool = False,
    ) -> dict[tuple[str, int], int]:
        """Move a group's committed offsets of ``topic`` (a name or several), or with
        ``all_topics`` of every topic it committed offsets for (one that was deleted since is left
        out), to exactly one target; returns the new offsets, clamped to each partition's log.
        ``dry_run``: compute them and commit nothing (Kafka's ``--reset-offsets`` preview).
        Refused (:class:`GroupNotEmpty`) while members of the group read one of the topics, preview
        or not: each would overwrite the reset with its next commit (Kafka resets only inactive
        groups)."""
        chosen = [to_earliest, to_latest, to_offset is not None, to_time is not None]
        if sum(chosen) != 1:
            raise InvalidRequest("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-time")
        if (topic is not None) == all_topics:
            raise InvalidRequest("choose the topics to reset: --topic TOPIC or --all-topics")
        if all_topics:
            committed = sorted({t for t, _ in self.view.committed_offsets(group)})
            if not committed:
                raise UnknownGroup(f"consumer group {group!r} has no committed offsets: --all-topics resets none")
            existing = set(self.view.topics())
            topics = [t for t in committed if t in existing]
        else:
            topics = [topic] if isinstance(topic, str) else list(dict.fromkeys(topic or ()))
        members = self.view.group_members(group)
        for name in topics:
            active = sorted({m for read, ids in members.items() if name in read for m in ids})
            if active:
                raise GroupNotEmpty(
                    f"consumer group {group!r} has {len(active)} live member(s) reading {name!r} "
                    f"({', '.join(active[:5])}{', ...' if len(active) > 5 else ''}): stop them before resetting "
                    "its offsets, or their next commits overwrite the reset"
                )
        new: dict[tuple[str, int], int] = {}
        for name in topics:
            for p in range(self.view.topic(name, refresh=True).partitions):
                offsets = self._client.list_offsets(name, p, timestamp=to_time)
                start, end = offsets["log_start_offset"], offsets["high_watermark"]
                if to_earliest:
                    target = start
                elif to_latest:
                    target = end
                elif to_offset is not None:
                    target = min(max(to_offset, start), end)
                else:
                    found = offsets.get("offset_for_time")
                    target = end if found is None else found
                new[(name, p)] = target
        if not dry_run:
            self.view.commit_offsets(group, new)
        return new

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
