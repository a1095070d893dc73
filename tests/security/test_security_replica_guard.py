"""Only a broker may fetch as a replica (issue 17's reproduction): with broker 2 down, a client
that sends fetches claiming ``replica_id=2`` must not put 2 back into the ISR, or ``acks=all``
records would be acknowledged with one real copy and lost with the leader."""

from __future__ import annotations

from pathlib import Path

import pyarrow.flight as flight
import pytest

from replication_helpers import Cluster
from security_helpers import SecureSetup
from sparklog.broker.replication.fetch_request import FetchPosition, request
from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import SparklogError
from sparklog.protocol import wire
from sparklog.security.client_config import ClientSecurity
from waiting import wait_for

TOPIC = "guarded"
pytestmark = pytest.mark.slow


def isr(meta: ClusterMetadata) -> list[int]:
    return meta.partition_state(TOPIC, 0).isr


def test_a_client_posing_as_a_follower_is_refused_and_cannot_change_the_isr(
    sparklog_connect: str, child_processes, tmp_path: Path
) -> None:
    secure = SecureSetup.create(tmp_path / "security", sparklog_connect)
    cluster = Cluster(sparklog_connect, tmp_path, child_processes, broker_args=secure.broker_args).start()
    try:
        with Admin(sparklog_connect, config=secure.client("admin")) as admin:
            admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        meta = cluster.meta
        wait_for(lambda: sorted(isr(meta)) == [1, 2, 3], 30, "a full ISR")
        leader = meta.partition_state(TOPIC, 0).leader
        follower = next(b for b in (1, 2, 3) if b != leader)
        cluster.brokers[follower].kill()  # kill -9: it stays registered until its session expires
        wait_for(lambda: follower not in isr(meta), 60, f"broker {follower} to leave the ISR")

        location = f"grpc+tls://127.0.0.1:{cluster.brokers[leader].port}"
        for user in ("alice", "admin"):  # a super user is not a broker either
            client = wire.flight_client(location, security=ClientSecurity.from_config(secure.client(user)))
            position = FetchPosition(TOPIC, 0, 10**6, 0, 0)  # "I have everything": would rejoin the ISR
            posing = request(follower, [position], 0, 1 << 20)
            with pytest.raises(flight.FlightError, match="may not fetch as replica"):
                list(client.do_get(flight.Ticket(wire.encode(posing))).read_all().to_batches())
            single = {"topic": TOPIC, "partition": 0, "offset": 0, "max_bytes": 1024, "replica_id": follower}
            with pytest.raises(flight.FlightError, match="may not fetch as replica"):
                client.do_get(flight.Ticket(wire.encode(single))).read_all()
        assert follower not in isr(meta)

        # acks=all still means min.insync.replicas real copies: kill the leader, nothing acknowledged is lost
        values = [f"r{i}".encode() for i in range(2000)]
        with Producer(sparklog_connect, acks="all", config=secure.client("alice")) as producer:
            futures = [producer.send(TOPIC, v, partition=0) for v in values]
            acked = [v for v, f in zip(values, futures, strict=True) if _acknowledged(f)]
        assert acked
        cluster.brokers[leader].kill()
        cluster.brokers[follower].start()
        survivors = [b for b in (1, 2, 3) if b != leader]
        wait_for(lambda: meta.partition_state(TOPIC, 0).leader in survivors, 60, "a new leader")
        with Consumer(
            TOPIC, zookeeper=sparklog_connect, auto_offset_reset="earliest", config=secure.client("alice")
        ) as consumer:
            got: list[bytes] = []
            for _ in range(300):
                for batch in consumer.poll_batches(timeout=0.2):
                    got.extend(batch.column("value").to_pylist())
                if len(got) >= len(acked):
                    break
        assert got[: len(acked)] == acked  # in order, none lost, none twice
    finally:
        cluster.close()


def _acknowledged(future) -> bool:
    try:
        future.result(60)
        return True
    except SparklogError:
        return False
