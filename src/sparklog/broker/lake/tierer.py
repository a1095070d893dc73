"""Tiering closed segments into Delta tables, exactly once, and the broker's tiering thread.

For each partition of a lake-enabled topic that this broker **leads**, a pass appends the committed
records (below the high watermark) of the oldest closed segment not yet in the table (and of the
next closed ones, up to ``max_commit_bytes`` of rows, when it is behind), in two commits (a
partition with none closes its active segment first once that is ``segment.ms`` old: the roll its
next append would make, so a quiet partition's last records reach the table too):

1. the Delta commit: the rows plus the application transaction ``sparklog-<topic>-<p>`` set to the
   next offset to tier (``DeltaTableWriter.append``, refused if the table is not where this
   leader last saw it);
2. ZooKeeper's lake offset (``topics/<t>/partitions/<p>/lake``) set to the same offset.

When it starts leading (a start, a restart, a leadership change) the tierer reads ZooKeeper's
lake offset, which never runs ahead of the table; once the partition has closed segments beyond
it, and before its first commit, it takes the table's transaction version as the truth and writes
it to ZooKeeper if that lags (a crash between 1 and 2): a crash at any point neither loses nor
repeats a row, and an idle partition costs one ZooKeeper read per leadership, no table read. A
follower only learns the lake offset from ZooKeeper (now and then, while it has closed segments
beyond what it knows is tiered), for its local retention.

After each commit the leader compacts the partition's small files if a run of them is due
(:mod:`.compaction`): one more Delta commit with the same rows, so a crash around it changes
nothing. Once ``lake.compaction.lag.ms`` has passed since a partition's last commit here, its
runs of old small files are compacted however few they are (once; a partition that led elsewhere
before is looked at after its first commit here). Partition 0's leader also runs Delta's
``VACUUM`` on the topic's table every hour (with the table's own retention, seven days by
default), so the files compactions replaced do not pile up on the lake's storage.

``SPARKLOG_TEST_LAKE_CRASH`` (tests only): ``before-delta``, ``after-delta`` or ``after-zookeeper``
makes the broker kill itself (SIGKILL) at that point of its first tiering commit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import pyarrow as pa

from sparklog.broker.lake.compaction import DEFAULT_TARGET_FILE_BYTES
from sparklog.broker.lake.rows import lake_rows
from sparklog.broker.lake.source import TieringSource
from sparklog.broker.lake.tiering_lag import TieringLag
from sparklog.errors import LakeConflict, LakeUnavailable, OffsetOutOfRange, SparklogError
from sparklog.lake.layout import check_value_columns
from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger(__name__)

CRASH_ENV = "SPARKLOG_TEST_LAKE_CRASH"
CRASH_POINTS = ("before-delta", "after-delta", "after-zookeeper")
DEFAULT_INTERVAL_S = 1.0
FOLLOWER_REFRESH_S = 10.0  # how often a follower may read a partition's lake offset from ZooKeeper
MAX_COMMIT_BYTES = 128 << 20  # a tierer behind takes closed segments together up to this: fewer, larger files
FOREIGN_TABLE_RETRY_S = 30.0  # how often a topic whose table holds an older topic looks at it again
VACUUM_INTERVAL_S = 3600.0  # how often partition 0's leader vacuums its topic's table


class TableWriter(Protocol):
    """A topic's Delta table (:class:`sparklog.broker.lake.delta_table.DeltaTableWriter`)."""

    def tiered_version(self, topic: str, partition: int) -> int | None: ...

    def append(
        self,
        topic: str,
        partition: int,
        rows: pa.Table,
        after: int | None,
        version: int,
        schemas: Sequence[ValueSchema] = (),
        topic_id: int | None = None,
    ) -> None: ...

    def topic_id(self, topic: str) -> int | None: ...

    def evolve(self, topic: str, schemas: Sequence[ValueSchema]) -> None: ...

    def compact(self, topic: str, partition: int, min_files: int, target_bytes: int, lag_ms: int = -1) -> int: ...

    def vacuum(self, topic: str) -> int: ...


