"""The cluster under test: a :class:`~sparklog.local_cluster.LocalCluster` (its own ZooKeeper unless
one is given), the fuzz topics, leader lookup, restarts and the brokers' thread and fd counts.

Topics: ``fz-plain`` (2 partitions, defaults), ``fz-compact`` (``cleanup.policy=compact``, segments
of 1 MiB rolled every 10 s so the log cleaner rewrites them: it reads every stored batch, finding 1
of issue 15) and ``fz-zstd`` (stored with ``compression=zstd``). With several brokers, every topic
has ``min(brokers, 3)`` replicas: followers copy what leaders stored, and a restart moves
leadership to them, so what they stored is read back too. The Kafka mode (``kafka``) adds
``fz-small`` (``max.message.bytes`` 64 KiB) and ``fz-logtime`` (``LogAppendTime``); every broker
then serves Kafka clients too, on a PLAINTEXT listener (:meth:`FuzzCluster.kafka_port`) and a
SASL_PLAINTEXT one (:meth:`FuzzCluster.sasl_port`: SCRAM-SHA-256 and PLAIN, sessions of
:data:`REAUTH_MS`), whose users (:data:`~sparklog.fuzz.kafka_sasl.USERS`, random passwords in
:attr:`FuzzCluster.passwords`) the fuzzer writes to ZooKeeper itself.

``low_privilege``: a secured cluster (``LocalCluster(secure=True)``) with the topics ``fz-own``,
``fz-drop`` (its batches stored zstd-compressed) and ``fz-secret``, the user of
:mod:`sparklog.fuzz.privileges` and the admin's marked records. The fuzzer's own calls (leaders,
offsets, pings, read-backs) go as ``admin`` (:attr:`FuzzCluster.admin`); the cases as the user
(:attr:`FuzzCluster.user`). Otherwise both are anonymous.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklog.config import TopicConfig
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.ports import free_port
from sparklog.errors import InvalidUserName
from sparklog.fuzz import flight_ops, kafka_sasl, privileges
from sparklog.fuzz.crash_log import fatal_error
from sparklog.fuzz.kafka_wire import KafkaWire
from sparklog.fuzz.ledger import Entry
from sparklog.local_cluster import LocalCluster
from sparklog.security.client_config import ClientSecurity
from sparklog.security.credential_store import CredentialStore

READY_TIMEOUT_S = 60.0
HOST = "127.0.0.1"
REAUTH_MS = 2000  # the SASL listeners' connections.max.reauth.ms: short, so cases can outlive a session
DEFAULT_MAX_MESSAGE_BYTES = TopicConfig().max_message_bytes


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str]

    @property
    def compacted(self) -> bool:
        return "compact" in self.configs.get("cleanup.policy", "")

    @property
    def max_message_bytes(self) -> int:
        return int(self.configs.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))

    @property
    def log_append_time(self) -> bool:
        return self.configs.get("message.timestamp.type") == "LogAppendTime"


TOPICS = (
    TopicSpec("fz-plain", 2, {}),
    TopicSpec("fz-compact", 1, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "segment.ms": "10000"}),
    TopicSpec("fz-zstd", 1, {"compression": "zstd"}),
)
# the Kafka mode's (``kafka``): the same, a topic whose batches may be at most 64 KiB (compression
# bombs and size limits are cheap to reach) and one stamping records with the broker's time
KAFKA_TOPICS = (
    *TOPICS,
    TopicSpec("fz-small", 2, {"max.message.bytes": str(64 << 10)}),
    TopicSpec("fz-logtime", 1, {"message.timestamp.type": "LogAppendTime"}),
)
LOW_PRIVILEGE_TOPICS = (
    TopicSpec(privileges.OWN, 2, {}),
    TopicSpec(privileges.DROP, 1, {"compression": "zstd"}),
    TopicSpec(privileges.SECRET, 2, {}),
)


@dataclasses.dataclass
class ProcessStats:
    """A broker's threads, open fds and anonymous memory (its mapped segment files left out)."""

    threads: int
    fds: int
    rss_mb: int


def process_stats(pid: int) -> ProcessStats | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return ProcessStats(
        threads=int(fields.get("Threads", "0").strip()),
        fds=fds,
        rss_mb=int(fields.get("RssAnon", "0 kB").split()[0]) // 1024,
    )


