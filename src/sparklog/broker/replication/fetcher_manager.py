"""Which fetcher follows which partition (Kafka's ``ReplicaFetcherManager``): per leader broker a
fixed set of :class:`LeaderFetcher` threads (``num.replica.fetchers``, default 1), each following
its share of the partitions that broker leads. A broker's thread count grows with the number of
brokers, not of partitions.

A manager made with ``fetching=False`` only records what to follow until :meth:`start_fetching`: a
broker fetches once it is registered (in Kafka, once the controller has seen it). A restarted
broker that fetched before that was put back in the ISRs while the registration of its previous
life still stood, then dropped from them by the controller when that registration expired."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparklog.broker.replication.leader_endpoint import LeaderEndPoint
from sparklog.broker.replication.leader_fetcher import LeaderFetcher

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition

TopicPartition = tuple[str, int]
DEFAULT_FETCHERS_PER_LEADER = 1


class ReplicaFetcherManager:
    """Starts, feeds and stops the fetchers of one follower broker."""

    def __init__(
        self,
        broker_id: int,
        endpoint_for: Callable[[int], LeaderEndPoint],  # a new endpoint (own fetch session) per fetcher
        reread_state: Callable[[str, int], None],
        fetchers_per_leader: int = DEFAULT_FETCHERS_PER_LEADER,
        fetching: bool = True,
    ) -> None:
        self.broker_id = broker_id
        self.endpoint_for = endpoint_for
        self.reread_state = reread_state
        self.fetchers_per_leader = max(1, fetchers_per_leader)
        self._fetchers: dict[tuple[int, int], LeaderFetcher] = {}
        self._assigned: dict[TopicPartition, tuple[int, int]] = {}
        self._partitions: dict[TopicPartition, Partition] = {}  # so that a fetcher started again gets them back
        self._lock = threading.Lock()
        self._stopped = False
        self._fetching = fetching

    def start_fetching(self) -> None:
        """Start the fetchers of everything followed so far (and of what is followed from now on)."""
        with self._lock:
            self._fetching = True
            for slot in set(self._assigned.values()):
                self._fetcher(slot)  # a fetcher starts with the partitions assigned to it

    def follow(self, partition: Partition, leader_id: int) -> None:
        """Follow ``partition`` from ``leader_id`` (moving it from the fetcher of a previous leader)."""
        key = (partition.topic, partition.partition)
        slot = (leader_id, zlib.crc32(f"{key[0]}-{key[1]}".encode()) % self.fetchers_per_leader)
        with self._lock:
            if self._stopped:
                return
            previous = self._assigned.get(key)
            if previous is not None and previous != slot and previous in self._fetchers:
                self._fetchers[previous].remove(key)
            self._assigned[key] = slot
            self._partitions[key] = partition
            if self._fetching:
                self._fetcher(slot).add(partition)

    def _fetcher(self, slot: tuple[int, int]) -> LeaderFetcher:
        """(Under the lock.) The running fetcher of ``slot``, started (again) with the partitions
        assigned to it if it is not running."""
        fetcher = self._fetchers.get(slot)
        if fetcher is None or not fetcher.is_alive():
            leader_id = slot[0]
            fetcher = self._fetchers[slot] = LeaderFetcher(
                leader_id, self.endpoint_for(leader_id), self.reread_state, f"fetcher-{leader_id}-{slot[1]}"
            )
            for key, assigned in self._assigned.items():  # a restarted fetcher takes its partitions back
                if assigned == slot:
                    fetcher.add(self._partitions[key])
            fetcher.start()
        return fetcher

    def unfollow(self, key: TopicPartition) -> None:
        """Stop following a partition (this broker leads it now, or holds no replica any more)."""
        with self._lock:
            slot = self._assigned.pop(key, None)
            self._partitions.pop(key, None)
            if slot is not None and slot in self._fetchers:
                self._fetchers[slot].remove(key)

    def followed(self) -> dict[TopicPartition, int]:
        """Each followed partition and the leader it is followed from."""
        with self._lock:
            return {key: slot[0] for key, slot in self._assigned.items()}

    def threads(self) -> list[LeaderFetcher]:
        with self._lock:
            return list(self._fetchers.values())

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            fetchers = list(self._fetchers.values())
        for fetcher in fetchers:
            fetcher.stop()
