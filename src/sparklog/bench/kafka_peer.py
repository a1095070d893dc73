"""Apache Kafka as the peer of the side-by-side benchmarks (``sparklog bench SCENARIO --against kafka``).

- :class:`KafkaCluster` starts a KRaft cluster (1 or 3 combined broker+controller nodes, no ZooKeeper)
  on loopback ports in a temporary directory and stops it again (also at interpreter exit and on
  Ctrl-C); the jars come from Maven Central via ``benchmarks/fetch_kafka.sh`` into ``.deps/kafka``.
- :func:`producer_perf` / :func:`consumer_perf` run Kafka's own perf tools
  (``org.apache.kafka.tools.ProducerPerformance`` / ``ConsumerPerformance``, what
  ``kafka-producer-perf-test.sh`` / ``kafka-consumer-perf-test.sh`` run) and parse their output.
- ``confluent_*`` run the confluent-kafka Python client (librdkafka): per-record ``produce()``,
  batch ``consume()``, and produce-to-consume latency with the consumer in another process.
- ``kafka_produce`` / ``kafka_consume`` / ``kafka_latency`` / ``kafka_spark_read`` /
  ``kafka_spark_write`` are the Kafka side of each scenario: same workload and the same flat keys as
  ``sparklog.bench.broker_scenarios`` (and the Spark scenarios).

``python -m sparklog.bench.kafka_peer up [--brokers 3]`` runs a cluster in the foreground (Ctrl-C stops it).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import gc
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sparklog.bench.paced_values import WARMUP_FLAG_AT, paced_values
from sparklog.coordination.ports import free_port, port_is_open
from sparklog.errors import KafkaNotInstalled

KAFKA_VERSION = "4.3.1"  # benchmarks/kafka-pom.xml
TOPIC = "bench"

# Kafka's kafka-server-start.sh defaults (heap kept at 1 GiB); the tools get a smaller heap.
BROKER_JVM_OPTS = [
    "-Xmx1g",
    "-Xms1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
TOOL_JVM_OPTS = ["-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
# Kafka's command-line tools (kafka-topics, kafka-configs, kafka-consumer-groups, the console and
# Verifiable* clients) as the tests run them: a JVM that lives seconds on a little data, so C1 only
# and the serial GC (measured: ~40 % less CPU per run than TOOL_JVM_OPTS, which the perf tools keep).
COMMAND_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]

# ProducerPerformance settings for the columnar comparison: batches as large as sparklog's
# (10k records of 100 bytes ~ 1 MB), a short linger, enough buffer memory. Kafka's defaults
# (batch.size=16384, linger.ms=5) are ~2x slower here; pass producer_props={} to measure those.
TUNED_PRODUCER_PROPS = {"batch.size": "1048576", "linger.ms": "10", "buffer.memory": "268435456"}


# ------------------------------------------------------------------------------------------------
# Locations


def project_root() -> Path:
    """The sparklog checkout (holds ``benchmarks/``): ``SPARKLOG_ROOT``, else up from this file, else cwd."""
    env = os.environ.get("SPARKLOG_ROOT")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        if (parent / "benchmarks" / "kafka-pom.xml").exists():
            return parent
    return Path.cwd()


def deps_dir(name: str) -> Path:
    """``.deps/<name>`` (``SPARKLOG_DEPS`` overrides ``.deps``)."""
    base = os.environ.get("SPARKLOG_DEPS")
    return (Path(base) if base else project_root() / ".deps") / name


def _jars(name: str, fetch: bool) -> list[Path]:
    folder = deps_dir(name)
    jars = sorted(folder.glob("*.jar"))
    if not jars and fetch:
        script = project_root() / "benchmarks" / "fetch_kafka.sh"
        which = "kafka" if name == "kafka" else "spark"
        done = subprocess.run(["bash", str(script), which], capture_output=True, text=True)
        if done.returncode != 0:
            raise KafkaNotInstalled(f"{script} {which} failed:\n{done.stderr[-2000:]}")
        jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise KafkaNotInstalled(f"no jars in {folder}: run benchmarks/fetch_kafka.sh")
    return jars


def kafka_classpath(fetch: bool = True) -> str:
    """The classpath of Kafka's broker and tools (fetched from Maven Central on first use)."""
    _jars("kafka", fetch)
    return str(deps_dir("kafka") / "*")


