"""One Kafka case (:mod:`sparklog.fuzz.kafka_cases`) against the cluster's Kafka listeners: send it,
classify what came back, record what was acknowledged.

- A produce's batches are judged by the reference reader (:func:`~sparklog.fuzz.kafka_batches.judge`):
  one it must store refused with a non-retriable code is ``refused-valid``; one it must refuse
  acknowledged is ``accepted-invalid``; refused with a code outside those its faults allow,
  ``wrong-error``. Each partition's log end is known before the case and read after it (sparklog's
  ``list_offsets``, once the listener answered the request, or an ApiVersions sent behind an acks=0
  one): a refused partition, or any partition of a request whose connection closed, must not have
  grown (``stored-refused``, an invariant failure), and an acknowledged one must have grown by its
  records, at the offsets acknowledged. An acks=0 batch that the log shows stored joins the ledger
  like an acknowledged one.
- Idempotent producers get their ids from InitProducerId; a batch sent again (the same bytes) must
  be answered with its first offsets and stored once (``duplicated``, an invariant failure), one
  skipping sequences refused (OUT_OF_ORDER_SEQUENCE).
- Every decoded response's error codes must make sense (:func:`~sparklog.fuzz.kafka_ops.check_code`:
  UNKNOWN_SERVER_ERROR is ``unexpected-error``); a connection closed on a well-formed request the
  listener serves (the broker's answer to an exception it did not expect) is ``unexpected-error``
  too; an answer that contradicts what the fuzzer knows (offsets, order, brokers, fields) is
  ``wrong-answer``; no answer in time is ``no-answer``.
- A case with a compression bomb measures the broker's peak memory: growing by more than
  :data:`MEMORY_SLACK_MB` plus a few times the topic's ``max.message.bytes`` is ``memory-spike``.
- Login cases (``kafka-login``) go to :class:`~sparklog.fuzz.kafka_login.LoginApplier`; after one,
  every SASL listener must log a user in on a fresh connection and answer Metadata.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

import numpy as np
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from sparklog.fuzz import kafka_ops as ops
from sparklog.fuzz.apply import Outcome
from sparklog.fuzz.cases import Case
from sparklog.fuzz.cluster import DEFAULT_MAX_MESSAGE_BYTES, FuzzCluster
from sparklog.fuzz.kafka_batches import (
    HEADER_SIZE,
    NO_PRODUCER_ID,
    Producer,
    Records,
    TopicRules,
    Verdict,
    build,
    get_field,
    judge,
    mutate,
    parse_fetched,
)
from sparklog.fuzz.kafka_cases import (
    API_KEYS,
    KAFKA_FRAME,
    KAFKA_HANG,
    KAFKA_LOGIN,
    KAFKA_PRODUCE,
    KAFKA_QUERY,
    ODD_TOPICS,
    VERSIONS,
)
from sparklog.fuzz.kafka_login import LoginApplier
from sparklog.fuzz.kafka_wire import CLOSED, SILENT, Answer, KafkaWire, decode_response
from sparklog.fuzz.ledger import Entry, Ledger
from sparklog.fuzz.report import (
    ACCEPTED_INVALID,
    DUPLICATED,
    LINGERING,
    MEMORY_SPIKE,
    MISMATCH,
    NO_ANSWER,
    OFFSET_REUSE,
    REFUSED_VALID,
    SERVED_INVALID,
    STORED_REFUSED,
    UNEXPECTED_ERROR,
    WRONG_ANSWER,
    Anomaly,
)
from sparklog.names import LEGAL_NAME
from sparklog.records import now_ms

CASE_TIMEOUT_S = 15.0
QUIET_S = 0.3  # how long a request the broker must not answer yet is listened to
MAX_HUNG = 4  # connections left hanging at once
MEMORY_SLACK_MB = 96
# what a batch whose producer fields a mutation changed may be refused with
SEQUENCE_ERRORS = frozenset(
    {
        ops.OUT_OF_ORDER_SEQUENCE,
        ops.DUPLICATE_SEQUENCE,
        ops.INVALID_PRODUCER_EPOCH,
        ops.UNKNOWN_PRODUCER_ID,
        ops.INVALID_RECORD,
    }
)
LONG_POLL_GRACE_S = 0.03


@dataclasses.dataclass
class _Stream:
    """An idempotent producer's batches on one partition, as the fuzzer knows them."""

    next_sequence: int = 0
    last: bytes | None = None  # the last batch stored (sent again by a "dup" case)
    last_range: tuple[int, int] | None = None
    last_records: Records | None = None
    known: bool = False  # the broker holds this producer's state here (a batch stored in this epoch)
    uncertain: bool = False  # a batch may have been stored without the fuzzer knowing


@dataclasses.dataclass
class _Part:
    """One partition of a produce request: what was sent and what must come of it."""

    topic: str
    partition: int
    data: bytes | None
    verdict: Verdict
    ours: bool
    must: str  # "accept", "refuse" or "either"
    allowed: set[int]
    why: str
    stream: _Stream | None = None
    sequence: int = -1
    duplicate_of: tuple[int, int] | None = None
    producer: Producer = dataclasses.field(default_factory=Producer)
    before: int | None = None
    after: int | None = None

    @property
    def count(self) -> int | None:
        return None if self.verdict.records is None else len(self.verdict.records)

    @property
    def delta(self) -> int | None:
        return None if self.before is None or self.after is None else self.after - self.before

    def describe(self) -> str:
        return f"{self.topic!r:.60}-{self.partition}"


