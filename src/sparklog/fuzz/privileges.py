"""The low-privilege mode (``sparklog fuzz --low-privilege``, ``FuzzConfig.low_privilege``): the
cases are sent by an authenticated user whose ACLs cover some topics only, and what comes back must
respect them.

On a secured cluster (``LocalCluster(secure=True)``: SASL_SSL, SCRAM, ACLs) the user :data:`USER`
may Read and Write :data:`OWN`, only Write :data:`DROP`, and do nothing on :data:`SECRET`. The
admin fills every topic the user may not Read with records that carry a marker unique to the run
(:class:`Secrets`: ``TOPSECRET-<run>:<topic>:<partition>:<n>``). Two invariants follow:

- **leak**: no byte returned to the user (record batch buffers, replica-fetch frames decoded,
  app metadata, action answers, error messages) holds the marker, and the topics it may Read never
  come to hold a record carrying it (:class:`ReadableScan` reads them back as admin);
- **unauthorized**: a request its ACLs do not allow is not answered (:class:`Access`): a produce
  acknowledged without Write, a consumer fetch or ``fetch_many`` answered without Read, a replica
  fetch or ``offsets_for_leader_epoch`` naming a replica (ClusterAction: only brokers), a
  ``copy_records`` answered without Read on its source and Write on each target, ``list_offsets``,
  ``offsets_for_leader_epoch`` or ``metadata`` answered about a topic without Describe.

The other way round, a well-formed (unmutated) request its ACLs allow that is refused with
``AUTHORIZATION_FAILED`` is a ``refused-valid`` finding: a broker refusing everything keeps the
two invariants, not its users.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.ipc as ipc

from sparklog.coordination.cluster import ClusterMetadata
from sparklog.fuzz import flight_ops
from sparklog.fuzz.ledger import Entry, Ledger, fingerprint
from sparklog.protocol.record_frames import SCHEMA_FIELD, frame, schema_text
from sparklog.protocol.wire import COPY_RECORDS, LIST_OFFSETS, METADATA, OFFSETS_FOR_LEADER_EPOCH
from sparklog.records import to_record_batch
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.client_config import ClientSecurity
from sparklog.security.credential_store import MIN_ITERATIONS, CredentialStore

if TYPE_CHECKING:
    from sparklog.local_cluster import LocalCluster

USER = "fz-user"
PRINCIPAL = f"User:{USER}"
OWN = "fz-own"  # Read and Write
DROP = "fz-drop"  # Write only (a drop box others write to as well)
SECRET = "fz-secret"  # nothing
READ, WRITE, DESCRIBE = "Read", "Write", "Describe"
GRANTS: dict[str, tuple[str, ...]] = {OWN: (READ, WRITE), DROP: (WRITE,)}
FILL_RECORDS = 50  # per partition of each topic the user may not Read
REPLICA_FETCH = "replica_fetch"
FETCH_MANY = "fetch_many"
USER_READY_TIMEOUT_S = 30.0
SCAN_BYTES = 16 << 20


# ----------------------------------------------------------------------------------- the user
@dataclasses.dataclass(frozen=True)
class Access:
    """What the fuzzing user may do, per topic (an Allow of Read or Write allows Describe too, as
    in Kafka); never ClusterAction (only brokers fetch as replicas)."""

    principal: str
    grants: Mapping[str, tuple[str, ...]]

    def may(self, operation: str, topic: object) -> bool:
        if not isinstance(topic, str):
            return False
        granted = self.grants.get(topic, ())
        return bool(granted) if operation == DESCRIBE else operation in granted

    @property
    def readable(self) -> list[str]:
        return sorted(t for t, ops in self.grants.items() if READ in ops)

    # ------------------------------------------------------------------ answers it must not get
    def fetch_violation(self, body: bytes, got: flight_ops.GetResult, read: str) -> str | None:
        """Why a ``do_get`` answered with ``got`` was not the user's to get (None if it was, or if
        nothing was answered)."""
        request = parse_json(body)
        if request is None or (not got.metadata and not got.batches):
            return None  # nothing answered (refused, or a stream dropped before its first message)
        messages = [parse_json(m) if m else None for m in got.metadata]
        rows = sum(b.num_rows for b in got.batches)
        kind = request.get("type")
        if kind == REPLICA_FETCH:
            answered = rows or any(m is not None and ("hw" in m or "h" in m) for m in messages)
            if not answered:
                return None
            topics = sorted({str(m.get("t")) for m in messages if m is not None and "t" in m and "error" not in m})
            return (
                f"a replica fetch (replica_id {request.get('replica_id')!r:.40}) was answered to {self.principal}, "
                f"which may not fetch as a replica (ClusterAction): {len(got.metadata)} messages, {rows} records, "
                f"partitions of {topics}"
            )
        topic = request.get("topic")
        if kind == FETCH_MANY:
            served = [m for m in messages if m is None or "error" not in m]
            if served and not self.may(READ, topic):
                return f"a fetch_many of topic {topic!r:.80} was answered ({rows} records), which it may not Read"
            return None
        replica_id = request.get("replica_id", -1)
        if _is_int(replica_id) and replica_id >= 0:
            return (
                f"a fetch as replica {replica_id} of {topic!r:.80} was answered ({rows} records) to "
                f"{self.principal}, which may not fetch as a replica (ClusterAction)"
            )
        if not self.may(READ, topic):
            return f"a fetch of topic {topic!r:.80} was answered ({rows} records), which it may not Read"
        return None

    def action_violation(self, name: str, body: bytes, result: flight_ops.ActionResult) -> str | None:
        """Why an action's answer was not the user's to get (None if it was, or none came)."""
        if result.error is not None:
            return None
        request = parse_json(body)
        try:
            answer = result.json()
        except ValueError:
            return None
        if request is None or not isinstance(answer, dict):
            return None
        if name == LIST_OFFSETS:
            items = request.get("partitions")
            if items is None:
                if not self.may(DESCRIBE, request.get("topic")):
                    return f"list_offsets of topic {request.get('topic')!r:.80} answered without Describe"
                return None
            results = answer.get("results")
            for item, got in zip(items if isinstance(items, list) else [], results or [], strict=False):
                topic = item.get("topic") if isinstance(item, dict) else None
                if isinstance(got, dict) and "error" not in got and not self.may(DESCRIBE, topic):
                    return f"list_offsets of many partitions answered topic {topic!r:.80} without Describe"
            return None
        if name == OFFSETS_FOR_LEADER_EPOCH:
            replica_id = request.get("replica_id", -1)
            if _is_int(replica_id) and replica_id >= 0:
                return f"offsets_for_leader_epoch as replica {replica_id} answered (ClusterAction: brokers only)"
            if not self.may(DESCRIBE, request.get("topic")):
                return f"offsets_for_leader_epoch of topic {request.get('topic')!r:.80} answered without Describe"
            return None
        if name == COPY_RECORDS:
            source = request.get("topic")
            slices = request.get("slices")
            targets = sorted(
                {str(s.get("topic")) for s in slices if isinstance(s, dict)} if isinstance(slices, list) else set()
            )
            missing = [] if self.may(READ, source) else [f"Read on the source {source!r:.80}"]
            missing += [f"Write on the target {t!r:.80}" for t in targets if not self.may(WRITE, t)]
            if missing:
                return f"copy_records from {source!r:.80} to {targets} answered without " + " and ".join(missing)
            return None
        if name == METADATA:
            topics = answer.get("topics")
            for entry in topics if isinstance(topics, list) else []:
                if isinstance(entry, dict) and "error" not in entry and not self.may(DESCRIBE, entry.get("name")):
                    return f"metadata described topic {entry.get('name')!r:.80} without Describe"
        return None

    # ------------------------------------------------------------------ requests it may make
    def fetch_permitted(self, body: bytes) -> bool:
        """Whether the user's ACLs allow a ``do_get`` with this ticket (never a replica's)."""
        request = parse_json(body)
        if request is None or request.get("type") == REPLICA_FETCH:
            return False
        replica_id = request.get("replica_id", -1)
        if request.get("type") != FETCH_MANY and _is_int(replica_id) and replica_id >= 0:
            return False
        return self.may(READ, request.get("topic"))

    def action_permitted(self, name: str, body: bytes) -> bool:
        """Whether the user's ACLs allow this action as a whole (a request of many partitions: each of them)."""
        request = parse_json(body)
        if request is None:
            return False
        if name == LIST_OFFSETS:
            items = request.get("partitions")
            if items is None:
                return self.may(DESCRIBE, request.get("topic"))
            return isinstance(items, list) and all(
                isinstance(i, dict) and self.may(DESCRIBE, i.get("topic")) for i in items
            )
        if name == OFFSETS_FOR_LEADER_EPOCH:
            replica_id = request.get("replica_id", -1)
            return not (_is_int(replica_id) and replica_id >= 0) and self.may(DESCRIBE, request.get("topic"))
        if name == COPY_RECORDS:
            slices = request.get("slices")
            return (
                self.may(READ, request.get("topic"))
                and isinstance(slices, list)
                and all(isinstance(s, dict) and self.may(WRITE, s.get("topic")) for s in slices)
            )
        return name == METADATA  # a topic it may not Describe is an error entry, not a refusal

    def produce_violation(self, topic: str, acked: int) -> str | None:
        if acked and not self.may(WRITE, topic):
            return f"{acked} batch(es) acknowledged on topic {topic!r:.80}, which it may not Write"
        return None


