"""One case against the cluster: send it, classify what came back, record acknowledgements.

The verdict of a case combines what the broker answered with what it had to answer:

- an acknowledged batch that the broker must refuse is ``accepted-invalid``; one that had to be
  accepted but was refused with a non-retriable error is ``refused-valid`` (only for requests
  that were not mutated: a mutated descriptor may be valid or not);
- a produce's frames (:mod:`sparklog.fuzz.frames`): a mutated frame, or one read with another
  schema than its batch's, is read as the broker reads it; one the broker cannot read, or that
  declares more than the topic allows, or decodes to a batch failing Arrow's full validation, must
  be refused, and one it decodes must read back as what it decodes to. A stream of Flight record
  batches (the wire before frames) must be refused with INVALID_REQUEST (``wrong-error`` else);
- an error without a ``sparklog:<CODE>:`` prefix is ``untyped-error`` (and ``leaked-internals``
  when it carries a traceback or source paths), an UNKNOWN_SERVER_ERROR (an exception the broker's
  code did not expect) ``unexpected-error``; a call not abandoned on purpose that got no answer
  in time is ``no-answer``; put metadata that does not match the batch is ``bad-ack``;
- acknowledged records go to the :class:`~sparklog.fuzz.ledger.Ledger` (an overlap with earlier
  ones is ``offset-reuse``);
- in the low-privilege mode (:mod:`sparklog.fuzz.privileges`) every byte the user got back is
  scanned for the secret records' marker (``leak``), and an answer its ACLs do not allow is
  ``unauthorized``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.config import TopicConfig
from sparklog.fuzz import flight_ops, requests
from sparklog.fuzz import frames as fuzz_frames
from sparklog.fuzz.batches import MAX_BATCH_ROWS, BuiltBatch, build_batch
from sparklog.fuzz.cases import ABANDON, ACTION, FETCH, GARBAGE, MULTI_FETCH, PRODUCE, REPLICA_FETCH, Case
from sparklog.fuzz.cluster import FuzzCluster
from sparklog.fuzz.ledger import Entry, Fingerprints, Ledger, fingerprint
from sparklog.fuzz.privileges import FETCH_MANY, WRITE
from sparklog.fuzz.privileges import REPLICA_FETCH as REPLICA_FETCH_TYPE
from sparklog.fuzz.report import (
    ACCEPTED_INVALID,
    BAD_ACK,
    LEAK,
    LEAKED_INTERNALS,
    NO_ANSWER,
    OFFSET_REUSE,
    REFUSED_VALID,
    SERVED_INVALID,
    UNAUTHORIZED,
    UNEXPECTED_ERROR,
    UNTYPED_ERROR,
    WRONG_ERROR,
    Anomaly,
)
from sparklog.protocol.record_frames import SCHEMA_FIELD, schema_text
from sparklog.records import to_record_batch

# errors a well-formed request may get without the broker being wrong
RETRIABLE = {
    "NOT_LEADER",
    "NOT_ENOUGH_REPLICAS",
    "LOG_CLOSED",
    "BROKER_NOT_AVAILABLE",
    "REQUEST_TIMED_OUT",
    "TOO_MANY_REQUESTS",
    "COORDINATOR_NOT_AVAILABLE",
}
# what a produce stream of Flight record batches (the produce wire before frames) may be refused with
OLD_WIRE_ERRORS = {"INVALID_REQUEST", "AUTHORIZATION_FAILED", *RETRIABLE}
DEFAULT_MAX_MESSAGE_BYTES = TopicConfig().max_message_bytes
# timestamp modes whose stored value the case fixes (the others are the broker's clock)
FIXED_TIMESTAMPS = {"now", "past", "int64", "seconds", "nanos", "negative", "year9999", "min", "max"}
COPY_TIMEOUT_S = 60.0


@dataclasses.dataclass
class Outcome:
    """What one case did: a short label (``ack``, ``refused:<CODE>``, ...) and its anomalies."""

    label: str
    anomalies: list[Anomaly] = dataclasses.field(default_factory=list)
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Stream:
    """An idempotent producer's position on one partition, and its last stream (to send again)."""

    next_sequence: int = 0
    last_case: dict[str, Any] | None = None
    last_acks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    # a batch of this stream may be stored without the fuzzer knowing (acks=0, abandoned, no
    # answer): a later batch with its sequence is then answered with that one's offsets and records
    uncertain: bool = False


