"""The ``sparklog`` command line, run as real subprocesses against a real ZooKeeper and real brokers.

Every test works under its own ZooKeeper chroot (sparklog treats it as its root), and every process a
test starts is stopped by the test's fixtures.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer as KafkaProducer
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from broker_helpers import registered_brokers
from sparklog import Consumer
from sparklog.cli.common import CliError, format_table, parse_configs, parse_time, zookeeper_hosts
from sparklog.cli.consume import format_batch
from sparklog.coordination.ports import free_port, port_is_open
from sparklog.coordination.zookeeper_server import four_letter_word
from sparklog.security.client_config import load_properties
from waiting import wait_for

CLI = [sys.executable, "-m", "sparklog.cli.main"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_DEBUG")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(
    *args: str,
    zk: str | None = None,
    input: bytes | str | None = None,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``sparklog [--zookeeper zk] args...`` to completion; text stdout and stderr."""
    command = [*CLI, *(["--zookeeper", zk] if zk else []), *args]
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run(command, input=data, capture_output=True, timeout=timeout, env={**_env(), **(env or {})})
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    )


def ok(*args: str, zk: str | None = None, input: bytes | str | None = None) -> subprocess.CompletedProcess[str]:
    result = run_cli(*args, zk=zk, input=input)
    assert result.returncode == 0, f"sparklog {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert lines[0].startswith("sparklog: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def table(text: str, header: str) -> list[dict[str, str]]:
    """Rows of a CLI table (whitespace-separated columns) starting at the line that begins with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = lines[start].split()
    return [dict(zip(names, line.split(), strict=True)) for line in lines[start + 1 :] if line.strip()]


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def chroot(zookeeper: Any) -> str:
    """A ZooKeeper connect string with a chroot of this test's own."""
    return f"{zookeeper.connect_string}/cli-{uuid.uuid4().hex[:12]}"


class Brokers:
    """Brokers run with ``sparklog broker`` (the CLI command itself) as subprocesses."""

    def __init__(self, connect: str, base: Path) -> None:
        self.connect = connect
        self.base = base
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.ports: dict[int, int] = {}

    def start(self, broker_id: int) -> int:
        log = self.base / f"broker-{broker_id}.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *CLI,
                    "broker",
                    "--id",
                    str(broker_id),
                    "--port",
                    "0",
                    "--data-dir",
                    str(self.base / f"broker-{broker_id}"),
                    "--zookeeper",
                    self.connect,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_env(),
            )
        self.procs[broker_id] = proc

        def listening_port() -> int | None:
            match = re.search(rf"broker {broker_id} listening on [\d.]+:(\d+)", log.read_text(errors="replace"))
            if match:
                return int(match.group(1))
            assert proc.poll() is None, f"broker {broker_id} exited:\n{log.read_text(errors='replace')}"
            return None

        started = f"broker {broker_id} to start"
        self.ports[broker_id] = wait_for(listening_port, 60, lambda: f"{started}:\n{log.read_text(errors='replace')}")
        return self.ports[broker_id]

    def stop(self, broker_id: int) -> int:
        return _stop(self.procs[broker_id])

    def stop_all(self) -> None:
        for proc in self.procs.values():
            _stop(proc)


@pytest.fixture
def brokers(chroot: str, tmp_path: Path) -> Iterator[Brokers]:
    started = Brokers(chroot, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def one_broker(brokers: Brokers) -> str:
    brokers.start(1)
    return brokers.connect


# ----------------------------------------------------------------- helpers without processes
def test_parse_configs_and_time() -> None:
    assert parse_configs(["retention.ms=1000", "cleanup.policy = compact"]) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    assert parse_configs(None) == {}
    with pytest.raises(CliError, match="key=value"):
        parse_configs(["retention.ms"])
    with pytest.raises(CliError, match="key=value"):
        parse_configs(["=1"])
    assert parse_time("2026-01-01T00:00:00Z", "--t") == 1_767_225_600_000
    assert parse_time("2026-01-01T00:00:00", "--t") == 1_767_225_600_000  # no offset: UTC
    assert parse_time("2026-01-01T02:00:00+02:00", "--t") == 1_767_225_600_000
    assert parse_time("2026-01-01", "--t") == 1_767_225_600_000
    assert parse_time("1767225600000", "--t") == 1_767_225_600_000
    with pytest.raises(CliError, match="ISO 8601"):
        parse_time("yesterday", "--from-time")
    assert zookeeper_hosts("a:1,b:2/chroot") == [("a", 1), ("b", 2)]
    assert zookeeper_hosts("a") == [("a", 2181)]
    with pytest.raises(CliError):
        zookeeper_hosts("a:port")


def test_format_batch_text_and_json() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["t", "t", "t"]),
            "partition": pa.array([0, 0, 0], pa.int32()),
            "offset": pa.array([7, 8, 9], pa.int64()),
            "timestamp": pa.array([1000, 2000, 3000], pa.timestamp("ms", tz="UTC")),
            "key": pa.array([b"k", None, b"\xff"], pa.binary()),
            "value": pa.array([b"hello", b"\xff\xfe", None], pa.binary()),
            "headers": pa.array(
                [[{"key": "src", "value": b"web"}], None, []],
                pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])),
            ),
        }
    )
    assert format_batch(batch, "text") == b"hello\n\xff\xfe\nnull\n"
    assert format_batch(batch, "text", print_key=True, separator=b"|") == b"k|hello\nnull|\xff\xfe\n\xff|null\n"
    rows = [json.loads(line) for line in format_batch(batch, "json").decode().splitlines()]
    assert rows[0] == {
        "topic": "t",
        "partition": 0,
        "offset": 7,
        "timestamp": 1000,
        "key": "k",
        "value": "hello",
        "headers": {"src": "web"},
    }
    assert rows[1]["key"] is None and rows[1]["value"] == {"base64": "//4="} and rows[1]["headers"] == {}
    assert rows[2]["key"] == {"base64": "/w=="} and rows[2]["value"] is None
    assert format_table(["A", "LONGER"], [[1, None], ["xyz", 2]]).splitlines() == ["A    LONGER", "1    -", "xyz  2"]


