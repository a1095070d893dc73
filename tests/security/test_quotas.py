"""Client quotas (issue 17): the token buckets of :class:`Throttle` on a fake clock, quotas stored in
ZooKeeper and followed by :class:`QuotaCache`, ``sparklog quotas``, and a secured broker delaying a
produce request over alice's byte rate (its answer says ``throttle_ms``) but not a super user's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from kazoo.client import KazooClient

from broker_helpers import BrokerProcess, registered_brokers, scrape_metrics
from security_helpers import HOST, SecureSetup
from sparklog.broker.throttle import Throttle
from sparklog.client.admin import Admin
from sparklog.coordination.zk_layout import DEFAULT_QUOTA_USER, ZkLayout
from sparklog.errors import InvalidRequest
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
from sparklog.records import now_ms, wire_schema
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.client_config import ClientSecurity
from sparklog.security.quotas import NO_QUOTA, Quota, QuotaCache, QuotaStore
from waiting import wait_for

LAYOUT = ZkLayout("/sparklog")
ALICE = "User:alice"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def throttle_of(quotas: dict[str, Quota]) -> tuple[Throttle, FakeClock]:
    clock = FakeClock()
    return Throttle(lambda principal: quotas.get(principal, NO_QUOTA), clock), clock


# ----------------------------------------------------------------- Throttle
def test_within_the_burst_no_delay_then_the_excess_waits_at_the_rate() -> None:
    throttle, clock = throttle_of({ALICE: Quota(producer_byte_rate=1000)})
    assert throttle.delay(ALICE, "produce", 600) == 0
    assert throttle.delay(ALICE, "produce", 400) == 0  # one second of the rate is the burst
    assert throttle.delay(ALICE, "produce", 500) == pytest.approx(0.5)
    clock.now += 0.5  # waited: back at zero
    assert throttle.delay(ALICE, "produce", 100) == pytest.approx(0.1)
    clock.now += 10  # refills, but never beyond one second of the rate
    assert throttle.delay(ALICE, "produce", 1000) == 0
    assert throttle.delay(ALICE, "produce", 1) == pytest.approx(0.001)


def test_kinds_and_principals_have_their_own_buckets() -> None:
    quota = Quota(producer_byte_rate=100, consumer_byte_rate=200, request_rate=2)
    throttle, _ = throttle_of({ALICE: quota, "User:bob": quota})
    assert throttle.delay(ALICE, "produce", 300) == pytest.approx(2.0)
    assert throttle.delay(ALICE, "fetch", 200) == 0
    assert throttle.delay("User:bob", "produce", 100) == 0
    assert [throttle.delay(ALICE, "request", 1) for _ in range(3)] == [0, 0, pytest.approx(0.5)]


def test_no_quota_no_delay_and_a_changed_rate_applies_at_once() -> None:
    quotas: dict[str, Quota] = {}
    throttle, _ = throttle_of(quotas)
    assert throttle.delay(ALICE, "produce", 10**9) == 0
    assert throttle.delay(ALICE, "request", 10**6) == 0
    quotas[ALICE] = Quota(producer_byte_rate=100)
    assert throttle.delay(ALICE, "produce", 300) == pytest.approx(2.0)
    quotas[ALICE] = Quota(producer_byte_rate=1000)  # the debt stays, paid at the new rate
    assert throttle.delay(ALICE, "produce", 0) == pytest.approx(0.2)
    del quotas[ALICE]
    assert throttle.delay(ALICE, "produce", 10**9) == 0


def test_quota_values_are_checked_and_the_default_fills_in() -> None:
    for bad in (0, -1, float("inf"), "10", True):
        with pytest.raises(InvalidRequest, match="producer_byte_rate"):
            Quota(producer_byte_rate=bad)  # type: ignore[arg-type]
    own = Quota(producer_byte_rate=5)
    assert own.or_else(Quota(producer_byte_rate=1, request_rate=2)) == Quota(5, None, 2)
    assert Quota.from_json(own.to_json()) == own
    assert own.to_json() == b'{"producer_byte_rate": 5}'


def test_a_fetch_stream_waits_before_each_message_for_its_bytes() -> None:
    from sparklog.broker.fetch_handler import throttled_messages

    batches = [pa.RecordBatch.from_pylist([{"v": b"x" * n}]) for n in (10, 1000)]
    taken: list[tuple[str, float]] = []
    messages = throttled_messages(iter([(b, None) for b in batches]), lambda kind, n: taken.append((kind, n)) or 0.0)
    assert next(messages)[0] is batches[0] and taken == [("fetch", batches[0].get_total_buffer_size())]
    assert next(messages)[0] is batches[1] and len(taken) == 2 and taken[1][1] > 1000


def test_super_users_have_no_quota() -> None:
    from sparklog.broker.access_control import quotas_but_super_users

    class Cache:
        def quota_for(self, principal: str) -> Quota:
            return Quota(request_rate=1)

    quotas = quotas_but_super_users(Cache(), frozenset({"User:admin"}))  # type: ignore[arg-type]
    assert quotas("User:admin") == NO_QUOTA and quotas(ALICE) == Quota(request_rate=1)


# ----------------------------------------------------------------- ZooKeeper
def test_store_and_cache_round_trip(zk_client: KazooClient) -> None:
    store = QuotaStore(zk_client, LAYOUT)
    assert store.quotas() == {}
    with QuotaCache(zk_client, LAYOUT) as cache:
        assert cache.quota_for(ALICE) == NO_QUOTA
        store.set("alice", Quota(producer_byte_rate=1024))
        store.set(DEFAULT_QUOTA_USER, Quota(producer_byte_rate=10, consumer_byte_rate=20))
        assert store.quotas() == {
            DEFAULT_QUOTA_USER: Quota(10, 20),
            "alice": Quota(producer_byte_rate=1024),
        }
        data, _ = zk_client.get("/sparklog/security/quotas/users/alice")
        assert data == b'{"producer_byte_rate": 1024}'  # Kafka's names
        wait_for(
            lambda: cache.quota_for(ALICE) == Quota(1024, 20),
            10,
            "alice's own rate and the default's for the rest",
            0.01,
        )
        wait_for(lambda: cache.quota_for("User:bob") == Quota(10, 20), 10, "bob to get the default quota", 0.01)
        store.set("alice", Quota(request_rate=5))  # replaces alice's quota
        wait_for(lambda: cache.quota_for(ALICE) == Quota(10, 20, 5), 10, "alice's replaced quota", 0.01)
        assert store.remove("alice") and not store.remove("alice")
        wait_for(lambda: cache.quota_for(ALICE) == Quota(10, 20), 10, "alice back on the default quota", 0.01)
        assert store.remove(DEFAULT_QUOTA_USER)
        wait_for(lambda: cache.quota_for(ALICE) == NO_QUOTA, 10, "no quota once the default is removed", 0.01)
        store.set("alice", Quota(consumer_byte_rate=7))  # a znode made again is followed again
        wait_for(lambda: cache.quota_for(ALICE) == Quota(consumer_byte_rate=7), 10, "alice's re-made quota znode", 0.01)
    with pytest.raises(InvalidRequest):
        store.set("../x", Quota(request_rate=1))


def test_alter_sets_and_removes_rates_one_by_one(zk_client: KazooClient) -> None:
    store = QuotaStore(zk_client, LAYOUT)
    assert store.alter("carol", {"producer_byte_rate": 10, "request_rate": None}) == Quota(producer_byte_rate=10)
    assert store.alter("carol", {"request_rate": 5}) == Quota(producer_byte_rate=10, request_rate=5)  # the other kept
    assert store.alter("carol", {"consumer_byte_rate": 1}, validate_only=True) == Quota(10, 1, 5)
    assert store.quotas()["carol"] == Quota(producer_byte_rate=10, request_rate=5)  # validated, not written
    with pytest.raises(InvalidRequest, match="unknown quota rate"):
        store.alter("carol", {"request_percentage": 5})
    with pytest.raises(InvalidRequest, match="positive number"):
        store.alter("carol", {"request_rate": 0})
    assert store.alter("carol", {"producer_byte_rate": None, "request_rate": None}) == NO_QUOTA
    assert "carol" not in store.quotas()  # no rates left: no znode
    assert store.alter(DEFAULT_QUOTA_USER, {"request_rate": None}) == NO_QUOTA  # nothing there, nothing made


def run_cli(zk: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_DEBUG")}
    command = [sys.executable, "-m", "sparklog.cli.main", "quotas", *args, "--zookeeper", zk]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def test_cli_set_list_remove(sparklog_connect: str) -> None:
    zk = sparklog_connect
    result = run_cli(zk, "set", "--user", "alice", "--producer-byte-rate", "1048576", "--request-rate", "2.5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "set the quota of user 'alice': producer_byte_rate=1048576 request_rate=2.5\n"
    assert run_cli(zk, "set", "--user-default", "--consumer-byte-rate", "1000").returncode == 0
    listed = run_cli(zk, "list")
    assert listed.stdout.splitlines() == [
        "<default> consumer_byte_rate=1000",
        "alice producer_byte_rate=1048576 request_rate=2.5",
    ]
    assert run_cli(zk, "remove", "--user", "alice").stdout == "removed the quota of user 'alice'\n"
    missing = run_cli(zk, "remove", "--user", "alice")
    assert missing.returncode != 0 and "there is no quota of user 'alice'" in missing.stderr
    assert run_cli(zk, "remove", "--user-default").returncode == 0
    assert run_cli(zk, "list").stdout == ""
    for bad in (["set", "--user", "alice"], ["set", "--user", "alice", "--request-rate", "0"], ["set"]):
        failed = run_cli(zk, *bad)
        assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr


# ----------------------------------------------------------------- a secured broker
TOPIC = "quoted"


@pytest.fixture
def secure(sparklog_connect: str, tmp_path: Path) -> SecureSetup:
    setup = SecureSetup.create(tmp_path / "security", sparklog_connect)
    setup.extra = {"authorizer.enabled": "true"}
    return setup


@pytest.fixture
def broker(secure: SecureSetup, sparklog_connect: str, child_processes, tmp_path: Path) -> BrokerProcess:
    process = BrokerProcess(1, tmp_path / "broker-1", sparklog_connect, child_processes)
    process.extra_args = [*secure.broker_args(1, process.port), "--metrics-port", "0"]
    return process.start()


def produce_many(secure: SecureSetup, port: int, user: str, batches: list[pa.RecordBatch]) -> dict[str, object]:
    """One raw multi-partition produce request as ``user``; the broker's answer."""
    security = ClientSecurity.from_config(secure.client(user))
    client = wire.flight_client(security.location(HOST, port), security=security)
    try:
        writer, reader = open_produce(client, {"type": wire.PRODUCE_MANY, "acks": "1"}, batches[0].schema)
        for i, batch in enumerate(batches):
            meta: dict[str, object] = {"t": TOPIC, "p": 0, "pid": -1, "seq": -1}
            if i == len(batches) - 1:
                meta["end"] = True
            write_frame(writer, batch, meta)
        ack = reader.read()
        assert ack is not None
        writer.close()
        return wire.decode(ack)
    finally:
        client.close()