class KafkaApplier:
    """Applies Kafka cases; keeps a connection per broker, the hanging ones, the idempotent
    producers and streams, and each partition's log end between cases."""

    def __init__(self, cluster: FuzzCluster, ledger: Ledger) -> None:
        self.cluster = cluster
        self.ledger = ledger
        self.conns: dict[int, KafkaWire] = {}
        self.hung: collections.deque[KafkaWire] = collections.deque()
        self.offsets: dict[tuple[str, int], dict[str, Any]] = {}
        self.producers: dict[int, tuple[int, int]] = {}
        self.streams: dict[tuple[int, str, int], _Stream] = {}
        self.served: dict[int, tuple[int, int]] = {}  # the API table the listener advertises
        self.creatable: set[str] = set()  # names a Metadata request allowed to create (they may exist)
        self.lingering = ops.Lingering()
        self.login = LoginApplier(cluster, self._end)

    def reset(self) -> None:
        """A fresh cluster: nothing known of it."""
        self.disconnect()
        self.login.reset()
        self.producers.clear()
        self.streams.clear()
        self.served.clear()
        self.creatable.clear()

    def disconnect(self) -> None:
        """Before brokers restart: every connection closed, every log end read again."""
        for wire in [*self.conns.values(), *self.hung]:
            wire.close()
        self.conns.clear()
        self.hung.clear()
        self.offsets.clear()
        self.lingering.clear()

    def apply(self, case: Case) -> Outcome:
        handler = {
            KAFKA_PRODUCE: self._produce,
            KAFKA_FRAME: self._frame,
            KAFKA_QUERY: self._query,
            KAFKA_HANG: self._hang,
            KAFKA_LOGIN: self.login.apply,
        }[case.kind]
        outcome = handler(case)
        for anomaly in outcome.anomalies:
            anomaly.case = case.to_json()
        return outcome

    # ------------------------------------------------------------------ cluster state
    def _ours(self, topic: str, partition: Any) -> bool:
        spec = self.cluster.topics.get(topic) if isinstance(topic, str) else None
        return spec is not None and isinstance(partition, int) and 0 <= partition < spec.partitions

    def _broker_for(self, topic: str, partition: int) -> int:
        if self._ours(topic, partition):
            leader = self.cluster.leader(topic, partition)
            if leader is not None:
                return leader
        return self.cluster.broker_ids[0]

    def _conn(self, broker_id: int) -> KafkaWire:
        wire = self.conns.get(broker_id)
        if wire is None or wire.closed:
            wire = KafkaWire(ops.HOST, self.cluster.kafka_port(broker_id), timeout=CASE_TIMEOUT_S)
            self.conns[broker_id] = wire
        return wire

    def _drop(self, broker_id: int) -> None:
        wire = self.conns.pop(broker_id, None)
        if wire is not None:
            wire.close()

    def _state(self, topic: str, partition: int, fresh: bool = False) -> dict[str, Any] | None:
        """The partition's offsets (log start and end, high watermark, leader epoch) from sparklog's
        ``list_offsets``: kept between cases (only the fuzzer writes), read again when ``fresh``."""
        key = (topic, partition)
        if not fresh and key in self.offsets:
            return self.offsets[key]
        found = self.cluster.offsets(topic, partition)
        if found is None:
            self.offsets.pop(key, None)
            return None
        self.offsets[key] = found
        return found

    def _end(self, topic: str, partition: int, fresh: bool = False) -> int | None:
        state = self._state(topic, partition, fresh)
        return None if state is None else int(state["log_end_offset"])

    def _rules(self, topic: str) -> TopicRules:
        spec = self.cluster.topics.get(topic)
        if spec is None:
            return TopicRules(DEFAULT_MAX_MESSAGE_BYTES)
        return TopicRules(spec.max_message_bytes, spec.compacted, spec.log_append_time)

    def _pid(self, broker_id: int) -> int | None:
        return self.cluster.pid(broker_id)

    # ------------------------------------------------------------------ producers
    def _producer(self, slot: int, bump: bool, broker_id: int) -> tuple[int, int] | None:
        """The slot's producer id and epoch (InitProducerId; ``bump``: the next epoch)."""
        known = self.producers.get(slot)
        if known is not None and not bump:
            return known
        pid, epoch = known if known is not None else (-1, -1)
        answer = self._conn(broker_id).exchange(ops.init_pid_request(4, None, 60_000, pid, epoch))
        if answer.response is None or answer.response.error_code:
            self._drop(broker_id)
            return known
        got = (int(answer.response.producer_id), int(answer.response.producer_epoch))
        if known is None or got != known:
            for key in [k for k in self.streams if k[0] == slot]:
                del self.streams[key]  # a new epoch: its sequences start again
        self.producers[slot] = got
        return got

    # ------------------------------------------------------------------ produce
    def _produce(self, case: Case) -> Outcome:
        p = case.params
        version, acks = int(p["version"]), int(p["acks"])
        now = now_ms()
        parts: list[_Part] = []
        anomalies: list[Anomaly] = []
        first = p["parts"][0]
        broker_id = self._broker_for(first["topic"], first["partition"])
        bombs = []
        for spec in p["parts"]:
            part = self._part(spec, now, broker_id, acks, p.get("transactional_id"))
            if part.ours and part.must == "accept" and self._broker_for(part.topic, part.partition) != broker_id:
                part.must = "either"  # another broker leads it: NOT_LEADER_OR_FOLLOWER (silent with acks=0)
            parts.append(part)
            if spec.get("mutation") and spec["mutation"].get("op") == "bomb" and part.ours:
                bombs.append(part)
        for part in parts:
            if part.ours:
                part.before = self._end(part.topic, part.partition)
        request = ops.produce_request(
            version,
            acks,
            int(p["timeout_ms"]),
            p.get("transactional_id"),
            [(x.topic, x.partition, x.data) for x in parts],
        )
        detail: dict[str, Any] = {"broker": broker_id}
        pid = self._pid(broker_id) if bombs else None
        start_mb = None
        if pid is not None:
            ops.reset_peak_rss(pid)
            start_mb = ops.peak_rss_mb(pid)
        answer = self._send_produce(broker_id, request, acks)
        if pid is not None and start_mb is not None:
            anomalies += self._memory(pid, start_mb, bombs, detail)
        settled = answer.problem != SILENT
        for part in parts:
            if part.ours:
                part.after = self._end(part.topic, part.partition, fresh=True) if settled else None
                if not settled:
                    self.offsets.pop((part.topic, part.partition), None)
        if answer.problem == SILENT:
            anomalies.append(Anomaly(NO_ANSWER, f"no answer to a Produce v{version} (acks={acks}) in time"))
        responses = self._responses(answer.response) if answer.response is not None else {}
        labels = []
        for part in parts:
            found, label = self._judge_part(case, part, acks, answer, responses)
            anomalies += found
            labels.append(label)
        if answer.problem == CLOSED and acks != 0:  # bad batches get errors per partition, never a close
            anomalies.append(self._closed(broker_id, f"a Produce v{version} (acks={acks}) that decodes"))
        return Outcome(",".join(sorted(set(labels))), anomalies, detail)

    def _part(self, spec: dict[str, Any], now: int, broker_id: int, acks: int, transactional_id: str | None) -> _Part:
        topic, partition = spec["topic"], spec["partition"]
        ours = self._ours(topic, partition)
        rules = self._rules(topic)
        records_spec = spec.get("records")
        mode = spec.get("idempotence", "none") if ours and isinstance(records_spec, dict) else "none"
        stream: _Stream | None = None
        producer = Producer()
        duplicate_of = None
        reasons: list[str] = []
        allowed: set[int] = set()
        data: bytes | None
        if mode != "none":
            got = self._producer(int(spec["producer"]), mode == "bump", broker_id)
            if got is None:
                mode = "none"
            else:
                stream = self.streams.setdefault((int(spec["producer"]), topic, partition), _Stream())
        if stream is not None and mode == "dup" and stream.last is not None and not stream.uncertain:
            data = stream.last
            duplicate_of = stream.last_range
            verdict = Verdict(True, stream.last_records)
            sequence = get_field(data, "base_sequence")
            producer = Producer(get_field(data, "producer_id"), get_field(data, "producer_epoch"), sequence)
        else:
            sequence = -1
            if stream is not None:
                pid, epoch = self.producers[int(spec["producer"])]
                sequence = next_sequence(stream.next_sequence, 3) if mode == "gap" else stream.next_sequence
                if mode == "wrap" and not stream.known and not stream.uncertain and isinstance(records_spec, dict):
                    # a stream of this producer starting where the next batches cross 2147483647
                    sequence = stream.next_sequence = (1 << 31) - 1 - int(records_spec["count"]) // 2
                producer = Producer(pid, epoch, sequence)
            if records_spec is None:
                data = None
            elif records_spec == "empty":
                data = b""
            else:
                data, _ = build(records_spec, producer, now)
                if spec.get("mutation"):
                    data = mutate(data, spec["mutation"], rules.max_bytes)
            verdict = judge(data, rules, now) if data else judge(None, rules, now)
            if stream is not None and data and _producer_of(data) != (producer.producer_id, producer.epoch, sequence):
                # the mutation changed the producer fields: another producer, epoch or sequence
                allowed |= SEQUENCE_ERRORS
                verdict = dataclasses.replace(verdict, valid=None if verdict.valid else verdict.valid)
            elif mode == "gap" and stream is not None and stream.known and not stream.uncertain:
                reasons.append("a sequence 3 past the producer's next")
                allowed |= {ops.OUT_OF_ORDER_SEQUENCE}
            elif stream is not None and (stream.uncertain or mode == "gap" or (mode == "wrap" and not stream.known)):
                # a producer the broker does not know yet may start anywhere (Kafka: at 0 only)
                allowed |= {ops.OUT_OF_ORDER_SEQUENCE, ops.DUPLICATE_SEQUENCE}
                verdict = dataclasses.replace(verdict, valid=None if verdict.valid else verdict.valid)
        allowed |= verdict.errors
        if verdict.valid is False:
            reasons.append(verdict.why)
        if not ours and topic not in self.creatable:
            reasons.append("not a partition under test")
            allowed |= ops.UNKNOWN_TARGET
        elif not ours:  # a topic a Metadata request may have created: anything goes
            allowed |= ops.KNOWN_CODES
            verdict = dataclasses.replace(verdict, valid=None if verdict.valid else verdict.valid)
        if acks not in (-1, 0, 1):
            reasons.append(f"acks={acks}")
            allowed |= {ops.INVALID_REQUIRED_ACKS}
        if transactional_id is not None:
            reasons.append("a transactional id")
            allowed |= {
                ops.INVALID_REQUEST,
                ops.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                ops.INVALID_TXN_STATE,
                ops.INVALID_RECORD,
            }
        must = "refuse" if reasons else ("accept" if verdict.valid is True else "either")
        why = "; ".join(reasons) or verdict.why
        return _Part(
            topic, partition, data, verdict, ours, must, allowed, why, stream, sequence, duplicate_of, producer
        )

    def _send_produce(self, broker_id: int, request: Any, acks: int) -> Answer:
        """The response (acks=0: that of an ApiVersions sent behind it, on the same connection,
        which the broker answers only after it handled the produce)."""
        try:
            wire = self._conn(broker_id)
        except OSError as exc:
            return Answer(None, f"{CLOSED}: cannot connect ({exc})")
        if acks != 0:
            answer = wire.exchange(request)
        else:
            try:
                wire.send(request)
            except OSError:
                self._drop(broker_id)
                return Answer(None, CLOSED)
            answer = wire.exchange(ops.api_versions_request(0))
            if answer.response is not None:
                answer = Answer(None, "acks=0")
        if answer.response is None and answer.problem != "acks=0":
            self._drop(broker_id)
        return answer

    @staticmethod
    def _responses(response: Any) -> dict[tuple[str, int], Any]:
        out: dict[tuple[str, int], Any] = {}
        for topic in response.responses:
            for entry in topic.partition_responses:
                out[(topic.name, entry.index)] = entry
        return out

    def _judge_part(
        self, case: Case, part: _Part, acks: int, answer: Answer, responses: dict[tuple[str, int], Any]
    ) -> tuple[list[Anomaly], str]:
        found: list[Anomaly] = []
        what = f"{part.describe()}: {part.why or 'a valid batch'}"
        delta = part.delta
        if answer.response is not None:
            entry = responses.get((part.topic, part.partition))
            if entry is None:
                return [Anomaly(WRONG_ANSWER, f"{part.describe()}: the Produce response has no answer for it")], "odd"
            code = int(entry.error_code)
            if code == ops.NONE:
                return self._acknowledged(case, part, int(entry.base_offset)), "ack"
            found += ops.check_code(f"Produce of {what}", code, part.allowed)
            if code not in ops.RETRIABLE and part.must == "accept":
                found.append(
                    Anomaly(REFUSED_VALID, f"{part.describe()}: a valid batch refused with {ops.code_name(code)}")
                )
            if delta and not (code in ops.AFTER_APPEND and delta == part.count):
                found.append(
                    Anomaly(
                        STORED_REFUSED,
                        f"{part.describe()}: refused with {ops.code_name(code)}, the log grew by {delta}",
                    )
                )
            if part.stream is not None and code in ops.AFTER_APPEND:
                part.stream.uncertain = True
            return found, f"refused:{ops.NAMES.get(code, code)}"
        if answer.problem == SILENT:
            if part.stream is not None:
                part.stream.uncertain = True
            return found, "no-answer"
        if acks == 0 and answer.problem in ("acks=0", CLOSED):
            if not delta:
                if part.must == "accept" and delta == 0 and part.duplicate_of is None:
                    found.append(Anomaly(REFUSED_VALID, f"{part.describe()}: a valid acks=0 batch was not stored"))
                return found, "acks0-not-stored"
            if part.duplicate_of is not None:
                found.append(
                    Anomaly(DUPLICATED, f"{part.describe()}: an idempotent batch sent again (acks=0) was stored again")
                )
                return found, "acks0-duplicated"
            assert part.before is not None
            if part.count is not None and delta != part.count:
                found.append(
                    Anomaly(
                        WRONG_ANSWER, f"{part.describe()}: the log grew by {delta} for an acks=0 batch of {part.count}"
                    )
                )
                return found, "acks0-odd"
            return self._acknowledged(case, part, part.before, acks0=True), "acks0-stored"
        # the connection closed (or the request could not be sent): nothing may have been stored
        if delta:
            found.append(Anomaly(STORED_REFUSED, f"{part.describe()}: the connection closed, the log grew by {delta}"))
        return found, "closed"

    def _acknowledged(self, case: Case, part: _Part, base: int, acks0: bool = False) -> list[Anomaly]:
        found: list[Anomaly] = []
        label = "an acks=0 batch stored" if acks0 else "acknowledged"
        if part.must == "refuse":
            found.append(Anomaly(ACCEPTED_INVALID, f"{part.describe()}: {label} at {base}: {part.why}"))
        delta = part.delta
        if part.duplicate_of is not None:
            if delta:
                found.append(
                    Anomaly(
                        DUPLICATED, f"{part.describe()}: an idempotent batch sent again was stored again (+{delta})"
                    )
                )
            elif not acks0 and base != part.duplicate_of[0]:
                found.append(
                    Anomaly(
                        WRONG_ANSWER,
                        f"{part.describe()}: a batch sent again answered at {base}, "
                        f"first stored at {part.duplicate_of[0]}",
                    )
                )
            return found
        count = part.count if part.count is not None else delta
        if not acks0 and part.before is not None and base != part.before and delta:
            found.append(
                Anomaly(WRONG_ANSWER, f"{part.describe()}: acknowledged at {base}, the log ended at {part.before}")
            )
        if delta is not None and count is not None and delta != count:
            if delta == 0 and part.data is not None and get_field(part.data, "producer_id") != NO_PRODUCER_ID:
                return found  # a batch the broker took for one an idempotent producer already stored
            found.append(Anomaly(WRONG_ANSWER, f"{part.describe()}: {label} {count} records, the log grew by {delta}"))
            return found
        if not count:
            return found
        records = part.verdict.records if part.must != "refuse" else None
        rules = self._rules(part.topic)
        entry = Entry(
            part.topic,
            part.partition,
            base,
            base + count - 1,
            records.fingerprints() if records is not None else None,
            not rules.log_append_time,
            case.index,
            "produce",
            invalid=part.must == "refuse",
        )
        idempotent = part.data is not None and get_field(part.data, "producer_id") != NO_PRODUCER_ID
        problem = self.ledger.add(entry, idempotent=idempotent)
        if problem:
            found.append(Anomaly(OFFSET_REUSE, problem))
        stream = part.stream
        sent = _producer_of(part.data) if part.data else None
        if stream is not None and sent is not None and sent[:2] == (part.producer.producer_id, part.producer.epoch):
            stream.next_sequence = next_sequence(sent[2], count)
            stream.last, stream.last_range, stream.last_records = part.data, (base, base + count - 1), records
            stream.known, stream.uncertain = True, False
        return found

    def _memory(self, pid: int, start_mb: int, bombs: list[_Part], detail: dict[str, Any]) -> list[Anomaly]:
        peak = ops.peak_rss_mb(pid)
        if peak is None:
            return []
        detail["peak_rss_mb"] = [start_mb, peak]
        limit = max(self._rules(b.topic).max_bytes for b in bombs)
        allowed = MEMORY_SLACK_MB + 4 * limit // (1 << 20)
        grew = peak - start_mb
        if grew <= allowed:
            return []
        return [
            Anomaly(
                MEMORY_SPIKE,
                f"refusing a compression bomb of {max(len(b.data or b'') for b in bombs)} bytes "
                f"(max.message.bytes {limit}) took the broker from {start_mb} to {peak} MB at its peak",
            )
        ]

    def _closed(self, broker_id: int, what: str) -> Anomaly:
        """The broker closed the connection on ``what``: the exception behind it, from its log."""
        log = self.cluster.log_tail(broker_id, 60)
        failed = [line for line in log.splitlines() if "failed" in line or "Error" in line or "error" in line]
        detail = f" (its log: {failed[-1][-300:]})" if failed else ""
        return Anomaly(UNEXPECTED_ERROR, f"the broker closed the connection on {what}{detail}")

    # ------------------------------------------------------------------ queries
    def _resolve_offset(self, value: Any, topic: str, partition: int) -> int:
        if not isinstance(value, str):
            return int(value)
        state = self._state(topic, partition) if self._ours(topic, partition) else None
        end = int(state["log_end_offset"]) if state else 0
        start = int(state["log_start_offset"]) if state else 0
        return {"$end": end, "$end+1": end + 1, "$start": start, "$mid": (start + end) // 2}[value]

    def _resolve_epoch(self, value: Any, topic: str, partition: int) -> int:
        if not isinstance(value, str):
            return int(value)
        state = self._state(topic, partition) if self._ours(topic, partition) else None
        epoch = int(state["leader_epoch"]) if state else 0
        return epoch + (1 if value == "$epoch+1" else 0)

    def _query(self, case: Case) -> Outcome:
        p = case.params
        api, version = p["api"], int(p["version"])
        targets = [(str(t), int(q)) for t, q in p["targets"]]
        broker_id = self._broker_for(*targets[0])
        request = self._query_request(p, api, version, targets)
        timeout = CASE_TIMEOUT_S + max(0, int(p.get("max_wait_ms", 0))) / 1000
        try:
            answer = self._conn(broker_id).exchange(request, timeout)
        except OSError as exc:
            return Outcome("connect-failed", [], {"error": str(exc)})
        if answer.response is None:
            self._drop(broker_id)
            if answer.problem == SILENT:
                return Outcome("no-answer", [Anomaly(NO_ANSWER, f"no answer to a {api} v{version} in time")])
            if answer.problem == CLOSED:
                return Outcome("closed", [self._closed(broker_id, f"a well-formed {api} v{version}")])
            return Outcome("undecodable", [Anomaly(WRONG_ANSWER, f"{api} v{version}: {answer.problem}")])
        check = {
            "fetch": self._check_fetch,
            "list-offsets": self._check_list_offsets,
            "metadata": self._check_metadata,
            "epochs": self._check_epochs,
            "init-pid": self._check_init_pid,
            "api-versions": self._check_api_versions,
        }[api]
        anomalies = check(p, version, answer.response, broker_id)
        return Outcome("answered", anomalies)

    def _query_request(self, p: dict[str, Any], api: str, version: int, targets: list[tuple[str, int]]) -> Any:
        t0, p0 = targets[0]
        if api == "fetch":
            with_offsets = [(t, q, self._resolve_offset(p["offset"], t, q)) for t, q in targets]
            return ops.fetch_request(
                version,
                with_offsets,
                replica_id=p["replica_id"],
                max_wait_ms=p["max_wait_ms"],
                min_bytes=p["min_bytes"],
                max_bytes=p["max_bytes"],
                isolation_level=p["isolation_level"],
                session_id=p["session_id"],
                session_epoch=p["session_epoch"],
                rack_id=p["rack_id"],
                forgotten=p["forgotten"],
                current_leader_epoch=self._resolve_epoch(p["current_leader_epoch"], t0, p0),
                last_fetched_epoch=self._resolve_epoch(p["last_fetched_epoch"], t0, p0),
                log_start_offset=p["log_start_offset"],
                partition_max_bytes=p["partition_max_bytes"],
            )
        if api == "list-offsets":
            timestamp = now_ms() if p["timestamp"] == "$now" else int(p["timestamp"])
            return ops.list_offsets_request(
                version,
                targets,
                timestamp,
                current_leader_epoch=self._resolve_epoch(p["current_leader_epoch"], t0, p0),
                replica_id=p["replica_id"],
                isolation_level=p["isolation_level"],
            )
        if api == "metadata":
            names: list[str] | None = {
                "targets": [t for t, _ in targets],
                "all": None,
                "empty": [],
                "many": [f"fz-many-{i}" for i in range(1000)] + sorted(self.cluster.topics),
            }[p["topics"]]
            if version == 0 and names == []:
                names = [t for t, _ in targets]
            if names and (version < 4 or p["auto_create"]):
                self.creatable |= {n for n in names if is_legal_topic_name(n)}  # they may be created now
            return ops.metadata_request(version, names, p["auto_create"], p["authorized_operations"])
        if api == "epochs":
            fields = {"replica_id": p["replica_id"]} if version >= 3 else {}
            return ops.epochs_request(
                version,
                targets,
                self._resolve_epoch(p["leader_epoch"], t0, p0),
                self._resolve_epoch(p["current_leader_epoch"], t0, p0),
                **fields,
            )
        if api == "init-pid":
            return ops.init_pid_request(
                version, p["transactional_id"], p["timeout_ms"], p["producer_id"], p["producer_epoch"]
            )
        return ops.api_versions_request(version, p["software_name"], p["software_version"])

    def _check_fetch(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        found = ops.check_code(
            f"Fetch v{version}", response.error_code if version >= 7 else 0, ops.ALLOWED["fetch-top"]
        )
        for topic in response.responses:
            for data in topic.partitions:
                where = f"Fetch v{version} of {topic.topic!r:.60}-{data.partition_index}"
                found += ops.check_code(where, data.error_code, ops.ALLOWED["fetch"])
                batches, problem = parse_fetched(bytes(data.records or b""))
                if problem:
                    found.append(Anomaly(SERVED_INVALID, f"{where}: {problem}"))
                if data.error_code or not batches:
                    continue
                found += self._check_served(where, topic.topic, data.partition_index, batches, int(data.high_watermark))
        return found

    def _check_served(self, where: str, topic: str, partition: int, batches: list[Any], hw: int) -> list[Anomaly]:
        """Records a fetch returned: below the high watermark, and as acknowledged."""
        last = batches[-1].offsets[-1]
        if last >= hw:
            return [Anomaly(WRONG_ANSWER, f"{where}: offset {last} served at or past the high watermark {hw}")]
        for batch in batches:
            offsets = batch.offsets
            expected = self.ledger.lookup(topic, partition, offsets[0], offsets[-1])
            if expected is None or len(offsets) != offsets[-1] - offsets[0] + 1:
                continue
            got = batch.records.fingerprints()
            wrong = np.flatnonzero(expected.record != got.record)
            if len(wrong):
                return [
                    Anomaly(MISMATCH, f"{where}: offset {offsets[int(wrong[0])]} differs from what was acknowledged")
                ]
        return []

    def _check_list_offsets(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        found: list[Anomaly] = []
        for topic in response.topics:
            for part in topic.partitions:
                where = f"ListOffsets v{version} ({p['timestamp']}) of {topic.name!r:.60}-{part.partition_index}"
                found += ops.check_code(where, part.error_code, ops.ALLOWED["list-offsets"])
                if part.error_code or not self._ours(topic.name, part.partition_index):
                    continue
                state = self._state(topic.name, part.partition_index)
                if state is None or self.cluster.replication > 1:
                    continue
                want = {-1: state["high_watermark"], -2: state["log_start_offset"]}.get(p["timestamp"])
                if want is not None and part.offset != want:
                    found.append(Anomaly(WRONG_ANSWER, f"{where}: offset {part.offset}, the partition says {want}"))
                elif want is None and not -1 <= part.offset <= state["high_watermark"]:
                    found.append(Anomaly(WRONG_ANSWER, f"{where}: offset {part.offset} outside the log"))
        return found

    def _check_metadata(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        found: list[Anomaly] = []
        ports = {b.port for b in response.brokers}
        live = {self.cluster.kafka_port(b) for b in self.cluster.broker_ids if self.cluster.alive(b)}
        if not live <= ports:
            found.append(
                Anomaly(WRONG_ANSWER, f"Metadata v{version} lists Kafka ports {sorted(ports)}, live {sorted(live)}")
            )
        for topic in response.topics:
            where = f"Metadata v{version} of {topic.name!r:.60}"
            found += ops.check_code(where, topic.error_code, ops.ALLOWED["metadata-topic"])
            spec = self.cluster.topics.get(topic.name)
            if topic.error_code:
                continue
            if spec is None:
                if not is_legal_topic_name(topic.name):
                    found.append(Anomaly(WRONG_ANSWER, f"{where}: a topic by a name Kafka refuses exists"))
                elif topic.name.startswith("fz-many-") or (
                    topic.name in ODD_TOPICS and topic.name not in self.creatable
                ):
                    found.append(Anomaly(WRONG_ANSWER, f"{where}: a topic nobody asked to create is there"))
                continue
            if len(topic.partitions) != spec.partitions:
                found.append(
                    Anomaly(WRONG_ANSWER, f"{where}: {len(topic.partitions)} partitions, not {spec.partitions}")
                )
            for part in topic.partitions:
                found += ops.check_code(
                    f"{where}-{part.partition_index}", part.error_code, ops.ALLOWED["metadata-partition"]
                )
        return found

    def _check_epochs(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        found: list[Anomaly] = []
        for topic in response.topics:
            for part in topic.partitions:
                where = f"OffsetForLeaderEpoch v{version} of {topic.topic!r:.60}-{part.partition}"
                found += ops.check_code(where, part.error_code, ops.ALLOWED["epochs"])
                if part.error_code or not self._ours(topic.topic, part.partition):
                    continue
                end = self._end(topic.topic, part.partition)
                if end is not None and not -1 <= part.end_offset <= end:
                    found.append(Anomaly(WRONG_ANSWER, f"{where}: end offset {part.end_offset}, the log ends at {end}"))
        return found

    def _check_init_pid(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        where = f"InitProducerId v{version}"
        found = ops.check_code(where, response.error_code, ops.ALLOWED["init-pid"])
        if response.error_code == ops.NONE:
            if p["transactional_id"] is not None:
                found.append(Anomaly(WRONG_ANSWER, f"{where}: a transactional id was given an id (no transactions)"))
            if not (0 <= response.producer_id < 1 << 47 and 0 <= response.producer_epoch < 1 << 15):
                found.append(
                    Anomaly(
                        WRONG_ANSWER, f"{where}: handed out id {response.producer_id} epoch {response.producer_epoch}"
                    )
                )
        return found

    def _check_api_versions(self, p: dict[str, Any], version: int, response: Any, broker_id: int) -> list[Anomaly]:
        found = ops.check_code(f"ApiVersions v{version}", response.error_code, ops.ALLOWED["api-versions"])
        table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        for api, (low, high) in VERSIONS.items():
            served = table.get(API_KEYS[api])
            if served is None or served[0] > low or served[1] < high:
                found.append(Anomaly(WRONG_ANSWER, f"ApiVersions v{version}: {api} served {served}, not {low}-{high}"))
        return found

    # ------------------------------------------------------------------ whole-request mutations
    def _frame(self, case: Case) -> Outcome:
        p = case.params
        kind = p["kind"]
        rng = np.random.default_rng(int(p["seed"]))
        broker_id = self.cluster.broker_ids[0]
        target: tuple[str, int] | None = None
        if "topic" in p and "partition" in p:
            target = (p["topic"], int(p["partition"]))
            broker_id = self._broker_for(*target)
        try:
            wire = KafkaWire(ops.HOST, self.cluster.kafka_port(broker_id), timeout=CASE_TIMEOUT_S)
        except OSError as exc:
            return Outcome("connect-failed", [], {"error": str(exc)})
        with wire:
            before = self._end(*target) if target is not None and p.get("base") == "produce" else None
            anomalies, label, acked = self._frame_on(wire, p, kind, rng, target)
        if before is not None and target is not None:
            after = self._end(*target, fresh=True)
            anomalies += self._frame_stored(case, target, before, after, acked)
        return Outcome(label, anomalies)

    def _frame_on(
        self, wire: KafkaWire, p: dict[str, Any], kind: str, rng: np.random.Generator, target: tuple[str, int] | None
    ) -> tuple[list[Anomaly], str, int | None]:
        """Send the frame(s) of a ``kafka-frame`` case; findings, a label, the base offset a
        produce got (if acknowledged)."""
        found: list[Anomaly] = []
        if kind in ("huge-size", "negative-size", "tiny-size"):
            wire.send_bytes(int(p["size"]).to_bytes(4, "big", signed=True) + bytes(64))
            got = wire.receive(5.0)
            if got != CLOSED:
                what = "said nothing" if got == SILENT else "answered"
                found.append(
                    Anomaly(WRONG_ANSWER, f"a frame declaring {p['size']} bytes was not refused: the broker {what}")
                )
            return found, f"frame:{got if isinstance(got, str) else 'answered'}", None
        if kind == "garbage-frame":
            wire.send_raw(rng.integers(0, 256, int(p["n"]), dtype=np.uint8).tobytes())
            got = wire.receive(5.0)
            return found, f"frame:{got if isinstance(got, str) else 'answered'}", None
        if kind in ("garbage-body", "unknown-api", "unknown-version"):
            return self._bad_header(wire, p, kind, rng)
        if kind == "api-versions-future":
            version = int(p["version"])
            body = b"\x0esparklog-fuzz\x041.0\x00"
            wire.send_raw(ops.raw_header(18, version, 7, b"fz", flexible=True) + body)
            got = wire.receive(5.0)
            if isinstance(got, str):
                return [Anomaly(WRONG_ANSWER, f"ApiVersions v{version}: {got}, not a v0 answer")], f"frame:{got}", None
            answer = decode_response(18, 0, got, 7)
            if (
                answer.response is None
                or answer.response.error_code != ops.UNSUPPORTED_VERSION
                or not answer.response.api_keys
            ):
                found.append(
                    Anomaly(WRONG_ANSWER, f"ApiVersions v{version}: not v0 UNSUPPORTED_VERSION with the table")
                )
            return found, "frame:answered", None
        if kind == "client-id":
            return self._client_id(wire, p)
        if kind == "pipelined":
            return self._pipelined(wire, p)
        assert target is not None
        request = self._base_request(p["base"], target, rng)
        frame = wire.frame(request)
        correlation = wire.correlation_id
        body = frame[4:]
        n = int(p["n"])
        acked: int | None = None
        if kind == "split-send":
            step = max(n, len(frame) // 50 + 1)
            for at in range(0, len(frame), step):
                if not wire.send_bytes(frame[at : at + step]):
                    break
                time.sleep(0.001)
            got = wire.receive()
            if isinstance(got, str):
                found.append(
                    Anomaly(
                        NO_ANSWER if got == SILENT else UNEXPECTED_ERROR, f"a {p['base']} request sent in pieces: {got}"
                    )
                )
                return found, f"frame:{got}", None
            answer = decode_response(request.API_KEY, request.API_VERSION, got, correlation)
            if answer.response is None:
                return (
                    [Anomaly(WRONG_ANSWER, f"a {p['base']} request sent in pieces: {answer.problem}")],
                    "frame:odd",
                    None,
                )
            acked = self._produce_ack(answer.response) if p["base"] == "produce" else None
            return found, "frame:answered", acked
        if kind == "long-size":
            wire.send_bytes(len(body + bytes(n)).to_bytes(4, "big") + body)
            got = wire.receive(QUIET_S)
            if got != SILENT and got != CLOSED:
                found.append(
                    Anomaly(WRONG_ANSWER, f"a {p['base']} frame {n} bytes short of its declared size was answered")
                )
            return found, f"frame:{got if isinstance(got, str) else 'answered'}", None
        if kind == "short-size":
            declared = max(0, len(body) - n)
            wire.send_bytes(declared.to_bytes(4, "big") + body)
        else:  # trailing
            extra = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            wire.send_raw(body + extra)
        got = wire.receive(5.0)
        if isinstance(got, str):
            return found, f"frame:{got}", None
        answer = decode_response(request.API_KEY, request.API_VERSION, got, correlation)
        if answer.response is not None and p["base"] == "produce":
            acked = self._produce_ack(answer.response)
        return found, "frame:answered", acked

    def _bad_header(
        self, wire: KafkaWire, p: dict[str, Any], kind: str, rng: np.random.Generator
    ) -> tuple[list[Anomaly], str, int | None]:
        found: list[Anomaly] = []
        if kind == "unknown-api":
            key, version = int(p["api_key"]), int(p["version"])
        else:
            key, version = API_KEYS[p["api"]], int(p["version"])
        served = self.served.get(key)
        advertised = served is not None and served[0] <= version <= served[1]
        body = rng.integers(0, 256, int(p.get("n", 8)), dtype=np.uint8).tobytes()
        flexible = kind == "garbage-body" and _flexible(p["api"], version)
        wire.send_raw(ops.raw_header(key, version, 11, b"fz", flexible) + body)
        got = wire.receive(5.0)
        label = f"frame:{got if isinstance(got, str) else 'answered'}"
        if kind == "unknown-version" and key == 18:
            if isinstance(got, str):
                found.append(Anomaly(WRONG_ANSWER, f"ApiVersions v{version}: {got}, not a v0 answer"))
            return found, label, None
        if not advertised and got != CLOSED and self.served:
            what = "said nothing" if got == SILENT else "answered"
            found.append(
                Anomaly(WRONG_ANSWER, f"API {key} v{version} (not advertised) was not refused: the broker {what}")
            )
        if advertised and isinstance(got, bytes):
            answer = decode_response(key, version, got, 11)
            if answer.response is not None:
                found += ops.codes_in(answer.response, f"API {key} v{version} of random bytes")
        return found, label, None

    def _client_id(self, wire: KafkaWire, p: dict[str, Any]) -> tuple[list[Anomaly], str, int | None]:
        version = int(p["version"])
        flexible = version >= 3
        body = b"\x0esparklog-fuzz\x041.0\x00" if flexible else b""
        variant = p["client_id"]
        client: bytes | None = {
            "null": None,
            "empty": b"",
            "long": b"x" * 32767,
            "nul": b"\x00",
            "not-utf8": b"\xff\xfe\xfd",
            "lying-length": b"",
        }[variant]
        header = ops.raw_header(18, version, 3, client, flexible)
        if variant == "lying-length":
            header = ops.raw_header(18, version, 3, b"", False)[:8] + (1000).to_bytes(2, "big") + b"abc"
        wire.send_raw(header + body)
        got = wire.receive(5.0)
        if isinstance(got, str):
            if variant not in ("not-utf8", "lying-length") and got == CLOSED:
                return (
                    [Anomaly(UNEXPECTED_ERROR, f"ApiVersions v{version} with a {variant} client id: closed")],
                    "frame:closed",
                    None,
                )
            return [], f"frame:{got}", None
        answer = decode_response(18, version, got, 3)
        if answer.response is None:
            return (
                [Anomaly(WRONG_ANSWER, f"ApiVersions v{version}, {variant} client id: {answer.problem}")],
                "frame:odd",
                None,
            )
        return (
            ops.check_code(f"ApiVersions v{version}, {variant} client id", answer.response.error_code, {0}),
            "frame:answered",
            None,
        )

    def _pipelined(self, wire: KafkaWire, p: dict[str, Any]) -> tuple[list[Anomaly], str, int | None]:
        topic = p["topic"]
        requests = []
        for api in p["apis"]:
            if api == "api-versions":
                requests.append(ops.api_versions_request(3))
            elif api == "metadata":
                requests.append(ops.metadata_request(12, [topic]))
            elif api == "list-offsets":
                requests.append(ops.list_offsets_request(6, [(topic, 0)], -1))
            else:
                requests.append(ops.fetch_request(12, [(topic, 0, 0)], max_wait_ms=0, min_bytes=1, max_bytes=1 << 16))
        frames, ids = b"", []
        for request in requests:
            frames += wire.frame(request)
            ids.append(wire.correlation_id)
        wire.send_bytes(frames)
        found: list[Anomaly] = []
        for request, correlation in zip(requests, ids, strict=True):
            got = wire.receive()
            if isinstance(got, str):
                kind = NO_ANSWER if got == SILENT else UNEXPECTED_ERROR
                return (
                    [Anomaly(kind, f"{len(requests)} pipelined requests: {got} before the answer to #{correlation}")],
                    "frame:odd",
                    None,
                )
            answer = decode_response(request.API_KEY, request.API_VERSION, got, correlation)
            if answer.response is None:
                found.append(Anomaly(WRONG_ANSWER, f"{len(requests)} pipelined requests: {answer.problem}"))
                break
        return found, "frame:answered", None

    def _base_request(self, base: str, target: tuple[str, int], rng: np.random.Generator) -> Any:
        topic, partition = target
        if base == "produce":
            spec = {"count": 3, "seed": int(rng.integers(0, 1 << 31)), "keys": "all", "value_size": 20}
            data, _ = build(spec, Producer(), now_ms())
            return ops.produce_request(9, 1, 10_000, None, [(topic, partition, data)])
        if base == "metadata":
            return ops.metadata_request(12, [topic])
        if base == "fetch":
            return ops.fetch_request(12, [(topic, partition, 0)], max_wait_ms=0, min_bytes=1, max_bytes=1 << 16)
        return ops.api_versions_request(3)

    @staticmethod
    def _produce_ack(response: Any) -> int | None:
        for topic in response.responses:
            for entry in topic.partition_responses:
                if entry.error_code == 0:
                    return int(entry.base_offset)
        return None

    def _frame_stored(
        self, case: Case, target: tuple[str, int], before: int | None, after: int | None, acked: int | None
    ) -> list[Anomaly]:
        """A produce sent in an odd frame: the log grew only if, and as, it was acknowledged (its
        3 records then join the ledger: their content is not known, being rebuilt by the reader)."""
        if before is None or after is None:
            return []
        delta = after - before
        if acked is None:
            if delta:
                return [
                    Anomaly(
                        STORED_REFUSED, f"{target[0]}-{target[1]}: an unanswered odd frame, the log grew by {delta}"
                    )
                ]
            return []
        if delta != 3 or acked != before:
            return [
                Anomaly(
                    WRONG_ANSWER, f"{target[0]}-{target[1]}: acknowledged at {acked}, the log went {before}->{after}"
                )
            ]
        entry = Entry(target[0], target[1], acked, acked + 2, None, False, case.index, "produce")
        problem = self.ledger.add(entry)
        return [Anomaly(OFFSET_REUSE, problem)] if problem else []

    # ------------------------------------------------------------------ hangs
    def _hang(self, case: Case) -> Outcome:
        p = case.params
        target = (p["topic"], int(p["partition"]))
        broker_id = self._broker_for(*target)
        try:
            wire = KafkaWire(ops.HOST, self.cluster.kafka_port(broker_id), timeout=CASE_TIMEOUT_S)
        except OSError as exc:
            return Outcome("connect-failed", [], {"error": str(exc)})
        kind = p["kind"]
        if kind == "long-poll":
            offset = self._end(*target) or 0
            request = ops.fetch_request(
                11, [(target[0], target[1], offset)], max_wait_ms=int(p["max_wait_ms"]), min_bytes=1, max_bytes=1 << 20
            )
            wire.send_bytes(wire.frame(request))
            time.sleep(LONG_POLL_GRACE_S)
            wire.close()  # the client gives up: the broker must let the connection go
            return Outcome("long-poll-left")
        rng = np.random.default_rng(int(p["seed"]))
        if kind == "half":
            frame = wire.frame(self._base_request(rng.choice(["produce", "metadata", "fetch"]), target, rng))
            cut = min(len(frame) - 1, max(1, int(len(frame) * float(p["cut"]))))
            wire.send_bytes(frame[:cut])
        elif kind == "size-only":
            wire.send_bytes(b"\x00\x00\x01"[: int(rng.integers(1, 4))])
        self.hung.append(wire)
        while len(self.hung) > MAX_HUNG:
            self.hung.popleft().close()
        return Outcome(f"hanging:{kind}")

    # ------------------------------------------------------------------ checks between cases
    def health(self) -> tuple[list[int], list[Anomaly]]:
        """Every live broker's Kafka listener answers ApiVersions and Metadata on a fresh
        connection (after a login case, its SASL listener logs a user in and answers Metadata
        too): the brokers whose listener does not (after a second try), and findings."""
        silent: list[int] = []
        findings: list[Anomaly] = []
        topics = sorted(self.cluster.topics)
        for broker_id in self.cluster.broker_ids:
            if not self.cluster.alive(broker_id):
                continue
            port = self.cluster.kafka_port(broker_id)
            problem, found, table = ops.listener_health(port, topics)
            if problem is not None:
                time.sleep(0.5)
                problem, found, table = ops.listener_health(port, topics)
            if problem is not None:
                silent.append(broker_id)
            findings += found
            if table:
                self.served = table
        sasl_silent, sasl_findings = self.login.health()
        silent += [b for b in sasl_silent if b not in silent]
        return silent, findings + sasl_findings

    def lingering_connections(self) -> list[Anomaly]:
        ports = {self.cluster.kafka_port(b) for b in self.cluster.broker_ids}
        ports |= {self.cluster.sasl_port(b) for b in self.cluster.broker_ids if b in self.cluster.sasl_ports}
        found = self.lingering.look(ports)
        return [
            Anomaly(
                LINGERING,
                f"the Kafka listener on port {port} still holds a connection its client ({remote}) closed "
                f"{age:.0f}+ s ago (a thread and a max.connections.per.ip slot)",
            )
            for port, remote, age in found
        ]


def is_legal_topic_name(name: str) -> bool:
    """Kafka's rule for topic names (1-249 of ASCII letters, digits, '.', '_', '-'; not '.' or '..')."""
    return bool(LEGAL_NAME.fullmatch(name)) and name not in (".", "..")


def _producer_of(data: bytes) -> tuple[int, int, int] | None:
    """A batch's producer id, epoch and first sequence (None: too short to hold them)."""
    if len(data) < HEADER_SIZE:
        return None
    return get_field(data, "producer_id"), get_field(data, "producer_epoch"), get_field(data, "base_sequence")


def next_sequence(first: int, count: int) -> int:
    """The sequence after ``count`` records from ``first``: Kafka's int32 sequences go from
    2147483647 back to 0 (its clients' ``incrementSequence``)."""
    after = first + count
    return after - (1 << 31) if after > (1 << 31) - 1 else after


def _flexible(api: str, version: int) -> bool:
    classes = {
        "produce": ProduceRequest,
        "fetch": FetchRequest,
        "list-offsets": ListOffsetsRequest,
        "metadata": MetadataRequest,
        "epochs": OffsetForLeaderEpochRequest,
        "init-pid": InitProducerIdRequest,
        "api-versions": ApiVersionsRequest,
    }
    return ops.is_flexible(classes[api], version)