def test_help_and_typos_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from sparklog.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in ("up", "zookeeper", "broker", "topics", "produce", "consume", "groups", "bench"):
        assert command in out
    for argv, fragment in (
        (["topcs", "list"], "invalid choice: 'topcs'"),
        (["topics", "creat", "x"], "invalid choice: 'creat'"),
        (["topics", "create"], "NAME"),
        (["consume", "t", "--max-mesages", "3"], "unrecognized arguments"),
        (["consume", "t", "--from-beginning", "--offset", "3"], "not allowed with"),
        (["groups", "reset", "g", "--topic", "t"], "one of the arguments"),
        (["produce", "t", "--acks", "2"], "invalid choice: '2'"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1 and captured.err.startswith("sparklog: error: "), captured.err
        assert fragment in captured.err
    # The same through a real process.
    assert_one_line_error(run_cli("topcs", "list"), "invalid choice", "topics")


def _all_one_line_errors(cases: list[tuple[tuple[str, ...], dict[str, Any], tuple[str, ...]]]) -> None:
    """Run independent failing commands side by side; each must fail with its one error line."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: run_cli(*case[0], **case[1]), cases))
    for (args, _kwargs, fragments), result in zip(cases, results, strict=True):
        try:
            assert_one_line_error(result, *fragments)
        except AssertionError as exc:
            raise AssertionError(f"sparklog {' '.join(args)}: {exc}") from None


def test_errors_are_one_line_without_traceback(chroot: str) -> None:
    zk = {"zk": chroot}
    _all_one_line_errors(
        [
            # A ZooKeeper but no broker: enough for everything that fails on metadata or options.
            (("consume", "nope"), zk, ("unknown topic 'nope'",)),
            (("produce", "nope"), {**zk, "input": "x\n"}, ("unknown topic 'nope'",)),
            (("topics", "describe", "nope"), zk, ("unknown topic 'nope'",)),
            (("topics", "delete", "nope"), zk, ("unknown topic 'nope'",)),
            (("topics", "alter", "nope", "--config", "retention.ms=1"), zk, ("unknown topic",)),
            (("groups", "describe", "nobody"), zk, ("nobody",)),
            (("groups", "reset", "g", "--topic", "nope", "--to-earliest"), zk, ("unknown topic",)),
            # Malformed options.
            (("topics", "create", "t", "--config", "retention.ms"), zk, ("--config expects key=value",)),
            (("topics", "create", "t", "--config", "compression=gzip"), zk, ("compression", "gzip")),
            (("topics", "create", "t", "--config", "no.such=1"), zk, ("no.such",)),
            (("topics", "create", "t", "--partitions", "x"), zk, ("invalid int",)),
            (("topics", "create", "t"), zk, ("live brokers",)),  # none registered
            (("consume", "t", "--offset", "3"), zk, ("--offset needs --partition",)),
            (("consume", "t", "--from-time", "yesterday"), zk, ("ISO 8601",)),
            (("groups", "reset", "g", "--topic", "t", "--to-time", "noon"), zk, ("ISO 8601",)),
            # A benchmark option that the scenario would not use (refused before anything starts).
            (("bench", "produce", "--source", "files"), zk, ("produce has no choice of source",)),
            (("bench", "spark-read", "--source", "files"), zk, ("spark-read reads from topic or memory",)),
            (("bench", "spark-write", "--source", "files", "--against", "kafka"), zk, ("drop --source",)),
            (("bench", "produce", "--lake"), zk, ("--lake is for the spark-read scenario",)),
            (("bench", "spark-read", "--lake", "--source", "memory"), zk, ("drop --source",)),
            (("bench", "spark-read", "--segment-bytes", "65536"), zk, ("--segment-bytes is for the tier",)),
        ]
    )


def test_zookeeper_not_running_fails_fast() -> None:
    """Every command first looks whether anything listens at the ZooKeeper address, and fails at
    once saying nothing does: the error is that check's, not what kazoo reports after retrying for
    its whole connection timeout."""
    dead = f"127.0.0.1:{free_port()}"
    zk = {"zk": dead}
    nothing = "nothing is listening there"
    _all_one_line_errors(
        [
            (("topics", "list"), zk, ("ZooKeeper", dead, nothing)),
            (("topics", "create", "t"), zk, ("ZooKeeper", dead, nothing)),
            (("consume", "t"), zk, ("ZooKeeper", dead, nothing)),
            (("produce", "t"), {**zk, "input": "a\n"}, ("ZooKeeper", dead, nothing)),
            (("groups", "describe", "g"), zk, ("ZooKeeper", dead, nothing)),
            (("broker", "--id", "1", "--port", "0"), zk, ("ZooKeeper", dead, nothing)),
            # --zookeeper after the command, and the environment variable, are honoured too.
            (("topics", "list", "--zookeeper", dead), {}, (dead, nothing)),
            (("groups", "list"), {"env": {"SPARKLOG_ZOOKEEPER": dead}}, (dead, nothing)),
        ]
    )


def test_stopped_broker_is_a_clear_error(brokers: Brokers) -> None:
    """With its only broker stopped, ``consume`` warns once that the partition cannot be read,
    naming the cause, and waits for it (Kafka's console consumer does) until ``--timeout-ms``;
    ``produce`` fails with a one-line error before it reads any input (its lines would wait out the
    whole delivery timeout for nothing)."""
    zk = brokers.connect
    brokers.start(1)
    ok("topics", "create", "t", "--partitions", "1", zk=zk)
    ok("produce", "t", zk=zk, input="a\nb\n")
    assert brokers.stop(1) == 0

    waited = ok("consume", "t", "--from-beginning", "--timeout-ms", "15000", zk=zk)
    assert waited.stdout == ""
    warnings = [line for line in waited.stderr.splitlines() if line.startswith("sparklog: warning:")]
    assert len(warnings) == 1, waited.stderr
    assert "t-0 cannot be read" in warnings[0] and "broker 1" in warnings[0], warnings

    with subprocess.Popen(
        [*CLI, "--zookeeper", zk, "produce", "t"],
        stdin=subprocess.PIPE,  # left open: a produce that read its input would wait for more
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    ) as proc:
        try:
            proc.wait(timeout=60)  # hang guard
        finally:
            if proc.poll() is None:
                proc.kill()
        refused = subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr.read().decode())
    assert_one_line_error(refused, "broker 1", "not live")

    described = ok("topics", "describe", "t", zk=zk)  # still describes what ZooKeeper knows
    assert table(described.stdout, "PARTITION")[0]["LOG-END-OFFSET"] == "-"
    assert "warning" in described.stderr


def test_consumers_read_the_partitions_that_have_leaders(brokers: Brokers) -> None:
    """Two of a topic's partitions lose their only broker: ``consume`` prints every record of the
    others and a warning for each leaderless one; a library Consumer reads the others, lists the
    leaderless ones in ``stalled()`` without raising, and reads them once their broker is back."""
    zk = brokers.connect
    brokers.start(1)
    brokers.start(2)
    wait_for(lambda: set(registered_brokers(zk)) == {1, 2}, 30, "both brokers to register")
    ok("topics", "create", "x2", "--partitions", "4", zk=zk)
    for p in range(4):
        ok("produce", "x2", "--partition", str(p), zk=zk, input=f"p{p}-a\np{p}-b\n")
    leaders = {
        int(row["PARTITION"]): int(row["LEADER"])
        for row in table(ok("topics", "describe", "x2", zk=zk).stdout, "PARTITION")
    }
    assert sorted(set(leaders.values())) == [1, 2], leaders
    down = sorted(p for p, leader in leaders.items() if leader == 2)
    up = sorted(p for p, leader in leaders.items() if leader == 1)
    assert brokers.stop(2) == 0

    consumed = ok("consume", "x2", "--from-beginning", "--timeout-ms", "15000", zk=zk)
    assert sorted(consumed.stdout.split()) == sorted(f"p{p}-{x}" for p in up for x in "ab")
    warned = sorted(int(m) for m in re.findall(r"sparklog: warning: x2-(\d+) cannot be read", consumed.stderr))
    assert warned == down, consumed.stderr

    with Consumer("x2", zookeeper=zk, auto_offset_reset="earliest", retry_timeout_s=2) as consumer:
        got: list[bytes] = []

        def read_until(done: Callable[[], bool]) -> bool:
            got.extend(r.value for r in consumer.poll(0.5))
            return done()

        wait_for(lambda: read_until(lambda: set(consumer.stalled()) == {("x2", p) for p in down}), 60, "stalled")
        assert sorted(got) == sorted(f"p{p}-{x}".encode() for p in up for x in "ab")
        brokers.start(2)
        wait_for(lambda: read_until(lambda: len(got) == 8), 90, lambda: f"the rest after broker 2 is back: {got}")
        assert consumer.stalled() == {}
    assert sorted(got) == sorted(f"p{p}-{x}".encode() for p in range(4) for x in "ab")


# ----------------------------------------------------------------- topics
def test_topics_create_list_describe_alter_delete(one_broker: str) -> None:
    zk = one_broker
    assert ok("topics", "list", zk=zk).stdout == ""
    created = ok(
        "topics", "create", "orders", "--partitions", "3", "--replication-factor", "1",
        "--config", "retention.ms=60000", "--config", "cleanup.policy=delete", zk=zk,
    )  # fmt: skip
    assert "created topic orders" in created.stdout
    ok("topics", "create", "clicks", zk=zk)
    assert_one_line_error(run_cli("topics", "create", "orders", zk=zk), "already exists")
    assert ok("topics", "list", zk=zk).stdout.split() == ["clicks", "orders"]

    described = ok("topics", "describe", "orders", zk=zk).stdout
    first = described.splitlines()[0]
    assert "Topic: orders" in first and "Partitions: 3" in first and "ReplicationFactor: 1" in first
    assert "retention.ms=60000" in first and "cleanup.policy=delete" in first
    rows = table(described, "PARTITION")
    assert [r["PARTITION"] for r in rows] == ["0", "1", "2"]
    for row in rows:
        assert row["LEADER"] == "1" and row["REPLICAS"] == "1" and row["ISR"] == "1"
        assert row["LOG-START-OFFSET"] == "0" and row["LOG-END-OFFSET"] == "0"

    ok("produce", "orders", "--partition", "2", zk=zk, input="a\nb\nc\n")
    info = json.loads(ok("topics", "describe", "orders", "--json", zk=zk).stdout)
    ends = {p["partition"]: p["log_end_offset"] for p in info["partitions"]}
    assert ends == {0: 0, 1: 0, 2: 3}

    altered = ok("topics", "alter", "orders", "--config", "retention.ms=1000", zk=zk)
    assert "retention.ms=1000" in altered.stdout
    assert "retention.ms=1000" in ok("topics", "describe", "orders", zk=zk).stdout.splitlines()[0]
    assert_one_line_error(run_cli("topics", "alter", "orders", "--config", "retention.ms=abc", zk=zk), "retention.ms")

    ok("topics", "delete", "orders", zk=zk)
    assert ok("topics", "list", zk=zk).stdout.split() == ["clicks"]
    assert_one_line_error(run_cli("topics", "describe", "orders", zk=zk), "unknown topic")


# ----------------------------------------------------------------- produce and consume
def test_produce_then_consume_everything_once_in_order(brokers: Brokers) -> None:
    zk = brokers.connect
    brokers.start(1)
    brokers.start(2)
    ok("topics", "create", "events", "--partitions", "3", zk=zk)
    lines = [f"user-{i % 37}:value-{i}" for i in range(1000)]
    produced = ok("produce", "events", "--key-separator", ":", "--acks", "all", zk=zk, input="\n".join(lines) + "\n")
    assert produced.stdout == ""
    assert "1000" in produced.stderr

    consumed = ok("consume", "events", "--from-beginning", "--max-messages", "1000", "--format", "json", zk=zk)
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(records) == 1000
    assert sorted((r["key"], r["value"]) for r in records) == sorted(
        (f"user-{i % 37}", f"value-{i}") for i in range(1000)
    )
    by_partition: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        assert r["topic"] == "events" and r["headers"] == {} and isinstance(r["timestamp"], int)
        by_partition[r["partition"]].append(r)
    assert set(by_partition) <= {0, 1, 2} and len(by_partition) > 1
    key_partition = {}
    for p, rows in by_partition.items():
        assert [r["offset"] for r in rows] == list(range(len(rows)))  # in order, no gap, no repeat
        sequence = [int(r["value"].split("-")[1]) for r in rows]
        assert sequence == sorted(sequence)  # the order they were produced in
        for r in rows:
            assert key_partition.setdefault(r["key"], p) == p  # one key, one partition
    assert "Processed a total of 1000 messages" in consumed.stderr


def test_consume_positions_formats_and_raw_bytes(one_broker: str) -> None:
    zk = one_broker
    ok("topics", "create", "events", "--partitions", "2", zk=zk)
    lines = "".join(f"k{i}:v{i}\n" for i in range(10))
    ok("produce", "events", "--partition", "0", "--key-separator", ":", zk=zk, input=lines)

    # One partition from an offset, text format with keys.
    some = ok(
        "consume", "events", "--partition", "0", "--offset", "3", "--max-messages", "2",
        "--print-key", "--key-separator", "=", zk=zk,
    )  # fmt: skip
    assert some.stdout.splitlines() == ["k3=v3", "k4=v4"]
    # From a time: everything after 2000, nothing after 2999 (and --timeout-ms ends the wait, exit 0).
    since = ok("consume", "events", "--from-time", "2000-01-01T00:00:00Z", "--timeout-ms", "1000", zk=zk)
    assert since.stdout.split() == [f"v{i}" for i in range(10)]
    future = ok("consume", "events", "--from-time", "2999-01-01T00:00:00Z", "--timeout-ms", "300", zk=zk)
    assert future.stdout == "" and "Processed a total of 0 messages" in future.stderr
    assert_one_line_error(run_cli("consume", "events", "--partition", "7", zk=zk), "partition 7")

    # Bytes go through untouched; values that are not UTF-8 come back as base64 in JSON.
    ok("produce", "events", "--partition", "1", zk=zk, input=b"\xff\xfe\r\n\nplain\n")
    raw = ok("consume", "events", "--partition", "1", "--offset", "0", "--max-messages", "3", "--format", "json", zk=zk)
    assert [json.loads(line)["value"] for line in raw.stdout.splitlines()] == [{"base64": "//4="}, "", "plain"]
    text = subprocess.run(
        [*CLI, "--zookeeper", zk, "consume", "events", "--partition", "1", "--offset", "earliest"]
        + ["--max-messages", "3", "-q"],
        capture_output=True,
        timeout=60,
        env=_env(),
    )
    assert text.returncode == 0 and text.stdout == b"\xff\xfe\n\nplain\n" and text.stderr == b""
    assert_one_line_error(run_cli("produce", "events", "--key-separator", ":", zk=zk, input="no separator\n"), "line 1")


def test_produce_stops_at_the_first_line_it_cannot_send_and_names_it(one_broker: str) -> None:
    """Kafka's console producer goes on past a record it cannot send; here the first such line ends
    the run (--ignore-errors goes on), and the error says which line and what was delivered."""
    zk = one_broker
    ok("topics", "create", "small", "--partitions", "1", "--config", "max.message.bytes=100000", zk=zk)
    big = "x" * 200_000
    lines = "first\n" + big + "\n" + "".join(f"after-{i}\n" for i in range(1000))

    stopped = run_cli("produce", "small", zk=zk, input=lines)
    error = assert_one_line_error(stopped, "line 2 (b'xxxxxxxx", "max.message.bytes=100000")
    assert "1 line(s) before it were delivered, none after it was sent" in error
    assert ok("consume", "small", "--from-beginning", "--timeout-ms", "2000", zk=zk).stdout.split() == ["first"]

    kept_on = run_cli("produce", "small", "--ignore-errors", zk=zk, input=lines)
    assert kept_on.returncode == 1 and "Traceback" not in kept_on.stderr
    assert "line 2 (b'xxxx" in kept_on.stderr and "produced 1001 record(s) to small; 1 line(s) lost" in kept_on.stderr
    values = ok("consume", "small", "--from-beginning", "--timeout-ms", "2000", zk=zk).stdout.split()
    assert values == ["first", "first", *[f"after-{i}" for i in range(1000)]]


def test_produce_100k_lines_then_consume_each_once(one_broker: str) -> None:
    """(How fast is for benchmarks: a timed assertion here only measured the machine's load.)"""
    zk = one_broker
    ok("topics", "create", "bulk", "--partitions", "2", zk=zk)
    ok("produce", "bulk", zk=zk, input="".join(f"{i}\n" for i in range(100_000)))
    rows = json.loads(ok("topics", "describe", "bulk", "--json", zk=zk).stdout)["partitions"]
    assert sum(p["log_end_offset"] for p in rows) == 100_000
    consumed = ok("consume", "bulk", "--from-beginning", "--max-messages", "100000", "-q", zk=zk)
    assert sorted(map(int, consumed.stdout.split())) == list(range(100_000))


# ----------------------------------------------------------------- consumer groups
def _lag(zk: str, group: str) -> dict[str, int]:
    rows = table(ok("groups", "describe", group, zk=zk).stdout, "TOPIC")
    return {
        "committed": sum(int(r["COMMITTED-OFFSET"]) for r in rows),
        "end": sum(int(r["LOG-END-OFFSET"]) for r in rows),
        "lag": sum(int(r["LAG"]) for r in rows),
    }


def test_group_commits_and_lag(one_broker: str) -> None:
    zk = one_broker
    ok("topics", "create", "payments", "--partitions", "2", zk=zk)
    ok("produce", "payments", zk=zk, input="".join(f"first-{i}\n" for i in range(100)))

    first = ok("consume", "payments", "--group", "billing", "--from-beginning", "--max-messages", "100", zk=zk)
    assert sorted(first.stdout.split()) == sorted(f"first-{i}" for i in range(100))
    assert "billing" in ok("groups", "list", zk=zk).stdout.split()
    assert _lag(zk, "billing") == {"committed": 100, "end": 100, "lag": 0}

    ok("produce", "payments", zk=zk, input="".join(f"second-{i}\n" for i in range(25)))
    rows = [json.loads(line) for line in ok("groups", "describe", "billing", "--json", zk=zk).stdout.splitlines()]
    assert {(r["group"], r["topic"]) for r in rows} == {("billing", "payments")}
    assert sorted(r["partition"] for r in rows) == [0, 1]
    assert sum(r["lag"] for r in rows) == 25
    assert all(r["lag"] == r["log_end_offset"] - r["committed_offset"] for r in rows)

    # The group goes on where it stopped: only the new records, then lag 0 again.
    second = ok("consume", "payments", "--group", "billing", "--timeout-ms", "1000", zk=zk)
    assert sorted(second.stdout.split()) == sorted(f"second-{i}" for i in range(25))
    assert _lag(zk, "billing") == {"committed": 125, "end": 125, "lag": 0}


def test_group_reset(one_broker: str) -> None:
    zk = one_broker
    ok("topics", "create", "payments", "--partitions", "2", zk=zk)
    ok("produce", "payments", zk=zk, input="".join(f"r-{i}\n" for i in range(125)))
    everything = sorted(f"r-{i}" for i in range(125))

    reset = ok("groups", "reset", "billing", "--topic", "payments", "--to-earliest", "--execute", zk=zk)
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(reset.stdout, "TOPIC")] == [
        ("payments", "0", "0"),
        ("payments", "1", "0"),
    ]
    assert _lag(zk, "billing") == {"committed": 0, "end": 125, "lag": 125}
    again = ok("consume", "payments", "--group", "billing", "--max-messages", "125", zk=zk)
    assert sorted(again.stdout.split()) == everything

    latest = ok("groups", "reset", "billing", "--topic", "payments", "--to-latest", "--execute", zk=zk)
    ends = [int(r["NEW-OFFSET"]) for r in table(latest.stdout, "TOPIC")]
    assert sum(ends) == 125
    moved = ok("groups", "reset", "billing", "--topic", "payments", "--to-offset", "1", "--execute", zk=zk)
    assert [int(r["NEW-OFFSET"]) for r in table(moved.stdout, "TOPIC")] == [min(1, end) for end in ends]  # clamped
    by_time = ok(
        "groups", "reset", "billing", "--topic", "payments", "--to-time", "2000-01-01T00:00:00Z", "--execute", zk=zk
    )
    assert [r["NEW-OFFSET"] for r in table(by_time.stdout, "TOPIC")] == ["0", "0"]

    # --max-messages stops inside a fetched batch: only what was printed is committed.
    five = ok("consume", "payments", "--group", "billing", "--max-messages", "5", zk=zk)
    assert len(five.stdout.split()) == 5
    assert _lag(zk, "billing") == {"committed": 5, "end": 125, "lag": 120}


def test_consume_stops_cleanly_on_sigterm_and_commits(one_broker: str) -> None:
    zk = one_broker
    ok("topics", "create", "live", zk=zk)
    ok("produce", "live", zk=zk, input="a\nb\nc\n")
    proc = subprocess.Popen(
        [*CLI, "--zookeeper", zk, "consume", "live", "--group", "tail", "--from-beginning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        got = [proc.stdout.readline() for _ in range(3)]
        assert got == [b"a\n", b"b\n", b"c\n"]
    finally:
        code = _stop(proc)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Processed a total of 3 messages" in stderr
    assert _lag(zk, "tail") == {"committed": 3, "end": 3, "lag": 0}


# ----------------------------------------------------------------- sparklog broker / up
def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class _Lines:
    """Reads a process's stdout lines in a thread so a test can wait for one with a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: [self.lines.put(line.decode()) for line in stream], daemon=True).start()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"no such line within {timeout} s; saw: {self.seen}")


@pytest.mark.parametrize(
    ("brokers_n", "sig", "given_zookeeper"),
    [(2, signal.SIGTERM, False), (1, signal.SIGINT, False), (1, signal.SIGTERM, True)],
    ids=["2-brokers-sigterm", "1-broker-ctrl-c", "given-zookeeper"],
)
def test_up_runs_a_cluster_and_stops_it_cleanly(
    tmp_path: Path, chroot: str, brokers_n: int, sig: int, given_zookeeper: bool
) -> None:
    zk_port = int(chroot.split("/")[0].rsplit(":", 1)[1]) if given_zookeeper else free_port()
    command = [*CLI, "up", "--brokers", str(brokers_n), "--data-dir", str(tmp_path / "data"), "--broker-port", "0"]
    command += ["--zookeeper", chroot] if given_zookeeper else ["--zookeeper-port", str(zk_port)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    children: set[int] = set()
    try:
        out = _Lines(proc)
        out.wait_for(lambda line: line.startswith("sparklog is up"))
        listening = [line for line in out.seen if " listening on " in line]
        if given_zookeeper:
            assert any(line.startswith(f"zookeeper at {chroot} (given") for line in out.seen)
        else:
            assert any(line.startswith(f"zookeeper listening on 127.0.0.1:{zk_port}") for line in listening)
        ports = {}
        for line in listening:
            match = re.match(r"broker (\d+) listening on 127\.0\.0\.1:(\d+)", line)
            if match:
                ports[int(match.group(1))] = int(match.group(2))
        assert sorted(ports) == list(range(1, brokers_n + 1))
        assert all(port_is_open("127.0.0.1", port) for port in ports.values())
        # each broker's Prometheus endpoint, on a free port, in its line; it answers
        metrics = [re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)$", line) for line in listening[-brokers_n:]]
        assert all(metrics), listening
        for found in metrics:
            assert found is not None
            with urllib.request.urlopen(found.group(1), timeout=30) as response:
                assert b"kafka_server_replicamanager_partitioncount" in response.read()
        children = _descendants(proc.pid)
        assert len(children) >= brokers_n + (0 if given_zookeeper else 1)  # brokers and the ZooKeeper JVM

        zk = chroot if given_zookeeper else f"127.0.0.1:{zk_port}"
        ok("topics", "create", "through-up", "--partitions", str(2 * brokers_n), zk=zk)
        leaders = {r["LEADER"] for r in table(ok("topics", "describe", "through-up", zk=zk).stdout, "PARTITION")}
        assert leaders == {str(b) for b in ports}
        ok("produce", "through-up", "--key-separator", ",", zk=zk, input="".join(f"k{i},v{i}\n" for i in range(50)))
        # every broker serves Kafka clients too: its Kafka listener is in the ready lines
        (kafka_line,) = [line for line in out.seen if line.startswith("Kafka clients: bootstrap.servers=")]
        kafka_servers = kafka_line.split("=", 1)[1].split(",")
        assert len(kafka_servers) == brokers_n
        kafka_producer = KafkaProducer({"bootstrap.servers": ",".join(kafka_servers)})
        for i in range(50, 60):
            kafka_producer.produce("through-up", key=f"k{i}".encode(), value=f"v{i}".encode())
        assert kafka_producer.flush(30) == 0
        consumed = ok("consume", "through-up", "--from-beginning", "--max-messages", "60", "--print-key", zk=zk)
        assert sorted(consumed.stdout.splitlines()) == sorted(f"k{i}\tv{i}" for i in range(60))
    finally:
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        for pid in _descendants(proc.pid) | children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr and "error" not in stderr, stderr
    left = [pid for pid in children if _alive(pid)]
    assert not left, f"processes left behind: {left}"
    assert port_is_open("127.0.0.1", zk_port) == given_zookeeper  # a given ZooKeeper is left running
    assert all(not port_is_open("127.0.0.1", port) for port in ports.values())
    assert (tmp_path / "data" / "zookeeper").is_dir() != given_zookeeper
    assert (tmp_path / "data" / "broker-1").is_dir()


@pytest.mark.parametrize("victim", ["broker", "zookeeper"])
def test_up_stops_the_cluster_when_one_of_its_processes_dies(tmp_path: Path, victim: str) -> None:
    """``kill -9`` of one of ``up``'s processes (broker 2, or its ZooKeeper): ``up`` says which one
    exited and where its log is, stops the others cleanly and exits 1; nothing is left running."""
    zk_port = free_port()
    command = [*CLI, "up", "--brokers", "2", "--data-dir", str(tmp_path / "data"), "--broker-port", "0"]
    proc = subprocess.Popen(
        [*command, "--zookeeper-port", str(zk_port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    children: set[int] = set()
    try:
        _Lines(proc).wait_for(lambda line: line.startswith("sparklog is up"))
        children = _descendants(proc.pid)
        marker = "--id\x002\x00" if victim == "broker" else "org.apache.zookeeper"
        (target,) = [pid for pid in children if marker in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]
        os.kill(target, signal.SIGKILL)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _descendants(proc.pid) | children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 1, stderr
    assert "Traceback" not in stderr, stderr
    said = "broker 2 exited with code -9" if victim == "broker" else "its ZooKeeper exited"
    assert f"sparklog: {said}" in stderr and "stopping the cluster" in stderr, stderr
    assert stderr.splitlines()[-1].startswith(f"sparklog: error: {said}"), stderr
    left = [pid for pid in children if _alive(pid)]
    assert not left, f"processes left behind: {left}"
    assert not port_is_open("127.0.0.1", zk_port)


class socket_listening:
    """A TCP port with a listener on it for the duration of a ``with`` block."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_up_refuses_a_busy_zookeeper_port(tmp_path: Path) -> None:
    with socket_listening() as busy:
        result = run_cli("up", "--data-dir", str(tmp_path), "--zookeeper-port", str(busy), timeout=60)
    assert_one_line_error(result, "already listening")
    assert_one_line_error(run_cli("up", "--brokers", "0"), "--brokers")


def test_broker_command_runs_and_stops_on_sigterm(brokers: Brokers) -> None:
    port = brokers.start(7)
    assert port_is_open("127.0.0.1", port)
    assert brokers.stop(7) == 0
    assert not port_is_open("127.0.0.1", port)


def test_zookeeper_command_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*CLI, "zookeeper", "--port", "0", "--data-dir", str(tmp_path / "zk")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        line = _Lines(proc).wait_for(lambda text: "listening on" in text, timeout=60)
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        assert port_is_open("127.0.0.1", port)
        children = _descendants(proc.pid)
    finally:
        code = _stop(proc, timeout=30)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0 and stderr == "", stderr
    assert not port_is_open("127.0.0.1", port)
    assert not [pid for pid in children if _alive(pid)]


def test_broker_command_refuses_a_busy_port(chroot: str, tmp_path: Path) -> None:
    with socket_listening() as busy:
        result = run_cli("broker", "--id", "1", "--port", str(busy), "--data-dir", str(tmp_path / "b"), zk=chroot)
    assert_one_line_error(result, "already listening", str(busy))


def test_up_secure_runs_a_cluster_only_its_admin_reaches(tmp_path: Path) -> None:
    """``sparklog up --secure``: TLS, SCRAM and ACLs on; the printed client.properties works with
    --command-config, plaintext and a wrong password are refused, ZooKeeper refuses anonymous writes
    (at its root too) and answers no four-letter word that lists its clients."""
    data = tmp_path / "data"
    zk_port = free_port()
    command = [*CLI, "up", "--secure", "--data-dir", str(data), "--broker-port", "0", "--zookeeper-port", str(zk_port)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        out = _Lines(proc)
        out.wait_for(lambda line: line.startswith("sparklog is up (TLS, SCRAM, ACLs)"))
        properties = data / "client.properties"
        assert f"--command-config {properties}" in out.seen[-1]
        assert properties.stat().st_mode & 0o077 == 0  # it holds a password
        config = ("--command-config", str(properties))
        ok("topics", "create", "secured", "--partitions", "2", *config)
        ok("produce", "secured", *config, input="".join(f"v{i}\n" for i in range(20)))
        consumed = ok("consume", "secured", "--from-beginning", "--max-messages", "20", *config)
        assert sorted(consumed.stdout.splitlines()) == sorted(f"v{i}" for i in range(20))

        # the administration it prints: through the brokers, with the same file (no ZooKeeper digest)
        assert f"sparklog users add alice --command-config {properties}" in out.seen[-1]
        assert "SPARKLOG_ZOOKEEPER_DIGEST" not in out.seen[-1]
        ok("users", "add", "alice", *config, input="alice-secret\n")
        ok("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "secured", *config)
        alice = tmp_path / "alice.properties"
        alice.write_text(
            properties.read_text()
            .replace("sasl.username=admin", "sasl.username=alice")
            .replace(
                next(line for line in properties.read_text().splitlines() if line.startswith("sasl.password=")),
                "sasl.password=alice-secret",
            )
        )
        read = ok("consume", "secured", "--from-beginning", "--max-messages", "20", "--command-config", str(alice))
        assert sorted(read.stdout.splitlines()) == sorted(f"v{i}" for i in range(20))

        # Kafka clients: SASL_SSL listeners, and kafka-client.properties usable as-is by confluent-kafka
        kafka_properties = data / "kafka-client.properties"
        kafka_line = next(line for line in out.seen if line.startswith("Kafka clients: bootstrap.servers="))
        assert "SASL_SSL" in kafka_line and str(kafka_properties) in kafka_line
        assert kafka_properties.stat().st_mode & 0o077 == 0
        kafka_config = load_properties(kafka_properties)
        assert kafka_config["security.protocol"] == "SASL_SSL"
        producer = KafkaProducer({**kafka_config, "partitioner": "murmur2_random"})
        for i in range(20, 30):
            producer.produce("secured", value=f"v{i}".encode())
        assert producer.flush(30) == 0
        read = ok("consume", "secured", "--from-beginning", "--max-messages", "30", *config)
        assert sorted(read.stdout.splitlines()) == sorted(f"v{i}" for i in range(30))
        plain_kafka = KafkaProducer(
            {"bootstrap.servers": kafka_config["bootstrap.servers"], "message.timeout.ms": 3000}
        )
        outcome: list[object] = []
        plain_kafka.produce("secured", value=b"never", on_delivery=lambda err, _msg: outcome.append(err))
        plain_kafka.flush(10)
        assert outcome and outcome[0] is not None  # a plaintext Kafka client does not get in

        servers = next(line for line in properties.read_text().splitlines() if line.startswith("bootstrap.servers="))
        plaintext = run_cli("topics", "list", "--bootstrap-server", servers.split("=", 1)[1], timeout=120)
        assert_one_line_error(plaintext, "security.protocol")
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(properties.read_text().replace("sasl.password=", "sasl.password=x"))
        assert_one_line_error(run_cli("topics", "list", "--command-config", str(wrong)), "wrong password")

        anonymous = KazooClient(hosts=f"127.0.0.1:{zk_port}", timeout=10.0)
        anonymous.start(timeout=15)
        try:
            with pytest.raises(NoAuthError):
                anonymous.delete("/sparklog/topics/secured", recursive=True)
            with pytest.raises(NoAuthError):
                anonymous.create("/intruder", b"")
        finally:
            anonymous.stop()
            anonymous.close()
        assert "not in the whitelist" in four_letter_word("127.0.0.1", zk_port, "cons")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    assert code == 0, proc.stderr.read().decode() if proc.stderr else ""


# ----------------------------------------------------------------- habits of Kafka's tools
def test_acks_minus_one_means_all_wherever_acks_is_taken(one_broker: str) -> None:
    """Kafka's tools take ``--acks -1`` for ``all``; so does every command with ``--acks``."""
    from sparklog.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["produce", "t", "--acks", "-1"]).acks == "all"
    assert parser.parse_args(["bench", "latency", "--acks", "-1"]).acks == "all"
    zk = one_broker
    ok("topics", "create", "acked", zk=zk)
    ok("produce", "acked", "--acks", "-1", zk=zk, input="a\nb\n")
    assert ok("consume", "acked", "--from-beginning", "--max-messages", "2", zk=zk).stdout.split() == ["a", "b"]


def test_a_zookeeper_host_name_that_does_not_resolve_is_named_as_such() -> None:
    """A typo in the ZooKeeper host name is not "nothing is listening there": the error says the
    name does not resolve (``.invalid`` never does, RFC 2606); with a resolvable address beside it
    that nothing listens on, both are said."""
    name = "no-such-zookeeper.invalid"
    dead = f"127.0.0.1:{free_port()}"
    _all_one_line_errors(
        [
            (("topics", "list"), {"zk": f"{name}:2181"}, (f"host name '{name}' does not resolve", "--zookeeper")),
            (("consume", "t"), {"zk": f"{name}:2181/chroot"}, (f"host name '{name}' does not resolve",)),
            (("broker", "--id", "1", "--port", "0"), {"zk": f"{name}:2181"}, (f"'{name}' does not resolve",)),
            (("groups", "list"), {"env": {"SPARKLOG_ZOOKEEPER": f"{name}:2181"}}, (f"'{name}' does not resolve",)),
            (("topics", "list"), {"zk": f"{name}:2181,{dead}"}, (f"nothing is listening at {dead}", f"'{name}' does")),
        ]
    )
    for case in (("topics", "list"), ("consume", "t")):
        assert "nothing is listening there" not in run_cli(*case, zk=f"{name}:2181").stderr


def test_a_partition_without_a_leader_is_said_to_have_none_once(brokers: Brokers) -> None:
    """When every broker of a partition's in-sync replicas is down the controller leaves it without
    a leader (-1): commands say the partition has no leader and where its replicas are (not that
    "broker -1" is not live), in one line: a warning from describe and consume (which waits for
    it), an error from produce."""
    zk = brokers.connect
    brokers.start(1)
    brokers.start(2)
    ok("topics", "create", "big", "--partitions", "2", zk=zk)
    leaders = {
        p["partition"]: p["leader"]
        for p in json.loads(ok("topics", "describe", "big", "--json", zk=zk).stdout)["partitions"]
    }
    down = leaders[0]
    assert brokers.stop(down) == 0

    def leaderless() -> bool:
        info = json.loads(ok("topics", "describe", "big", "--json", zk=zk).stdout)
        return info["partitions"][0]["leader"] == -1

    wait_for(leaderless, 60, "the controller to leave big-0 without a leader")
    said = f"big-0 has no leader (the brokers of its in-sync replicas are down; its replicas are on broker(s) {down})"
    described = ok("topics", "describe", "big", zk=zk)
    assert described.stderr.splitlines() == [f"sparklog: warning: {said}"]
    rows = table(described.stdout, "PARTITION")
    assert rows[0]["LOG-END-OFFSET"] == "-" and rows[1]["LOG-END-OFFSET"] == "0"
    line = assert_one_line_error(run_cli("produce", "big", "--partition", "0", zk=zk, input="a\n"), said)
    assert "broker -1" not in line and "not live" not in line
    waited = ok("consume", "big", "--partition", "0", "--offset", "0", "--timeout-ms", "15000", zk=zk)
    (line,) = waited.stderr.splitlines()[:-1]  # then "Processed a total of 0 messages"
    assert line.startswith("sparklog: warning: big-0 cannot be read") and said in line, waited.stderr
    assert "broker -1" not in line and "not live" not in line


def test_typed_produce_errors_name_the_input_line_counted_from_one(one_broker: str, tmp_path: Path) -> None:
    """A JSON line a typed topic's schema refuses is named by its line number (from 1, as every
    produce error), not by its row in the batch the producer built (from 0); it fails alone, the
    lines sent with it are delivered."""
    zk = one_broker
    schema = tmp_path / "reading.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "Reading", "fields": [{"name": "a", "type": "long"}]}))
    ok("topics", "create", "readings", "--value-schema", str(schema), zk=zk)

    lines = ['{"a": 1}', '{"a": "x"}', '{"a": 3}']
    stopped = run_cli("produce", "readings", zk=zk, input="\n".join(lines) + "\n")
    error = assert_one_line_error(stopped, 'line 2 (b\'{"a": "x"}\')', "field 'a' must be long, got str 'x'")
    assert "row" not in error and "line 1" not in error
    consumed = ok("consume", "readings", "--from-beginning", "--timeout-ms", "2000", zk=zk).stdout.splitlines()
    assert json.loads(consumed[0]) == {"a": 1} and all(json.loads(v)["a"] != "x" for v in consumed)

    many = [json.dumps({"a": i}) for i in range(1, 3001)]
    many[1233] = json.dumps({"a": None})
    kept_on = run_cli("produce", "readings", "--ignore-errors", zk=zk, input="\n".join(many) + "\n")
    assert kept_on.returncode == 1 and "Traceback" not in kept_on.stderr
    errors = [line for line in kept_on.stderr.splitlines() if line.startswith("sparklog: error: ")]
    assert len(errors) == 1 and errors[0].startswith("sparklog: error: line 1234 ("), kept_on.stderr
    assert "row" not in errors[0]
    assert "produced 2999 record(s) to readings; 1 line(s) lost" in kept_on.stderr
    values = ok("consume", "readings", "--from-beginning", "--timeout-ms", "2000", "-q", zk=zk).stdout.splitlines()
    assert sorted(json.loads(v)["a"] for v in values[len(consumed) :]) == [i for i in range(1, 3001) if i != 1234]


def test_topics_describe_without_a_name_describes_every_topic(one_broker: str) -> None:
    """As ``kafka-topics --describe`` without ``--topic``: every topic, a blank line between them
    (with ``--json`` one object a line)."""
    zk = one_broker
    assert ok("topics", "describe", zk=zk).stdout == ""
    ok("topics", "create", "alpha", "--partitions", "2", zk=zk)
    ok("topics", "create", "beta", "--config", "retention.ms=60000", zk=zk)
    ok("produce", "beta", zk=zk, input="x\ny\n")

    blocks = ok("topics", "describe", zk=zk).stdout.split("\n\n")
    assert len(blocks) == 2, blocks
    assert blocks[0].startswith("Topic: alpha  Partitions: 2  ReplicationFactor: 1")
    assert [(r["PARTITION"], r["LEADER"]) for r in table(blocks[0], "PARTITION")] == [("0", "1"), ("1", "1")]
    assert blocks[1].startswith("Topic: beta  Partitions: 1") and "retention.ms=60000" in blocks[1].splitlines()[0]
    assert [r["LOG-END-OFFSET"] for r in table(blocks[1], "PARTITION")] == ["2"]

    infos = [json.loads(line) for line in ok("topics", "describe", "--json", zk=zk).stdout.splitlines()]
    assert [(i["topic"], len(i["partitions"])) for i in infos] == [("alpha", 2), ("beta", 1)]
    assert ok("topics", "describe", "beta", "--json", zk=zk).stdout.count("\n") == 1  # one topic named: as before


def test_topics_alter_adds_partitions_and_deletes_config_overrides(brokers: Brokers) -> None:
    """``topics alter --partitions N`` grows a topic as ``kafka-topics --alter --partitions`` does
    (through ZooKeeper or a broker): the new partitions get the topic's replication factor, their
    replicas follow and join the ISR, and they take and serve records; fewer or as many is a clear
    error that changes nothing. ``--delete-config`` removes per-topic overrides."""
    zk = brokers.connect
    brokers.start(1)
    bootstrap = ("--bootstrap-server", f"127.0.0.1:{brokers.start(2)}")
    ok("topics", "create", "orders", "--partitions", "2", "--replication-factor", "2",
       "--config", "retention.ms=60000", "--config", "segment.bytes=1048576", zk=zk)  # fmt: skip
    ok("produce", "orders", "--partition", "1", zk=zk, input="old\n")

    altered = ok("topics", "alter", "orders", "--partitions", "5", zk=zk)
    assert altered.stdout.splitlines() == ["altered topic orders: partitions 2 -> 5"]
    assert "keyed records of orders are placed among 5 partitions" in altered.stderr

    def described() -> dict[str, Any]:
        return json.loads(ok("topics", "describe", "orders", "--json", zk=zk).stdout)

    def in_sync(count: int) -> bool:
        parts = described()["partitions"]
        return len(parts) == count and all(sorted(p["isr"]) == [1, 2] and p["leader"] in (1, 2) for p in parts)

    wait_for(lambda: in_sync(5), 60, "the new partitions' replicas to be in sync")
    info = described()
    assert [sorted(p["replicas"]) for p in info["partitions"]] == [[1, 2]] * 5
    assert {p["replicas"][0] for p in info["partitions"]} == {1, 2}  # leaders spread as a new topic's
    assert [p["log_end_offset"] for p in info["partitions"]] == [0, 1, 0, 0, 0]  # nothing moved

    ok("produce", "orders", "--partition", "4", zk=zk, input="new\n")
    read = ok("consume", "orders", "--partition", "4", "--offset", "0", "--max-messages", "1", zk=zk)
    assert read.stdout == "new\n"
    ok("produce", "orders", "--key-separator", ":", zk=zk, input="".join(f"key-{i}:v{i}\n" for i in range(200)))
    assert all(p["log_end_offset"] > 0 for p in described()["partitions"])  # keys spread over all five

    # through a broker (CreatePartitions), then refusals that change nothing
    assert "partitions 5 -> 6" in ok("topics", "alter", "orders", "--partitions", "6", *bootstrap).stdout
    wait_for(lambda: in_sync(6), 60, "partition 5's replicas to be in sync")
    assert_one_line_error(run_cli("topics", "alter", "orders", "--partitions", "3", zk=zk),
                          "'orders' has 6 partitions", "can only be increased", "would remove 3")  # fmt: skip
    assert_one_line_error(run_cli("topics", "alter", "orders", "--partitions", "6", *bootstrap), "already has 6")
    refused = run_cli("topics", "alter", "orders", "--partitions", "2", "--config", "retention.ms=1000", zk=zk)
    assert_one_line_error(refused, "can only be increased")
    first = ok("topics", "describe", "orders", zk=zk).stdout.splitlines()[0]
    assert "Partitions: 6" in first and "retention.ms=60000" in first

    # --delete-config: back to the defaults (comma-separated or repeated; ZooKeeper or a broker)
    deleted = ok("topics", "alter", "orders", "--delete-config", "retention.ms,segment.bytes", zk=zk)
    assert deleted.stdout.splitlines() == ["altered topic orders: configs partitioner=murmur2"]
    ok("topics", "alter", "orders", "--config", "retention.ms=5000", "--config", "flush.ms=10", *bootstrap)
    ok("topics", "alter", "orders", "--delete-config", "retention.ms", "--delete-config", "flush.ms", *bootstrap)
    assert json.loads(ok("topics", "describe", "orders", "--json", zk=zk).stdout)["configs"] == {
        "partitioner": "murmur2"
    }
    _all_one_line_errors(
        [
            (("topics", "alter", "orders"), {"zk": zk}, ("nothing to alter", "--partitions", "--delete-config")),
            (("topics", "alter", "orders", "--delete-config", "no.such"), {"zk": zk}, ("unknown topic config",)),
            (("topics", "alter", "orders", "--delete-config", "partitioner"), {"zk": zk}, ("cannot be deleted",)),
            (("topics", "alter", "nope", "--partitions", "3"), {"zk": zk}, ("unknown topic 'nope'",)),
        ]
    )


def test_group_reset_previews_unless_execute_and_resets_all_topics(one_broker: str) -> None:
    """As ``kafka-consumer-groups --reset-offsets``: without ``--execute`` the planned offsets are
    printed and nothing changes (a warning says so unless ``--dry-run`` asked for the preview);
    ``--dry-run --execute`` is an error; ``--all-topics`` resets every topic the group committed
    offsets for, and no other."""
    zk = one_broker
    for topic, partitions in (("payments", "2"), ("refunds", "1"), ("unread", "1")):
        ok("topics", "create", topic, "--partitions", partitions, zk=zk)
        ok("produce", topic, zk=zk, input="".join(f"{topic}-{i}\n" for i in range(30)))
    for topic in ("payments", "refunds"):
        ok("consume", topic, "--group", "billing", "--from-beginning", "--max-messages", "30", zk=zk)
    committed = {"committed": 60, "end": 60, "lag": 0}
    assert _lag(zk, "billing") == committed

    preview = ok("groups", "reset", "billing", "--topic", "payments", "--to-earliest", zk=zk)
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(preview.stdout, "TOPIC")] == [
        ("payments", "0", "0"),
        ("payments", "1", "0"),
    ]
    assert preview.stderr.startswith("sparklog: warning: nothing was changed") and "--execute" in preview.stderr
    assert _lag(zk, "billing") == committed
    dry = ok("groups", "reset", "billing", "--topic", "payments", "--to-offset", "3", "--dry-run", zk=zk)
    ends = [
        p["log_end_offset"]
        for p in json.loads(ok("topics", "describe", "payments", "--json", zk=zk).stdout)["partitions"]
    ]
    assert [int(r["NEW-OFFSET"]) for r in table(dry.stdout, "TOPIC")] == [min(3, end) for end in ends]
    assert dry.stderr == ""
    assert _lag(zk, "billing") == committed
    assert_one_line_error(
        run_cli("groups", "reset", "billing", "--topic", "payments", "--to-earliest", "--dry-run", "--execute", zk=zk),
        "not allowed with",
    )

    everything = ok("groups", "reset", "billing", "--all-topics", "--to-earliest", "--dry-run", zk=zk)
    planned = [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(everything.stdout, "TOPIC")]
    assert planned == [("payments", "0", "0"), ("payments", "1", "0"), ("refunds", "0", "0")]
    assert _lag(zk, "billing") == committed
    executed = ok("groups", "reset", "billing", "--all-topics", "--to-earliest", "--execute", zk=zk)
    assert executed.stdout == everything.stdout and executed.stderr == ""
    rows = table(ok("groups", "describe", "billing", zk=zk).stdout, "TOPIC")
    assert {(r["TOPIC"], r["COMMITTED-OFFSET"]) for r in rows} == {("payments", "0"), ("refunds", "0")}
    assert_one_line_error(
        run_cli("groups", "reset", "nobody", "--all-topics", "--to-latest", "--execute", zk=zk),
        "'nobody' has no committed offsets",
    )


def test_help_says_what_each_option_does_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    """Every option of ``topics create|list|delete``, ``schemas``, ``zookeeper`` and ``bench`` has a
    help string that says what it does, and for an option (not a positional) its default."""
    from sparklog.cli.main import build_parser, main

    def command(*path: str) -> argparse.ArgumentParser:
        parser = build_parser()
        for name in path:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[name]
        return parser

    paths = [("topics", "create"), ("topics", "list"), ("topics", "delete"), ("schemas", "list")]
    paths += [("schemas", "show"), ("schemas", "add"), ("zookeeper",), ("bench",)]
    lacking = []
    for path in paths:
        for action in command(*path)._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = action.help or ""
            name = " ".join([*path, action.option_strings[0] if action.option_strings else action.dest])
            if len(text.strip()) < 10 or text == argparse.SUPPRESS:
                lacking.append(f"{name}: says nothing ({text!r})")
            elif action.option_strings and "default" not in text.lower():
                lacking.append(f"{name}: no default in {text!r}")
    assert not lacking, "\n".join(lacking)

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--compression {none,lz4,zstd} append: the log's compression" in shown and "default none" in shown