def spark_kafka_jars(fetch: bool = True) -> list[str]:
    """Spark's Kafka connector and the jars pyspark does not already ship (for ``spark.jars``)."""
    return [str(j) for j in _jars("spark-kafka", fetch)]


def _log4j_config() -> str:
    return str(project_root() / "benchmarks" / "kafka-log4j2.properties")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaNotInstalled("java not found (Kafka 4.x needs Java 17)")
    return java


def java_command(main_class: str, args: Sequence[str], jvm_opts: Sequence[str] = TOOL_JVM_OPTS) -> list[str]:
    return [
        _java(),
        *jvm_opts,
        f"-Dlog4j2.configurationFile={_log4j_config()}",
        "-cp",
        kafka_classpath(),
        main_class,
        *args,
    ]


# ------------------------------------------------------------------------------------------------
# Every child process is stopped: at the end of its ``with``/``finally``, at interpreter exit, and
# on SIGTERM while a runner holds :func:`terminate_on_sigterm`.

_children: set[subprocess.Popen[Any]] = set()
_children_lock = threading.Lock()


def _track(process: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    with _children_lock:
        _children.add(process)
    return process


def _untrack(process: subprocess.Popen[Any]) -> None:
    with _children_lock:
        _children.discard(process)


def _kill(process: subprocess.Popen[Any], grace: float = 0.0) -> None:
    """SIGTERM the process group (then SIGKILL after ``grace`` s), or SIGKILL right away."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        try:
            process.wait(grace if grace > 0 else 10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    _untrack(process)


@atexit.register
def stop_all_children() -> None:
    """Kill every process this module started that is still running."""
    with _children_lock:
        left = list(_children)
    for process in left:
        _kill(process)


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit`` (so ``finally`` blocks and atexit stop the
    clusters) instead of ending Python on the spot. Main thread only; no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_java(
    main_class: str, args: Sequence[str], timeout: float = 600.0, jvm_opts: Sequence[str] = TOOL_JVM_OPTS
) -> str:
    """Run a Kafka tool to completion; its stdout (raises with its output if it fails)."""
    process = _track(
        subprocess.Popen(
            java_command(main_class, args, jvm_opts),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"{main_class} did not finish within {timeout:.0f} s") from exc
    finally:
        _kill(process)
    if process.returncode != 0:
        raise RuntimeError(
            f"{main_class} {' '.join(args)} exited with {process.returncode}:\n{err[-3000:]}{out[-2000:]}"
        )
    return out


# ------------------------------------------------------------------------------------------------
# The cluster


def _cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, URL-safe base64 without padding,
    never starting with ``-`` (the tools would read it as an option; Kafka's Uuid avoids it too)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaCluster:
    """A KRaft cluster of ``brokers`` combined broker+controller nodes on 127.0.0.1.

    ``with KafkaCluster(brokers=3) as kafka: kafka.create_topic("t", 6, 3); kafka.bootstrap``
    """

    def __init__(
        self,
        brokers: int = 1,
        data_dir: str | os.PathLike[str] | None = None,
        jvm_opts: Sequence[str] = BROKER_JVM_OPTS,
        partitions: int = 6,
        extra_config: dict[str, str] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("brokers must be >= 1")
        self.brokers = brokers
        self.jvm_opts = list(jvm_opts)
        self.partitions = partitions
        self.extra_config = dict(extra_config or {})
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="sparklog-kafka-"))
        self.ports = [free_port() for _ in range(brokers)]
        self.controller_ports = [free_port() for _ in range(brokers)]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}"

    def _write_config(self, node_id: int) -> Path:
        template = (project_root() / "benchmarks" / "kraft-server.properties").read_text()
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        internal_rf = min(3, self.brokers)
        text = template.format(
            node_id=node_id,
            voters=voters,
            port=self.ports[node_id - 1],
            controller_port=self.controller_ports[node_id - 1],
            log_dir=self.node_dir(node_id) / "data",
            partitions=self.partitions,
            internal_rf=internal_rf,
            internal_min_isr=min(2, internal_rf),
        )
        text += "".join(f"{k}={v}\n" for k, v in self.extra_config.items())
        path = self.node_dir(node_id) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        try:
            cluster_id = _cluster_id()
            configs = {i: self._write_config(i) for i in range(1, self.brokers + 1)}
            for config in configs.values():  # static quorum: every node formatted with the same id
                run_java("kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(config)], timeout=120)
            for i, config in configs.items():
                self._start_node(i, config)
            self.wait_until_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, node_id: int, config: Path) -> None:
        folder = self.node_dir(node_id)
        opts = [*self.jvm_opts, f"-Dkafka.logs.dir={folder}", "-Dkafka.log.name=server"]
        opts += ["-Dkafka.log.level=INFO", "-Dkafka.log.appender=file"]
        with open(folder / "stdout.log", "ab") as out:
            self.processes[node_id] = _track(
                subprocess.Popen(
                    java_command("kafka.Kafka", [str(config)], opts),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches Python only; Python stops the node
                )
            )

    def wait_until_ready(self, timeout: float = 120.0) -> None:
        """Until every node listens and has registered with the controller quorum (checked by
        creating and deleting a topic spread over all brokers)."""
        deadline = time.monotonic() + timeout
        while not all(port_is_open("127.0.0.1", p, 0.2) for p in self.ports):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka did not listen within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)
        while True:
            try:
                self.create_topic("_sparklog_ready", self.brokers, self.brokers)
                self.delete_topic("_sparklog_ready")
                return
            except RuntimeError:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _check_alive(self) -> None:
        for i, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"Kafka node {i} exited with {process.returncode}:\n{self.log_tail(i)}")

    def log_tail(self, node_id: int = 1, lines: int = 30) -> str:
        text = ""
        for name in ("stdout.log", "server.log"):
            path = self.node_dir(node_id) / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def create_topic(
        self, name: str, partitions: int, replication_factor: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        args = ["--bootstrap-server", self.bootstrap, "--create", "--topic", name]
        args += ["--partitions", str(partitions), "--replication-factor", str(replication_factor)]
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        run_java("org.apache.kafka.tools.TopicCommand", args, timeout=120)

    def under_replicated(self, name: str) -> int:
        """How many partitions of a topic have fewer in-sync replicas than replicas (or no leader)."""
        args = ["--bootstrap-server", self.bootstrap, "--describe", "--topic", name]
        lagging = run_java("org.apache.kafka.tools.TopicCommand", [*args, "--under-replicated-partitions"])
        leaderless = run_java("org.apache.kafka.tools.TopicCommand", [*args, "--unavailable-partitions"])
        return sum(1 for line in (lagging + leaderless).splitlines() if "Partition:" in line)

    def delete_topic(self, name: str) -> None:
        run_java(
            "org.apache.kafka.tools.TopicCommand", ["--bootstrap-server", self.bootstrap, "--delete", "--topic", name]
        )

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> log end offset (``kafka-get-offsets``)."""
        out = run_java(
            "org.apache.kafka.tools.GetOffsetShell", ["--bootstrap-server", self.bootstrap, "--topic", topic]
        )
        ends = {}
        for line in out.splitlines():
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[0] == topic:
                ends[int(parts[1])] = int(parts[2])
        return ends

    def kill(self, node_id: int) -> None:
        """``kill -9`` one node."""
        process = self.processes.pop(node_id, None)
        if process is not None:
            _kill(process)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every node at once (controlled shutdown), SIGKILL what is left after ``grace`` s,
        then remove the data directory if this object made it."""
        processes = list(self.processes.values())
        self.processes.clear()
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in processes:
            _kill(process, max(0.1, deadline - time.monotonic()))
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    close = stop  # for contextlib.closing

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------------
# Kafka's perf tools

_PRODUCER_FINAL = re.compile(
    r"(?P<records>\d+) records sent, (?P<records_per_s>[\d.]+) records/sec \((?P<mb_per_s>[\d.]+) MB/sec\), "
    r"(?P<avg_ms>[\d.]+) ms avg latency, (?P<max_ms>[\d.]+) ms max latency, (?P<p50_ms>[\d.]+) ms 50th, "
    r"(?P<p95_ms>[\d.]+) ms 95th, (?P<p99_ms>[\d.]+) ms 99th, (?P<p999_ms>[\d.]+) ms 99.9th"
)


def parse_producer_perf(output: str) -> dict[str, float]:
    """The summary line of ProducerPerformance: records, records_per_s, mb_per_s (MiB/s as the tool
    counts), avg/max/p50/p95/p99/p999 send latency in ms."""
    found = list(_PRODUCER_FINAL.finditer(output))
    if not found:
        raise ValueError(f"no ProducerPerformance summary in:\n{output[-2000:]}")
    return {k: float(v) for k, v in found[-1].groupdict().items()}


def parse_consumer_perf(output: str) -> dict[str, str]:
    """ConsumerPerformance prints a CSV header and one line of values: returns them as a dict
    (``nMsg.sec`` includes the group join, ``fetch.nMsg.sec`` does not)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            keys = [k.strip() for k in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(keys) == len(values):
                return dict(zip(keys, values, strict=True))
    raise ValueError(f"no ConsumerPerformance result in:\n{output[-2000:]}")


def producer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    value_bytes: int = 100,
    acks: str = "1",
    producer_props: dict[str, str] | None = None,
    throughput: int = -1,
) -> dict[str, float]:
    """``kafka-producer-perf-test``: ``records`` random values of ``value_bytes``, as fast as possible."""
    props = {"bootstrap.servers": bootstrap, "acks": "-1" if acks == "all" else acks, **(producer_props or {})}
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(value_bytes)]
    args += ["--throughput", str(throughput), "--command-property", *(f"{k}={v}" for k, v in props.items())]
    return parse_producer_perf(run_java("org.apache.kafka.tools.ProducerPerformance", args))


