"""Where things live in ZooKeeper (PRODUCT.md section 6), under a root that defaults to ``/sparklog``.

```
<root>/brokers/ids/<id>                                  ephemeral: {"host", "port"}
<root>/controller                                        ephemeral: {"broker_id"}
<root>/topics/<topic>                                    {"partitions", "replicas": [[ids]...], "configs"}
<root>/topics/<topic>/partitions/<p>/state               {"leader", "leader_epoch", "isr"}
<root>/consumers/<group>/offsets/<topic>/<partition>     committed offset, decimal text
<root>/consumers/<group>/members/<member>                ephemeral: a live member of the group
<root>/schemas/<topic>/<version>                         Avro schema JSON of a typed topic
<root>/admin/reassign/<topic>                            {"partitions": {"<p>": [ids]}}: a pending move
```
"""

from __future__ import annotations

import re

DEFAULT_ROOT = "/sparklog"
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
GROUP_NAME = TOPIC_NAME


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
    def topics(self) -> str:
        return f"{self.root}/topics"

    def topic(self, topic: str) -> str:
        return f"{self.topics}/{topic}"

    def partition_state(self, topic: str, partition: int) -> str:
        return f"{self.topic(topic)}/partitions/{partition}/state"

    @property
    def consumers(self) -> str:
        return f"{self.root}/consumers"

    def group_offsets(self, group: str) -> str:
        return f"{self.consumers}/{group}/offsets"

    def committed_offset(self, group: str, topic: str, partition: int) -> str:
        return f"{self.group_offsets(group)}/{topic}/{partition}"

    def group_members(self, group: str) -> str:
        return f"{self.consumers}/{group}/members"

    @property
    def reassignments(self) -> str:
        return f"{self.root}/admin/reassign"

    def reassignment(self, topic: str) -> str:
        return f"{self.reassignments}/{topic}"

    @property
    def schema_root(self) -> str:
        return f"{self.root}/schemas"

    def schemas(self, topic: str) -> str:
        return f"{self.schema_root}/{topic}"
