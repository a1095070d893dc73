"""Publishing a staged batch exactly once (the driver side of the sink; design in
:mod:`sparklog.datasource.writer`, the sink's stored state in
:mod:`sparklog.datasource.publish_state`): the publish intent is stored, the staged slices are
copied to their partitions (on the broker, or relayed through this process), and the batch is
recorded as published."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from sparklog.datasource import connections
from sparklog.datasource.fault_injection import first_to_claim
from sparklog.datasource.options import WriteOptions
from sparklog.datasource.publish_state import (
    Targets,
    intent_from_messages,
    producer_id,
    read_state,
    seq_key,
    targets_from_json,
    targets_json,
    versions_from_messages,
    write_state,
)
from sparklog.errors import DuplicateSequence, OffsetOutOfRange, SparklogError
from sparklog.protocol import wire
from sparklog.records import offsets_of

if TYPE_CHECKING:
    from sparklog.client.cluster_client import ClusterClient
    from sparklog.datasource.stager import SparklogCommitMessage

log = logging.getLogger("sparklog.datasource")

PUBLISH_TIMEOUT_S = 120.0
COPY_SLICES = 64  # slices per copy_records action
BROKER_COPY = True  # False: every slice through this process (tests of the relay path)
Wanted = tuple[int, int, tuple[str, int], int]  # a slice: first, last staged offset, target, first sequence


# ----------------------------------------------------------------------------------------- publish
def publish_batch(
    options: WriteOptions,
    sink_id: str,
    batch_id: int,
    messages: Sequence[SparklogCommitMessage],
    forget: bool,
) -> None:
    """Publish one batch's staged slices exactly once (see the module docs)."""
    _crash_point(options, "start")
    client = connections.cluster_client(options.address)
    state, version = read_state(client, sink_id)
    if state is not None and (
        state["batch"] > batch_id or (state["batch"] == batch_id and state["state"] == "published")
    ):
        log.warning("sparklog sink %s: batch %s was published before; skipping its re-run", sink_id, batch_id)
        return
    if state is not None and state["batch"] < batch_id and state["state"] == "publishing":
        # an earlier batch was left half-published and Spark moved on without this sink hearing of
        # it again (cannot happen while tasks report the query id): finish it first
        log.warning("sparklog sink %s: finishing batch %s before batch %s", sink_id, state["batch"], batch_id)
        publish_batch(options, sink_id, state["batch"], [], forget=False)
        state, version = read_state(client, sink_id)
    next_seq: dict[str, dict[str, int]] = (state or {}).get("next_seq", {})
    if state is not None and state["batch"] == batch_id and state["state"] == "publishing":
        staging, targets, versions = targets_from_json(state["intent"])
        log.warning("sparklog sink %s: finishing batch %s, found half-published", sink_id, batch_id)
    else:
        staging, targets = intent_from_messages(messages)
        versions = versions_from_messages(messages)
        if not targets:
            return
        intent_state = {
            "batch": batch_id,
            "state": "publishing",
            "next_seq": next_seq,
            "intent": targets_json(staging, targets, versions),
        }
        version = write_state(client, sink_id, intent_state, version)
        _crash_point(options, "intent")

    assert staging is not None
    publisher = _Publisher(client, options, sink_id, staging, targets, versions, next_seq)
    publisher.run()
    published: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), rows in sorted(publisher.rows.items()):
        first, last = publisher.span.get((topic, partition), (-1, -1))
        published.setdefault(topic, {})[str(partition)] = [first, last, rows]
    next_seq = publisher.next_seq
    if forget:
        client.view.delete_sink_state(sink_id, version)
        return
    write_state(
        client,
        sink_id,
        {"batch": batch_id, "state": "published", "next_seq": next_seq, "published": published},
        version,
    )
    _crash_point(options, "published")


