"""A follower broker against a hostile leader: a real broker process follows a partition whose
leader is a fake broker (an Arrow Flight server registered in ZooKeeper under its own id) that
answers replica fetches with what a compromised or buggy leader could send:

- a zstd frame of a few KB declaring 200 MiB of values (a compression bomb);
- a frame whose batch declares 50 million records over a body of a few bytes;
- a frame cut inside its Arrow IPC stream;
- a response stream declaring record batch columns, its batch zstd-compressed to 200 MiB decoded
  (Flight would decode it before any check).

The follower refuses each without decoding it: its resident memory (from ``/proc``) grows by less
than 100 MB, and it goes on following: the legitimate batch the fake sends last is stored, and
reads back once the follower is made the leader. The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from flatbuffers import encode
from flatbuffers import number_types as fb
from flatbuffers.table import Table

from broker_helpers import BrokerProcess, ProcessGroup, read_partition
from log_helpers import config
from sparklog import Admin
from sparklog.broker.log import PartitionLog
from sparklog.broker.replication.fetch_request import EMPTY, FRAMED, frame
from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.protocol import wire
from waiting import wait_for

MIB = 1 << 20
FOLLOWER, FAKE = 1, 9
TOPIC = "hostile"
GROWTH_LIMIT_MB = 100
Answer = Callable[[], flight.FlightDataStream]


def zeros(rows: int, size: int = MIB) -> pa.Array:
    """``rows`` binary values of ``size`` zero bytes (one zero-filled buffer the kernel maps lazily)."""
    offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int64) * size).astype(np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), rows, [None, offsets, pa.py_buffer(bytes(rows * size))])


def stream_bytes(batch: pa.RecordBatch, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def with_rows(stream: bytes, rows: int) -> bytes:
    """``stream`` (schema, one batch, end) with the batch's declared record count changed in place:
    the ``length`` field of the ``RecordBatch`` table in its FlatBuffer metadata (Arrow's
    ``Message.fbs``: the message's ``header`` is field 2, the batch's ``length`` field 0)."""
    source = pa.BufferReader(stream)
    pa.ipc.read_message(source)
    metadata = pa.ipc.read_message(source).metadata.to_pybytes()
    buf = bytearray(metadata)
    message = Table(buf, encode.Get(fb.UOffsetTFlags.packer_type, buf, 0))
    batch = Table(buf, 0)
    message.Union(batch, message.Offset(4 + 2 * 2))
    struct.pack_into("<q", buf, batch.Pos + batch.Offset(4), rows)
    start = stream.index(metadata)
    return stream[:start] + bytes(buf) + stream[start + len(metadata) :]


class HostileLeader(flight.FlightServerBase):
    """Leads ``TOPIC`` partition ``partition`` as broker ``FAKE``: answers the follower's epoch and
    offset questions truthfully, and its replica fetches from offset 0 with ``script`` (one answer
    a fetch, once :attr:`armed`), then with ``legit`` until the follower fetches from offset 1."""

    def __init__(self, partition: int, script: list[tuple[str, Answer]], legit: bytes) -> None:
        super().__init__("grpc+tcp://127.0.0.1:0")
        self.partition = partition
        self.script = list(script)
        self.legit = legit
        self.served: list[str] = []
        self.armed = threading.Event()
        self.asked = threading.Event()  # the follower fetched from this leader
        self.stored = threading.Event()  # the follower fetched from offset 1: it stored offset 0
        self._offset = 0
        self._lock = threading.Lock()

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = json.loads(action.body.to_pybytes())
        if action.type == wire.OFFSETS_FOR_LEADER_EPOCH:
            return iter([json.dumps({"epoch": body["epoch"], "end_offset": 1, "log_start_offset": 0}).encode()])
        if action.type == wire.LIST_OFFSETS:
            return iter([json.dumps({"log_start_offset": 0, "log_end_offset": 1}).encode()])
        raise flight.FlightServerError(f"the fake leader does not serve {action.type}")

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        for item in request.get("partitions", []):
            if (item["t"], item["p"]) == (TOPIC, self.partition):
                self._offset = item["o"]
        self.asked.set()
        with self._lock:
            if self._offset >= 1:
                self.stored.set()
            elif self.armed.is_set() and self.script:
                name, answer = self.script.pop(0)
                self.served.append(name)
                return answer()
            elif self.armed.is_set():
                self.served.append("legit")
                return framed(self.legit)
        time.sleep(min(request.get("max_wait_ms", 100), 100) / 1000)
        return flight.GeneratorStream(FRAMED, iter([]))


def framed(data: bytes) -> flight.FlightDataStream:
    return flight.GeneratorStream(FRAMED, iter([(EMPTY, pa.py_buffer(data))]))


def memory_mb(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak since :func:`reset_peak` (MB)."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS


def test_a_follower_refuses_what_a_hostile_leader_sends_without_decoding_it(
    sparklog_connect: str, tmp_path: Path
) -> None:
    # the legitimate batch, as a real leader's log stores it
    source = PartitionLog(tmp_path / "source", config())
    source.append({"value": [b"legit"]}, leader_epoch=0)
    ((stored, header),) = source.read_stored(0)
    source.close()
    meta = {"t": TOPIC, "h": header.encode(crc=b"00000000"), "hw": 1, "lso": 0}
    bomb = stream_bytes(pa.record_batch({"value": zeros(200)}), "zstd")
    assert len(bomb) < 64 << 10

    group = ProcessGroup()
    follower = BrokerProcess(FOLLOWER, tmp_path / "follower", sparklog_connect, group)
    fake: HostileLeader | None = None
    try:
        follower.start()
        with ClusterMetadata(sparklog_connect) as cluster:
            with Admin(sparklog_connect) as admin:
                admin.create_topic("placeholder", 1, 1)  # the controller runs and has seen broker 1
            # the fake registers before the topic exists, so that the topic is assigned to both
            fake = HostileLeader(-1, [], b"")
            cluster.register_broker(FAKE, "127.0.0.1", fake.port)
            wait_for(lambda: FAKE in cluster.brokers(), 30, "the fake leader to register")
            with Admin(sparklog_connect) as admin:
                admin.create_topic(TOPIC, 2, 2)
            topic = cluster.topic(TOPIC)
            (led,) = [p for p, replicas in enumerate(topic.replicas) if replicas[0] == FAKE]
            epoch = cluster.partition_state(TOPIC, led).leader_epoch + 1
            cluster.set_partition_state(TOPIC, led, PartitionState(FAKE, epoch, [FAKE, FOLLOWER]))
            meta["p"] = led

            columns_batch = pa.record_batch({"value": zeros(200)})
            fake.partition = led
            fake.legit = frame(stored, meta).to_pybytes()
            fake.script = [
                ("bomb", lambda: framed(bomb + wire.encode(meta))),
                ("rows", lambda: framed(with_rows(stream_bytes(stored), 50_000_000) + wire.encode(meta))),
                ("cut", lambda: framed(stream_bytes(stored)[:-40] + wire.encode(meta))),
                (
                    "columns",
                    lambda: flight.GeneratorStream(
                        columns_batch.schema,
                        iter([columns_batch]),
                        options=pa.ipc.IpcWriteOptions(compression="zstd"),
                    ),
                ),
            ]
            wait_for(fake.asked.is_set, 60, "the follower to fetch from the fake leader")
            assert follower.proc is not None
            pid = follower.proc.pid
            time.sleep(1)  # the follower settled into its fetch rounds
            before, _ = memory_mb(pid)
            reset_peak(pid)
            fake.armed.set()
            wait_for(fake.stored.is_set, 90, f"the follower to store the legitimate batch (served: {fake.served})")
            after, peak = memory_mb(pid)
            print(
                f"follower RSS before {before:.1f} MB, after {after:.1f} MB, peak {peak:.1f} MB; served {fake.served}"
            )

            assert fake.served[:4] == ["bomb", "rows", "cut", "columns"]
            assert peak - before < GROWTH_LIMIT_MB, (before, peak)
            assert follower.alive
            log = follower.output()
            assert "more than the 67108864 a frame may decode to" in log
            assert "50000000 records" in log

            # the follower, made the leader, serves what it replicated
            cluster.set_partition_state(TOPIC, led, PartitionState(FOLLOWER, epoch + 1, [FOLLOWER]))
            wait_for(
                lambda: _readable(follower.location, led),
                30,
                "the follower to lead the partition it replicated",
            )
            assert [r["value"] for r in read_partition(follower.location, TOPIC, led)] == [b"legit"]
    finally:
        follower.stop_or_kill()
        group.close()
        if fake is not None:
            fake.shutdown()


def _readable(location: str, partition: int) -> bool:
    try:
        read_partition(location, TOPIC, partition)
    except Exception:
        return False
    return True