def test_a_produce_over_the_byte_rate_is_throttled_but_not_a_super_users(
    secure: SecureSetup, broker: BrokerProcess, sparklog_connect: str
) -> None:
    with secure.store() as store:
        AclStore(store.zk, store.layout).add(
            [AclBinding.parse(ResourcePattern.parse("topic", TOPIC), "User:alice", "*", "Write", "Allow")]
        )
        QuotaStore(store.zk, store.layout).set("alice", Quota(producer_byte_rate=200_000))
        QuotaStore(store.zk, store.layout).set(DEFAULT_QUOTA_USER, Quota(producer_byte_rate=200_000))
    bootstrap = f"{HOST}:{broker.port}"
    with Admin(bootstrap_servers=bootstrap, config=secure.client("admin")) as admin:
        admin.create_topic(TOPIC, 1, 1)
    schema = wire_schema()
    rows = [{"timestamp": now_ms(), "key": None, "value": b"x" * 1000, "headers": None} for _ in range(250)]
    batches = [pa.RecordBatch.from_pylist(rows, schema=schema) for _ in range(4)]  # ~1 MB
    assert sum(b.get_total_buffer_size() for b in batches) > 1_000_000

    answer = produce_many(secure, broker.port, "alice", batches)
    results = answer["r"]
    assert isinstance(results, list) and len(results) == 4 and all("b" in r for r in results), answer
    throttle_ms = answer.get("throttle_ms")
    assert isinstance(throttle_ms, int) and throttle_ms > 0, answer

    answer = produce_many(secure, broker.port, "admin", batches)  # super users are never throttled
    assert "throttle_ms" not in answer and len(answer["r"]) == 4, answer

    # the broker's metrics: alice's held time, the request's throttle part
    url = registered_brokers(sparklog_connect)[1].metrics_url
    assert url is not None
    samples = scrape_metrics(url)
    held = {
        dict(labels)["user"]: v
        for (name, labels), v in samples.items()
        if name == "sparklog_quota_throttle_seconds_total"
    }
    assert set(held) == {"alice"} and held["alice"] >= throttle_ms / 1000 * 0.9
    throttled = (("listener", "flight"), ("request", "Produce"))
    assert samples[("kafka_network_requestmetrics_throttletimems_sum", throttled)] >= throttle_ms * 0.9
    assert samples[("kafka_network_requestmetrics_throttletimems_count", throttled)] == 2


