"""The Kafka-protocol fuzzer's cases (``sparklog fuzz --kafka``) and the hypothesis strategies that
draw them: plain data, applied by :mod:`sparklog.fuzz.kafka_ops`.

- ``kafka-produce``: a Produce request (kafka-python's generated classes, a served version) of
  1-3 partitions, each carrying a record batch (:mod:`sparklog.fuzz.kafka_batches`: sparklog's
  encoder or kafka-python's ``DefaultRecordBatchBuilder``, any codec), acks 0, 1 or -1, for an
  idempotent producer (ids from InitProducerId; the next batch, the last one again, one skipping
  sequences, an epoch bumped, a new stream starting just below 2147483647 so that its sequences
  wrap to 0) or none; about half of the batches mutated (flipped, cut or extended
  bytes, CRC computed again or not, header fields that lie, attribute bits, compression bombs),
  a few requests with odd acks, timeouts, transactional ids, topics, partitions or records.
- ``kafka-frame``: whole-request mutations: random bytes after a valid header, frames cut or
  declaring sizes above ``socket.request.max.bytes``, below a header or negative, unknown API keys
  and versions, ApiVersions from the future, odd client ids, bytes after a valid request,
  pipelined requests, a request sent a few bytes at a time.
- ``kafka-query``: Fetch, ListOffsets, Metadata, OffsetForLeaderEpoch, InitProducerId and
  ApiVersions with hostile fields (negative or huge offsets, max_bytes 0 or huge, unknown topics
  and partitions, absurd epochs, odd isolation levels and replica ids, many topics); a Metadata
  request may create the odd topics it names (``auto.create.topics.enable``), a few legal names
  and the illegal ones it must refuse.
- ``kafka-hang``: a connection that sends half a request (or nothing) and stays open while the
  next cases run, or a long-poll fetch its client leaves.
- ``kafka-login``: a sequence of 1-6 steps on one connection to a broker's SASL_PLAINTEXT listener
  (sometimes its PLAINTEXT one, where any SASL request must be refused cleanly), judged by
  :mod:`sparklog.fuzz.kafka_login`: logins (SCRAM-SHA-256 or PLAIN as ``fz-user``, ``fz-other``,
  ``fz-long`` or users nobody created; right, wrong, empty, prefixed or control-character
  passwords; mechanisms not enabled or garbage; a handshake, ApiVersions or Metadata in the middle
  of a login, or Metadata sent with its last message; SCRAM's client-first or client-final
  flipped, cut or extended, with a wrong nonce, channel binding or proof, an authorization id,
  extensions, the client-final of an earlier login replayed; messages padded to just below or
  above 4096 bytes), a SaslHandshake or SaslAuthenticate
  on its own (before a handshake, after a login, in unserved versions), other requests (Metadata,
  Fetch, ListOffsets, ApiVersions, and before a login Produce, InitProducerId and a Metadata that
  would create a topic), frames around 512 KiB, and waits until a session's lifetime
  (``connections.max.reauth.ms``) is over. Passwords are symbolic (``right``, ``wrong``, ...),
  resolved against the cluster's users when the case is applied.

Symbolic values resolved when a case is applied: offsets ``$end``, ``$end+1``, ``$start``,
``$mid`` (the partition's log then) and epochs ``$epoch``, ``$epoch+1`` (its leader epoch).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from sparklog.fuzz import cases
from sparklog.fuzz.kafka_batches import BOMB_KINDS, DELTAS, FIELDS, IGNORED_FIELDS, TIMESTAMP_MODES
from sparklog.fuzz.kafka_sasl import FUZZ_USER, LONG_USER, MECHANISMS, OTHER_USER, PLAIN, SCRAM, USERS
from sparklog.fuzz.strategies import SEEDS, weighted
from sparklog.kafka.listener_security import SASL_MAX_RECEIVE_BYTES
from sparklog.security.sasl_exchange import MAX_MESSAGE

KAFKA_PRODUCE = "kafka-produce"
KAFKA_FRAME = "kafka-frame"
KAFKA_QUERY = "kafka-query"
KAFKA_HANG = "kafka-hang"
KAFKA_LOGIN = "kafka-login"
KAFKA_KINDS = (KAFKA_PRODUCE, KAFKA_FRAME, KAFKA_QUERY, KAFKA_HANG, KAFKA_LOGIN)

# the versions the listener serves (docs/kafka-protocol.md); a case names others on purpose only
VERSIONS = {
    "produce": (3, 12),
    "fetch": (4, 12),
    "list-offsets": (1, 6),
    "metadata": (0, 12),
    "epochs": (2, 4),
    "init-pid": (0, 5),
    "api-versions": (0, 4),
}
API_KEYS = {
    "produce": 0,
    "fetch": 1,
    "list-offsets": 2,
    "metadata": 3,
    "epochs": 23,
    "init-pid": 22,
    "api-versions": 18,
}

INT32 = (-(1 << 31), -1, 0, 1, (1 << 31) - 1)
INT64 = (-(1 << 63), -1, 0, 1, (1 << 31), (1 << 63) - 1)
ODD_TOPICS = (
    "",
    "no-such-topic",
    "fz-plain ",
    "FZ-PLAIN",
    "..",
    "a" * 249,
    "a" * 300,
    "tópico",
    "t\x00",
    "__consumer_offsets",
)


@dataclasses.dataclass(frozen=True)
class KafkaTopology:
    """The topics under test: partitions, and which are compacted, small (max.message.bytes) or
    stamp the broker's time; the broker ids."""

    topics: dict[str, int]
    compacted: frozenset[str]
    small: frozenset[str]
    brokers: tuple[int, ...]