class OffsetStore(Protocol):
    """The lake offsets in ZooKeeper (:class:`sparklog.coordination.lake_offsets.LakeOffsets`)."""

    def get(self, topic: str, partition: int) -> int | None: ...

    def set(self, topic: str, partition: int, offset: int) -> None: ...

    def topic_id(self, topic: str) -> int | None: ...


@dataclasses.dataclass
class _Led:
    """A partition tiered by this broker in one leader epoch: where the table stands for it."""

    epoch: int
    replica: object  # TieringSource.replica: a topic created again starts over
    version: int | None  # the table's transaction version (None: nothing of it in the table yet)
    synced: bool  # ``version`` read from the table (else ZooKeeper's, which may lag the table)
    compact_at: float | None = None  # clock() when its old small files are looked at (lake.compaction.lag.ms)

    @property
    def next_offset(self) -> int:
        return self.version or 0


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        log.warning("%s=%s: killing this broker", CRASH_ENV, name)
        os.kill(os.getpid(), signal.SIGKILL)


class Tierer:
    """The tiering logic over any partitions: call :meth:`run_once` with the partitions held here."""

    def __init__(
        self,
        writer: TableWriter,
        offsets: OffsetStore,
        clock: Callable[[], float] = time.monotonic,
        max_commit_bytes: int = MAX_COMMIT_BYTES,
        target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    ) -> None:
        """``max_commit_bytes``: the closed segments waiting are tiered in one commit until their
        rows reach this size (one segment at least, whatever its size). ``target_file_bytes``:
        the size of the table's files that compaction aims at (:mod:`.compaction`)."""
        self.writer = writer
        self.offsets = offsets
        self.clock = clock
        self.max_commit_bytes = max_commit_bytes
        self.target_file_bytes = target_file_bytes
        self._led: dict[tuple[str, int], _Led] = {}
        self._follower_read: dict[tuple[str, int], float] = {}
        self._evolved: dict[str, int] = {}  # typed topics: the latest version their table was brought to
        self._owners: dict[str, int] = {}  # topic -> its id, checked against its table's
        self._foreign: dict[str, float] = {}  # topic -> when to look again at its table holding another topic
        self._vacuum_at: dict[str, float] = {}  # topic -> when partition 0's leader here vacuums its table next
        self.lag = TieringLag(clock)  # how far each led partition's table is behind (metrics)

    def run_once(self, sources: Iterable[TieringSource]) -> int:
        """One pass: at most one commit per led partition; returns how many commits were made."""
        commits = 0
        seen: set[tuple[str, int]] = set()
        for source in sources:
            key = (source.topic, source.partition)
            seen.add(key)
            try:
                epoch = source.leader_epoch()
                if epoch is None:
                    self._led.pop(key, None)
                    self._follow(source)
                else:
                    if self._tier(source, epoch):
                        commits += 1
                    led = self._led.get(key)
                    if led is not None:
                        self.lag.observe(key, source.high_watermark(), led.next_offset)
                    self._maybe_vacuum(source)
            except LakeConflict as exc:
                log.warning("%s; reading the table again", exc)
                self._led.pop(key, None)
                self._evolved.pop(source.topic, None)
            except OffsetOutOfRange:
                log.info("%s-%s: retention deleted records being tiered; trying again", *key)
            except Exception as exc:  # LakeUnavailable, ZooKeeper trouble...: must not stop the others
                log.warning("tiering %s-%s failed: %s", *key, exc, exc_info=not isinstance(exc, SparklogError))
                self._led.pop(key, None)
                self._evolved.pop(source.topic, None)
        for key in set(self._led) - seen:
            del self._led[key]
        self.lag.keep_only(self._led)
        topics = {topic for topic, _ in seen}
        for topic in set(self._owners) - topics:
            del self._owners[topic]
        for topic in set(self._vacuum_at) - topics:
            del self._vacuum_at[topic]
        for key in set(self._follower_read) - seen:
            del self._follower_read[key]
        return commits

    def _start_leading(self, source: TieringSource, epoch: int) -> _Led:
        """A new leadership: ZooKeeper's lake offset, a lower bound of the table's."""
        stored = self.offsets.get(source.topic, source.partition)
        led = self._led[(source.topic, source.partition)] = _Led(epoch, source.replica, stored, synced=False)
        source.set_tiered(led.next_offset)
        return led

    def _check_owner(self, topic: str) -> int:
        """The topic's id, once its table is known to hold this topic's rows (or none yet).
        :class:`LakeUnavailable` if the table holds a deleted topic of the same name: its
        transactions would pass for this topic's, skipping (and letting local retention delete)
        the new topic's first offsets, and the union read would serve the old topic's rows."""
        topic_id = self.offsets.topic_id(topic)
        if topic_id is None:
            raise LakeUnavailable(f"topic {topic!r} is gone")
        if self._owners.get(topic) != topic_id:
            held = self.writer.topic_id(topic)
            if held is not None and held != topic_id:
                self._foreign[topic] = self.clock() + FOREIGN_TABLE_RETRY_S
                raise LakeUnavailable(
                    f"the Delta table of {topic!r} holds the rows of an earlier topic of that name (deleted, "
                    f"then created again): nothing of {topic!r} is tiered until that table is moved away"
                )
            self._owners[topic] = topic_id
            self._foreign.pop(topic, None)
        return topic_id

    def _sync(self, source: TieringSource, led: _Led) -> None:
        """Where the table stands for this partition (the truth), written to ZooKeeper if it lags."""
        self._check_owner(source.topic)
        version = self.writer.tiered_version(source.topic, source.partition)
        stored = led.version
        if version is not None and stored != version:
            log.info(
                "%s-%s: the Delta table is at offset %s, ZooKeeper at %s: ZooKeeper corrected",
                source.topic,
                source.partition,
                version,
                stored,
            )
            self.offsets.set(source.topic, source.partition, version)
        led.version, led.synced = version, True
        source.set_tiered(led.next_offset)

    def _tier(self, source: TieringSource, epoch: int) -> bool:
        """Tier the next closed segments' committed records (one, or more up to ``max_commit_bytes``), if
        any; True if it committed."""
        if self._foreign.get(source.topic, 0.0) > self.clock():
            return False  # its table holds another topic (said when found; looked at again later)
        led = self._led.get((source.topic, source.partition))
        if led is None or led.epoch != epoch or led.replica is not source.replica:
            led = self._start_leading(source, epoch)
        schemas = source.value_schemas()
        if schemas and self._evolved.get(source.topic) != schemas[-1].version:
            self._check_owner(source.topic)  # never rewrite another topic's table
            check_value_columns(source.topic, schemas[-1].arrow_type.names)  # InvalidConfig: not tiered
            self.writer.evolve(source.topic, schemas)  # a new version: the table follows it now
            self._evolved[source.topic] = schemas[-1].version
        end = source.tierable_end()
        if end <= led.next_offset and source.roll_if_aged():
            end = source.tierable_end()  # a quiet partition's last records reach the table after segment.ms
        if end <= led.next_offset:
            self._compact_quiet(source, led)
            return False
        if not led.synced:
            self._sync(source, led)
            if end <= led.next_offset:
                return False
        start = max(led.next_offset, source.log_start())
        if start >= end:
            return False  # retention deleted all of it before it was tiered (warned once there is more)
        upto = min(end, source.segment_end(start))
        if start > led.next_offset:
            log.warning(
                "%s-%s: offsets [%d, %d) were deleted by retention before they were tiered",
                source.topic,
                source.partition,
                led.next_offset,
                start,
            )
        parts = [lake_rows(source.partition, source.read(start, upto), start, upto, schemas)]
        size = parts[0].nbytes
        while upto < end and size < self.max_commit_bytes:  # behind: the next closed segments too
            after = min(end, source.segment_end(upto))
            parts.append(lake_rows(source.partition, source.read(upto, after), upto, after, schemas))
            size += parts[-1].nbytes
            upto = after
        rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        _crash_point("before-delta")
        topic_id = self._owners[source.topic]  # checked by _sync in this leadership
        self.writer.append(source.topic, source.partition, rows, led.version, upto, schemas, topic_id)
        led.version = upto
        _crash_point("after-delta")
        self.offsets.set(source.topic, source.partition, upto)
        _crash_point("after-zookeeper")
        source.set_tiered(upto)
        log.info("%s-%s: tiered offsets [%d, %d) into the lake", source.topic, source.partition, start, upto)
        self._compact(source)
        lag_ms = source.compaction_lag_ms()
        led.compact_at = None if lag_ms < 0 else self.clock() + lag_ms / 1000
        return True

    def _compact_quiet(self, source: TieringSource, led: _Led) -> None:
        """A partition with nothing to tier: once ``lake.compaction.lag.ms`` has passed since its
        last commit here, rewrite its runs of old small files, however few (then not again before
        its next commit)."""
        if led.compact_at is None or led.compact_at > self.clock():
            return
        led.compact_at = None
        lag_ms = source.compaction_lag_ms()  # read again: the topic's config may have changed since
        if lag_ms >= 0:
            self._compact(source, lag_ms)

    def _compact(self, source: TieringSource, lag_ms: int = -1) -> None:
        """Rewrite the partition's runs of small files, one after the other, while one is due (after
        a commit: by count; ``lag_ms`` >= 0: old ones too). It changes no row, so a failure only
        waits for the next commit to try again."""
        min_files = source.compaction_min_files()
        while min_files >= 2:
            try:
                rewritten = self.writer.compact(
                    source.topic, source.partition, min_files, self.target_file_bytes, lag_ms
                )
            except (LakeConflict, LakeUnavailable) as exc:
                log.info("%s-%s: compaction not done (tried again after the next commit): %s", *self._key(source), exc)
                return
            if not rewritten:
                return
            log.info("%s-%s: compacted %d files of the Delta table into one", *self._key(source), rewritten)

    def _maybe_vacuum(self, source: TieringSource) -> None:
        """Partition 0's leader vacuums the topic's table every ``VACUUM_INTERVAL_S`` (the first
        time that long after it started leading it here), once the table is known to hold this
        topic (never another topic's of the same name): the files compaction replaced are deleted
        after the table's retention."""
        if source.partition != 0:
            return
        now = self.clock()
        due = self._vacuum_at.setdefault(source.topic, now + VACUUM_INTERVAL_S)
        if now < due:
            return
        self._vacuum_at[source.topic] = now + VACUUM_INTERVAL_S
        try:
            self._check_owner(source.topic)
            deleted = self.writer.vacuum(source.topic)
        except LakeUnavailable as exc:
            log.warning("%s: %s", source.topic, exc)
            return
        if deleted:
            log.info("%s: vacuumed the Delta table: %d replaced files deleted", source.topic, deleted)

    @staticmethod
    def _key(source: TieringSource) -> tuple[str, int]:
        return source.topic, source.partition

    def _follow(self, source: TieringSource) -> None:
        """A follower learns the lake offset (for local retention) from ZooKeeper: only while it
        holds closed segments beyond what it knows is tiered, and not more often than
        ``FOLLOWER_REFRESH_S``."""
        key = (source.topic, source.partition)
        known = source.tiered()
        if known is not None and source.tierable_end() <= known:
            return
        now = self.clock()
        if now - self._follower_read.get(key, -FOLLOWER_REFRESH_S) < FOLLOWER_REFRESH_S:
            return
        self._follower_read[key] = now
        stored = self.offsets.get(source.topic, source.partition)
        if stored is not None:
            source.set_tiered(stored)


class LakeTiering:
    """The broker's one tiering thread: passes over the partitions ``sources()`` gives (those of
    lake-enabled topics held here), back to back while there is work, every ``interval_s`` when
    there is none."""

    def __init__(
        self, tierer: Tierer, sources: Callable[[], list[TieringSource]], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.tierer = tierer
        self.sources = sources
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lake-tiering", daemon=True)

    def start(self) -> LakeTiering:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                busy = self.tierer.run_once(self.sources()) > 0
            except Exception:
                log.exception("lake tiering pass failed")
                busy = False
            if not busy:
                self._stopped.wait(self.interval_s)
