"""The state of an exactly-once Spark sink in ZooKeeper: one znode, ``<root>/sinks/<sink id>``,
holding JSON (zlib-compressed past 256 KiB, marked ``zlib:``), changed only by versioned writes
(compare-and-set), so that two writers of one sink fail instead of interleaving. What the state
means is :mod:`sparklog.datasource.publish_state`'s business; this module only stores it. Used by
the ZooKeeper-backed client view and by brokers answering ``sink_state`` for bootstrap clients."""

from __future__ import annotations

import contextlib
import json
import zlib
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import SinkConflict
from sparklog.names import check_transactional_id

_ZLIB = b"zlib:"
COMPRESS_FROM = 256 << 10


def decode_state(data: bytes) -> dict[str, Any]:
    if data.startswith(_ZLIB):
        data = zlib.decompress(data[len(_ZLIB) :])
    return json.loads(data)


def encode_state(state: dict[str, Any]) -> bytes:
    raw = json.dumps(state, separators=(",", ":")).encode()
    return _ZLIB + zlib.compress(raw) if len(raw) > COMPRESS_FROM else raw


class SinkStates:
    """Reads and writes sinks' state znodes with one kazoo client."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout

    def path(self, sink_id: str) -> str:
        return f"{self.layout.root}/sinks/{check_transactional_id(sink_id)}"

    def read(self, sink_id: str) -> tuple[dict[str, Any] | None, int | None]:
        """The state and its znode version; (None, None) if the sink has none."""
        try:
            data, stat = self.zk.get(self.path(sink_id))
        except NoNodeError:
            return None, None
        return decode_state(data), stat.version

    def write(self, sink_id: str, state: dict[str, Any], version: int | None) -> int:
        """Create the state (``version`` None) or replace the one at ``version``; the new version.
        :class:`SinkConflict` if it exists already or changed meanwhile."""
        path = self.path(sink_id)
        try:
            if version is None:
                self.zk.create(path, encode_state(state), makepath=True)
                return 0
            return int(self.zk.set(path, encode_state(state), version=version).version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise SinkConflict(
                f"sparklog sink {sink_id}: its state in ZooKeeper ({path}) changed under this commit; "
                "is another run of the same query writing?"
            ) from None

    def delete(self, sink_id: str, version: int | None) -> None:
        """Remove the state (if still at ``version``; any version when None); gone already is fine."""
        with contextlib.suppress(NoNodeError, BadVersionError):
            self.zk.delete(self.path(sink_id), version=-1 if version is None else version)