ACCESS = Access(PRINCIPAL, GRANTS)


def parse_json(data: bytes | None) -> dict[str, Any] | None:
    """``data`` as the broker parses it, if it is a JSON object."""
    if not data:
        return None
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def bindings() -> list[AclBinding]:
    return [
        AclBinding.parse(ResourcePattern.parse("topic", topic), PRINCIPAL, "*", operation, "Allow")
        for topic, operations in GRANTS.items()
        for operation in operations
    ]


def create_user(cluster: LocalCluster) -> ClientSecurity:
    """:data:`USER` with a random password and its ACLs, in the secured cluster's ZooKeeper (as
    :mod:`sparklog.security.local_setup` adds ``admin``); its client settings."""
    security = cluster.security
    assert security is not None, "the low-privilege mode needs a secured cluster"
    password = secrets.token_urlsafe(18)
    with ClusterMetadata(cluster.zookeeper, digest=security.zookeeper_digest) as meta:
        CredentialStore(meta.zk, meta.layout).upsert(USER, password, iterations=MIN_ITERATIONS)
        AclStore(meta.zk, meta.layout).add(bindings())
    return ClientSecurity(
        "SASL_SSL",
        ca_location=str(security.ca.certificate.resolve()),
        username=USER,
        password=password,
    )


def wait_for_user(locations: list[str], user: flight_ops.Connector, timeout: float = USER_READY_TIMEOUT_S) -> None:
    """Until every broker knows the user and its ACLs: its ``metadata`` of the topics it was
    granted comes back without an error entry (cluster actions: any broker answers them)."""
    deadline = time.monotonic() + timeout
    body = json.dumps({"topics": sorted(GRANTS)}).encode()
    for location in locations:
        while True:
            result = flight_ops.action(location, METADATA, body, timeout=10.0, via=user)
            try:
                topics = result.json()["topics"] if result.error is None else None
            except (ValueError, KeyError, TypeError):
                topics = None
            if isinstance(topics, list) and len(topics) == len(GRANTS) and all("error" not in t for t in topics):
                break
            if time.monotonic() > deadline:
                why = result.error.message if result.error is not None else f"answered {result.bodies[:1]!r:.300}"
                raise RuntimeError(f"{PRINCIPAL} cannot describe {sorted(GRANTS)} on {location}: {why}")
            time.sleep(0.2)


