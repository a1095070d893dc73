"""A hostile but authenticated user on a secured cluster (``LocalCluster(secure=True)``, what
``sparklog up --secure`` runs, with two brokers), talking raw Arrow Flight with its own SCRAM login:
nothing of a topic it may not Read comes back to it, whatever call it makes, and revoking its ACLs,
removing it or changing its password ends what it has open.

Users: ``reader`` (Read on ``mine``, group ``g1``), ``writer`` (Write on ``wonly``), ``mixed``
(Write on ``secret``, Read on ``mine``); the admin wrote ``TOPSECRET-1..6`` into ``secret``.
One cluster for the module; a test that removes or changes a user makes its own."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from kazoo.client import KazooClient

from sparklog import Admin, Producer
from sparklog.broker.fetch_handler import MAX_WAIT_MS
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.coordination.zookeeper_acls import client_options
from sparklog.errors import AuthenticationFailed, AuthorizationFailed, InvalidRequest, SparklogError, error_from_code
from sparklog.local_cluster import LocalCluster
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.client_config import ClientSecurity
from sparklog.security.credential_store import CredentialStore
from sparklog.security.credentials import DEFAULT_ITERATIONS
from waiting import wait_for

SECRET = b"TOPSECRET"
ACLS = {
    "reader": [("topic", "mine", "Read"), ("group", "g1", "Read")],
    "writer": [("topic", "wonly", "Write")],
    "mixed": [("topic", "secret", "Write"), ("topic", "mine", "Read")],
}
REVOCATION_TIMEOUT_S = 15.0  # generous: the broker's watches see a change within milliseconds


class Hostile:
    """The secured cluster, its users and raw Flight clients logged in as them."""

    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.security is not None
        self.cluster = cluster
        self.admin_config = cluster.client_config()
        self.zk = KazooClient(
            hosts=cluster.zookeeper, timeout=10.0, **client_options(cluster.security.zookeeper_digest)
        )
        self.zk.start(timeout=15)
        self.layout = ZkLayout("/sparklog")
        self.credentials = CredentialStore(self.zk, self.layout)
        self.acls = AclStore(self.zk, self.layout)
        self.passwords: dict[str, str] = {}

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def add_user(self, user: str, acls: list[tuple[str, str, str]]) -> None:
        self.passwords[user] = uuid.uuid4().hex
        self.credentials.upsert(user, self.passwords[user])
        self.acls.add(self.binding(user, *acl) for acl in acls)

    @staticmethod
    def binding(user: str, resource: str, name: str, operation: str) -> AclBinding:
        return AclBinding.parse(ResourcePattern.parse(resource, name), f"User:{user}", "*", operation, "Allow")

    def security(self, user: str, password: str | None = None) -> ClientSecurity:
        config = {**self.admin_config, "sasl.username": user, "sasl.password": password or self.passwords[user]}
        return ClientSecurity.from_config(config)

    def location(self, broker_id: int) -> str:
        return f"grpc+tls://127.0.0.1:{self.cluster.brokers[broker_id].port}"

    def client(self, user: str, broker_id: int = 1) -> flight.FlightClient:
        return wire.flight_client(self.location(broker_id), own_connection=True, security=self.security(user))

    def leader(self, topic: str) -> int:
        admin = wire.flight_client(self.location(1), security=ClientSecurity.from_config(self.admin_config))
        with admin:
            entry = action(admin, wire.METADATA, {"topics": [topic]})["topics"][0]
        return entry["partitions"][0]["leader"]


def action(client: flight.FlightClient, name: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        results = list(client.do_action(flight.Action(name, wire.encode(body)), flight.FlightCallOptions(timeout=20)))
    except flight.FlightError as exc:
        raise wire.from_flight_error(exc) from None
    return json.loads(results[0].body.to_pybytes())


def fetched_bytes(client: flight.FlightClient, ticket: dict[str, Any]) -> bytes:
    """Everything a ``do_get`` returned (every buffer and app metadata), or its typed error."""
    try:
        reader = client.do_get(flight.Ticket(wire.encode(ticket)), flight.FlightCallOptions(timeout=20))
        out = bytearray()
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return bytes(out)
            if chunk.data is not None:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, chunk.data.schema) as writer:
                    writer.write_batch(chunk.data)
                out += sink.getvalue().to_pybytes()
            if chunk.app_metadata is not None:
                out += chunk.app_metadata.to_pybytes()
    except flight.FlightError as exc:
        raise wire.from_flight_error(exc) from None


def refused(call: Any) -> SparklogError:
    """The typed error ``call`` ended with; fails if it returned anything instead."""
    try:
        got = call()
    except SparklogError as exc:
        return exc
    raise AssertionError(f"not refused; it returned {str(got)[:300]}")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    with LocalCluster(tmp_path_factory.mktemp("hostile") / "data", brokers=2, secure=True) as cluster:
        setup = Hostile(cluster)
        try:
            for user, acls in ACLS.items():
                setup.add_user(user, acls)
            with Admin(config=setup.admin_config) as admin:
                for topic in ("secret", "mine", "wonly"):
                    admin.create_topic(topic, 1, 2)
            with Producer(acks="all", config=setup.admin_config) as producer:
                for i in range(1, 7):
                    producer.send("secret", SECRET + f"-{i}".encode(), partition=0).result(30)
                producer.send("mine", b"mine-0", partition=0).result(30)
            yield setup
        finally:
            setup.close()


# ----------------------------------------------------------------- row 1: replica fetches
@pytest.mark.parametrize("user", ["reader", "writer"])
def test_a_user_cannot_fetch_as_a_replica(hostile: Hostile, user: str) -> None:
    leader = hostile.leader("secret")
    follower = 2 if leader == 1 else 1
    position = [{"t": "secret", "p": 0, "o": 0, "e": 0}]
    tickets = [
        {
            "type": "replica_fetch",
            "replica_id": replica_id,
            "partitions": position,
            "max_wait_ms": 0,
            "max_bytes": 1 << 20,
        }
        for replica_id in (-1, -2, follower, leader, 7)
    ]
    tickets.append({**tickets[0], "session_id": 12345, "session_epoch": 0})  # with a fetch session
    tickets.append({**tickets[2], "session_id": 12346, "session_epoch": 0})
    # the single-partition fetch naming a replica
    single = {"topic": "secret", "partition": 0, "offset": 0, "max_bytes": 1 << 20}
    tickets += [{**single, "replica_id": follower}, {**single, "replica_id": -2}, single]
    with hostile.client(user, leader) as client:
        for ticket in tickets:
            error = refused(lambda ticket=ticket: fetched_bytes(client, ticket))
            assert isinstance(error, AuthorizationFailed | InvalidRequest), (ticket, error)
            if ticket.get("replica_id", -1) >= 0:
                assert isinstance(error, AuthorizationFailed) and f"replica {ticket['replica_id']}" in str(error)
        # the broker serves its legitimate users throughout
        assert action(client, wire.PING, {})["broker_id"] == leader


# ----------------------------------------------------------------- row 2: copy_records
def test_copy_records_needs_read_on_the_source_and_write_on_the_target(hostile: Hostile) -> None:
    body = {"topic": "secret", "partition": 0, "slices": [{"first": 0, "last": 5, "topic": "mine", "partition": 0}]}
    for broker_id in hostile.cluster.brokers:
        with hostile.client("mixed", broker_id) as client:
            error = refused(lambda client=client: action(client, wire.COPY_RECORDS, body))
            assert isinstance(error, AuthorizationFailed), error
            assert "User:mixed may not Read topic 'secret'" in str(error)
    # Write on the target too: mixed may Read mine but not Write it
    reverse = {"topic": "mine", "partition": 0, "slices": [{"first": 0, "last": 0, "topic": "wonly", "partition": 0}]}
    with hostile.client("mixed", hostile.leader("mine")) as client:
        error = refused(lambda: action(client, wire.COPY_RECORDS, reverse))
        assert isinstance(error, AuthorizationFailed) and "may not Write topic 'wonly'" in str(error), error
    # mine holds none of secret's records
    with hostile.client("reader", hostile.leader("mine")) as client:
        got = fetched_bytes(client, {"topic": "mine", "partition": 0, "offset": 0, "max_bytes": 1 << 20})
    assert b"mine-0" in got and SECRET not in got


# ----------------------------------------------------------------- row 7: offsets_for_leader_epoch
def test_offsets_for_leader_epoch_needs_describe_or_a_replica(hostile: Hostile) -> None:
    leader = hostile.leader("secret")
    follower = 2 if leader == 1 else 1
    with hostile.client("reader", leader) as client:
        body = {"topic": "secret", "partition": 0, "epoch": 0}
        error = refused(lambda: action(client, wire.OFFSETS_FOR_LEADER_EPOCH, body))
        assert isinstance(error, AuthorizationFailed) and "may not Describe topic 'secret'" in str(error), error
        for replica_id in (follower, leader):
            as_replica = {**body, "replica_id": replica_id, "leader_epoch": 0}
            error = refused(lambda as_replica=as_replica: action(client, wire.OFFSETS_FOR_LEADER_EPOCH, as_replica))
            assert isinstance(error, AuthorizationFailed) and f"replica {replica_id}" in str(error), error
    # its own topic: Read implies Describe
    with hostile.client("reader", hostile.leader("mine")) as client:
        mine = action(client, wire.OFFSETS_FOR_LEADER_EPOCH, {"topic": "mine", "partition": 0, "epoch": 0})
    assert mine["end_offset"] == 1


def test_unknown_calls_are_refused(hostile: Hostile) -> None:
    with hostile.client("reader") as client:
        for name in ("no_such_action", "replica_fetch", "fetch"):
            error = refused(lambda name=name: action(client, name, {}))
            assert isinstance(error, InvalidRequest) and "unknown action" in str(error), error
        error = refused(lambda: fetched_bytes(client, {"type": "fetch_all", "topic": "secret"}))
        assert isinstance(error, InvalidRequest) and "unknown get type 'fetch_all'" in str(error), error


# ----------------------------------------------------------------- row 6: SCRAM first answers
class _ServerFirst(flight.ClientAuthHandler):
    """Sends a SCRAM client-first message for ``user`` and keeps the broker's server-first answer
    (then gives up: the proof is garbage)."""

    def __init__(self, user: str) -> None:
        super().__init__()
        self.user = user
        self.answer = ""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        first = f"n,,n={self.user},r={uuid.uuid4().hex}"
        outgoing.write(json.dumps({"mechanism": "SCRAM-SHA-256", "first": first}).encode())
        self.answer = bytes(incoming.read()).decode()
        outgoing.write(b"c=biws,r=x,p=AAAA")
        incoming.read()

    def get_token(self) -> bytes:
        return b""


def server_first(hostile: Hostile, user: str, broker_id: int) -> dict[str, str]:
    security = hostile.security("reader")
    client = flight.FlightClient(hostile.location(broker_id), **security.tls_options())
    handler = _ServerFirst(user)
    with client, contextlib.suppress(flight.FlightError):
        client.authenticate(handler, flight.FlightCallOptions(timeout=10))
    fields = dict(part.split("=", 1) for part in handler.answer.split(","))
    assert set(fields) == {"r", "s", "i"}, handler.answer
    return fields


def test_scram_does_not_tell_which_users_exist(hostile: Hostile) -> None:
    real = [server_first(hostile, "reader", b) for b in (1, 2, 1)]
    made_up = [server_first(hostile, "nobody-here", b) for b in (1, 2, 1)]
    for answers in (real, made_up):
        salts = {a["s"] for a in answers}
        assert len(salts) == 1, f"a user's salt changed between answers: {answers}"  # every broker, every time
        assert {a["i"] for a in answers} == {str(DEFAULT_ITERATIONS)}
    assert len(base64.b64decode(real[0]["s"])) == len(base64.b64decode(made_up[0]["s"]))
    assert real[0]["s"] != made_up[0]["s"]
    assert server_first(hostile, "someone-else", 1)["s"] != made_up[0]["s"]  # derived from the name
    # and the login itself fails alike
    for user, password in (("reader", "wrong"), ("nobody-here", "wrong")):
        with pytest.raises(AuthenticationFailed, match="unknown user or wrong password"):
            wire.flight_client(hostile.location(1), security=hostile.security(user, password))


# ----------------------------------------------------------------- rows 3-5: revocation
def _produce_stream(client: flight.FlightClient, topic: str, many: bool) -> tuple[Any, Any]:
    command = (
        {"type": "produce_many", "acks": "1"}
        if many
        else {"type": "produce", "topic": topic, "partition": 0, "acks": "1"}
    )
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    return open_produce(client, command, schema)


def _send(writer: Any, reader: Any, topic: str, many: bool, value: bytes) -> dict[str, Any]:
    """One batch on an open produce stream and its answer; the stream's typed error once it ended."""
    batch = pa.record_batch({"key": pa.array([None], pa.binary()), "value": pa.array([value], pa.binary())})
    meta = {"t": topic, "p": 0, "end": True} if many else None
    try:
        write_frame(writer, batch, meta)
        answer = reader.read()
        if answer is None:
            writer.close()
            raise AssertionError("the stream ended without an answer or an error")
    except flight.FlightError as exc:
        raise wire.from_flight_error(exc) from None
    decoded = wire.decode(answer)
    if many:
        result = decoded["r"][0]
        if "e" in result:
            raise error_from_code(result["e"], result.get("m", ""))
        return {"base_offset": result["b"]}
    return decoded