def is_kafka_case(case: cases.Case) -> bool:
    return case.kind in KAFKA_KINDS


# ----------------------------------------------------------------------------------------- produce
@st.composite
def records_spec(draw: st.DrawFn, compacted: bool, small: bool) -> dict[str, Any]:
    count = weighted(
        draw, [(6, draw(st.integers(1, 10))), (3, draw(st.integers(11, 200))), (1, draw(st.integers(201, 2000)))]
    )
    value_size = weighted(draw, [(4, draw(st.integers(0, 64))), (1, draw(st.integers(65, 2048)))])
    if small:
        value_size = min(value_size, 48_000 // max(1, count))
    keys = weighted(draw, [(6, "all"), (1, "some"), (1, "none"), (1, "empty")]) if not compacted else "all"
    if compacted and not draw(st.integers(0, 19)):
        keys = "some"  # refused: a compacted topic's records need keys
    return {
        "count": count,
        "seed": draw(SEEDS),
        "keys": keys,
        "key_space": weighted(draw, [(2, 4), (2, 50), (1, 100_000)]),
        "value_size": value_size,
        "null_values": weighted(draw, [(5, False), (1, True)]),
        "headers": weighted(draw, [(4, 0), (2, 1), (1, 3)]),
        "timestamp": weighted(draw, [(12, "now"), (2, "same"), (2, "past")] + [(1, m) for m in TIMESTAMP_MODES]),
        "deltas": weighted(draw, [(40, "ok")] + [(1, d) for d in DELTAS if d != "ok"]),
        "builder": weighted(draw, [(1, "sparklog"), (1, "kafka-python")]),
        "codec": weighted(draw, [(4, 0), (1, 1), (1, 2), (1, 3), (1, 4)]),
    }


FIELD_LIES: dict[str, tuple[int, ...]] = {
    "batch_length": (-1, 0, 48, 49, 1 << 20, (1 << 31) - 1, -(1 << 31)),
    "records_count": (-1, 0, 2, (1 << 31) - 1, -(1 << 31), 100_000),
    "last_offset_delta": (-1, 0, 1, 1000, (1 << 31) - 1),
    "magic": (0, 1, 3, -1, 127),
    "producer_id": (-2, 0, 1 << 47, (1 << 63) - 1, -(1 << 63)),
    "producer_epoch": (-1, -2, (1 << 15) - 1, -(1 << 15)),
    "base_sequence": (-2, (1 << 31) - 1, -(1 << 31)),
    "base_timestamp": (0, -1, (1 << 63) - 1, -(1 << 63), 1 << 62),
    "max_timestamp": (0, -1, (1 << 63) - 1, -(1 << 63)),
    "base_offset": (0, 12345, -1, (1 << 63) - 1),
    "leader_epoch": (-1, 0, 7, (1 << 31) - 1),
    "crc": (0, 0xFFFFFFFF),
}
assert set(FIELD_LIES) <= set(FIELDS) and set(IGNORED_FIELDS) <= set(FIELD_LIES)


@st.composite
def mutation(draw: st.DrawFn, small: bool) -> dict[str, Any]:
    """One mutation of a batch (:func:`sparklog.fuzz.kafka_batches.mutate`)."""
    op = weighted(
        draw,
        [
            (5, "flip"),
            (3, "cut"),
            (2, "extend"),
            (5, "field"),
            (2, "attributes"),
            (1, "codec"),
            (1, "section"),
            (1, "two-batches"),
            (3, "bomb"),
        ],
    )
    m: dict[str, Any] = {"op": op, "seed": draw(SEEDS), "crc": draw(st.booleans())}
    if op == "flip":
        m["where"] = weighted(draw, [(1, "any"), (1, "header"), (2, "section")])
        m["n"] = weighted(draw, [(4, 1), (2, 2), (1, 8)])
    elif op == "cut":
        m["keep"] = draw(st.floats(0.0, 0.999))
        m["fix"] = draw(st.booleans())
    elif op == "extend":
        m["n"] = weighted(draw, [(3, draw(st.integers(1, 8))), (1, draw(st.integers(9, 4096)))])
        m["fix"] = draw(st.booleans())
    elif op == "field":
        field = draw(st.sampled_from(sorted(FIELD_LIES)))
        m["field"] = field
        m["value"] = draw(st.one_of(st.sampled_from(FIELD_LIES[field]), st.integers(-(1 << 31), (1 << 31) - 1)))
        m["crc"] = field not in ("crc", *IGNORED_FIELDS) and draw(st.integers(0, 3)) > 0
    elif op == "attributes":
        m["bits"] = draw(st.sampled_from([0x08, 0x10, 0x20, 0x30, 0x40, 0x80, 0x100, 0x4000, -0x8000]))
        m["crc"] = draw(st.integers(0, 3)) > 0
    elif op == "codec":
        m["codec"] = draw(st.integers(0, 7))
        m["crc"] = draw(st.integers(0, 3)) > 0
    elif op == "section":
        m["n"] = draw(st.integers(0, 600))
    elif op == "bomb":
        kinds = BOMB_KINDS if small else ("zeros", "declares")
        m["kind"] = draw(st.sampled_from(kinds))
        m["codec"] = draw(st.integers(1, 4))
        m["factor"] = draw(st.sampled_from([1.5, 2.0, 4.0] if small else [1.25, 2.0]))
        m["crc"] = draw(st.integers(0, 5)) > 0
    return m


@st.composite
def produce_part(draw: st.DrawFn, topology: KafkaTopology, mutated: bool, odd: bool) -> dict[str, Any]:
    names = sorted(topology.topics)
    if odd and not draw(st.integers(0, 2)):
        topic = draw(st.sampled_from(ODD_TOPICS))
        partition = draw(st.sampled_from([0, 1, -1, 1 << 20, -(1 << 31)]))
    else:
        topic = draw(st.sampled_from(names))
        partition = draw(st.integers(0, topology.topics[topic] - 1))
        if odd and not draw(st.integers(0, 2)):
            partition = draw(st.sampled_from([-1, topology.topics[topic], (1 << 31) - 1]))
    small = topic in topology.small
    spec: Any = draw(records_spec(topic in topology.compacted, small))
    if odd and not draw(st.integers(0, 3)):
        spec = draw(st.sampled_from([None, "empty"]))
    return {
        "topic": topic,
        "partition": partition,
        "records": spec,
        "idempotence": weighted(draw, [(6, "none"), (5, "next"), (2, "dup"), (1, "gap"), (1, "bump"), (1, "wrap")]),
        "producer": draw(st.integers(0, 2)),
        "mutation": draw(mutation(small)) if mutated else None,
    }


@st.composite
def produce_case(draw: st.DrawFn, topology: KafkaTopology) -> cases.Case:
    shape = weighted(draw, [(9, "well-formed"), (9, "mutated"), (2, "odd")])
    n = weighted(draw, [(6, 1), (2, 2), (1, 3)])
    parts: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for i in range(n):
        mutated = shape == "mutated" and (i == 0 or draw(st.booleans()))
        part = draw(produce_part(topology, mutated, shape == "odd"))
        if (part["topic"], part["partition"]) not in seen:  # one entry per partition
            seen.add((part["topic"], part["partition"]))
            parts.append(part)
    acks = weighted(draw, [(5, 1), (4, -1), (2, 0)])
    timeout = 10_000
    transactional_id = None
    if shape == "odd":
        acks = weighted(draw, [(3, acks), (1, draw(st.sampled_from([2, -2, 100, -32768, 32767])))])
        timeout = draw(st.sampled_from([10_000, 0, -1, (1 << 31) - 1, -(1 << 31)]))
        transactional_id = weighted(draw, [(4, None), (1, "tx-1"), (1, "")])
    low, high = VERSIONS["produce"]
    params = {
        "version": draw(st.integers(low, high)),
        "acks": acks,
        "timeout_ms": timeout,
        "transactional_id": transactional_id,
        "parts": parts,
    }
    return cases.Case(KAFKA_PRODUCE, params)


# ----------------------------------------------------------------------------------------- frames
FRAME_KINDS = (
    "garbage-body",  # a served API's header, then random bytes
    "garbage-frame",  # random bytes as a whole frame
    "huge-size",  # a frame declaring more than socket.request.max.bytes
    "negative-size",
    "tiny-size",  # fewer bytes than a request header
    "short-size",  # a valid request whose frame declares fewer bytes than it has
    "long-size",  # a valid request whose frame declares more (then the client closes)
    "trailing",  # bytes after a valid request, within its frame
    "unknown-api",
    "unknown-version",
    "api-versions-future",
    "client-id",
    "pipelined",
    "split-send",
)


@st.composite
def frame_case(draw: st.DrawFn, topology: KafkaTopology) -> cases.Case:
    kind = draw(st.sampled_from(FRAME_KINDS))
    names = sorted(topology.topics)
    params: dict[str, Any] = {"kind": kind, "seed": draw(SEEDS)}
    if kind in ("garbage-body", "unknown-version"):
        params["api"] = draw(st.sampled_from(sorted(VERSIONS)))
    if kind == "garbage-body":
        low, high = VERSIONS[params["api"]]
        params["version"] = draw(st.integers(low, high))
        params["n"] = weighted(draw, [(4, draw(st.integers(0, 64))), (1, draw(st.integers(65, 20_000)))])
    elif kind == "garbage-frame":
        params["n"] = draw(st.integers(8, 2000))
    elif kind == "huge-size":
        params["size"] = draw(st.sampled_from([100 * (1 << 20) + 1, 1 << 30, (1 << 31) - 1]))
    elif kind == "negative-size":
        params["size"] = draw(st.sampled_from([-1, -2, -(1 << 31), -100]))
    elif kind == "tiny-size":
        params["size"] = draw(st.integers(0, 7))
    elif kind in ("short-size", "long-size", "trailing", "split-send"):
        params["base"] = draw(st.sampled_from(["produce", "metadata", "fetch", "api-versions"]))
        params["topic"] = draw(st.sampled_from(names))
        params["partition"] = draw(st.integers(0, topology.topics[params["topic"]] - 1))
        params["n"] = weighted(draw, [(3, draw(st.integers(1, 16))), (1, draw(st.integers(17, 5000)))])
    elif kind == "unknown-api":
        params["api_key"] = draw(st.sampled_from([-1, -32768, 4, 5, 6, 7, 44, 68, 1000, 32767]))
        params["version"] = draw(st.integers(0, 20))
    elif kind == "unknown-version":
        low, high = VERSIONS[params["api"]]
        params["version"] = draw(st.sampled_from([low - 1, high + 1, high + 5, 127, 32767, -1, -32768]))
    elif kind == "api-versions-future":
        params["version"] = draw(st.sampled_from([5, 6, 100, 32767, -1]))
    elif kind == "client-id":
        params["client_id"] = draw(st.sampled_from(["null", "empty", "long", "nul", "not-utf8", "lying-length"]))
        params["version"] = draw(st.integers(0, 4))
    elif kind == "pipelined":
        params["apis"] = draw(
            st.lists(st.sampled_from(["api-versions", "metadata", "list-offsets", "fetch"]), min_size=2, max_size=8)
        )
        params["topic"] = draw(st.sampled_from(names))
    return cases.Case(KAFKA_FRAME, params)


# ----------------------------------------------------------------------------------------- queries
OFFSETS = ("$end", "$end", "$start", "$mid", "$end+1", *INT64, -2)
EPOCHS = ("$epoch", "$epoch", "$epoch+1", -1, -2, 0, (1 << 31) - 1, -(1 << 31))


@st.composite
def target(draw: st.DrawFn, topology: KafkaTopology) -> tuple[str, int]:
    if draw(st.integers(0, 5)):
        topic = draw(st.sampled_from(sorted(topology.topics)))
        return topic, draw(
            weighted(
                draw, [(8, st.integers(0, topology.topics[topic] - 1)), (1, st.sampled_from([-1, 99, (1 << 31) - 1]))]
            )
        )
    return draw(st.sampled_from(ODD_TOPICS)), draw(st.sampled_from([0, -1, 3]))


@st.composite
def query_case(draw: st.DrawFn, topology: KafkaTopology) -> cases.Case:
    api = weighted(
        draw, [(6, "fetch"), (3, "list-offsets"), (3, "metadata"), (3, "epochs"), (2, "init-pid"), (1, "api-versions")]
    )
    low, high = VERSIONS[api]
    params: dict[str, Any] = {"api": api, "version": draw(st.integers(low, high))}
    targets = draw(st.lists(target(topology), min_size=1, max_size=weighted(draw, [(4, 1), (2, 3), (1, 6)])))
    params["targets"] = [list(t) for t in targets]
    if api == "fetch":
        params |= {
            "offset": draw(st.sampled_from(OFFSETS)),
            "partition_max_bytes": draw(st.sampled_from([1 << 20, 1 << 20, 0, 1, 100, *INT32])),
            "max_bytes": draw(st.sampled_from([1 << 20, 1 << 20, 0, 1, 1000, *INT32])),
            "min_bytes": draw(st.sampled_from([1, 1, 0, -1, 1 << 20, (1 << 31) - 1])),
            "max_wait_ms": draw(st.sampled_from([0, 0, 10, 100, -1, -(1 << 31)])),
            "isolation_level": draw(st.sampled_from([0, 0, 1, 2, -1, 127])),
            "current_leader_epoch": draw(st.sampled_from(EPOCHS)),
            "last_fetched_epoch": draw(st.sampled_from([-1, -1, *EPOCHS])),
            "log_start_offset": draw(st.sampled_from([-1, 0, (1 << 63) - 1])),
            "replica_id": draw(st.sampled_from([-1, -1, -2, 0, 1, 2, 3, 1000])),
            "session_id": draw(st.sampled_from([0, 0, 1, -1, (1 << 31) - 1])),
            "session_epoch": draw(st.sampled_from([-1, -1, 0, 1, (1 << 31) - 1])),
            "forgotten": draw(st.booleans()),
            "rack_id": draw(st.sampled_from(["", "rack-1", "x" * 1000])),
        }
    elif api == "list-offsets":
        params |= {
            "timestamp": draw(st.sampled_from([-1, -2, -3, -4, -5, 0, 1_000_000_000_000, "$now", *INT64])),
            "current_leader_epoch": draw(st.sampled_from(EPOCHS)),
            "isolation_level": draw(st.sampled_from([0, 1, 2, -1])),
            "replica_id": draw(st.sampled_from([-1, -1, -2, 0, 1, 99])),
        }
    elif api == "metadata":
        params |= {
            "topics": weighted(draw, [(3, "targets"), (2, "all"), (1, "empty"), (1, "many")]),
            "auto_create": draw(st.booleans()),
            "authorized_operations": draw(st.booleans()),
        }
        if params["topics"] == "many":  # a thousand names nobody created: asked without creating them
            params |= {"version": draw(st.integers(4, high)), "auto_create": False}
    elif api == "epochs":
        params |= {
            "leader_epoch": draw(st.sampled_from(EPOCHS)),
            "current_leader_epoch": draw(st.sampled_from(EPOCHS)),
            "replica_id": draw(st.sampled_from([-1, -2, 0, 1, 99])),
        }
    elif api == "init-pid":
        params |= {
            "transactional_id": weighted(draw, [(4, None), (1, "tx"), (1, ""), (1, "t" * 3000)]),
            "timeout_ms": draw(st.sampled_from([60_000, 0, -1, (1 << 31) - 1])),
            "producer_id": draw(st.sampled_from([-1, -1, 0, 1, (1 << 47) - 1, 1 << 47, *INT64])),
            "producer_epoch": draw(st.sampled_from([-1, -1, 0, 1, (1 << 15) - 2, (1 << 15) - 1, -(1 << 15)])),
        }
    else:
        params |= {
            "software_name": draw(st.sampled_from(["sparklog-fuzz", "", "a" * 300, "név", "x y"])),
            "software_version": draw(st.sampled_from(["1.0", "", "-", "1" * 300])),
        }
    return cases.Case(KAFKA_QUERY, params)


# ----------------------------------------------------------------------------------------- hangs
@st.composite
def hang_case(draw: st.DrawFn, topology: KafkaTopology) -> cases.Case:
    kind = weighted(draw, [(3, "long-poll"), (3, "half"), (1, "size-only"), (1, "idle")])
    topic = draw(st.sampled_from(sorted(topology.topics)))
    params: dict[str, Any] = {
        "kind": kind,
        "seed": draw(SEEDS),
        "topic": topic,
        "partition": draw(st.integers(0, topology.topics[topic] - 1)),
        "cut": draw(st.floats(0.05, 0.95)),
        "max_wait_ms": draw(st.sampled_from([5_000, 60_000, (1 << 31) - 1])),
    }
    return cases.Case(KAFKA_HANG, params)


# ----------------------------------------------------------------------------------------- logins
SASL_LISTENER = "sasl"
PLAINTEXT_LISTENER = "plaintext"
ODD_MECHANISMS = (
    "SCRAM-SHA-512",
    "GSSAPI",
    "OAUTHBEARER",
    "plain",
    "",
    "SCRAM-SHA-256-PLUS",
    "PLAIN\x00",
    "SCRAM-SHA-256 ",
    "M" * 300,
)
UNKNOWN_USERS = ("fz-nobody", "FZ-USER", "fz-user ", "fz,user", "fz=user", "ü-user", "", "a" * 300, "admin")
# symbolic passwords (kafka_login resolves them); "saslprep" is the right one with a soft hyphen,
# which SASLprep maps to nothing
PASSWORDS = ("right", "wrong", "empty", "control", "prefix", "other", "saslprep", "long")
SCRAM_FIRST_MUTATIONS = (
    "flip",
    "cut",
    "extend",
    "gs2-y",  # the client supports channel binding, thinks the broker does not (consistent)
    "authzid-self",  # n,a=<user>, (consistent)
    "authzid-other",  # n,a=<another user>, (consistent)
    "cbind-p",  # p=tls-unique: channel binding required, which a plaintext listener cannot give
    "mext",  # a mandatory extension (m=), which the broker must refuse
    "extension",  # an optional extension after the nonce (consistent)
    "size",  # padded (an extension or the nonce) to a size around 4096 bytes
)
SCRAM_FINAL_MUTATIONS = (
    "flip",
    "cut",
    "extend",
    "nonce",  # another nonce, the proof computed over it
    "cbind",  # channel-binding data other than the gs2 header sent
    "proof",  # a proof of zeros, too short or empty
    "order",  # r= before c=
    "extension",  # an extension before the proof (consistent)
    "replay-final",  # the client-final of an earlier login of the same user
    "replay-both",  # both messages of an earlier login
)
PLAIN_MUTATIONS = ("flip", "cut", "extend", "authzid-self", "authzid-other", "fields", "size")
# every request but ApiVersions must close a connection that has not logged in; these three only
# before a login (they would change what the broker stores)
BEFORE_LOGIN_ONLY = ("produce", "init-pid", "metadata-create")
LOGIN_REQUESTS = ("api-versions", "metadata", "list-offsets", "fetch", *BEFORE_LOGIN_ONLY)
MESSAGE_SIZES = (MAX_MESSAGE - 2, MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1, MAX_MESSAGE + 5, MAX_MESSAGE + 900)
FRAME_SIZES = (
    SASL_MAX_RECEIVE_BYTES - 100,
    SASL_MAX_RECEIVE_BYTES - 1,
    SASL_MAX_RECEIVE_BYTES,
    SASL_MAX_RECEIVE_BYTES + 1,
    SASL_MAX_RECEIVE_BYTES + 100,
    600 * 1024,
    1 << 20,
)


def may_log_in(step: dict[str, Any]) -> bool:
    """Whether a login step (or a lone SaslAuthenticate) could leave its connection logged in."""
    if step["op"] == "authenticate":
        return step["token"] == "plain-right"
    return (
        step["op"] == "login"
        and step["mechanism"] in MECHANISMS
        and step["user"] in USERS
        and step["password"] in ("right", "saslprep")
    )


@st.composite
def correct_login(draw: st.DrawFn) -> dict[str, Any]:
    """A login as a real client makes it (the right password of a known user)."""
    return {
        "op": "login",
        "mechanism": draw(st.sampled_from(MECHANISMS)),
        "user": weighted(draw, [(4, FUZZ_USER), (1, OTHER_USER), (1, LONG_USER)]),
        "password": "right",
        "version": weighted(draw, [(4, 2), (1, 1), (1, 0)]),
        "mutation": None,
        "interrupt": None,
        "pipeline": weighted(draw, [(6, False), (1, True)]),
    }


@st.composite
def login_step_login(draw: st.DrawFn) -> dict[str, Any]:
    mechanism = weighted(draw, [(6, SCRAM), (4, PLAIN), (1, draw(st.sampled_from(ODD_MECHANISMS)))])
    user = weighted(draw, [(8, FUZZ_USER), (2, OTHER_USER), (1, LONG_USER), (3, draw(st.sampled_from(UNKNOWN_USERS)))])
    password = weighted(draw, [(10, "right"), (6, draw(st.sampled_from(PASSWORDS)))])
    step: dict[str, Any] = {
        "op": "login",
        "mechanism": mechanism,
        "user": user,
        "password": password,
        "version": weighted(draw, [(4, 2), (1, 1), (1, 0)]),
        "mutation": None,
        "interrupt": weighted(draw, [(14, None), (1, "handshake"), (1, "api-versions"), (1, "metadata")]),
        # a Metadata request sent with the login's last message: answered only if the login succeeds
        "pipeline": weighted(draw, [(4, False), (1, True)]),
    }
    if draw(st.integers(0, 2)) == 0:
        if mechanism == PLAIN:
            op = draw(st.sampled_from(PLAIN_MUTATIONS))
            mutation: dict[str, Any] = {"target": "plain", "op": op}
        else:
            target = draw(st.sampled_from(["first", "final"]))
            op = draw(st.sampled_from(SCRAM_FIRST_MUTATIONS if target == "first" else SCRAM_FINAL_MUTATIONS))
            mutation = {"target": target, "op": op}
            if op == "size":
                mutation["via"] = draw(st.sampled_from(["extension", "nonce"]))
        if op == "flip":
            mutation["n"] = weighted(draw, [(4, 1), (1, 3)])
        elif op == "cut":
            mutation["keep"] = draw(st.floats(0.0, 0.99))
        elif op == "extend":
            mutation["n"] = weighted(draw, [(4, draw(st.integers(1, 8))), (1, draw(st.integers(9, 300)))])
        elif op == "size":
            mutation["n"] = draw(st.sampled_from(MESSAGE_SIZES))
        elif op == "nonce":
            mutation["how"] = draw(st.sampled_from(["flip-server", "flip-client", "cut-server", "append"]))
        elif op == "proof":
            mutation["how"] = draw(st.sampled_from(["zeros", "short", "empty", "other-password"]))
        elif op == "cbind":
            mutation["how"] = draw(st.sampled_from(["y", "p", "garbage", "empty-authzid"]))
        step["mutation"] = mutation
    return step


@st.composite
def login_step(draw: st.DrawFn, topology: KafkaTopology, logged: bool, plaintext: bool) -> dict[str, Any]:
    """One step of a login case; ``logged``: an earlier step may have logged the connection in (a
    plaintext listener's always is), so no request that would store something comes now."""
    op = weighted(
        draw,
        [(10, "login"), (5, "request"), (2, "handshake"), (2, "authenticate"), (1, "frame")]
        + ([(2, "wait")] if logged and not plaintext else []),
    )
    if op == "login":
        return draw(login_step_login())
    if op == "handshake":
        mechanism = weighted(draw, [(3, draw(st.sampled_from(MECHANISMS))), (2, draw(st.sampled_from(ODD_MECHANISMS)))])
        return {"op": op, "mechanism": mechanism, "version": weighted(draw, [(8, 1), (1, 0), (1, 2)])}
    if op == "authenticate":
        token = weighted(draw, [(3, "random"), (1, "empty"), (1, "plain-right"), (1, "scram-first")])
        version = weighted(draw, [(4, 2), (1, 1), (1, 0), (1, draw(st.sampled_from([3, 100, -1])))])
        n = weighted(draw, [(4, draw(st.integers(1, 64))), (1, draw(st.sampled_from(MESSAGE_SIZES)))])
        return {"op": op, "token": token, "n": n, "version": version, "seed": draw(SEEDS)}
    if op == "frame":
        content = draw(st.sampled_from(["api-versions", "sasl-authenticate"]))
        return {"op": op, "size": draw(st.sampled_from(FRAME_SIZES)), "content": content}
    if op == "wait":
        return {"op": op}
    return draw(login_request(topology, logged))


@st.composite
def login_request(draw: st.DrawFn, topology: KafkaTopology, logged: bool) -> dict[str, Any]:
    """A request other than the login's (none that would store something if ``logged``)."""
    apis = LOGIN_REQUESTS if not logged else tuple(a for a in LOGIN_REQUESTS if a not in BEFORE_LOGIN_ONLY)
    api = draw(st.sampled_from(apis))
    topic = draw(st.sampled_from(sorted(topology.topics)))
    return {"op": "request", "api": api, "topic": topic, "partition": draw(st.integers(0, topology.topics[topic] - 1))}


@st.composite
def login_case(draw: st.DrawFn, topology: KafkaTopology) -> cases.Case:
    """A ``kafka-login`` case: steps on one connection to a SASL (or the PLAINTEXT) listener."""
    listener = weighted(draw, [(7, SASL_LISTENER), (1, PLAINTEXT_LISTENER)])
    plaintext = listener == PLAINTEXT_LISTENER
    n = weighted(draw, [(2, 1), (4, 2), (4, 3), (2, 4), (1, 6)])
    steps: list[dict[str, Any]] = []
    logged = plaintext
    for i in range(n):
        # half the cases log in first, so that what follows a login is fuzzed as much as the login
        first = i == 0 and not plaintext and draw(st.booleans())
        step = draw(correct_login()) if first else draw(login_step(topology, logged, plaintext))
        logged = logged or may_log_in(step)
        steps.append(step)
        if step["op"] == "wait":  # then something that finds the session over
            after = weighted(draw, [(3, login_request(topology, True)), (2, correct_login()), (1, login_step_login())])
            steps.append(draw(after))
    params = {
        "listener": listener,
        "broker": draw(st.integers(0, max(0, len(topology.brokers) - 1))),
        "seed": draw(SEEDS),
        "steps": steps,
    }
    return cases.Case(KAFKA_LOGIN, params)


STRATEGIES = {
    KAFKA_PRODUCE: produce_case,
    KAFKA_QUERY: query_case,
    KAFKA_FRAME: frame_case,
    KAFKA_HANG: hang_case,
    KAFKA_LOGIN: login_case,
}
WEIGHTS = {KAFKA_PRODUCE: 10, KAFKA_QUERY: 5, KAFKA_FRAME: 4, KAFKA_HANG: 2, KAFKA_LOGIN: 3}


@st.composite
def kafka_case(draw: st.DrawFn, topology: KafkaTopology, kinds: tuple[str, ...] = KAFKA_KINDS) -> cases.Case:
    """One Kafka case of ``kinds``: mostly produce requests, then queries, whole-request
    mutations, logins and hangs."""
    kind = weighted(draw, [(WEIGHTS[k], k) for k in kinds])
    return draw(STRATEGIES[kind](topology))