class _Publisher:
    """Copies the staged slices to their partitions: one thread per staging partition (of each
    staging topic the batch used) reads it once,
    in offset order over the span of the slices it holds (skipping rows no slice references, such as
    failed task attempts'), and sends each slice to its target partition on an idempotent produce
    stream with a few slices in flight. Each (sink, target partition, staging partition) has its own
    producer id and sequence numbers (consecutive, in offset order), so staging partitions are
    published in parallel and a re-run numbers every slice the same way. Slices of a typed staging
    topic are sent as the target schema version its values were converted to."""

    def __init__(
        self,
        client: ClusterClient,
        options: WriteOptions,
        sink_id: str,
        staging: str,
        targets: Targets,
        versions: dict[str, int],
        next_seq: dict[str, dict[str, int]],
    ) -> None:
        self.client = client
        self.options = options
        self.sink_id = sink_id
        self.staging = staging
        self.versions = versions
        self.next_seq = {t: dict(seqs) for t, seqs in next_seq.items()}
        # (staging topic, staging partition) -> slices (first, last, target, first sequence)
        self.wanted: dict[tuple[str, int], list[Wanted]] = {}
        self.rows: dict[tuple[str, int], int] = {}
        self.span: dict[tuple[str, int], tuple[int, int]] = {}
        self._lock = threading.Lock()
        for topic, partition, slices in targets:
            self.rows[(topic, partition)] = 0
            for stage_partition, first, last, staged_in in slices:
                key = seq_key(partition, stage_partition, self._typed(staged_in))
                seq = self.next_seq.setdefault(topic, {}).get(key, 0)
                self.wanted.setdefault((staged_in, stage_partition), []).append((first, last, (topic, partition), seq))
                self.next_seq[topic][key] = seq + last - first + 1

    def _typed(self, staging: str) -> str | None:
        """``staging`` if it is a typed staging topic (else None: the plain one)."""
        return staging if staging in self.versions else None

    def run(self) -> None:
        errors: list[BaseException] = []

        def one(source: tuple[str, int]) -> None:
            try:
                self._copy(source[0], source[1], sorted(self.wanted[source]))
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=one, args=(source,), name=f"sparklog-publish-{source[1]}", daemon=True)
            for source in sorted(self.wanted)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _record(self, acks: list[connections.Ack]) -> None:
        with self._lock:
            for target, base, last, count in acks:
                self.rows[target] += count
                if base >= 0:
                    first, end = self.span.get(target, (base, last))
                    self.span[target] = (min(first, base), max(end, last))

    def _copy(self, staging: str, stage_partition: int, wanted: list[Wanted]) -> None:
        """Publish one staging partition's slices: those whose target partition has the same leader
        on the broker (``copy_records``), the others (and whatever a failed copy left) relayed."""
        local: list[Wanted] = []
        relayed: list[Wanted] = []
        for item in wanted:
            (local if BROKER_COPY and self._same_leader((staging, stage_partition), item[2]) else relayed).append(item)
        left = self._copy_on_broker(staging, stage_partition, local)
        if left or relayed:
            self._relay(staging, stage_partition, sorted(relayed + left))

    def _same_leader(self, source: tuple[str, int], target: tuple[str, int]) -> bool:
        try:
            return self.client.leader(*source).broker_id == self.client.leader(*target).broker_id
        except SparklogError:
            return False

    def _copy_on_broker(self, staging: str, stage_partition: int, slices: list[Wanted]) -> list[Wanted]:
        """Have the staging partition's leader copy ``slices`` to their targets, which it also
        leads (:mod:`sparklog.broker.record_copy`), in actions of up to ``COPY_SLICES``; the rows
        never come to this process. Returns the slices not copied when an action failed (a leader
        moved, a broker without the action): the caller relays them, and the idempotent producer
        state recognises any of them the failed action had stored."""
        typed = self._typed(staging)
        version = None if typed is None else self.versions[typed]
        mid_crash = self.options.test_crash_commit is not None and self.options.test_crash_commit[1] == "mid"
        size = 1 if mid_crash else COPY_SLICES
        call = flight.FlightCallOptions(timeout=PUBLISH_TIMEOUT_S)
        i = 0
        while i < len(slices):
            chunk = slices[i : i + size]
            body = {
                "topic": staging,
                "partition": stage_partition,
                "acks": "all",
                "slices": [
                    {
                        "first": first,
                        "last": last,
                        "topic": topic,
                        "partition": partition,
                        "producer_id": producer_id(self.sink_id, topic, partition, stage_partition, typed),
                        "sequence": sequence,
                        "schema_version": version,
                    }
                    for first, last, (topic, partition), sequence in chunk
                ],
            }
            try:
                broker = self.client.leader(staging, stage_partition)
                action = flight.Action(wire.COPY_RECORDS, wire.encode(body))
                answer = wire.decode(next(iter(self.client.flight(broker).do_action(action, call))).body)
                results = answer["results"][: len(chunk)]
                if not results:
                    raise SparklogError("copy_records answered for no slice")
            except Exception as exc:  # noqa: BLE001 - any failure: the relay takes the rest
                error = connections.typed(exc, f"{staging}-{stage_partition}")
                log.info("sparklog sink %s: relaying %s-%s (%s)", self.sink_id, staging, stage_partition, error)
                return slices[i:]
            self._record(
                [
                    (target, int(r["base_offset"]), int(r["last_offset"]), int(r["count"]))
                    for (_f, _l, target, _s), r in zip(chunk, results, strict=False)  # a long copy stops early
                ]
            )
            i += len(results)
            if mid_crash:
                _crash_point(self.options, "mid")  # test only: die with exactly one slice published
        return []

    def _relay(self, staging: str, stage_partition: int, wanted: list[Wanted]) -> None:
        """Publish slices through this process: read from the staging partition, sent on an
        idempotent produce stream per target."""
        streams: dict[tuple[str, int], connections.PutStream] = {}
        typed = self._typed(staging)

        def stream_for(target: tuple[str, int], value_type: pa.DataType) -> connections.PutStream:
            stream = streams.get(target)
            if stream is None:
                topic, partition = target
                stream = streams[target] = connections.PutStream(
                    self.client,
                    topic,
                    partition,
                    acks="all",
                    producer_id=producer_id(self.sink_id, topic, partition, stage_partition, typed),
                    window=8,
                    timeout_s=PUBLISH_TIMEOUT_S,
                    already_stored=_already_stored,
                    value_type=value_type,
                    schema_version=None if typed is None else self.versions[typed],
                )
            return stream

        try:
            for target, data, sequence in self._staged_slices(staging, stage_partition, wanted):
                stream = stream_for(target, data.schema.field("value").type)
                self._record(stream.submit(data, sequence, tag=target))
                if self.options.test_crash_commit is not None and self.options.test_crash_commit[1] == "mid":
                    self._record(stream.flush())  # test only: die with exactly one slice published
                    _crash_point(self.options, "mid")
            for stream in streams.values():
                self._record(stream.flush())
        finally:
            for stream in streams.values():
                stream.close()

    def _staged_slices(
        self, staging: str, stage_partition: int, wanted: list[Wanted]
    ) -> Iterator[tuple[tuple[str, int], pa.RecordBatch, int]]:
        """Stream the staging partition over the wanted slices' span; each slice whole, in order."""
        w = 0
        pieces: list[pa.RecordBatch] = []
        got = 0
        offset = wanted[0][0]
        end = wanted[-1][1]
        while w < len(wanted):
            progressed = False
            try:
                for stored in connections.fetch(self.options.address, staging, stage_partition, offset, 16 << 20):
                    if stored.num_rows == 0:
                        continue
                    offs = offsets_of(stored)
                    while w < len(wanted):
                        first, last, target, sequence = wanted[w]
                        if offs[-1] < first:
                            break
                        lo = int(np.searchsorted(offs, max(first, offset)))
                        hi = int(np.searchsorted(offs, last + 1))
                        if hi > lo:
                            pieces.append(stored.slice(lo, hi - lo))
                            got += hi - lo
                        if got == last - first + 1:
                            data = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
                            yield target, data.drop_columns(["offset"]).replace_schema_metadata(None), sequence
                            pieces, got = [], 0
                            w += 1
                            continue
                        if offs[-1] >= last:  # the slice's rows are not all there
                            raise OffsetOutOfRange(f"staged offsets {first}..{last} are incomplete")
                        break
                    if int(offs[-1]) + 1 > offset:
                        offset = int(offs[-1]) + 1
                        progressed = True
                    if w >= len(wanted) or offset > end:
                        break
            except OffsetOutOfRange as exc:
                raise self._gone(staging, stage_partition, wanted[w], exc) from None
            if not progressed and w < len(wanted):
                raise self._gone(staging, stage_partition, wanted[w], None)

    def _gone(
        self, staging: str, stage_partition: int, slice_: tuple[int, int, tuple[str, int], int], cause: Any
    ) -> SparklogError:
        first, last, (topic, partition), _ = slice_
        path = f"sinks/{self.sink_id} under sparklog's ZooKeeper root"
        return OffsetOutOfRange(
            f"sparklog sink {self.sink_id}: the staged rows for {topic}-{partition} ({staging}-{stage_partition} "
            f"offsets {first}..{last}) are gone ({cause or 'not found'}), probably deleted by the staging topic's "
            f"retention; the batch cannot be finished exactly once. To go on anyway (its rows may then be "
            f"written twice), delete the znode {path}"
        )


def _already_stored(error: SparklogError) -> bool:
    """The leader's answer to a retried batch older than the batches it remembers for the producer."""
    return isinstance(error, DuplicateSequence)


# ----------------------------------------------------------------------------------------- tests
def _crash_point(options: WriteOptions, point: str) -> None:
    """Test-only (option sparklog.test.crashCommit=<marker>:<point>): the commit process dies at
    ``point`` -- like a driver killed there -- once (the marker file says it happened)."""
    crash = options.test_crash_commit
    if crash is not None and crash[1] == point and first_to_claim(crash[0], f"crashed at {point}"):
        os._exit(17)