@pytest.fixture
def fresh(hostile: Hostile) -> Iterator[str]:
    """A user of its own for a test that revokes: Read and Write on ``wonly``."""
    user = f"u{uuid.uuid4().hex[:8]}"
    hostile.add_user(user, [("topic", "wonly", "Write"), ("topic", "wonly", "Read")])
    yield user
    hostile.credentials.remove(user)
    hostile.acls.remove(hostile.binding(user, "topic", "wonly", op) for op in ("Write", "Read"))


@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_removing_the_write_acl_ends_open_produce_streams(hostile: Hostile, fresh: str, many: bool) -> None:
    with hostile.client(fresh, hostile.leader("wonly")) as client:
        writer, reader = _produce_stream(client, "wonly", many)
        assert _send(writer, reader, "wonly", many, b"allowed")["base_offset"] >= 0
        hostile.acls.remove([hostile.binding(fresh, "topic", "wonly", "Write")])

        def refused_now() -> SparklogError | None:
            try:
                _send(writer, reader, "wonly", many, b"late")
            except AuthorizationFailed as exc:
                return exc
            return None

        error = wait_for(refused_now, REVOCATION_TIMEOUT_S, "the open stream to refuse the next batch")
        assert f"User:{fresh} may not Write topic 'wonly'" in str(error)


