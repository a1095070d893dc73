"""Helpers for the broker integration tests (``tests/broker/``, and others): real broker processes, raw
Arrow Flight access following :mod:`sparklog.protocol.wire`, and small client programs run as
subprocesses.

A :class:`BrokerProcess` runs ``python -m sparklog.broker`` on a free loopback port and waits until it
printed its "listening" line *and* registered in ZooKeeper; it can be stopped (SIGTERM), killed
(SIGKILL) and restarted on the same data dir and port. :class:`ProcessGroup` remembers every process a
test started so that a fixture finalizer can end whatever is still running.

Run as a script, this module is the client side of the multi-process tests::

    python tests/broker_helpers.py produce --zookeeper ZK --topic T --producer-id 3 --records 500 ...
    python tests/broker_helpers.py group-member --zookeeper ZK --topic T --group G --out FILE ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from prometheus_client.parser import text_string_to_metric_families

from sparklog.client.partitioner import partitions_for_keys
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.ports import free_port
from sparklog.errors import SparklogError
from sparklog.local_cluster import BROKER_START_TIMEOUT_S, broker_command
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
from waiting import wait_for

HOST = "127.0.0.1"
HELPER_SCRIPT = Path(__file__).resolve()
SESSION_EXPIRY_S = 40.0  # ZooKeeper session timeout of every sparklog client (10 s) plus a wide margin


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ------------------------------------------------------------------------------------------ processes
class ProcessGroup:
    """Every subprocess a test starts; ``close()`` (a fixture finalizer) ends the ones still running:
    SIGTERM, then SIGKILL after a grace period."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_paths: list[Path] = []  # shown by conftest's report hook when a test fails

    def spawn(self, args: list[str], log_path: Path, **kwargs: Any) -> subprocess.Popen[bytes]:
        if log_path not in self.log_paths:
            self.log_paths.append(log_path)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=child_env(), **kwargs)
        self.procs.append(proc)
        return proc

    def close(self, grace_s: float = 15.0) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in alive:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def registered_brokers(zookeeper: str) -> dict[int, Any]:
    with ClusterMetadata(zookeeper) as cluster:
        return cluster.brokers()


class PortTaken(AssertionError):
    """A broker could not bind its port: something else took it."""


class BrokerProcess:
    """One broker subprocess with a fixed id, data dir and port (kept across restarts)."""

    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        zookeeper: str,
        processes: ProcessGroup,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.broker_id = broker_id
        self.extra_args = list(extra_args)  # broker settings (``--max-connections-per-ip 20``)
        self.data_dir = Path(data_dir)
        self.zookeeper = zookeeper
        self.processes = processes
        self.port = port or free_port(HOST)
        # a port picked here may be taken (by another process's outgoing connection) before the
        # broker's first start binds it: that start then tries another one
        self._port_picked = port is None  # until the first start listened on it
        self.log_path = self.data_dir.parent / f"broker-{broker_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def location(self) -> str:
        return f"grpc+tcp://{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = BROKER_START_TIMEOUT_S) -> BrokerProcess:
        """Start the process and wait until it listens and is registered in ZooKeeper."""
        for attempt in (1, 2, 3):
            try:
                self._start_once(timeout)
                break
            except PortTaken:
                if not self._port_picked or attempt == 3:
                    raise
                self.port = free_port(HOST)
        self._port_picked = False  # a restart keeps the port it listened on
        return self

    def _start_once(self, timeout: float) -> None:
        assert not self.alive, f"broker {self.broker_id} is already running"
        self.starts += 1
        marker = f"=== start {self.starts} ===\n"
        with open(self.log_path, "a") as log:
            log.write(marker)
        args = broker_command(self.broker_id, self.port, self.data_dir, self.zookeeper) + self.extra_args
        self.proc = self.processes.spawn(args, self.log_path)
        listening = f"broker {self.broker_id} listening on {HOST}:{self.port}"

        def ready() -> bool:
            current = self.output().rsplit(marker, 1)[-1]
            if self.proc is not None and self.proc.poll() is not None:
                failed = PortTaken if "Address already in use" in current else AssertionError
                raise failed(
                    f"broker {self.broker_id} exited with {self.proc.returncode} while starting:\n{self.output()}"
                )
            if listening not in current:
                return False
            info = registered_brokers(self.zookeeper).get(self.broker_id)
            return info is not None and info.port == self.port

        wait_for(ready, timeout, f"broker {self.broker_id} to listen and register", interval=0.1)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (clean shutdown) and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop_or_kill(self, timeout: float = 20.0) -> None:
        """For finalizers: SIGTERM; if the broker does not exit in time, SIGKILL it and fail."""
        if not self.alive:
            return
        try:
            self.stop(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"broker {self.broker_id} did not exit within {timeout}s of SIGTERM (killed):\n{self.output()[-2000:]}"
            ) from None

    def kill(self) -> None:
        """SIGKILL (kill -9) and wait: no flush, no ZooKeeper goodbye."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def wait_unregistered(self, timeout: float = SESSION_EXPIRY_S) -> None:
        """Wait until ZooKeeper forgot this broker (after a kill -9: when its session expires)."""
        wait_for(
            lambda: self.broker_id not in registered_brokers(self.zookeeper),
            timeout,
            f"broker {self.broker_id}'s registration to vanish",
            interval=0.2,
        )

    def restart(self, timeout: float = BROKER_START_TIMEOUT_S) -> BrokerProcess:
        """Start again on the same data dir and port (stopping it first if it still runs).

        The old registration is an ephemeral znode that outlives a killed process until its ZooKeeper
        session expires, and a broker refuses to start while its id is registered; so wait for that."""
        if self.alive:
            self.stop()
        self.wait_unregistered()
        return self.start(timeout)


@contextlib.contextmanager
def running_broker(
    zookeeper_hosts: str, base_dir: Path, broker_id: int = 1, extra_args: tuple[str, ...] = ()
) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker under a fresh chroot of ``zookeeper_hosts`` for a whole module (``scope="module"``
    fixtures): yields (broker, connect string); stopped (or killed) on exit."""
    connect = f"{zookeeper_hosts}/t-{uuid.uuid4().hex[:8]}"
    group = ProcessGroup()
    broker = BrokerProcess(broker_id, base_dir / f"broker-{broker_id}", connect, group, extra_args=extra_args)
    try:
        broker.start()
        yield broker, connect
        broker.stop_or_kill()
    finally:
        group.close()