class Applier:
    def __init__(self, cluster: FuzzCluster, ledger: Ledger) -> None:
        self.cluster = cluster
        self.ledger = ledger
        self.streams: dict[tuple[int, str, int], _Stream] = {}

    def reset(self) -> None:
        self.streams.clear()

    def apply(self, case: Case) -> Outcome:
        handler = {
            PRODUCE: self._produce,
            FETCH: self._fetch,
            ACTION: self._action,
            ABANDON: self._abandon,
            GARBAGE: self._garbage,
            REPLICA_FETCH: self._replica_fetch,
            MULTI_FETCH: self._multi_fetch,
        }[case.kind]
        outcome = handler(case)
        for anomaly in outcome.anomalies:
            anomaly.case = case.to_json()
        return outcome

    # ------------------------------------------------------------------ the low-privilege mode
    def _leaks(self, hits: list[str], what: str) -> list[Anomaly]:
        if not hits:
            return []
        principal = self.cluster.access.principal if self.cluster.access else "the client"
        shown = "; ".join(hits[:3]) + (f"; and {len(hits) - 3} more" if len(hits) > 3 else "")
        return [Anomaly(LEAK, f"{principal} got secret records in {what}: {shown}")]

    def _unauthorized(self, violation: str | None) -> list[Anomaly]:
        if violation is None or self.cluster.access is None:
            return []
        return [Anomaly(UNAUTHORIZED, f"{self.cluster.access.principal}: {violation}")]

    def _guard_get(self, what: str, body: bytes, got: flight_ops.GetResult, read: str) -> list[Anomaly]:
        """A fetch's answer to the user: no secret record in it, nothing its ACLs do not allow."""
        access, secrets = self.cluster.access, self.cluster.secrets
        if access is None or secrets is None:
            return []
        return self._leaks(secrets.scan_get(got, what), what) + self._unauthorized(
            access.fetch_violation(body, got, read)
        )

    def _guard_action(self, name: str, body: bytes, result: flight_ops.ActionResult) -> list[Anomaly]:
        access, secrets = self.cluster.access, self.cluster.secrets
        if access is None or secrets is None:
            return []
        what = f"the answer to action {name!r:.40}"
        chunks = [*result.bodies, result.error.message.encode(errors="replace") if result.error else None]
        return self._leaks(secrets.scan_bytes(chunks, what), what) + self._unauthorized(
            access.action_violation(name, body, result)
        )

    def _guard_put(self, target: tuple[str, int] | None, result: flight_ops.PutResult, acked: int) -> list[Anomaly]:
        access, secrets = self.cluster.access, self.cluster.secrets
        if access is None or secrets is None:
            return []
        chunks = [*result.acks, result.error.message.encode(errors="replace") if result.error else None]
        found = self._leaks(secrets.scan_bytes(chunks, "a produce's answers"), "a produce's answers")
        if target is not None:
            found += self._unauthorized(access.produce_violation(target[0], acked))
        return found

    def _refused_allowed(self, what: str, error: flight_ops.CallError | None, permitted: bool) -> list[Anomaly]:
        """A well-formed request the user's ACLs allow, refused as unauthorized (low-privilege mode)."""
        access = self.cluster.access
        if access is None or error is None or error.code != "AUTHORIZATION_FAILED" or not permitted:
            return []
        detail = f"{access.principal}: {what} refused although its ACLs allow it: {error.message}"
        return [Anomaly(REFUSED_VALID, detail)]

    def _may_write(self, target: tuple[str, int] | None) -> bool:
        access = self.cluster.access
        return access is None or (target is not None and access.may(WRITE, target[0]))

    # ------------------------------------------------------------------ errors
    def _error_outcome(self, error: flight_ops.CallError, must_succeed: bool, deliberate_timeout: bool) -> Outcome:
        anomalies = []
        if error.leaked:
            anomalies.append(Anomaly(LEAKED_INTERNALS, error.message))
        if error.typed:
            if error.code == "UNKNOWN_SERVER_ERROR":  # the broker's code raised what it did not expect
                anomalies.append(Anomaly(UNEXPECTED_ERROR, error.message))
            elif must_succeed and error.code not in RETRIABLE:
                anomalies.append(Anomaly(REFUSED_VALID, error.message))
            return Outcome(f"refused:{error.code}", anomalies)
        if error.timed_out:
            if not deliberate_timeout:
                anomalies.append(Anomaly(NO_ANSWER, error.message))
            return Outcome("timeout", anomalies)
        if error.transport:
            return Outcome("transport-error", anomalies, {"error": error.message})
        anomalies.append(Anomaly(UNTYPED_ERROR, error.message))
        return Outcome("untyped-error", anomalies)

    # ------------------------------------------------------------------ produce
    def _produce(self, case: Case) -> Outcome:
        """A produce stream: its batches as frames (one of them perhaps mutated, the records' schema
        named in the descriptor, or not, or another one), or, for a few cases, as Flight record
        batches (the produce wire before frames: every batch must be refused)."""
        p = case.params
        topic, partition = p["topic"], p["partition"]
        try:
            specs, built = _stream(p["batches"])
        except (pa.ArrowException, ValueError, OverflowError) as exc:
            return Outcome("unbuildable", detail={"error": str(exc)[:200]})
        verdict = _combine([b.valid for b in built])
        descriptor: dict[str, Any] = {"type": "produce", "topic": topic, "partition": partition, "acks": p["acks"]}
        named, schema_value = fuzz_frames.named_schema(
            p.get("schema", "named"), built[0].batch.schema, int(p.get("schema_seed", 0))
        )
        if named:
            descriptor[SCHEMA_FIELD] = schema_value
        mode = p["idempotence"]
        stream_key = (int(p["producer"]), str(topic), partition if isinstance(partition, int) else -1)
        stream = self.streams.setdefault(stream_key, _Stream())
        dup_of: list[tuple[int, int]] = []
        sequence_gap = False
        metadata: list[bytes | None] = [None] * len(built)
        if mode == "dup" and stream.last_case is not None:
            specs, built = _stream(stream.last_case["batches"])
            metadata = [None] * len(built)
            verdict = _combine([b.valid for b in built])
            descriptor.update(stream.last_case["descriptor"])
            dup_of = list(stream.last_acks)
        elif mode in ("next", "dup", "gap"):
            descriptor["producer_id"] = stream_key[0]
            descriptor["first_sequence"] = stream.next_sequence + (5 if mode == "gap" else 0)
            if mode == "gap" and stream.last_case is not None and not stream.uncertain:
                verdict = False  # a known producer skipping sequence numbers (an unknown one may start anywhere)
                sequence_gap = True
        elif mode == "weird":
            descriptor["producer_id"] = stream_key[0]
            descriptor["first_sequence"] = stream.next_sequence
            metadata = [b'{"sequence": -7}', b"not json", b'{"sequence": 1e400}', b"[]"][: len(built)]
            metadata += [None] * (len(built) - len(metadata))
            verdict = None
        body = requests.render(descriptor, p["edits"])
        target = _target(body)
        idempotent = _idempotent(body)
        spec_topic = self.cluster.topics.get(target[0]) if target else None
        if verdict is True and spec_topic is not None and spec_topic.compacted and int(specs[0].get("keys", 0)) <= 4:
            verdict = None  # records without keys: Kafka refuses them on a compacted topic; accepting is harmless
        mutated = requests.is_mutated(p["edits"])
        acks_wanted = _acks_of(body)
        location = self.cluster.leader_location(str(topic), partition if isinstance(partition, int) else 0)
        old_wire = p.get("wire", "frames") == "flight"
        unknown: set[int] = set()  # batches whose stored form the fuzzer cannot know
        if old_wire:
            result = flight_ops.put_batches(
                location,
                body,
                [b.batch for b in built],
                metadata,
                read_acks=acks_wanted,
                compression=p["compression"],
                abandon=p["abandon"],
                via=self.cluster.user,
            )
            built = [
                dataclasses.replace(b, valid=False, note="Flight record batches: the wire before frames") for b in built
            ]
            verdict = False
        else:
            sent, built, unknown = self._frames(p, built, metadata, body, target)
            if any(b.valid is not True for b in built):
                verdict = _combine([verdict, *(b.valid for b in built)])
            result = flight_ops.put(
                location, body, sent, read_acks=acks_wanted, abandon=p["abandon"], via=self.cluster.user
            )
        anomalies: list[Anomaly] = []
        acked: list[tuple[int, int]] = []
        known_content = not (idempotent and stream.uncertain)
        for i, raw in enumerate(result.acks):
            if raw is None:
                continue
            got = _parse_ack(raw, built[i].batch.num_rows)
            if isinstance(got, str):
                anomalies.append(Anomaly(BAD_ACK, got))
                continue
            acked.append(got)
            if built[i].valid is False and mode != "weird" and not mutated:
                anomalies.append(Anomaly(ACCEPTED_INVALID, f"acknowledged {got}: {_what(specs[0], built[i])}"))
            elif sequence_gap and i == 0 and not mutated:
                anomalies.append(
                    Anomaly(ACCEPTED_INVALID, f"acknowledged {got}: a sequence 5 past the producer's next")
                )
            if target is not None:
                known = known_content and i not in unknown
                problem = self._record(target, got, built[i], specs[i], case.index, idempotent, known)
                if problem:
                    anomalies.append(Anomaly(OFFSET_REUSE, problem))
        common = min(len(acked), len(dup_of))  # batches the first stream had no answer for are new
        if common and acked[:common] != dup_of[:common]:
            anomalies.append(Anomaly(BAD_ACK, f"a resent idempotent stream was stored again: {acked} (first {dup_of})"))
        if mode in ("next", "dup") and acked and target is not None:
            stream.next_sequence = max(
                stream.next_sequence, descriptor.get("first_sequence", 0) + sum(b.batch.num_rows for b in built)
            )
            stream.last_case = {"batches": specs, "descriptor": dict(descriptor)}
            stream.last_acks = acked
        if idempotent and (not acks_wanted or p["abandon"] or len(acked) < len(built) or unknown):
            stream.uncertain = True
        anomalies += self._guard_put(target, result, len(acked))
        if old_wire and p["abandon"] is None and not mutated:
            anomalies += self._old_wire_refused(target, result.error)
        if result.error is not None and not acked:
            # an idempotent stream may be out of step (an earlier acks=0 or abandoned batch was stored)
            must = verdict is True and not mutated and p["abandon"] is None and mode == "none"
            must = must and self._may_write(target)
            outcome = self._error_outcome(result.error, must, deliberate_timeout=p["abandon"] is not None)
            outcome.anomalies[:0] = anomalies
            return outcome
        if result.error is not None:  # some batches acknowledged, then an error
            tail = self._error_outcome(result.error, False, deliberate_timeout=p["abandon"] is not None)
            anomalies += tail.anomalies
        label = "ack" if acked else ("abandoned" if p["abandon"] else ("sent-acks-0" if not acks_wanted else "no-ack"))
        return Outcome(label, anomalies, {"acked": acked})

    def _old_wire_refused(self, target: tuple[str, int] | None, error: flight_ops.CallError | None) -> list[Anomaly]:
        """A stream of Flight record batches to a partition under test must end with INVALID_REQUEST
        (it declares record batch columns), unless the caller may not write or the partition moved
        (an acknowledgement is ``accepted-invalid``, found with the acks; an untyped error is found
        as such)."""
        if target is None or not self._ours(*target):
            return []
        if error is None:
            return [Anomaly(WRONG_ERROR, "a stream of Flight record batches ended without an error")]
        if not error.typed or error.code in OLD_WIRE_ERRORS:
            return []
        detail = f"Flight record batches refused with {error.code}, not INVALID_REQUEST: {error.message}"
        return [Anomaly(WRONG_ERROR, detail)]

    def _frames(
        self,
        p: dict[str, Any],
        built: list[BuiltBatch],
        metadata: list[bytes | None],
        body: bytes,
        target: tuple[str, int] | None,
    ) -> tuple[list[bytes | None], list[BuiltBatch], set[int]]:
        """The frames of a produce stream (the case's mutation applied to one of them), the batches
        the broker must store for them (a frame it must refuse: ``valid`` False; one it decodes to
        something else than the batch built: that batch, ``valid`` None) and the batches whose
        stored form the fuzzer cannot know (a mutated frame whose ``"sequence"`` changed)."""
        mutation = p.get("frame_mutation")
        index = int(mutation.get("batch", 0)) % len(built) if mutation else -1
        sent = [
            fuzz_frames.build(b.batch, metadata[i], p["compression"], mutation if i == index else None)
            for i, b in enumerate(built)
        ]
        schema = fuzz_frames.descriptor_schema(body)
        spec = self.cluster.topics.get(target[0]) if target else None
        max_bytes = (
            int(spec.configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES)) if spec else DEFAULT_MAX_MESSAGE_BYTES
        )
        expected: list[BuiltBatch] = []
        unknown: set[int] = set()
        for i, (batch, frame) in enumerate(zip(built, sent, strict=True)):
            what = f"frame {frame.mutated}" if frame.mutated else "frame"
            if schema is None:
                expected.append(dataclasses.replace(batch, valid=False, note="the descriptor names no readable schema"))
                continue
            if frame.mutated is None and schema.equals(batch.batch.schema):
                expected.append(batch)
                continue
            guess = fuzz_frames.predict(frame.data, schema, max_bytes, MAX_BATCH_ROWS)
            if schema_text(schema) != schema_text(batch.batch.schema):
                what += f" read with another schema ({', '.join(f'{f.name}: {f.type}' for f in schema)})"
            if guess.batch is None:
                expected.append(dataclasses.replace(batch, valid=False, note=f"{what}: {guess.why}"))
                continue
            expected.append(BuiltBatch(guess.batch, None, f"{what}: decodes to {guess.batch.num_rows} rows"))
            sent_meta = _json_object(metadata[i])
            if guess.metadata is None or guess.metadata.get("sequence") != sent_meta.get("sequence"):
                unknown.add(i)  # its sequence changed: it may be taken for another batch of the producer
        return [f.data for f in sent], expected, unknown

    def _record(
        self,
        target: tuple[str, int],
        ack: tuple[int, int],
        built: BuiltBatch,
        spec: dict[str, Any],
        index: int,
        idempotent: bool,
        known_content: bool,
    ) -> str | None:
        expected, ts_known = _expected(built, spec) if known_content else (None, False)
        invalid = built.valid is False
        entry = Entry(target[0], target[1], ack[0], ack[1], expected, ts_known, index, "produce", invalid=invalid)
        return self.ledger.add(entry, idempotent=idempotent)

    # ------------------------------------------------------------------ fetch
    def _fetch(self, case: Case) -> Outcome:
        p = case.params
        ticket = dict(p["ticket"])
        topic, partition = ticket["topic"], ticket["partition"]
        ticket["offset"] = self._offset(str(topic), partition, p["offset_mode"], p["offset"])
        body = requests.render(ticket, p["edits"])
        read = p["read"]
        wait = ticket.get("max_wait_ms")
        timeout = 0.5
        if read == "all":
            timeout = 15.0 + (min(wait, 1000) / 1000 if isinstance(wait, int) and wait > 0 else 0.0)
        location = self.cluster.leader_location(str(topic), partition if isinstance(partition, int) else 0)
        got = flight_ops.get(location, body, timeout=timeout, read=read, via=self.cluster.user)
        return self._got("a fetch", body, got, read, mutated=requests.is_mutated(p["edits"]))

    def _got(self, what: str, body: bytes, got: flight_ops.GetResult, read: str, mutated: bool) -> Outcome:
        """The outcome of a ``do_get`` (``read`` other than ``all``: dropped on purpose)."""
        guarded = self._guard_get(what, body, got, read)
        if self.cluster.access is not None and not mutated:
            guarded += self._refused_allowed(what, got.error, self.cluster.access.fetch_permitted(body))
        if got.invalid:
            return Outcome("served-invalid", [*guarded, Anomaly(SERVED_INVALID, got.invalid)])
        if got.error is not None:
            outcome = self._error_outcome(got.error, False, deliberate_timeout=read != "all")
            outcome.anomalies[:0] = guarded
            return outcome
        return Outcome("fetched", guarded, {"rows": sum(b.num_rows for b in got.batches)})

    def _epoch(self, topic: str, partition: Any) -> int:
        """The partition's leader epoch now (0 when the fuzzer cannot tell)."""
        offsets = self.cluster.offsets(topic, partition) if self._ours(topic, partition) else None
        epoch = offsets.get("leader_epoch") if offsets else None
        return epoch if isinstance(epoch, int) else 0

    def _ours(self, topic: str, partition: Any) -> bool:
        spec = self.cluster.topics.get(topic)
        return spec is not None and isinstance(partition, int) and 0 <= partition < spec.partitions

    def _replica_fetch(self, case: Case) -> Outcome:
        """A replica fetch ticket sent by the case's client (in the low-privilege mode, a user that
        is no broker: it must get nothing)."""
        p = case.params
        partitions = []
        for item in p["partitions"]:
            topic, partition = item["topic"], item["partition"]
            epoch = self._epoch(topic, partition) if item["epoch"] == "$current" else item["epoch"]
            offset = self._offset(topic, partition, item["offset_mode"], item["offset"])
            partitions.append({"t": topic, "p": partition, "o": offset, "e": epoch, "hw": -1})
        ticket: dict[str, Any] = {
            "type": REPLICA_FETCH_TYPE,
            "replica_id": p["replica_id"],
            "max_wait_ms": p["max_wait_ms"],
            "max_bytes": p["max_bytes"],
            "partitions": partitions,
        }
        if p["session"] is not None:
            ticket.update(session_id=p["session"], session_epoch=0)
        body = requests.render(ticket, p["edits"])
        first = partitions[0]
        location = self.cluster.leader_location(str(first["t"]), first["p"] if isinstance(first["p"], int) else 0)
        got = flight_ops.get(location, body, timeout=15.0, read="all", via=self.cluster.user)
        return self._got("a replica fetch", body, got, "all", mutated=requests.is_mutated(p["edits"]))

    def _multi_fetch(self, case: Case) -> Outcome:
        p = case.params
        topic = p["topic"]
        ticket: dict[str, Any] = {
            "type": FETCH_MANY,
            "topic": topic,
            "partitions": [
                {"p": i["partition"], "o": self._offset(topic, i["partition"], i["offset_mode"], i["offset"])}
                for i in p["partitions"]
            ],
            "max_bytes": p["max_bytes"],
            "max_wait_ms": p["max_wait_ms"],
            "compact": p["compact"],
        }
        body = requests.render(ticket, p["edits"])
        location = self.cluster.leader_location(topic, p["partitions"][0]["partition"])
        got = flight_ops.get(location, body, timeout=15.0, read="all", via=self.cluster.user)
        return self._got("a fetch_many", body, got, "all", mutated=requests.is_mutated(p["edits"]))

    def _offset(self, topic: str, partition: Any, mode: str, explicit: int) -> int:
        if mode == "explicit" or topic not in self.cluster.topics or not isinstance(partition, int):
            return explicit
        if not 0 <= partition < self.cluster.topics[topic].partitions:
            return explicit
        offsets = self.cluster.offsets(topic, partition)
        if offsets is None:
            return explicit
        start, end = int(offsets["log_start_offset"]), int(offsets["high_watermark"])
        return {"start": start, "mid": (start + end) // 2, "end": end, "beyond": end + 5}.get(mode, explicit)

    # ------------------------------------------------------------------ actions
    def _action(self, case: Case) -> Outcome:
        p = case.params
        name, base = p["name"], json.loads(json.dumps(p["body"]))
        if name == "copy_records":
            self._resolve_slices(base)
        body = requests.render(base, p["edits"])
        topic, partition = base.get("topic"), base.get("partition")
        location = self.cluster.leader_location(str(topic), partition if isinstance(partition, int) else 0)
        result = flight_ops.action(location, name, body, timeout=COPY_TIMEOUT_S, via=self.cluster.user)
        guarded = self._guard_action(name, body, result)
        if self.cluster.access is not None and not requests.is_mutated(p["edits"]):
            permitted = self.cluster.access.action_permitted(name, body)
            guarded += self._refused_allowed(f"action {name!r:.40}", result.error, permitted)
        if result.error is not None:
            outcome = self._error_outcome(result.error, False, deliberate_timeout=False)
        elif name != "copy_records" or requests.is_mutated(p["edits"]):
            outcome = Outcome("answered")
        else:
            outcome = self._copied(base, result, case.index)
        outcome.anomalies[:0] = guarded
        return outcome

    def _resolve_slices(self, body: dict[str, Any]) -> None:
        source = (
            self.cluster.offsets(body["topic"], body["partition"]) if body.get("topic") in self.cluster.topics else None
        )
        hw = int(source["high_watermark"]) if source else 0
        start = int(source["log_start_offset"]) if source else 0
        symbols = {"$last": hw - 1, "$mid": (start + hw) // 2, "$first10": min(hw, start + 10) - 1}
        symbols["$first100"] = min(hw, start + 100) - 1  # in case logs of earlier versions
        previous: dict[str, Any] | None = None
        source_leader = self.cluster.leader(body["topic"], body["partition"]) if source else None
        for piece in body.get("slices", []):
            if piece.get("partition") == "$colocated":  # a partition of the target the source's leader leads
                spec = self.cluster.topics.get(piece.get("topic"))
                count = spec.partitions if spec else 0
                led = [q for q in range(count) if spec and self.cluster.leader(spec.name, q) == source_leader]
                piece["partition"] = led[0] if led else 0
            for field in ("first", "last"):
                if isinstance(piece.get(field), str) and piece[field] in symbols:
                    piece[field] = symbols[piece[field]]
            if piece.get("first") == 0:
                piece["first"] = start
            if piece.get("sequence") == "$follows" and previous is not None:
                piece["sequence"] = previous["sequence"] + max(0, previous["last"] - previous["first"] + 1)
            previous = piece

    def _copied(self, body: dict[str, Any], result: flight_ops.ActionResult, index: int) -> Outcome:
        anomalies: list[Anomaly] = []
        try:
            results = result.json()["results"]
        except (ValueError, KeyError, TypeError) as exc:
            return Outcome("bad-answer", [Anomaly(BAD_ACK, f"copy_records answered {result.bodies[:1]!r}: {exc}")])
        copied = 0
        for piece, answer in zip(body["slices"], results, strict=False):
            base, last = answer.get("base_offset"), answer.get("last_offset")
            if base == -1:
                continue  # stored before (a duplicate sequence)
            count = piece["last"] - piece["first"] + 1
            if not isinstance(base, int) or not isinstance(last, int) or last - base + 1 != count:
                anomalies.append(Anomaly(BAD_ACK, f"copy of {piece['first']}..{piece['last']} answered {answer}"))
                continue
            expected = self.ledger.lookup(body["topic"], body["partition"], piece["first"], piece["last"])
            entry = Entry(piece["topic"], piece["partition"], base, last, expected, expected is not None, index, "copy")
            idempotent = piece.get("producer_id", -1) >= 0 and piece.get("sequence", -1) >= 0
            problem = self.ledger.add(entry, idempotent=idempotent)
            if problem:
                anomalies.append(Anomaly(OFFSET_REUSE, problem))
            copied += count
        return Outcome("copied", anomalies, {"records": copied})

    # ------------------------------------------------------------------ abandoned calls, garbage
    def _abandon(self, case: Case) -> Outcome:
        p = case.params
        topic, partition = p["topic"], p["partition"]
        offsets = self.cluster.offsets(topic, partition) or {"log_start_offset": 0, "high_watermark": 0}
        start, end = int(offsets["log_start_offset"]), int(offsets["high_watermark"])
        call = p["call"]
        ticket: dict[str, Any] = {"topic": topic, "partition": partition, "max_bytes": 64 << 20}
        if call == "get_long_poll":
            ticket.update(offset=end, max_wait_ms=30_000)
        elif call == "get_follow":
            ticket.update(offset=max(start, end - 1), max_wait_ms=30_000, follow=True)
        else:
            ticket.update(offset=start, max_wait_ms=0)
        schema = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())])
        if call == "action_copy":
            last = min(end - 1, start + 10)
            descriptor = json.dumps(
                {
                    "topic": topic,
                    "partition": partition,
                    "slices": [{"first": start, "last": last, "topic": topic, "partition": partition}],
                }
            ).encode()
        else:  # a produce naming the records' schema
            produce = {"type": "produce", "topic": topic, "partition": partition, "acks": "1"}
            descriptor = json.dumps({**produce, SCHEMA_FIELD: schema_text(schema)}).encode()
        opened = flight_ops.abandon_streams(
            self.cluster.leader_location(topic, partition),
            call,
            json.dumps(ticket).encode(),
            descriptor,
            schema,
            int(p["streams"]),
            via=self.cluster.user,
        )
        return Outcome("abandoned", detail={"opened": opened})

    def _garbage(self, case: Case) -> Outcome:
        p = case.params
        broker = self.cluster.broker_ids[int(p["seed"]) % len(self.cluster.broker_ids)]
        payload = flight_ops.garbage_payload(p["mode"], int(p["nbytes"]), int(p["seed"]))
        said = flight_ops.send_garbage(self.cluster.port(broker), payload, int(p["hold_ms"]) / 1000)
        return Outcome("garbage-sent", detail={"broker": said})