# ----------------------------------------------------------------------------------- the secrets
_RECORD = re.compile(rb":([A-Za-z0-9._-]{1,249}):(\d{1,10}):(\d{1,10})")


class Secrets:
    """The marker of the admin's records in the topics the user may not Read, and where it is found."""

    def __init__(self, run: str | None = None) -> None:
        self.run = run or uuid.uuid4().hex[:16]
        self.marker = f"TOPSECRET-{self.run}".encode()

    def batch(self, topic: str, partition: int, count: int = FILL_RECORDS) -> pa.RecordBatch:
        values = [self.marker + f":{topic}:{partition}:{n}".encode() + b"." * 40 for n in range(count)]
        keys = [self.marker + f":{topic}:{partition}:{n}".encode() for n in range(count)]
        return pa.RecordBatch.from_pydict({"key": keys, "value": values})

    # ------------------------------------------------------------------ scanning
    def find(self, data: bytes | memoryview | pa.Buffer, where: str) -> list[str]:
        """Each record named by a marker in ``data`` (at most 5), described with ``where``."""
        raw = data.to_pybytes() if isinstance(data, pa.Buffer) else bytes(data)
        hits: list[str] = []
        start = raw.find(self.marker)
        while start >= 0 and len(hits) < 5:
            match = _RECORD.match(raw, start + len(self.marker))
            record = (
                f"{match.group(1).decode()}-{int(match.group(2))} record {int(match.group(3))}"
                if match
                else "a secret record"
            )
            hits.append(f"{record} ({where})")
            start = raw.find(self.marker, start + len(self.marker))
        return hits

    def scan_batch(self, batch: pa.RecordBatch, where: str) -> list[str]:
        """Every buffer of every column of a received batch (validated already), raw."""
        hits: list[str] = []
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            for buffer in column.buffers():
                if buffer is not None and buffer.size:
                    hits += self.find(buffer, f"{where}, column {name!r}")
        return _unique(hits)

    def scan_get(self, got: flight_ops.GetResult, what: str) -> list[str]:
        """A fetch's answer: its batches, its app metadata raw and, where the metadata is a frame (a
        replica fetch's stored batches travel so), the batch it holds decoded (compressed or not)."""
        hits: list[str] = []
        for i, batch in enumerate(got.batches):
            hits += self.scan_batch(batch, f"{what}, message {i}")
        for i, meta in enumerate(got.metadata):
            if meta:
                hits += self.find(meta, f"{what}, app metadata of message {i}")
                for inner in _ipc_batches(meta):
                    hits += self.scan_batch(inner, f"{what}, the stored batch in app metadata of message {i}")
        if got.error is not None:
            hits += self.find(got.error.message.encode(errors="replace"), f"{what}, its error")
        return _unique(hits)

    def scan_bytes(self, chunks: Iterable[bytes | None], what: str) -> list[str]:
        hits: list[str] = []
        for chunk in chunks:
            if chunk:
                hits += self.find(chunk, what)
        return _unique(hits)