def lying_frame(batch: pa.RecordBatch, declared: int, metadata: dict[str, object] | None = None) -> bytes:
    """A zstd frame of ``batch`` whose first buffer announces ``declared`` decompressed bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_batch(batch)
    messages = pa.ipc.MessageReader.open_stream(sink.getvalue())
    messages.read_next_message()  # the schema's
    message = bytearray(messages.read_next_message().serialize().to_pybytes())
    body = 8 + int.from_bytes(message[4:8], "little")  # after the marker, the length and the metadata
    message[body : body + 8] = declared.to_bytes(8, "little", signed=True)
    return bytes(message) + wire.encode(metadata or {})


@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_a_frame_declaring_more_than_it_may_does_not_run_up_its_producers_quota(
    secure: SecureSetup, broker: BrokerProcess, many: bool
) -> None:
    """A frame is refused from the size it declares; that size, a client's claim, must not be
    charged to its quota whole: 2^50 bytes at 200 kB/s would throttle the user for 178 years."""
    with secure.store() as store:
        AclStore(store.zk, store.layout).add(
            [AclBinding.parse(ResourcePattern.parse("topic", TOPIC), "User:alice", "*", "Write", "Allow")]
        )
        QuotaStore(store.zk, store.layout).set("alice", Quota(producer_byte_rate=200_000))
    with Admin(bootstrap_servers=f"{HOST}:{broker.port}", config=secure.client("admin")) as admin:
        admin.create_topic(TOPIC, 1, 1)
    batch = pa.RecordBatch.from_pylist(
        [{"timestamp": now_ms(), "key": None, "value": b"x", "headers": None}], wire_schema()
    )
    meta = {"t": TOPIC, "p": 0, "end": True}
    security = ClientSecurity.from_config(secure.client("alice"))
    client = wire.flight_client(security.location(HOST, broker.port), security=security)
    options = flight.FlightCallOptions(timeout=30)
    try:
        command = (
            {"type": wire.PRODUCE_MANY, "acks": "1"}
            if many
            else {"type": wire.PRODUCE, "topic": TOPIC, "partition": 0, "acks": "1"}
        )
        writer, reader = open_produce(client, command, batch.schema, options)
        writer.write_metadata(pa.py_buffer(lying_frame(batch, 1 << 50, meta if many else None)))
        try:
            answer = reader.read()
            refused = wire.decode(answer)["r"][0]["e"] if answer is not None else None
            if answer is None:
                writer.close()
        except flight.FlightError as exc:
            refused = wire.from_flight_error(exc).code
        # a charged claim would have held the answer for years: the call's 30 s deadline would end it instead
        assert refused == "RECORD_TOO_LARGE", refused
        writer2, reader2 = open_produce(client, command, batch.schema, options)  # the next produce is served
        write_frame(writer2, batch, meta if many else None)
        answer = wire.decode(reader2.read())
        writer2.close()
        assert ("b" in answer["r"][0]) if many else ("base_offset" in answer), answer
        assert answer.get("throttle_ms", 0) < 5000, answer
    finally:
        client.close()
