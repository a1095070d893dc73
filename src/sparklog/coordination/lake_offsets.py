"""The lake offset of each partition of a lake-enabled topic, in ZooKeeper
(``topics/<t>/partitions/<p>/lake``, decimal text): every record below it is in the topic's Delta
table. The table's own application transaction is the truth (it commits first); this copy may lag
one commit behind after a crash, and the tierer corrects it (:mod:`sparklog.broker.lake.tierer`)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.coordination.zk_layout import ZkLayout


class LakeOffsets:
    """Reads and writes lake offsets (what the tierer needs of ZooKeeper, and nothing else)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout

    def get(self, topic: str, partition: int) -> int | None:
        """The stored lake offset, None if nothing was tiered yet (or the topic is gone)."""
        try:
            data, _ = self.zk.get(self.layout.partition_lake(topic, partition))
        except NoNodeError:
            return None
        return int(data.decode())

    def topic_id(self, topic: str) -> int | None:
        """Which incarnation of ``topic`` this is: the ZooKeeper transaction that created its node
        (a topic deleted and created again under the same name has another); None if it is gone."""
        stat = self.zk.exists(self.layout.topic(topic))
        return None if stat is None else stat.czxid

    def set(self, topic: str, partition: int, offset: int) -> None:
        """Store a partition's lake offset (created on first use, under its existing partition node:
        a topic deleted meanwhile raises NoNodeError rather than being recreated)."""
        path = self.layout.partition_lake(topic, partition)
        data = str(offset).encode()
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data)
            except NodeExistsError:
                self.zk.set(path, data)
