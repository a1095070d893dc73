"""A secured local cluster (``LocalCluster(secure=True)``, what ``sparklog up --secure`` runs) locks
down its own ZooKeeper beyond sparklog's tree: anonymous clients cannot create znodes at its root,
it answers only the ``ruok`` and ``srvr`` four-letter words, and every file the cluster writes
(segments, indexes, Delta tables, ZooKeeper's snapshots and transaction log) is owner-only.

One cluster (one broker) for the module: the tests only look at it, the last one produces."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from sparklog import Admin, Consumer, Producer
from sparklog.broker.log.segment import INDEX_SUFFIX, SEGMENT_SUFFIX
from sparklog.coordination.zookeeper_acls import client_options
from sparklog.coordination.zookeeper_server import four_letter_word
from sparklog.local_cluster import LocalCluster
from waiting import wait_for

NOT_WHITELISTED = "is not executed because it is not in the whitelist"
TIERING_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("secured") / "data", brokers=1, secure=True) as cluster:
        yield cluster


def _kazoo(hosts: str, **options: object) -> KazooClient:
    zk = KazooClient(hosts=hosts, timeout=10.0, **options)
    zk.start(timeout=15)
    return zk


def test_an_anonymous_client_cannot_create_znodes_at_the_root(secured: LocalCluster) -> None:
    assert secured.security is not None
    anonymous = _kazoo(secured.zookeeper)
    try:
        with pytest.raises(NoAuthError):
            anonymous.create("/intruder", b"x")
        with pytest.raises(NoAuthError):
            anonymous.set("/", b"x")
        assert {"sparklog", "zookeeper"} <= set(anonymous.get_children("/"))  # the root stays readable
        anonymous.get_children("/zookeeper")  # ZooKeeper's own node keeps its ACL
    finally:
        anonymous.stop()
        anonymous.close()
    owner = _kazoo(secured.zookeeper, **client_options(secured.security.zookeeper_digest))
    try:  # sparklog's identity still may
        owner.create("/sparklog-owned", b"x")
        owner.delete("/sparklog-owned")
    finally:
        owner.stop()
        owner.close()
    with Admin(config=secured.client_config()) as admin:  # and sparklog works
        admin.create_topic("root-locked", 1, 1)
    with Producer(acks="all", config=secured.client_config()) as producer:
        producer.send("root-locked", b"kept", partition=0).result(30)
    got: list[bytes] = []
    with Consumer("root-locked", auto_offset_reset="earliest", config=secured.client_config()) as consumer:
        for _ in range(150):
            for batch in consumer.poll_batches(timeout=0.2):
                got.extend(batch.column("value").to_pylist())
            if got:
                break
    assert got == [b"kept"]


def test_only_ruok_and_srvr_are_answered(secured: LocalCluster) -> None:
    assert secured.embedded is not None
    host, port = secured.embedded.host, secured.embedded.port
    assert four_letter_word(host, port, "ruok", timeout=5.0) == "imok"
    assert "Mode: standalone" in four_letter_word(host, port, "srvr", timeout=5.0)
    for word in ("stat", "mntr", "cons"):
        reply = four_letter_word(host, port, word, timeout=5.0)
        assert NOT_WHITELISTED in reply, f"{word}: {reply!r}"


def _first_not_owner_only(top: Path) -> str | None:
    """The first path under ``top`` (itself included) that is a directory not 0700 or a file not
    0600, with its mode; None if there is none."""
    for directory, subdirectories, files in os.walk(top):
        entries = [(directory, 0o700)]
        entries += [(os.path.join(directory, name), 0o700) for name in subdirectories]
        entries += [(os.path.join(directory, name), 0o600) for name in files]
        for path, wanted in entries:
            try:
                mode = stat.S_IMODE(os.lstat(path).st_mode)
            except FileNotFoundError:  # gone while walking (a temporary file)
                continue
            if mode != wanted:
                return f"{path} is {mode:04o}, not {wanted:04o}"
    return None


def test_everything_the_cluster_writes_is_owner_only(secured: LocalCluster) -> None:
    config = secured.client_config()
    with Admin(config=config) as admin:
        admin.create_topic("owner-only", 1, 1, {"lake.enabled": "true", "segment.bytes": "1024"})
    with Producer(acks="all", linger_ms=0, config=config) as producer:
        for batch in range(3):  # each batch outgrows a segment: the first two are closed and tiered
            producer.send_batch("owner-only", {"value": [b"%d-%03d" % (batch, i) + b"x" * 200 for i in range(10)]}, 0)
    table = secured.data_dir / "lake" / "owner-only"
    wait_for(lambda: list(table.rglob("*.parquet")), TIERING_TIMEOUT_S, "the Delta table's first Parquet file")

    names = [path.name for path in secured.data_dir.rglob("*")]
    for kind in (SEGMENT_SUFFIX, INDEX_SUFFIX, ".parquet", ".json"):  # .json: the Delta log
        assert any(name.endswith(kind) for name in names), f"no {kind} file under {secured.data_dir}"
    zookeeper = [path.name for path in (secured.data_dir / "zookeeper" / "version-2").iterdir()]
    assert any(name.startswith("snapshot.") for name in zookeeper) and any(n.startswith("log.") for n in zookeeper)
    offender = _first_not_owner_only(secured.data_dir)
    assert offender is None, offender