# ------------------------------------------------------------------------------------------ raw Flight
def flight_client(location: str) -> flight.FlightClient:
    return flight.FlightClient(location)


def typed_error(call: Callable[[], Any]) -> SparklogError:
    """Run a raw Flight call that must fail; the typed sparklog error its Flight error carries."""
    try:
        call()
    except flight.FlightError as exc:
        return wire.from_flight_error(exc, "test")
    raise AssertionError("the call succeeded but was expected to fail")


def raw_action(location: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    client = flight_client(location)
    try:
        results = list(client.do_action(flight.Action(name, wire.encode(body))))
        return wire.decode(results[0].body)
    finally:
        client.close()


def raw_fetch(
    location: str, topic: str, partition: int, offset: int, max_wait_ms: int = 0, max_bytes: int = 8 << 20
) -> pa.Table:
    client = flight_client(location)
    try:
        ticket = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "max_bytes": max_bytes,
            "max_wait_ms": max_wait_ms,
        }
        return client.do_get(flight.Ticket(wire.encode(ticket))).read_all()
    finally:
        client.close()


def raw_produce(location: str, command: dict[str, Any], batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    """A ``do_put`` exactly as the wire contract describes it (the records' schema, the first batch's,
    named in the descriptor; each batch a frame: :mod:`sparklog.protocol.record_frames`); the put
    metadata of every batch."""
    assert batches
    client = flight_client(location)
    try:
        writer, reader = open_produce(client, command, batches[0].schema)
        acks = []
        for batch in batches:
            write_frame(writer, batch)
            if str(command.get("acks", "1")) != "0":
                ack = reader.read()
                if ack is None:  # the broker ended the call: its error comes with closing the writer
                    writer.close()
                    raise AssertionError("the broker ended the produce stream without put metadata or an error")
                acks.append(wire.decode(ack))
        writer.done_writing()
        writer.close()
        return acks
    finally:
        client.close()


def read_partition(location: str, topic: str, partition: int) -> list[dict[str, Any]]:
    """Every stored record of a partition (from the log start to its end), as dicts."""
    offsets = raw_action(location, wire.LIST_OFFSETS, {"topic": topic, "partition": partition})
    position, end = offsets["log_start_offset"], offsets["log_end_offset"]
    rows: list[dict[str, Any]] = []
    while position < end:
        table = raw_fetch(location, topic, partition, position)
        assert table.num_rows, f"empty fetch at {topic}-{partition}@{position} below the log end {end}"
        fresh = [r for r in table.to_pylist() if r["offset"] >= position]
        rows.extend(fresh)
        position = fresh[-1]["offset"] + 1
    return rows


def read_topic(location: str, topic: str, partitions: int) -> dict[int, list[dict[str, Any]]]:
    return {p: read_partition(location, topic, p) for p in range(partitions)}


def ping(location: str) -> int:
    return int(raw_action(location, wire.PING, {})["broker_id"])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file (a line torn by a kill -9 is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().split("\n"):
        if not line.endswith("}"):
            continue
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


# ------------------------------------------------------------------------------------------ child programs
def producer_main(args: argparse.Namespace) -> int:
    """Send ``--records`` keyed records, alternating blocks of ``send()`` and ``send_batch()``; write
    one JSON line per acknowledged record: producer, seq, key, partition, offset."""
    from sparklog import Producer

    go = Path(args.go)
    out = open(args.out, "w")  # noqa: SIM115 - closed at the end, kept open while sending
    with Producer(zookeeper=args.zookeeper, acks="1", linger_ms=2) as producer:
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.01)
        seq = 0
        block = 0
        while seq < args.records:
            n = min(args.block, args.records - seq)
            seqs = list(range(seq, seq + n))
            keys = [f"key-{s % args.keys}".encode() for s in seqs]
            values = [f"{args.producer_id}:{s}".encode() for s in seqs]
            if block % 2 == 0:
                futures = [producer.send(args.topic, value=v, key=k) for k, v in zip(keys, values, strict=True)]
                landed = [(f.result(60).partition, f.result(60).offset) for f in futures]
            else:
                metas = producer.send_batch(args.topic, {"key": keys, "value": values})
                # send_batch keeps the row order within a partition: give each row its offset
                next_offset = {m.partition: m.base_offset for m in metas}
                ends = {m.partition: m.last_offset for m in metas}
                parts = partitions_for_keys(pa.array(keys, pa.binary()), args.partitions)
                landed = []
                for p in parts.tolist():
                    landed.append((p, next_offset[p]))
                    next_offset[p] += 1
                assert all(next_offset[p] == ends[p] + 1 for p in ends), (metas, next_offset)
            for s, k, (p, o) in zip(seqs, keys, landed, strict=True):
                line = {"producer": args.producer_id, "seq": s, "key": k.decode(), "partition": p, "offset": o}
                out.write(json.dumps(line) + "\n")
            out.flush()
            seq += n
            block += 1
    out.close()
    return 0


def group_member_main(args: argparse.Namespace) -> int:
    """A consumer group member: poll, write every record (partition, offset, value, time) as a JSON
    line, pause, commit, write the committed offsets; repeat until SIGTERM."""
    from sparklog import Consumer

    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    out = open(args.out, "a")  # noqa: SIM115 - closed at the end

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    consumer = Consumer(
        args.topic,
        group=args.group,
        zookeeper=args.zookeeper,
        auto_offset_reset="earliest",
        session_timeout_s=args.session_timeout,
        bootstrap_servers=args.bootstrap_servers,
    )
    emit({"event": "joined", "pid": os.getpid(), "t": time.time()})
    last_assignment: list[int] | None = None
    while not stop:
        records = consumer.poll(timeout=0.5)
        for r in records:
            emit({"p": r.partition, "o": r.offset, "v": r.value.decode(), "t": time.time()})
        if records and args.pause_before_commit:
            time.sleep(args.pause_before_commit)
        consumer.commit()
        emit({"event": "commit", "t": time.time()})
        assignment = [p for _t, p in consumer.assignment()]
        if assignment != last_assignment:
            emit({"event": "assigned", "partitions": assignment, "t": time.time()})
            last_assignment = assignment
    consumer.close()
    emit({"event": "closed", "t": time.time()})
    out.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="broker_helpers")
    sub = parser.add_subparsers(dest="command", required=True)
    prod = sub.add_parser("produce")
    prod.add_argument("--zookeeper", required=True)
    prod.add_argument("--topic", required=True)
    prod.add_argument("--partitions", type=int, required=True)
    prod.add_argument("--producer-id", type=int, required=True)
    prod.add_argument("--records", type=int, required=True)
    prod.add_argument("--keys", type=int, default=20)
    prod.add_argument("--block", type=int, default=50)
    prod.add_argument("--go", required=True)
    prod.add_argument("--out", required=True)
    member = sub.add_parser("group-member")
    member.add_argument("--zookeeper", default="")
    member.add_argument("--bootstrap-servers", default=None, help="instead of --zookeeper: brokers only")
    member.add_argument("--session-timeout", type=float, default=10.0)
    member.add_argument("--topic", required=True)
    member.add_argument("--group", required=True)
    member.add_argument("--out", required=True)
    member.add_argument("--pause-before-commit", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.command == "produce":
        return producer_main(args)
    return group_member_main(args)


if __name__ == "__main__":
    sys.exit(main())


def scrape_metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