@pytest.mark.parametrize("change", ["remove", "password"])
@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_removing_a_user_or_changing_its_password_ends_its_produce_streams(
    hostile: Hostile, fresh: str, many: bool, change: str
) -> None:
    with hostile.client(fresh, hostile.leader("wonly")) as client:
        writer, reader = _produce_stream(client, "wonly", many)
        assert _send(writer, reader, "wonly", many, b"allowed")["base_offset"] >= 0
        if change == "remove":
            hostile.credentials.remove(fresh)
        else:
            hostile.credentials.upsert(fresh, "a-new-password")
        with pytest.raises(AuthenticationFailed, match=f"user '{fresh}'"):
            for _ in range(int(REVOCATION_TIMEOUT_S * 10)):  # the next batch, or one a moment later:
                _send(writer, reader, "wonly", many, b"late")  # the watch is milliseconds behind
                time.sleep(0.1)


@pytest.mark.parametrize("change", ["acl", "remove", "password"])
def test_revocation_ends_an_open_following_fetch(hostile: Hostile, fresh: str, change: str) -> None:
    """Records keep arriving, so the fetch stream stays open; the revocation ends it with its error."""
    leader = hostile.leader("wonly")
    stop = threading.Event()

    def keep_producing() -> None:
        with Producer(acks="1", config=hostile.admin_config) as producer:
            while not stop.is_set():
                producer.send("wonly", b"more", partition=0).result(30)
                stop.wait(0.05)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    feeder.start()
    try:
        with hostile.client(fresh, leader) as client:
            ticket = {"topic": "wonly", "partition": 0, "offset": 0, "max_wait_ms": 2000, "follow": True}
            stream = client.do_get(flight.Ticket(wire.encode(ticket)))
            stream.read_chunk()  # open and delivering
            if change == "acl":
                hostile.acls.remove([hostile.binding(fresh, "topic", "wonly", "Read")])
            elif change == "remove":
                hostile.credentials.remove(fresh)
            else:
                hostile.credentials.upsert(fresh, "a-new-password")
            expected = AuthorizationFailed if change == "acl" else AuthenticationFailed
            with pytest.raises(expected):
                deadline = time.monotonic() + REVOCATION_TIMEOUT_S
                while time.monotonic() < deadline:  # ends long before: a message per record at most
                    try:
                        stream.read_chunk()
                    except flight.FlightError as exc:
                        raise wire.from_flight_error(exc) from None
                    except StopIteration:
                        raise AssertionError("the stream ended without the revocation's error") from None
    finally:
        stop.set()
        feeder.join(30)