def consumer_perf(
    bootstrap: str, topic: str, records: int, consumer_props: dict[str, str] | None = None, timeout_ms: int = 30_000
) -> dict[str, float]:
    """``kafka-consumer-perf-test`` from the earliest offset with a fresh group: ``records_per_s``
    is the fetch rate (``fetch.nMsg.sec``, without the group join, as sparklog's consume starts
    timing after its consumer exists); ``records_per_s_with_join`` is the tool's ``nMsg.sec``."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records)]
    args += ["--timeout", str(timeout_ms), "--group", f"perf-{uuid.uuid4().hex[:8]}"]
    props = {"auto.offset.reset": "earliest", **(consumer_props or {})}
    args += ["--command-property", *(f"{k}={v}" for k, v in props.items())]
    raw = parse_consumer_perf(run_java("org.apache.kafka.tools.ConsumerPerformance", args))
    consumed = int(float(raw["data.consumed.in.nMsg"]))
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {records} records")
    return {
        "records": consumed,
        "records_per_s": float(raw["fetch.nMsg.sec"]),
        "mb_per_s": float(raw["fetch.MB.sec"]),
        "records_per_s_with_join": float(raw["nMsg.sec"]),
        "rebalance_ms": float(raw["rebalance.time.ms"]),
    }


# ------------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka) Python client


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise KafkaNotInstalled("confluent-kafka is not installed: pip install confluent-kafka") from exc
    return confluent_kafka


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: int,
    value_bytes: int = 100,
    acks: str = "1",
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per-record ``produce()`` of ``records`` values (``poll(0)`` every 1000 records, ``flush()`` at
    the end), with librdkafka's defaults otherwise (linger.ms=5, batch.size=1 MB): the counterpart
    of sparklog's per-record ``send()`` + ``flush()``."""
    ck = _confluent()
    conf = {"bootstrap.servers": bootstrap, "acks": "all" if acks == "all" else acks, **(config or {})}
    producer = ck.Producer(conf)
    failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    value = b"x" * value_bytes
    # warm-up: connections and metadata
    producer.produce(topic, value, on_delivery=on_delivery)
    producer.flush(30)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                poll(0.01)
        if i % 1000 == 0:
            poll(0)
    left = producer.flush(120)
    took = time.perf_counter() - start
    if left or failed:
        raise RuntimeError(f"confluent-kafka: {left} records not delivered, {failed} failed")
    return {"send_records": records, "send_records_per_s": round(records / took)}