def _ipc_batches(value: bytes | None) -> list[pa.RecordBatch]:
    """The batches of an Arrow IPC stream at the start of ``value`` (bytes after its end marker
    ignored), none if it holds none."""
    if not value:
        return []
    try:
        return list(ipc.open_stream(pa.py_buffer(value)))
    except Exception:  # not an IPC stream: its raw bytes were scanned
        return []


def _unique(hits: list[str]) -> list[str]:
    return list(dict.fromkeys(hits))


class TopicShape(Protocol):
    name: str
    partitions: int


class AdminView(Protocol):
    """What filling and scanning need of the fuzzed cluster (:class:`~sparklog.fuzz.cluster.FuzzCluster`):
    its topics, where a partition's leader is, a partition's offsets, and the admin's connections."""

    admin: flight_ops.Connector

    @property
    def topics(self) -> Mapping[str, TopicShape]: ...

    def leader_location(self, topic: str, partition: int) -> str: ...

    def offsets(self, topic: str, partition: int) -> dict[str, Any] | None: ...


def fill(cluster: AdminView, secret: Secrets) -> list[Entry]:
    """The admin writes :data:`FILL_RECORDS` marked records to each partition of every topic the
    user may not Read; their ledger entries (they must read back like any acknowledged record)."""
    entries: list[Entry] = []
    for spec in cluster.topics.values():
        if ACCESS.may(READ, spec.name):
            continue
        for partition in range(spec.partitions):
            batch = secret.batch(spec.name, partition)
            command = {"type": "produce", "topic": spec.name, "partition": partition, "acks": "all"}
            descriptor = json.dumps({**command, SCHEMA_FIELD: schema_text(batch.schema)})
            result = flight_ops.put(
                cluster.leader_location(spec.name, partition),
                descriptor.encode(),
                [frame(batch).to_pybytes()],
                read_acks=True,
                via=cluster.admin,
            )
            ack = parse_json(result.acks[0]) if result.acks and result.acks[0] else None
            if result.error is not None or ack is None:
                problem = result.error.message if result.error else "no acknowledgement"
                raise RuntimeError(f"the admin could not fill {spec.name}-{partition}: {problem}")
            expected = fingerprint(to_record_batch(batch, now=0))
            expected.timestamp[:] = 0
            base, last = int(ack["base_offset"]), int(ack["last_offset"])
            entries.append(Entry(spec.name, partition, base, last, expected, False, -1, "fill"))
    return entries