# ----------------------------------------------------------------------------------- helpers
def _stream(specs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[BuiltBatch]]:
    """The batches of a produce stream: those of the first one's schema (one stream, one schema)."""
    built = [build_batch(spec) for spec in specs]
    kept = [i for i, b in enumerate(built) if b.batch.schema.equals(built[0].batch.schema)]
    return [specs[i] for i in kept], [built[i] for i in kept]


def _combine(verdicts: list[bool | None]) -> bool | None:
    if any(v is False for v in verdicts):
        return False
    return True if all(v is True for v in verdicts) else None


def _target(body: bytes) -> tuple[str, int] | None:
    """Where the broker will append: the topic and partition of the descriptor as it parses it."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    topic, partition = parsed.get("topic"), parsed.get("partition")
    if isinstance(topic, str) and isinstance(partition, int) and not isinstance(partition, bool):
        return topic, partition
    return None


def _idempotent(body: bytes) -> bool:
    """Whether the descriptor names a producer id and sequence (a resent sequence is a duplicate)."""
    try:
        parsed = json.loads(body)
        pid, seq = parsed.get("producer_id", -1), parsed.get("first_sequence", -1)
        return isinstance(pid, int) and isinstance(seq, int) and pid >= 0 and seq >= 0
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
        return False


def _acks_of(body: bytes) -> bool:
    """Whether the broker will answer each batch (any acks but 0)."""
    try:
        parsed = json.loads(body)
        return str(parsed.get("acks", "1")) != "0"
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError):
        return True


def _json_object(raw: bytes | None) -> dict[str, Any]:
    """Batch metadata as sent, parsed (``{}`` when it is none, or no JSON object)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _parse_ack(raw: bytes, rows: int) -> tuple[int, int] | str:
    try:
        ack = json.loads(raw)
        base, last, count = int(ack["base_offset"]), int(ack["last_offset"]), int(ack["count"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"put metadata {raw[:200]!r} is not an acknowledgement: {exc}"
    if count != rows or last - base + 1 != rows or base < 0:
        return f"put metadata {raw[:200]!r} for a batch of {rows} records"
    return base, last


def _expected(built: BuiltBatch, spec: dict[str, Any]) -> tuple[Fingerprints | None, bool]:
    """The stored form of an acknowledged batch, as the broker's own normalization makes it, if the
    batch is well-formed (a malformed one is never read here: reading it could crash the fuzzer)."""
    batch = built.batch
    try:
        batch.validate(full=True)
        normalized = to_record_batch(batch, now=0)
    except Exception:  # not a form the fuzzer can predict
        return None, False
    prints = fingerprint(normalized)
    names = batch.schema.names
    known = spec.get("timestamp") in FIXED_TIMESTAMPS and "timestamp" in names
    if known:
        column = batch.column("timestamp")
        type_ = column.type
        known = (pa.types.is_timestamp(type_) or pa.types.is_integer(type_)) and not column.null_count
    if not known:
        prints.timestamp = np.zeros(len(prints), np.int64)
    return prints, bool(known)


def _what(spec: dict[str, Any], built: BuiltBatch) -> str:
    rows = built.batch.num_rows
    return (
        f"layout {spec.get('layout')} ({built.note or 'as specified'}), {rows} rows, timestamp {spec.get('timestamp')}"
    )