def confluent_consume(
    bootstrap: str, topic: str, records: int, partitions: int, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Read ``records`` records from offset 0 of every partition with ``consume(num_messages=10000)``
    (partitions assigned directly: no group join), touching each value's length."""
    ck = _confluent()
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **(config or {}),
    }
    consumer = ck.Consumer(conf)
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        seen, nbytes = 0, 0
        start = time.perf_counter()
        deadline = time.monotonic() + 300
        while seen < records and time.monotonic() < deadline:
            # consume() returns when it has num_messages or at the timeout: never ask for more than is left
            for msg in consumer.consume(num_messages=min(10_000, records - seen), timeout=1.0):
                if msg.error() is None:
                    seen += 1
                    nbytes += len(msg.value())
        took = time.perf_counter() - start
    finally:
        consumer.close()
    if seen < records:
        raise RuntimeError(f"confluent-kafka consumed {seen} of {records} records")
    return {"records": seen, "records_per_s": round(seen / took), "mb_per_s": round(nbytes / took / 1e6, 1)}


def _confluent_latency_consumer(
    bootstrap: str, topic: str, partitions: int, total: int, ready: Any, results: Any
) -> None:
    """Runs in its own process: assign every partition at its current end, then collect
    receive - send times (ms) of ``total`` measured records (value: send time, 8 bytes, then a
    byte that is 1 for warm-up records, which are skipped)."""
    import numpy as np

    ck = _confluent()
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "socket.nagle.disable": True,
        }
    )
    ends = [consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    consumer.assign([ck.TopicPartition(topic, p, ends[p]) for p in range(partitions)])
    consumer.poll(0.5)  # connect to the leaders and start fetching
    ready.set()
    latencies: list[float] = []
    deadline = time.monotonic() + 180
    while len(latencies) < total and time.monotonic() < deadline:
        # poll(), not consume(n): consume waits until it has n messages (or its timeout)
        msg = consumer.poll(0.2)
        now = time.perf_counter_ns()  # CLOCK_MONOTONIC: comparable across processes on Linux
        if msg is not None and msg.error() is None:
            value = msg.value()
            if value[WARMUP_FLAG_AT] == 0:
                latencies.append((now - int.from_bytes(value[:8], "little", signed=True)) / 1e6)
    consumer.close()
    results.put(np.array(latencies) if latencies else np.array([np.nan]))


def confluent_latency(
    bootstrap: str,
    topic: str,
    partitions: int,
    rate: int = 10_000,
    seconds: float = 5.0,
    value_bytes: int = 100,
    acks: str = "1",
    warmup_s: float = 5.0,
    linger_ms: float = 1,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Produce at a fixed ``rate`` with per-record ``produce()`` (Nagle off) while a consumer in
    another process waits on the topic: the same method as ``broker_scenarios.latency`` (send time
    in the value, monotonic clock, sleep between sends), with two differences that favour Kafka:

    - a ``warmup_s`` lead-in at the same rate that is not measured: a freshly started broker runs
      interpreted until the JIT has compiled its request path, and here cannot keep up with 10k
      requests/s for its first seconds (latencies of seconds);
    - ``linger.ms=1`` instead of sparklog's 0: with linger.ms=0 librdkafka sends every record as
      its own request (up to a million in flight), which the broker here cannot sustain at
      10k/s (the backlog grows to seconds). sparklog's producer batches what accumulates while a
      batch is in flight. ``linger_ms=0`` with ``config={"max.in.flight.requests.per.connection": 1}``
      is the closest librdkafka analogue (measured a little worse than linger.ms=1 here).
    """
    import multiprocessing

    import numpy as np

    ck = _confluent()
    total = int(rate * seconds)
    values = paced_values(rate, int(rate * warmup_s), total, value_bytes)  # refuses a bad size first
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all" if acks == "all" else acks,
            "linger.ms": linger_ms,
            "socket.nagle.disable": True,
            **(config or {}),
        }
    )
    for p in range(partitions):  # before the consumer takes its start offsets: connections
        producer.produce(topic, b"\1" * value_bytes, partition=p)
    producer.flush(30)
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=_confluent_latency_consumer, args=(bootstrap, topic, partitions, total, ready, results))
    reader.start()
    try:
        if not ready.wait(60):
            raise TimeoutError("the latency consumer did not start")
        gc.collect()  # as in sparklog's latency scenario: the set-up's garbage is not collected while measured
        for value in values:
            producer.produce(topic, value)
            producer.poll(0)
        producer.flush(60)
        all_ms = results.get(timeout=240)
        reader.join(30)
    finally:
        if reader.is_alive():
            reader.kill()
            reader.join(10)
    return {
        "records": total,
        "received": int(np.count_nonzero(~np.isnan(all_ms))),
        "rate": rate,
        "warmup_s": warmup_s,
        "p50_ms": round(float(np.percentile(all_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(all_ms, 99)), 3),
        "max_ms": round(float(np.max(all_ms)), 3),
    }


# ------------------------------------------------------------------------------------------------
# The Kafka side of each scenario: same workload and keys as sparklog.bench.broker_scenarios


def _cluster_with_topic(partitions: int, replication_factor: int, brokers: int) -> KafkaCluster:
    kafka = KafkaCluster(brokers=max(brokers, replication_factor), partitions=partitions).start()
    try:
        configs = {"min.insync.replicas": str(min(2, replication_factor))} if replication_factor > 1 else {}
        kafka.create_topic(TOPIC, partitions, replication_factor, configs)
    except BaseException:
        kafka.stop()
        raise
    return kafka


def kafka_produce(
    records: int = 2_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    acks: str = "1",
    replication_factor: int = 1,
    brokers: int = 1,
    send_records: int = 1_000_000,
    batch_records: int = 10_000,
    producer_props: dict[str, str] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """ProducerPerformance (``records_per_s``, after a warm-up run of as many records as
    sparklog's warm-up), then confluent-kafka per-record ``produce()`` (``send_records_per_s``;
    skipped with ``send_records=0`` or when confluent-kafka is missing)."""
    props = TUNED_PRODUCER_PROPS if producer_props is None else producer_props
    with contextlib.closing(_cluster_with_topic(partitions, replication_factor, brokers)) as kafka:
        warmup = min(records, 4 * partitions * batch_records)
        producer_perf(kafka.bootstrap, TOPIC, warmup, value_bytes, acks, props)
        perf = producer_perf(kafka.bootstrap, TOPIC, records, value_bytes, acks, props)
        result: dict[str, Any] = {
            "scenario": "produce",
            "records": records,
            "value_bytes": value_bytes,
            "partitions": partitions,
            "acks": acks,
            "replication_factor": replication_factor,
            "records_per_s": round(perf["records_per_s"]),
            "mb_per_s": round(perf["records_per_s"] * value_bytes / 1e6, 1),
            "tool_p99_ms": perf["p99_ms"],
        }
        if send_records:
            with contextlib.suppress(KafkaNotInstalled):
                result.update(confluent_produce(kafka.bootstrap, TOPIC, send_records, value_bytes, acks))
    return result


def kafka_consume(
    records: int = 2_000_000,
    value_bytes: int = 100,
    batch_records: int = 10_000,
    partitions: int = 6,
    repeat: int = 1,
    python_client: bool = True,
    consumer_props: dict[str, str] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Fill the topic with ProducerPerformance (not timed; as many records as sparklog's consume
    writes), one ConsumerPerformance pass to warm up, then ``repeat`` timed passes (median):
    ``records_per_s``; then one confluent-kafka pass: ``python_client_records_per_s``."""
    total = max(1, records // batch_records) * batch_records
    with contextlib.closing(_cluster_with_topic(partitions, 1, 1)) as kafka:
        producer_perf(kafka.bootstrap, TOPIC, total, value_bytes, "1", TUNED_PRODUCER_PROPS)
        runs = [consumer_perf(kafka.bootstrap, TOPIC, total, consumer_props) for _ in range(repeat + 1)][1:]
        took = statistics.median(total / r["records_per_s"] for r in runs)
        result: dict[str, Any] = {
            "scenario": "consume",
            "records": total,
            "value_bytes": value_bytes,
            "partitions": partitions,
            "records_per_s": round(total / took),
            "mb_per_s": round(total * value_bytes / took / 1e6, 1),
            "records_per_s_with_join": round(statistics.median(r["records_per_s_with_join"] for r in runs)),
        }
        if python_client:
            try:
                got = confluent_consume(kafka.bootstrap, TOPIC, total, partitions)
                result["python_client_records_per_s"] = got["records_per_s"]
            except KafkaNotInstalled:
                pass
    return result


def kafka_latency(
    value_bytes: int = 100,
    rate: int = 10_000,
    seconds: float = 5.0,
    partitions: int = 6,
    acks: str = "1",
    warmup_s: float = 5.0,
    linger_ms: float = 1,
    **_: Any,
) -> dict[str, Any]:
    """confluent-kafka producer here, consumer in another process; one broker (as
    ``broker_scenarios.latency``); see :func:`confluent_latency` for the warm-up."""
    with contextlib.closing(_cluster_with_topic(partitions, 1, 1)) as kafka:
        got = confluent_latency(
            kafka.bootstrap, TOPIC, partitions, rate, seconds, value_bytes, acks, warmup_s=warmup_s, linger_ms=linger_ms
        )
    return {"scenario": "latency", "value_bytes": value_bytes, "partitions": partitions, "acks": acks, **got}


# ------------------------------------------------------------------------------------------------
# Spark Structured Streaming with Spark's Kafka connector, mirroring sparklog.bench.spark_scenarios:
# local[2], a warm-up query on a small topic (20 batches of 10k records), then ``repeat`` measured
# queries timed from ``start()`` returning to the end of the query, best of them. Each run is its own
# Python process (its own Spark JVM with the connector's jars on ``spark.jars``), so it cannot clash
# with the Spark session of the sparklog side in the calling process.

WARMUP_TOPIC = "warmup"


def spark_session(app: str = "sparklog-bench-kafka", cores: int = 2, extra_jars: Sequence[str] = ()) -> Any:
    """A local Spark session with Spark's Kafka connector (jars from ``.deps/spark-kafka``),
    configured like ``spark_scenarios.bench_spark``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    jars = [*spark_kafka_jars(), *extra_jars]
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _kafka_stream(spark: Any, bootstrap: str, topic: str) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def _timed(query: Any) -> float:
    start = time.perf_counter()
    query.awaitTermination()
    took = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"benchmark query failed: {query.exception()}")
    return took


def _spark_read_job(bootstrap: str, topic: str, records: int, repeat: int, cores: int = 2) -> dict[str, Any]:
    """``availableNow`` reads of ``topic`` into the noop sink."""
    spark = spark_session("sparklog-bench-kafka-read", cores)
    times = []
    try:
        with tempfile.TemporaryDirectory(prefix="spark-kafka-bench-") as tmp:

            def read(source: str, checkpoint: str) -> Any:
                return (
                    _kafka_stream(spark, bootstrap, source)
                    .writeStream.format("noop")
                    .option("checkpointLocation", os.path.join(tmp, checkpoint))
                    .trigger(availableNow=True)
                    .start()
                )

            _timed(read(WARMUP_TOPIC, "ckpt-warmup"))
            for i in range(repeat):
                query = read(topic, f"ckpt-{i}")
                times.append(_timed(query))
                rows = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
                if rows != records:
                    raise RuntimeError(f"the Kafka source read {rows} rows, the topic holds {records}")
    finally:
        spark.stop()
    return {"seconds": round(min(times), 3), "seconds_all": [round(t, 3) for t in times]}


def _spark_write_job(bootstrap: str, topic: str, target: str, repeat: int, cores: int = 2) -> dict[str, Any]:
    """``availableNow`` copies of ``topic`` into ``<target>-<i>`` (value only, Kafka sink, acks=all,
    Kafka's and Spark's defaults otherwise)."""
    spark = spark_session("sparklog-bench-kafka-write", cores)
    times = []
    try:
        with tempfile.TemporaryDirectory(prefix="spark-kafka-bench-") as tmp:

            def copy(source: str, out: str, checkpoint: str) -> Any:
                return (
                    _kafka_stream(spark, bootstrap, source)
                    .select("value")
                    .writeStream.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", out)
                    .option("checkpointLocation", os.path.join(tmp, checkpoint))
                    .trigger(availableNow=True)
                    .start()
                )

            _timed(copy(WARMUP_TOPIC, f"{WARMUP_TOPIC}-out", "ckpt-warmup"))
            for i in range(repeat):
                times.append(_timed(copy(topic, f"{target}-{i}", f"ckpt-{i}")))
    finally:
        spark.stop()
    return {"seconds": round(min(times), 3), "seconds_all": [round(t, 3) for t in times]}


def spark_subprocess(job: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``_spark_<job>_job`` in a fresh Python process; its JSON result."""
    command = [sys.executable, "-m", "sparklog.bench.kafka_peer", "_spark-job", job, json.dumps(kwargs)]
    process = _track(
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    )
    try:
        out, err = process.communicate(timeout=1800)
    finally:
        _kill(process, grace=5.0)
    if process.returncode != 0:
        raise RuntimeError(f"Spark {job} job failed ({process.returncode}):\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _spark_cluster(
    partitions: int, records: int, value_bytes: int, batch_records: int, targets: Sequence[str]
) -> tuple[KafkaCluster, int]:
    """One broker with the source topic (``records`` rounded down to whole batches, written by
    ProducerPerformance), the warm-up topic (20 batches) and empty ``targets``."""
    total = max(1, records // batch_records) * batch_records
    kafka = _cluster_with_topic(partitions, 1, 1)
    try:
        for name in (WARMUP_TOPIC, *targets):
            kafka.create_topic(name, partitions, 1)
        producer_perf(kafka.bootstrap, WARMUP_TOPIC, 20 * batch_records, value_bytes, "1", TUNED_PRODUCER_PROPS)
        producer_perf(kafka.bootstrap, TOPIC, total, value_bytes, "1", TUNED_PRODUCER_PROPS)
    except BaseException:
        kafka.stop()
        raise
    return kafka, total


def kafka_spark_read(
    records: int = 2_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 1,
    cores: int = 2,
    **_: Any,
) -> dict[str, Any]:
    """Structured Streaming ``format("kafka")``, ``availableNow``, into the ``noop`` sink: the
    counterpart of ``spark_scenarios.spark_read``."""
    kafka, total = _spark_cluster(partitions, records, value_bytes, batch_records, [])
    with contextlib.closing(kafka):
        got = spark_subprocess(
            "read", bootstrap=kafka.bootstrap, topic=TOPIC, records=total, repeat=repeat, cores=cores
        )
    best = got["seconds"]
    return {
        "scenario": "spark-read",
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "cores": cores,
        **got,
        "records_per_s": round(total / best),
        "read_records_per_s": round(total / best),
        "mb_per_s": round(total * value_bytes / best / 1e6, 1),
    }


def kafka_spark_write(
    records: int = 2_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 1,
    cores: int = 2,
    **_: Any,
) -> dict[str, Any]:
    """A Structured Streaming copy of a Kafka topic into another (``format("kafka")`` source and
    sink, ``availableNow``): the counterpart of ``spark_scenarios.spark_write``. Spark's Kafka sink
    is at-least-once (sparklog's stages and publishes exactly once)."""
    targets = [f"{TOPIC}-out-{i}" for i in range(repeat)]
    kafka, total = _spark_cluster(partitions, records, value_bytes, batch_records, [*targets, f"{WARMUP_TOPIC}-out"])
    with contextlib.closing(kafka):
        got = spark_subprocess(
            "write", bootstrap=kafka.bootstrap, topic=TOPIC, target=f"{TOPIC}-out", repeat=repeat, cores=cores
        )
        for target in targets:
            written = sum(kafka.end_offsets(target).values())
            if written < total:
                raise RuntimeError(f"Spark wrote {written} records to {target}, expected {total}")
    best = got["seconds"]
    return {
        "scenario": "spark-write",
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "cores": cores,
        **got,
        "records_per_s": round(total / best),
        "mb_per_s": round(total * value_bytes / best / 1e6, 1),
    }


KAFKA_SCENARIOS = {
    "produce": kafka_produce,
    "consume": kafka_consume,
    "latency": kafka_latency,
    "spark-read": kafka_spark_read,
    "spark-write": kafka_spark_write,
}


# ------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sparklog.bench.kafka_peer")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run a KRaft cluster in the foreground until Ctrl-C")
    up.add_argument("--brokers", type=int, default=1)
    up.add_argument("--topic", default=None, help="create this topic (6 partitions, RF = min(3, brokers))")
    sub.add_parser("fetch", help="fetch the Kafka and Spark connector jars")
    job = sub.add_parser("_spark-job")
    job.add_argument("job", choices=["read", "write"])
    job.add_argument("kwargs")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(kafka_classpath())
        print(",".join(spark_kafka_jars()))
        return 0
    if args.command == "_spark-job":
        function = _spark_read_job if args.job == "read" else _spark_write_job
        print(json.dumps(function(**json.loads(args.kwargs))), flush=True)
        return 0
    with contextlib.suppress(KeyboardInterrupt), terminate_on_sigterm(), KafkaCluster(brokers=args.brokers) as kafka:
        if args.topic:
            kafka.create_topic(args.topic, 6, min(3, args.brokers))
        print(f"Kafka {KAFKA_VERSION} KRaft, {args.brokers} node(s): bootstrap {kafka.bootstrap}", flush=True)
        while True:
            time.sleep(1)
            kafka._check_alive()
    return 0


if __name__ == "__main__":
    sys.exit(main())
