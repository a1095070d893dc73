"""The stored state of an exactly-once sink: the publish intent and what was published (used by
:mod:`sparklog.datasource.publish`; design in :mod:`sparklog.datasource.writer`), and the producer
ids and sequence-number keys it implies.

The state of a sink lives in one znode, ``<root>/sinks/<sink id>`` (the sink id is the streaming
query's id; batch writes use ``batch-<uuid>`` and delete theirs when done; written by this process,
or for it by a broker when the sink was given ``bootstrap.servers``:
:mod:`sparklog.coordination.sink_state`), as JSON::

    {"batch": 7, "state": "publishing" | "published",
     "next_seq": {"topic": {"<partition>/<staging partition>": 120000, ...}},  # where the next batch's
                                                                                # sequence numbers start
     "intent": {"staging_topic": ..., "targets": [[topic, partition, [[staging partition, first, last], ...]], ...],
                "versions": {"<typed staging topic>": <target schema version>, ...}},
     "published": {"topic": {"<partition>": [first offset, last offset, rows], ...}}}

A slice staged in a typed staging topic (for a typed target) names it as a fourth element,
``[staging partition, first, last, staging topic]``; its producer's key in ``next_seq`` is
``"<partition>/<staging partition>@<staging topic>"``.

``intent`` is present while ``publishing``; ``published`` after. Every change is a versioned
ZooKeeper ``set``: a second writer of the same sink (two runs of one query) fails instead of
interleaving. The producer id of a (sink, topic, partition, staging partition[, typed staging topic]) is a hash,
so a restarted driver uses the same one and numbers every slice the same way, and the leader's
idempotent-producer state recognises the slices it already stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sparklog.coordination.sink_state import SinkConflict as SinkConflict  # raised by a state write; named here

if TYPE_CHECKING:
    from sparklog.client.cluster_client import ClusterClient
    from sparklog.datasource.stager import SparklogCommitMessage


def producer_id(
    sink_id: str, topic: str, partition: int, stage_partition: int, typed_staging: str | None = None
) -> int:
    """The idempotent-producer id of one sink's writes to one partition from one staging partition
    (of a typed staging topic, if given) (stable across restarts)."""
    key = f"sparklog-sink/{sink_id}/{topic}/{partition}/{stage_partition}"
    if typed_staging is not None:
        key += f"@{typed_staging}"
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 62) - 1)


def seq_key(partition: int, stage_partition: int, typed_staging: str | None = None) -> str:
    """Key of a producer's next sequence number in the sink state: "<partition>/<staging partition>"
    (then "@<staging topic>" for a typed staging topic)."""
    key = f"{partition}/{stage_partition}"
    return key if typed_staging is None else f"{key}@{typed_staging}"


# ----------------------------------------------------------------------------------------- state
def read_state(client: ClusterClient, sink_id: str) -> tuple[dict[str, Any] | None, int | None]:
    """The sink's state and its version (None, None without one): :mod:`sparklog.coordination.sink_state`,
    in ZooKeeper, read directly or through a broker."""
    return client.view.read_sink_state(sink_id)


def write_state(client: ClusterClient, sink_id: str, state: dict[str, Any], version: int | None) -> int:
    """Create (``version`` None) or replace the state at ``version``; SinkConflict if it changed."""
    return client.view.write_sink_state(sink_id, state, version)


# ----------------------------------------------------------------------------------------- intent
# per target partition: its slices as (staging partition, first offset, last offset, staging topic)
Targets = list[tuple[str, int, list[tuple[int, int, int, str]]]]


def intent_from_messages(messages: Sequence[SparklogCommitMessage]) -> tuple[str | None, Targets]:
    """Slices per target partition, in staging order (staging partition, then offset): the order
    they are published in (a task's slices of one partition keep their order)."""
    by_target: dict[tuple[str, int], list[tuple[int, int, int, str]]] = {}
    staging = None
    for message in messages:
        staging = staging or message.staging_topic
        for topic, partition, stage_partition, first, last, staged_in in message.slices:
            by_target.setdefault((topic, partition), []).append((stage_partition, first, last, staged_in))
    return staging, [(t, p, sorted(slices)) for (t, p), slices in sorted(by_target.items())]


def versions_from_messages(messages: Sequence[SparklogCommitMessage]) -> dict[str, int]:
    """Typed staging topic -> the target schema version its values were converted to."""
    out: dict[str, int] = {}
    for message in messages:
        out.update(message.versions)
    return out


def targets_json(staging: str | None, targets: Targets, versions: dict[str, int] | None = None) -> dict[str, Any]:
    """The intent as stored: a slice staged in ``staging`` as [staging partition, first, last], one
    staged in another (typed) staging topic naming it as a fourth element."""

    def one(s: tuple[int, int, int, str]) -> list[Any]:
        return list(s[:3]) if s[3] == staging else list(s)

    intent: dict[str, Any] = {
        "staging_topic": staging,
        "targets": [[t, p, [one(s) for s in slices]] for t, p, slices in targets],
    }
    if versions:
        intent["versions"] = versions
    return intent


def targets_from_json(intent: dict[str, Any]) -> tuple[str, Targets, dict[str, int]]:
    """A stored intent read back: its staging topic, slices per target partition and versions."""
    staging = intent["staging_topic"]
    targets: Targets = [
        (t, int(p), [(int(s[0]), int(s[1]), int(s[2]), s[3] if len(s) > 3 else staging) for s in slices])
        for t, p, slices in intent["targets"]
    ]
    return staging, targets, {k: int(v) for k, v in intent.get("versions", {}).items()}
