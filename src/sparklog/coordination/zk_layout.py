"""Where things live in ZooKeeper (PRODUCT.md section 6), under a root that defaults to ``/sparklog``.

```
<root>/brokers/ids/<id>                                  ephemeral: {"host", "port", "endpoints",
                                                         "kafka_endpoints"?, "principal"?, "metrics_url"?}
<root>/controller                                        ephemeral: {"broker_id"}
<root>/cluster/id                                        {"version": "1", "id": <22 characters>}
<root>/topics/<topic>                                    {"replicas": [[ids]...], "configs"[, "status"]}
<root>/topics/<topic>/partitions/<p>/state               {"leader", "leader_epoch", "isr"}
<root>/topics/<topic>/partitions/<p>/lake                lake.enabled: offset tiered into the Delta
                                                         table (all below it), decimal text
<root>/admin/pending_topics/<topic>                      a topic being created or deleted (in chunks)
<root>/admin/pending_topics/<topic>/owner                ephemeral: the client doing it
<root>/consumers/<group>/offsets/<topic>/<partition>     committed offset, decimal text
<root>/consumers/<group>/members/<member>                ephemeral: a live member of the group
<root>/schemas/<topic>/<version>                         Avro schema JSON of a typed topic
<root>/admin/reassign/<topic>                            {"partitions": {"<p>": [ids]}}: a pending move
<root>/security/users/<user>                             SCRAM credentials: {"mechanism", "salt",
                                                         "stored_key", "server_key", "iterations"}
<root>/security/scram-secret                             random bytes an unknown user's SCRAM salt is
                                                         derived from (the same on every broker)
<root>/security/acls/<pattern type>/<resource type>/<name>   {"acls": [{"principal", "host",
                                                         "operation", "permission"}]}
<root>/security/quotas/users/<user|<default>>            client quotas: {"producer_byte_rate",
                                                         "consumer_byte_rate", "request_rate"}
```

A topic znode with a ``status`` (``creating`` or ``deleting``) is not a topic yet, or no longer:
readers treat it as absent (see :mod:`sparklog.coordination.cluster`). Every path with a topic or
group name checks the name first (:mod:`sparklog.names`), so no name can walk ZooKeeper's tree.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparklog.errors import InvalidRequest
from sparklog.names import check_group_id, check_topic_name, check_user_name

DEFAULT_ROOT = "/sparklog"
DEFAULT_QUOTA_USER = "<default>"  # the quota znode of every user without its own (Kafka's name)


def split_connect_string(connect: str) -> tuple[str, str]:
    """``host:port[,host:port][/chroot]`` -> (hosts, root path for sparklog's nodes).

    A chroot in the connect string becomes sparklog's root (so ``127.0.0.1:2181/x`` keeps
    everything under ``/x``); without one the root is ``/sparklog``.
    """
    if "/" in connect:
        hosts, chroot = connect.split("/", 1)
        root = "/" + chroot.strip("/")
        return hosts, root if root != "/" else DEFAULT_ROOT
    return connect, DEFAULT_ROOT


class ZkLayout:
    """Paths of every sparklog znode under one root."""

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.root = root.rstrip("/") or DEFAULT_ROOT

    @property
    def broker_ids(self) -> str:
        return f"{self.root}/brokers/ids"

    def broker(self, broker_id: int) -> str:
        return f"{self.broker_ids}/{broker_id}"

    @property
    def controller(self) -> str:
        return f"{self.root}/controller"

    @property
    def cluster_id(self) -> str:
        """The cluster's id (Kafka's ``cluster/id``), made by the first broker that asks."""
        return f"{self.root}/cluster/id"

    @property
    def isr_change(self) -> str:
        """Touched by a leader that took a replica back into an ISR: wakes the controller (Kafka's
        ``isr_change_notification``), which may then give a preferred replica its leadership back."""
        return f"{self.root}/admin/isr_change"

    @property
    def topics(self) -> str:
        return f"{self.root}/topics"

    def topic(self, topic: str) -> str:
        return f"{self.topics}/{check_topic_name(topic)}"

    def topic_partitions(self, topic: str) -> str:
        return f"{self.topic(topic)}/partitions"

    @property
    def pending_topics(self) -> str:
        return f"{self.root}/admin/pending_topics"

    def pending_topic(self, topic: str) -> str:
        return f"{self.pending_topics}/{check_topic_name(topic)}"

    def pending_topic_owner(self, topic: str) -> str:
        return f"{self.pending_topic(topic)}/owner"

    def partition_state(self, topic: str, partition: int) -> str:
        return f"{self.topic(topic)}/partitions/{partition}/state"

    def partition_lake(self, topic: str, partition: int) -> str:
        """The offset up to which a lake-enabled partition is in its Delta table (see
        :mod:`sparklog.coordination.lake_offsets`)."""
        return f"{self.topic(topic)}/partitions/{partition}/lake"

    @property
    def consumers(self) -> str:
        return f"{self.root}/consumers"

    def group(self, group: str) -> str:
        return f"{self.consumers}/{check_group_id(group)}"

    def group_partitioners(self, group: str) -> str:
        """The parent of the group's :meth:`group_partitioner` paths, one per set of topics read."""
        return f"{self.group(group)}/partitioner"

    def group_partitioner(self, group: str, topics: Iterable[str]) -> str:
        """Where the members of a group reading ``topics`` share their partitions (kazoo's
        ``SetPartitioner``: ``party`` and ``locks`` below it), whether they are ZooKeeper-native
        consumers or members a broker hosts for its clients."""
        return f"{self.group_partitioners(group)}/{'+'.join(sorted(topics))}"

    @staticmethod
    def partitioner_topics(name: str) -> tuple[str, ...]:
        """The topics of a :meth:`group_partitioner` path's last part."""
        return tuple(name.split("+"))

    def group_offsets(self, group: str) -> str:
        return f"{self.group(group)}/offsets"

    def committed_offset(self, group: str, topic: str, partition: int) -> str:
        return f"{self.group_offsets(group)}/{check_topic_name(topic)}/{partition}"

    def group_members(self, group: str) -> str:
        return f"{self.group(group)}/members"

    @property
    def reassignments(self) -> str:
        return f"{self.root}/admin/reassign"

    def reassignment(self, topic: str) -> str:
        return f"{self.reassignments}/{check_topic_name(topic)}"

    @property
    def schema_root(self) -> str:
        return f"{self.root}/schemas"

    def schemas(self, topic: str) -> str:
        return f"{self.schema_root}/{check_topic_name(topic)}"

    @property
    def users(self) -> str:
        return f"{self.root}/security/users"

    def user(self, name: str) -> str:
        return f"{self.users}/{check_user_name(name)}"

    @property
    def scram_secret(self) -> str:
        return f"{self.root}/security/scram-secret"

    @property
    def user_quotas(self) -> str:
        """The parent of the users' client quota znodes (:mod:`sparklog.security.quotas`)."""
        return f"{self.root}/security/quotas/users"

    def user_quota(self, name: str) -> str:
        """The quota znode of one user, or of every user without its own (``<default>``)."""
        return f"{self.user_quotas}/{name if name == DEFAULT_QUOTA_USER else check_user_name(name)}"

    @property
    def acls(self) -> str:
        return f"{self.root}/security/acls"

    def acl_resources(self, pattern_type: str, resource_type: str) -> str:
        """The parent of the ACL znodes of one pattern type (``literal``) and resource type (``Topic``)."""
        return f"{self.acls}/{_component(pattern_type)}/{_component(resource_type)}"

    def acl_resource(self, pattern_type: str, resource_type: str, name: str) -> str:
        """The znode holding the ACLs of one resource pattern (its name checked by
        :class:`sparklog.security.acls.ResourcePattern`; here only that it is one path component)."""
        return f"{self.acl_resources(pattern_type, resource_type)}/{_component(name)}"


def _component(name: str) -> str:
    """``name`` if it is one path component (not empty, no ``/``, not ``.`` or ``..``)."""
    if not name or "/" in name or name in (".", ".."):
        raise InvalidRequest(f"{name!r:.80} cannot be a ZooKeeper path component")
    return name