class FuzzCluster:
    """Start with :meth:`start`; ``generation`` counts fresh clusters (:meth:`reset` after a broker
    that cannot be recovered)."""

    def __init__(
        self,
        base_dir: Path,
        brokers: int = 1,
        zookeeper: str | None = None,
        low_privilege: bool = False,
        kafka: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.broker_count = brokers
        self.zookeeper_root = zookeeper
        self.replication = min(brokers, 3)
        self.low_privilege = low_privilege
        specs = LOW_PRIVILEGE_TOPICS if low_privilege else KAFKA_TOPICS if kafka else TOPICS
        self.topics = {t.name: t for t in specs}
        self.generation = 0
        self.cluster: LocalCluster | None = None
        self._leaders: dict[tuple[str, int], int] = {}
        self.admin = flight_ops.ANONYMOUS  # the fuzzer's own calls
        self.user = flight_ops.ANONYMOUS  # the cases'
        self.access: privileges.Access | None = privileges.ACCESS if low_privilege else None
        self.secrets: privileges.Secrets | None = privileges.Secrets() if low_privilege else None
        self.filled: list[Entry] = []  # the admin's records (low-privilege mode), for the ledger
        self.kafka = kafka
        self.sasl_ports: dict[int, int] = {}  # each broker's SASL_PLAINTEXT Kafka listener (Kafka mode)
        self.passwords: dict[str, str] = {}  # the SASL listeners' users (Kafka mode)
        self.meta: ClusterMetadata | None = None  # the fuzzer's own ZooKeeper client (Kafka mode: users)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FuzzCluster:
        from sparklog.client.admin import Admin

        self.generation += 1
        data_dir = self.base_dir / f"cluster-{self.generation}"
        zookeeper = None
        if self.zookeeper_root is not None:
            zookeeper = f"{self.zookeeper_root}/fuzz-{os.getpid()}-{self.generation}-{int(time.time() * 1000) % 10**8}"
        secure = self.low_privilege
        kafka_ports = None
        properties = None
        if self.kafka:
            kafka_ports = [free_port() for _ in range(self.broker_count)]
            self.sasl_ports = {i + 1: free_port() for i in range(self.broker_count)}
            properties = functools.partial(self._kafka_listeners, kafka_ports=kafka_ports)
        self.cluster = LocalCluster(
            data_dir,
            brokers=self.broker_count,
            zookeeper=zookeeper,
            secure=secure,
            kafka_ports=kafka_ports,
            broker_properties=properties,
        ).start()
        if secure:
            self.admin = flight_ops.Connector(ClientSecurity.from_config(self.cluster.client_config()), "admin")
        with Admin(config=self.cluster.client_config()) if secure else Admin(self.cluster.zookeeper) as admin:
            for spec in self.topics.values():
                admin.create_topic(spec.name, spec.partitions, self.replication, spec.configs)
        self._leaders.clear()
        problem = self.wait_ready()
        if problem:
            raise RuntimeError(f"fuzz cluster did not become ready: {problem}")
        if secure:
            self.user = flight_ops.Connector(privileges.create_user(self.cluster), privileges.USER)
            privileges.wait_for_user([self.location(b) for b in self.broker_ids], self.user)
            assert self.secrets is not None
            self.filled = privileges.fill(self, self.secrets)
        if self.kafka:
            self._add_users()
        return self

    def _kafka_listeners(self, broker_id: int, kafka_ports: list[int]) -> Mapping[str, str]:
        """A Kafka-mode broker's settings: its PLAINTEXT and SASL_PLAINTEXT Kafka listeners."""
        return {
            "kafka.listeners": f"PLAINTEXT://{HOST}:{kafka_ports[broker_id - 1]},"
            f"SASL_PLAINTEXT://{HOST}:{self.sasl_ports[broker_id]}",
            "sasl.enabled.mechanisms": ",".join(kafka_sasl.MECHANISMS),
            "connections.max.reauth.ms": str(REAUTH_MS),
        }

    def _add_users(self) -> None:
        """The SASL listeners' users, with new random passwords, then wait until every broker logs
        the first one in."""
        assert self.cluster is not None
        self.meta = ClusterMetadata(self.cluster.zookeeper).start()
        self.passwords = kafka_sasl.new_passwords()
        store = CredentialStore(self.meta.zk, self.meta.layout)
        for user, password in self.passwords.items():
            store.upsert(user, password)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for broker_id in self.broker_ids:
            while True:
                problem = self.login_problem(broker_id)
                if problem is None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {broker_id}'s SASL listener does not log the fuzz user in: {problem}")
                time.sleep(0.2)

    def login_problem(self, broker_id: int, mechanism: str = kafka_sasl.SCRAM) -> str | None:
        """Why ``fz-user`` cannot log in on the broker's SASL listener (None: it can)."""
        user = kafka_sasl.FUZZ_USER
        try:
            with KafkaWire(HOST, self.sasl_port(broker_id), timeout=5.0) as wire:
                answer = wire.login(user, self.passwords[user], mechanism)
        except OSError as exc:
            return f"cannot connect: {exc}"
        if answer.response is None:
            return f"no answer ({answer.problem})"
        return f"error code {answer.response.error_code}" if answer.response.error_code else None

    def users(self) -> dict[str, int | None]:
        """Every user in ZooKeeper and its credential's version (Kafka mode)."""
        assert self.meta is not None
        store = CredentialStore(self.meta.zk, self.meta.layout)
        found: dict[str, int | None] = {}
        for user in store.users():
            try:
                found[user] = store.version(user)
            except InvalidUserName:  # a znode no login could have made: listed, without a version
                found[user] = None
        return found

    def stop(self) -> list[str]:
        self.admin.forget()
        self.user.forget()
        if self.meta is not None:
            self.meta.close()
            self.meta = None
        if self.cluster is None:
            return []
        problems = self.cluster.stop()
        self.cluster = None
        return problems

    def reset(self) -> None:
        """A fresh cluster (new data dir, new ZooKeeper) after one that cannot be recovered."""
        self.stop()
        self.start()

    # ------------------------------------------------------------------ addressing
    @property
    def broker_ids(self) -> list[int]:
        assert self.cluster is not None
        return sorted(self.cluster.brokers)

    def port(self, broker_id: int) -> int:
        assert self.cluster is not None
        return self.cluster.brokers[broker_id].port

    def kafka_port(self, broker_id: int) -> int:
        """The broker's Kafka-protocol listener (every broker of a plain cluster has one)."""
        assert self.cluster is not None
        port = self.cluster.brokers[broker_id].kafka_port
        assert port is not None, f"broker {broker_id} has no Kafka listener"
        return port

    def sasl_port(self, broker_id: int) -> int:
        """The broker's SASL_PLAINTEXT Kafka listener (Kafka mode)."""
        return self.sasl_ports[broker_id]

    def location(self, broker_id: int) -> str:
        return self.admin.location(flight_ops.HOST, self.port(broker_id))

    def partitions(self) -> list[tuple[str, int]]:
        return [(t.name, p) for t in self.topics.values() for p in range(t.partitions)]

    def leader(self, topic: str, partition: int, refresh: bool = False) -> int | None:
        """The broker that answers ``list_offsets`` for the partition (None if none does)."""
        key = (topic, partition)
        if not refresh and key in self._leaders:
            return self._leaders[key]
        for broker_id in self.broker_ids:
            if not self.alive(broker_id):
                continue
            answer = flight_ops.list_offsets(self.location(broker_id), topic, partition, timeout=5.0, via=self.admin)
            if isinstance(answer, dict):
                self._leaders[key] = broker_id
                return broker_id
        self._leaders.pop(key, None)
        return None

    def leader_location(self, topic: str, partition: int) -> str:
        """Where to send a request for the partition (broker 1 for a topic that is not ours)."""
        if topic in self.topics and 0 <= partition < self.topics[topic].partitions:
            leader = self.leader(topic, partition)
            if leader is not None:
                return self.location(leader)
        return self.location(self.broker_ids[0])

    def offsets(self, topic: str, partition: int, attempts: int = 2) -> dict[str, Any] | None:
        """``list_offsets`` of the partition from its leader (None if no broker answered it)."""
        return self.offsets_or_error(topic, partition, attempts)[0]

    def offsets_or_error(
        self, topic: str, partition: int, attempts: int = 2
    ) -> tuple[dict[str, Any] | None, str | None]:
        """``list_offsets`` of the partition, or why it failed after ``attempts`` (0.5 s apart)."""
        problem = f"no broker leads {topic}-{partition}"
        for attempt in range(attempts):
            if attempt:
                time.sleep(0.5)
            leader = self.leader(topic, partition, refresh=attempt > 0)
            if leader is None:
                continue
            answer = flight_ops.list_offsets(self.location(leader), topic, partition, via=self.admin)
            if isinstance(answer, dict):
                return answer, None
            problem = f"list_offsets of {topic}-{partition} on broker {leader} failed: {answer.message}"
        return None, problem

    # ------------------------------------------------------------------ health
    def ping(self, broker_id: int, timeout: float = 5.0) -> int | None:
        """The broker id broker ``broker_id`` answers a ping with (as the fuzzer itself), or None."""
        return flight_ops.ping(self.location(broker_id), timeout, via=self.admin)

    def alive(self, broker_id: int) -> bool:
        assert self.cluster is not None
        return self.cluster.brokers[broker_id].alive()

    def exit_code(self, broker_id: int) -> int | None:
        assert self.cluster is not None
        return self.cluster.brokers[broker_id].exited()

    def pid(self, broker_id: int) -> int | None:
        assert self.cluster is not None
        process = self.cluster.brokers[broker_id].process
        return None if process is None else process.pid

    def stats(self) -> dict[int, ProcessStats]:
        out = {}
        for broker_id in self.broker_ids:
            pid = self.pid(broker_id)
            stats = process_stats(pid) if pid is not None and self.alive(broker_id) else None
            if stats is not None:
                out[broker_id] = stats
        return out

    def fatal_error(self, broker_id: int) -> str | None:
        """The fatal error in the broker's log since its last start, and where (see :mod:`.crash_log`)."""
        assert self.cluster is not None
        return fatal_error(self.cluster.brokers[broker_id].log_path)

    def log_tail(self, broker_id: int, lines: int = 30) -> str:
        assert self.cluster is not None
        return self.cluster.brokers[broker_id].log_tail(lines)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> str | None:
        """Until every broker answers a ping and every partition has a leader that answers; what is
        still wrong at the deadline (None when ready)."""
        deadline = time.monotonic() + timeout
        problem = "not checked"
        while time.monotonic() < deadline:
            dead = [b for b in self.broker_ids if not self.alive(b)]
            if dead:
                return f"broker(s) {dead} exited (codes {[self.exit_code(b) for b in dead]})"
            silent = [b for b in self.broker_ids if self.ping(b, timeout=2.0) != b]
            leaderless = [f"{t}-{p}" for t, p in self.partitions() if self.leader(t, p, refresh=True) is None]
            if not silent and not leaderless:
                return None
            problem = f"no ping answer from {silent}; no leader for {leaderless}"
            time.sleep(0.2)
        return problem

    def wait_replicated(self, timeout: float = 30.0) -> str | None:
        """Until every leader's high watermark reached its log end (followers hold everything)."""
        if self.replication < 2:
            return None
        deadline = time.monotonic() + timeout
        behind: list[str] = []
        while time.monotonic() < deadline:
            behind = []
            for topic, p in self.partitions():
                offsets = self.offsets(topic, p)
                if offsets is None or offsets["high_watermark"] < offsets["log_end_offset"]:
                    behind.append(f"{topic}-{p}")
            if not behind:
                return None
            time.sleep(0.2)
        return f"followers still behind on {behind}"

    # ------------------------------------------------------------------ restarts
    def restart(self, broker_id: int, how: str) -> str | None:
        """Stop a broker (``term``: SIGTERM and wait; ``kill``: SIGKILL), start it on the same data
        dir and port, and wait until the cluster is ready; a problem, or None."""
        assert self.cluster is not None
        broker = self.cluster.brokers[broker_id]
        problem = None
        if how == "term":
            code = broker.stop()
            if code not in (0, -15):
                problem = f"broker {broker_id} exited with code {code} on SIGTERM"
        else:
            broker.kill()
        self._leaders.clear()
        self._forget(broker_id)
        try:
            broker.start()
        except OSError as exc:
            return f"broker {broker_id} did not start again: {exc}"
        not_ready = self.wait_ready()
        if not_ready:
            return f"after {how}: {not_ready}" + (f"; {problem}" if problem else "")
        return problem

    def kill(self, broker_id: int) -> None:
        """``kill -9`` (a no-op for a broker that already exited, which it reaps)."""
        assert self.cluster is not None
        self.cluster.brokers[broker_id].kill()
        self._forget(broker_id)

    def _forget(self, broker_id: int) -> None:
        """Drop the kept clients of a broker that went away (the next call connects afresh)."""
        self.admin.forget(self.location(broker_id))
        self.user.forget(self.location(broker_id))

    def start_dead(self) -> str | None:
        """Start every broker that exited, then wait until ready."""
        assert self.cluster is not None
        for broker_id in self.broker_ids:
            broker = self.cluster.brokers[broker_id]
            if not broker.alive():
                broker.kill()  # reaps it and closes its log
                broker.start()
        self._leaders.clear()
        return self.wait_ready()