# ----------------------------------------------------------------------------------- readable topics
class ReadableScan:
    """The topics the user may Read, read back as admin from where the previous scan stopped: a
    record carrying the marker there is a leak (``copy_records`` moved it in), named with the
    ledger's copy that covers it when there is one."""

    def __init__(self, secret: Secrets) -> None:
        self.secret = secret
        self.position: dict[tuple[str, int], int] = {}

    def reset(self) -> None:
        self.position.clear()

    def check(self, cluster: AdminView, ledger: Ledger) -> list[str]:
        found: list[str] = []
        for topic in ACCESS.readable:
            spec = cluster.topics.get(topic)
            for partition in range(spec.partitions if spec else 0):
                found += self._partition(cluster, ledger, topic, partition)
        return found

    def _partition(self, cluster: AdminView, ledger: Ledger, topic: str, partition: int) -> list[str]:
        offsets = cluster.offsets(topic, partition)
        if offsets is None:
            return []  # the read-back checks report a partition nobody answers for
        start, end = int(offsets["log_start_offset"]), int(offsets["high_watermark"])
        position = self.position.get((topic, partition), start)
        if position > end:  # truncated (an unclean election): read again from its start
            position = start
        position = max(position, start)
        found: list[str] = []
        while position < end:
            ticket = json.dumps(
                {"topic": topic, "partition": partition, "offset": position, "max_bytes": SCAN_BYTES, "max_wait_ms": 0}
            ).encode()
            got = flight_ops.get(cluster.leader_location(topic, partition), ticket, timeout=60.0, via=cluster.admin)
            if got.error is not None or got.invalid or not any(b.num_rows for b in got.batches):
                break  # the read-back checks report unreadable partitions; scanned again next time
            last = position
            for batch in got.batches:
                if not batch.num_rows:
                    continue
                hits = self.secret.scan_batch(batch, f"{topic}-{partition}")
                if hits:
                    found.append(self._describe(ledger, topic, partition, batch, hits))
                last = max(last, int(batch.column("offset")[batch.num_rows - 1].as_py()))
            if last + 1 <= position:
                break
            position = last + 1
        self.position[(topic, partition)] = position
        return found

    def _describe(self, ledger: Ledger, topic: str, partition: int, batch: pa.RecordBatch, hits: list[str]) -> str:
        marker = self.secret.marker
        offsets = batch.column("offset").to_pylist()
        names = batch.schema.names
        columns = [batch.column(n).to_pylist() for n in ("key", "value") if n in names]
        rows = [
            offsets[i]
            for i in range(batch.num_rows)
            if any(isinstance(c[i], bytes) and marker in c[i] for c in columns)
        ]
        at = f"offsets {rows[0]}..{rows[-1]} ({len(rows)} records)" if rows else f"the batch at offset {offsets[0]}"
        cases = sorted(
            {
                e.case_index
                for e in ledger.entries.get((topic, partition), [])
                if rows and e.base <= rows[-1] and rows[0] <= e.last
            }
        )
        by = f", stored by case(s) {', '.join(f'#{c}' for c in cases)}" if cases else ""
        return f"{topic}-{partition}, which {PRINCIPAL} may Read, holds secret records at {at}{by}: {hits[0]}"