def test_an_idle_following_fetch_ends_when_its_user_is_removed(hostile: Hostile, fresh: str) -> None:
    """No record arrives: the waiting fetch still notices the removal (it looks every quarter
    second) and ends with the error while its 30 s wait is still on. The client gives the call
    half that long: a fetch that noticed only at the end of its wait fails with a deadline error
    here, not with the removal's."""
    with hostile.client(fresh, hostile.leader("wonly")) as client:
        end = action(client, wire.LIST_OFFSETS, {"topic": "wonly", "partition": 0})["high_watermark"]
        ticket = {"topic": "wonly", "partition": 0, "offset": end, "max_wait_ms": MAX_WAIT_MS, "follow": True}
        within_the_wait = flight.FlightCallOptions(timeout=MAX_WAIT_MS / 2000)
        remover = threading.Timer(1.0, hostile.credentials.remove, [fresh])  # while the fetch waits
        remover.start()
        try:
            with pytest.raises(AuthenticationFailed, match="no longer exists"):
                try:
                    stream = client.do_get(flight.Ticket(wire.encode(ticket)), within_the_wait)  # first message
                    stream.read_chunk()
                    stream.read_chunk()
                except flight.FlightError as exc:
                    raise wire.from_flight_error(exc) from None
        finally:
            remover.join()


@pytest.mark.parametrize("change", ["password", "remove_and_add"])
def test_old_session_tokens_die_with_their_credential(hostile: Hostile, fresh: str, change: str) -> None:
    with hostile.client(fresh) as old:
        assert action(old, wire.PING, {})["broker_id"] == 1
        if change == "password":
            hostile.credentials.upsert(fresh, "a-new-password")
        else:
            hostile.credentials.remove(fresh)
            hostile.credentials.upsert(fresh, hostile.passwords[fresh])  # the very same password again

        def dead() -> bool:  # at once: as soon as the broker's watch has the change (milliseconds)
            try:
                action(old, wire.PING, {})
            except AuthenticationFailed:
                return True
            return False

        wait_for(dead, REVOCATION_TIMEOUT_S, "the old session token to be refused")
        # a new login works at once, with the credential as it is now
        password = "a-new-password" if change == "password" else hostile.passwords[fresh]
        with wire.flight_client(hostile.location(1), security=hostile.security(fresh, password)) as new:
            assert action(new, wire.PING, {})["broker_id"] == 1
        error = refused(lambda: action(old, wire.PING, {}))  # and the old one stays dead
        assert isinstance(error, AuthenticationFailed), error
