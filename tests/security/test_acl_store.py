"""ACLs in a real ZooKeeper: the store (add, remove, list, concurrent writers) and the broker's cache
(kept current by watches)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from sparklog.errors import InvalidRequest
from sparklog.security.acl_store import AclCache, AclStore
from sparklog.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.authorizer import Authorizer
from waiting import wait_for

LAYOUT = ZkLayout("/sparklog")
TOPIC = ResourcePattern(ResourceType.TOPIC, "events")
WATCHED = 10.0  # hang guard of a wait for the cache to follow a change (its watches fire within milliseconds)


def acl(
    principal: str = "User:alice",
    operation: str = "Read",
    pattern: ResourcePattern = TOPIC,
    permission: str = "Allow",
    host: str = "*",
) -> AclBinding:
    return AclBinding.parse(pattern, principal, host, operation, permission)


@pytest.fixture
def store(zk_client: KazooClient) -> AclStore:
    return AclStore(zk_client, LAYOUT)


@pytest.fixture
def second_client(zookeeper: EmbeddedZooKeeper, zk_client: KazooClient) -> Iterator[KazooClient]:
    """Another session on the chroot of ``zk_client`` (another admin's, or a broker's)."""
    client = KazooClient(hosts=zookeeper.connect_string + zk_client.chroot, timeout=10.0)
    client.start(timeout=15.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_add_list_remove_round_trip(store: AclStore, zk_client: KazooClient) -> None:
    group = ResourcePattern(ResourceType.GROUP, "etl-", PatternType.PREFIXED)
    cluster = ResourcePattern.cluster()
    bindings = [
        acl(operation="Read"),
        acl(operation="Write", principal="User:bob", host="10.0.0.5"),
        acl(operation="All", principal="User:*", permission="Deny", pattern=ResourcePattern(ResourceType.TOPIC, "*")),
        acl(operation="Read", pattern=group),
        acl(operation="ClusterAction", principal="User:broker", pattern=cluster),
    ]
    assert store.add(bindings) == bindings
    assert store.add([bindings[0], bindings[1]]) == []  # already there: nothing added, nothing doubled

    listed = store.list_acls()
    assert sorted(listed, key=str) == sorted(bindings, key=str)
    assert len(listed) == len(bindings)

    # the documented layout: one znode per pattern, {"acls": [entries]}
    data, _ = zk_client.get("/sparklog/security/acls/literal/Topic/events")
    assert json.loads(data) == {
        "acls": [
            {"principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"},
            {"principal": "User:bob", "host": "10.0.0.5", "operation": "Write", "permission": "Allow"},
        ]
    }
    assert zk_client.exists("/sparklog/security/acls/prefixed/Group/etl-")
    assert zk_client.exists(f"/sparklog/security/acls/literal/Cluster/{CLUSTER_NAME}")
    assert zk_client.exists("/sparklog/security/acls/literal/Topic/*")

    # filters
    assert store.list_acls(ResourceType.TOPIC, "events", PatternType.LITERAL) == [bindings[0], bindings[1]]
    assert store.list_acls(principal="User:bob") == [bindings[1]]
    assert store.list_acls(ResourceType.GROUP) == [bindings[3]]
    assert store.list_acls(pattern_type=PatternType.PREFIXED) == [bindings[3]]
    assert store.list_acls(ResourceType.CLUSTER, CLUSTER_NAME) == [bindings[4]]
    assert store.list_acls(ResourceType.TOPIC, "nothing-here") == []

    # remove some: only what was there is reported; the last ACL of a pattern takes its znode along
    assert store.remove([bindings[0], acl(operation="Delete")]) == [bindings[0]]
    assert store.list_acls(ResourceType.TOPIC, "events", PatternType.LITERAL) == [bindings[1]]
    assert store.remove([bindings[1]]) == [bindings[1]]
    assert not zk_client.exists("/sparklog/security/acls/literal/Topic/events")
    assert store.remove([bindings[1]]) == []

    assert store.remove_all(group) == [bindings[3]]
    assert store.remove_all(group) == []
    assert sorted(store.list_acls(), key=str) == sorted([bindings[2], bindings[4]], key=str)


def test_describe_and_delete_by_filter(store: AclStore, zk_client: KazooClient) -> None:
    prefixed = ResourcePattern(ResourceType.TOPIC, "ev", PatternType.PREFIXED)
    bindings = [
        acl(),
        acl(operation="Write"),
        acl(principal="User:bob"),
        acl(pattern=prefixed, operation="Describe"),
        acl(pattern=ResourcePattern(ResourceType.TOPIC, "other")),
    ]
    assert store.add(bindings) == bindings
    assert store.describe(AclFilter(ResourceType.TOPIC, "events", PatternType.LITERAL)) == sorted(
        bindings[:3], key=lambda b: (b.principal, b.operation.value)
    )
    assert store.describe(AclFilter(ResourceType.TOPIC, "events", match=True, principal="User:alice")) == [
        bindings[0],
        bindings[1],
        bindings[3],  # sorted: literal patterns first
    ]
    assert store.describe(AclFilter(operation=Operation.DESCRIBE)) == [bindings[3]]

    with pytest.raises(InvalidRequest, match="needs their resource pattern"):
        store.delete([AclFilter(principal="User:alice")])
    assert len(store.list_acls()) == 5  # refused as a whole: nothing removed
    # every ACL of alice on topic 'events' (any operation), in one transaction with a prefixed pattern's
    removed = store.delete(
        [
            AclFilter(ResourceType.TOPIC, "events", PatternType.LITERAL, principal="User:alice"),
            AclFilter.of_pattern(prefixed),
        ]
    )
    assert sorted(removed, key=str) == sorted([bindings[0], bindings[1], bindings[3]], key=str)
    assert store.list_acls() == [bindings[2], bindings[4]]
    assert zk_client.exists(LAYOUT.acl_resource("prefixed", "Topic", "ev")) is None  # no ACLs, no znode
    assert store.delete([AclFilter.of(bindings[0])]) == []


def test_delete_matching_takes_filters_open_anywhere(store: AclStore) -> None:
    group = ResourcePattern(ResourceType.GROUP, "g")
    bindings = [
        acl(),
        acl(pattern=group),
        acl(principal="User:bob"),
        acl(pattern=ResourcePattern.cluster(), operation="Alter"),
    ]
    store.add(bindings)
    # Kafka's DeleteAcls: every ACL of alice, whatever its resource; one naming its pattern as delete takes it
    removed = store.delete_matching([AclFilter(principal="User:alice"), AclFilter.of(bindings[2])])
    assert sorted(removed, key=str) == sorted(bindings, key=str)
    assert store.list_acls() == []
    assert store.delete_matching([AclFilter()]) == []


def test_malformed_znode_is_a_clear_error(store: AclStore, zk_client: KazooClient) -> None:
    zk_client.create("/sparklog/security/acls/literal/Topic/events", b'{"acls": [{"principal": "bob"}]}', makepath=True)
    with pytest.raises(InvalidRequest, match="the ACLs of topic 'events' in ZooKeeper are malformed"):
        store.list_acls()
    with pytest.raises(InvalidRequest, match="malformed"):
        store.add([acl()])


def test_concurrent_adds_from_two_clients_keep_every_entry(
    store: AclStore, zk_client: KazooClient, second_client: KazooClient
) -> None:
    """Two writers (separate ZooKeeper sessions, as two admins) add to the same pattern at once: each
    read-edit-write that lost the race is done again, so no entry is lost."""
    stores = [store, AclStore(second_client, LAYOUT)]
    per_writer = 40
    wanted = [
        [acl(principal=f"User:w{w}-{i}", operation="Write") for i in range(per_writer)] for w in range(len(stores))
    ]
    start = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            start.wait()
            for binding in wanted[w]:
                assert stores[w].add([binding]) == [binding]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    _, stat = zk_client.get("/sparklog/security/acls/literal/Topic/events")
    stored = store.list_acls(ResourceType.TOPIC, "events")
    assert set(stored) == {b for bs in wanted for b in bs}
    assert len(stored) == len(stores) * per_writer
    assert stat.version == len(stores) * per_writer - 1  # one write per add: none overwrote another


def test_concurrent_add_and_remove_of_one_pattern(store: AclStore, second_client: KazooClient) -> None:
    keep = [acl(principal=f"User:keep{i}") for i in range(30)]
    drop = [acl(principal=f"User:drop{i}") for i in range(30)]
    store.add(drop)
    other = AclStore(second_client, LAYOUT)
    start = threading.Barrier(2)

    def adder() -> None:
        start.wait()
        for binding in keep:
            store.add([binding])

    def remover() -> None:
        start.wait()
        for binding in drop:
            other.remove([binding])

    threads = [threading.Thread(target=adder), threading.Thread(target=remover)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(store.list_acls()) == set(keep)


def test_cache_loads_and_follows_adds_and_removes(store: AclStore, second_client: KazooClient) -> None:
    before = acl(operation="Write")
    store.add([before])
    cache = AclCache(second_client, LAYOUT).start()
    try:
        authorizer = Authorizer(cache, super_users={"User:admin"})
        assert cache.bindings() == [before]  # loaded by start()
        assert authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "events")
        assert not authorizer.authorize("User:bob", "10.0.0.5", Operation.READ, ResourceType.TOPIC, "events-2")

        # an add on a new pattern (a new znode: the parent's watch) and on an existing one (its data watch)
        prefixed = acl(
            principal="User:bob", pattern=ResourcePattern(ResourceType.TOPIC, "events-", PatternType.PREFIXED)
        )
        # The cache never polls ZooKeeper: a change it shows can only have come through its watches.
        # The waits below are hang guards (a watch fires within milliseconds).
        store.add([prefixed])
        wait_for(
            lambda: authorizer.authorize("User:bob", "10.0.0.5", Operation.READ, ResourceType.TOPIC, "events-2"),
            WATCHED,
            "the prefixed allow, a new znode, through its parent's watch",
            0.01,
        )
        deny = acl(operation="Write", principal="User:*", permission="Deny")
        store.add([deny])
        wait_for(
            lambda: not authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "events"),
            WATCHED,
            "the deny, added to an existing znode, through that znode's watch",
            0.01,
        )
        assert set(cache.bindings()) == {before, prefixed, deny}

        # a removal takes effect as soon as ZooKeeper tells the cache
        store.remove([prefixed])
        wait_for(
            lambda: not authorizer.authorize("User:bob", "10.0.0.5", Operation.READ, ResourceType.TOPIC, "events-2"),
            WATCHED,
            "the prefixed allow's removal through its znode's watch",
            0.01,
        )
        store.remove([deny])
        wait_for(
            lambda: authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "events"),
            WATCHED,
            "the deny's removal",
            0.01,
        )
        store.remove([before])
        wait_for(lambda: cache.bindings() == [], WATCHED, "an empty cache", 0.01)
        assert not authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "events")

        # a pattern removed then added again is followed again (its watch was set anew)
        store.add([before])
        wait_for(lambda: cache.bindings() == [before], WATCHED, "the re-added pattern", 0.01)
        store.add([deny])
        wait_for(lambda: set(cache.bindings()) == {before, deny}, WATCHED, "the re-added deny", 0.01)
    finally:
        cache.close()


def test_cache_ignores_a_malformed_znode_and_recovers(
    store: AclStore, zk_client: KazooClient, second_client: KazooClient
) -> None:
    cache = AclCache(second_client, LAYOUT).start()
    try:
        good = acl(pattern=ResourcePattern(ResourceType.GROUP, "etl"))
        store.add([good])
        zk_client.create("/sparklog/security/acls/literal/Topic/events", b"not json", makepath=True)
        zk_client.create("/sparklog/security/acls/literal/Topic/a b", b"{}", makepath=True)  # no topic has that name
        wait_for(lambda: cache.bindings() == [good], WATCHED, "the good binding only", 0.01)
        zk_client.set("/sparklog/security/acls/literal/Topic/events", json.dumps({"acls": [acl().to_entry()]}).encode())
        wait_for(lambda: set(cache.bindings()) == {good, acl()}, WATCHED, "the repaired znode's binding", 0.01)
    finally:
        cache.close()
