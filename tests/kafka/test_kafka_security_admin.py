"""Security administration through the Kafka listener (DescribeAcls, CreateAcls, DeleteAcls,
DescribeUserScramCredentials, AlterUserScramCredentials, DescribeClientQuotas, AlterClientQuotas)
and DescribeLogDirs, by Kafka's own clients against a real two-broker cluster: confluent-kafka's
``AdminClient`` (librdkafka) for ACLs and users, kafka-python's ``KafkaAdminClient`` for log dirs,
and raw requests (kafka-python's message classes) for client quotas, which neither client offers,
and for the bad values clients would not send.

What the Kafka APIs write is what sparklog's own administration (its ``Admin`` through a broker's
Flight administration actions, and the stores in ZooKeeper) then reads, and the other way round;
a credential set through AlterUserScramCredentials verifies the password. Refusals are Kafka's
error codes with sparklog's message, each on its own entry. Without a cluster: Kafka's ACL numbers
both ways, every served version of every response encodes, and a principal without the cluster
ACL gets CLUSTER_AUTHORIZATION_FAILED where Kafka puts it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding as KAclBinding,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.protocol import admin as k

from kafka_wire import KafkaWire
from sparklog import Admin
from sparklog.errors import InvalidRequest
from sparklog.kafka import error_codes, security_admin
from sparklog.kafka.api import ListenerState, RequestContext
from sparklog.kafka.authorization import KAFKA_APIS, ApiPermissions
from sparklog.kafka.broker_access import LogDir, ReplicaSize
from sparklog.kafka.handlers import HANDLERS
from sparklog.local_cluster import LocalCluster
from sparklog.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
)
from sparklog.security.acls import ResourceType as SparklogResourceType
from sparklog.security.credential_store import CredentialStore
from sparklog.security.credentials import new_salt, salted_password
from sparklog.security.quotas import Quota
from waiting import wait_for

TIMEOUT_S = 30.0
NONE, INVALID_REQUEST = error_codes.NONE, error_codes.INVALID_REQUEST


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-security-admin"), brokers=2) as running:
        yield running


@pytest.fixture(scope="module")
def kafka_admin(cluster: LocalCluster) -> AdminClient:
    """librdkafka's admin client, once its metadata names a controller: it sends admin requests
    there by default and, told of none yet (a cluster a moment old), it waited out a test's 30 s
    once."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers, "log_level": 3})
    wait_for(lambda: admin.list_topics(timeout=TIMEOUT_S).controller_id > 0, TIMEOUT_S, "a controller")
    return admin


@pytest.fixture(scope="module")
def sparklog_admin(cluster: LocalCluster) -> Iterator[Admin]:
    """sparklog's own administration, through a broker's Flight administration actions."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        yield admin


@pytest.fixture(scope="module")
def credentials(cluster: LocalCluster) -> Iterator[CredentialStore]:
    """The users' credentials in ZooKeeper, as brokers check a SASL handshake against them."""
    with Admin(cluster.zookeeper) as admin:
        yield CredentialStore(admin.cluster.zk, admin.cluster.layout)


def kafka_wire(cluster: LocalCluster) -> KafkaWire:
    broker = cluster.brokers[1]
    assert broker.kafka_port is not None
    return KafkaWire("127.0.0.1", broker.kafka_port)


def kafka_error(future: Any) -> KafkaError:
    """The Kafka error a client's future ended with (it must end with one)."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error


# ------------------------------------------------------------------------------------ ACLs
@pytest.mark.slow
def test_acls_created_described_and_deleted_by_confluent_kafka(kafka_admin: AdminClient, sparklog_admin: Admin) -> None:
    alice, topic, prefix = f"User:{unique('alice')}", unique("orders"), unique("team")
    created = [
        KAclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, alice, "*", AclOperation.READ,
                    AclPermissionType.ALLOW),
        KAclBinding(ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, alice, "10.0.0.1",
                    AclOperation.DESCRIBE, AclPermissionType.DENY),
        KAclBinding(ResourceType.BROKER, CLUSTER_NAME, ResourcePatternType.LITERAL, alice, "*", AclOperation.ALTER,
                    AclPermissionType.ALLOW),
        KAclBinding(ResourceType.TRANSACTIONAL_ID, "*", ResourcePatternType.LITERAL, alice, "*", AclOperation.WRITE,
                    AclPermissionType.ALLOW),
    ]  # fmt: skip
    for future in kafka_admin.create_acls(created, request_timeout=TIMEOUT_S).values():
        assert future.result(TIMEOUT_S) is None

    expected = {
        AclBinding.parse(ResourcePattern.parse("Topic", topic), alice, "*", "Read", "Allow"),
        AclBinding.parse(ResourcePattern.parse("Group", prefix, "prefixed"), alice, "10.0.0.1", "Describe", "Deny"),
        AclBinding.parse(ResourcePattern.cluster(), alice, "*", "Alter", "Allow"),
        AclBinding.parse(ResourcePattern.parse("TransactionalId", "*"), alice, "*", "Write", "Allow"),
    }
    # sparklog's own administration (a broker's Flight actions) reads what the Kafka API created
    assert set(sparklog_admin.describe_acls(AclFilter(principal=alice))) == expected

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, alice, None, AclOperation.ANY,
                                  AclPermissionType.ANY)  # fmt: skip
    described = kafka_admin.describe_acls(everything, request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert set(described) == set(created)
    # MATCH: every pattern covering a group name (the prefixed one)
    covering = AclBindingFilter(ResourceType.GROUP, f"{prefix}-payments", ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert kafka_admin.describe_acls(covering, request_timeout=TIMEOUT_S).result(TIMEOUT_S) == [created[1]]

    # and the other way round: an ACL sparklog's administration adds is one Kafka's clients see
    bob = f"User:{unique('bob')}"
    sparklog_admin.create_acls([AclBinding.parse(ResourcePattern.parse("Topic", topic), bob, "*", "Write", "Allow")])
    bobs = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, bob, None, AclOperation.ANY,
                            AclPermissionType.ANY)  # fmt: skip
    assert kafka_admin.describe_acls(bobs, request_timeout=TIMEOUT_S).result(TIMEOUT_S) == [
        KAclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, bob, "*", AclOperation.WRITE,
                    AclPermissionType.ALLOW)
    ]  # fmt: skip

    # a filter may leave everything but the principal open; each filter answers what it matched
    allows = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, alice, None, AclOperation.ANY,
                              AclPermissionType.ALLOW)  # fmt: skip
    results = kafka_admin.delete_acls([allows, bobs], request_timeout=TIMEOUT_S)
    assert set(results[allows].result(TIMEOUT_S)) == {created[0], created[2], created[3]}
    assert len(results[bobs].result(TIMEOUT_S)) == 1
    assert set(sparklog_admin.describe_acls(AclFilter(principal=alice))) == {
        b for b in expected if b.permission is Permission.DENY
    }
    assert sparklog_admin.describe_acls(AclFilter(principal=bob)) == []
    kafka_admin.delete_acls([everything], request_timeout=TIMEOUT_S)[everything].result(TIMEOUT_S)
    assert sparklog_admin.describe_acls(AclFilter(principal=alice)) == []


def creation(**fields: Any) -> Any:
    """A CreateAcls creation: an Allow of Read on topic ``t`` to ``User:ann`` unless ``fields`` say otherwise."""
    base = {
        "resource_type": 2,
        "resource_name": "t",
        "resource_pattern_type": 3,
        "principal": "User:ann",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    return k.CreateAclsRequest.AclCreation(**{**base, **fields})


def acl_filter(request: Any = k.DeleteAclsRequest.DeleteAclsFilter, **fields: Any) -> Any:
    """A filter of ``request`` (a DeleteAcls filter, or a DescribeAcls request in version 3 when
    given its class): everything open unless ``fields`` say otherwise."""
    base = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    return request(**{**base, **fields})


@pytest.mark.slow
def test_bad_acls_are_refused_each_with_its_own_error(cluster: LocalCluster, sparklog_admin: Admin) -> None:
    ann = f"User:{unique('ann')}"
    topic = unique("t")
    bad = {
        "resource type DelegationToken (6) is not supported": creation(resource_type=6),
        "unknown resource type 42": creation(resource_type=42),
        "operation IdempotentWrite (12) is not supported": creation(resource_type=4, resource_name=CLUSTER_NAME,
                                                                    operation=12),
        "operation ANY (1) selects ACLs in a filter": creation(operation=1),
        "pattern type MATCH (2) selects ACLs in a filter": creation(resource_pattern_type=2),
        "the cluster resource is the literal name 'kafka-cluster'": creation(resource_type=4, resource_name="c"),
        "operation ClusterAction does not apply to topics": creation(operation=9),
        "must be written 'User:<name>'": creation(principal="ann"),
        "must be '*' or an IP address": creation(host="example.com"),
        "unknown permission type 0": creation(permission_type=0),
    }  # fmt: skip
    good = creation(resource_name=topic, principal=ann)
    with kafka_wire(cluster) as wire:
        response = wire.request(k.CreateAclsRequest[3](creations=[good, *bad.values()]))
        assert [r.error_code for r in response.results] == [NONE] + [INVALID_REQUEST] * len(bad)
        for message, result in zip(bad, response.results[1:], strict=True):
            assert message in result.error_message
        # the good one was stored beside the refused ones
        assert [str(b) for b in sparklog_admin.describe_acls(AclFilter(principal=ann))] == [
            f"Allow {ann} Read on topic {topic!r} from host *"
        ]

        filters = [
            acl_filter(resource_type_filter=99),  # no such number
            acl_filter(resource_type_filter=6),  # Kafka's, but no ACL here can have it: matches nothing
            acl_filter(operation=12),
            acl_filter(principal_filter="Group:ops"),  # sparklog's principals are users
            acl_filter(principal_filter=ann, resource_type_filter=2, resource_name_filter=topic,
                       pattern_type_filter=2),  # MATCH
        ]  # fmt: skip
        response = wire.request(k.DeleteAclsRequest[3](filters=filters))
        codes = [r.error_code for r in response.filter_results]
        assert codes == [INVALID_REQUEST, NONE, NONE, INVALID_REQUEST, NONE]
        assert "unknown resource type 99" in response.filter_results[0].error_message
        assert [len(r.matching_acls) for r in response.filter_results] == [0, 0, 0, 0, 1]
        removed = response.filter_results[4].matching_acls[0]
        assert (removed.resource_type, removed.resource_name, removed.pattern_type) == (2, topic, 3)
        assert (removed.principal, removed.host, removed.operation, removed.permission_type) == (ann, "*", 3, 3)
        assert sparklog_admin.describe_acls(AclFilter(principal=ann)) == []

        described = wire.request(acl_filter(k.DescribeAclsRequest[3], operation=14))  # DescribeTokens
        assert (described.error_code, described.resources) == (NONE, [])
        described = wire.request(acl_filter(k.DescribeAclsRequest[3], pattern_type_filter=7))
        assert described.error_code == INVALID_REQUEST and "unknown pattern type 7" in described.error_message


# ------------------------------------------------------------------------------------ SCRAM users
@pytest.mark.slow
def test_scram_users_set_described_and_removed_by_confluent_kafka(
    kafka_admin: AdminClient, sparklog_admin: Admin, credentials: CredentialStore
) -> None:
    user, password = unique("carol"), "s3cret-" + uuid.uuid4().hex
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    upserted = kafka_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, sha256, password.encode())])
    assert upserted[user].result(TIMEOUT_S) is None

    stored = credentials.versioned_credential(user)  # what a broker checks a SASL handshake against
    assert stored is not None and stored[0].matches(password) and not stored[0].matches("wrong")
    assert sparklog_admin.describe_scram_credentials([user]) == {user: 8192}

    described = kafka_admin.describe_user_scram_credentials([user], request_timeout=TIMEOUT_S)[user].result(TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    everyone = kafka_admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert user in everyone

    # set by sparklog's own administration, seen by Kafka's clients
    other = unique("dave")
    assert sparklog_admin.upsert_scram_credential(other, "pw-" + uuid.uuid4().hex, iterations=4096)
    described = kafka_admin.describe_user_scram_credentials([other], request_timeout=TIMEOUT_S)[other].result(TIMEOUT_S)
    assert described.scram_credential_infos[0].iterations == 4096

    ghost = unique("ghost")
    missing = kafka_error(kafka_admin.describe_user_scram_credentials([ghost], request_timeout=TIMEOUT_S)[ghost])
    assert missing.code() == KafkaError.RESOURCE_NOT_FOUND and "has no SCRAM credential" in missing.str()

    removed = kafka_admin.alter_user_scram_credentials(
        [
            UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialDeletion(other, ScramMechanism.SCRAM_SHA_256),
        ]
    )
    assert all(future.result(TIMEOUT_S) is None for future in removed.values())
    assert credentials.versioned_credential(user) is None
    assert sparklog_admin.describe_scram_credentials([user, other]) == {}


@pytest.mark.slow
def test_bad_scram_alterations_are_refused_each_with_its_own_error(
    kafka_admin: AdminClient, cluster: LocalCluster, credentials: CredentialStore
) -> None:
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100)
    twice, fine, weak, other_hash, ghost = (unique(n) for n in ("twice", "fine", "weak", "sha512", "ghost"))
    results = kafka_admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(fine, sha256, b"pw"),
            UserScramCredentialUpsertion(twice, sha256, b"pw"),
            UserScramCredentialDeletion(twice, ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialUpsertion(other_hash, sha512, b"pw"),
            UserScramCredentialUpsertion(weak, few, b"pw"),
            UserScramCredentialDeletion(ghost, ScramMechanism.SCRAM_SHA_256),
        ]
    )
    assert results[fine].result(TIMEOUT_S) is None  # the others' refusals leave it be
    refused = {user: kafka_error(results[user]) for user in (twice, other_hash, weak, ghost)}
    assert refused[twice].code() == KafkaError.DUPLICATE_RESOURCE
    assert refused[other_hash].code() == KafkaError.UNSUPPORTED_SASL_MECHANISM
    assert "SCRAM-SHA-512 is not supported" in refused[other_hash].str()
    assert refused[weak].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "iterations must be from 4096 to 16384" in refused[weak].str()
    assert refused[ghost].code() == KafkaError.RESOURCE_NOT_FOUND
    assert [credentials.versioned_credential(u) is not None for u in (fine, twice, other_hash, weak)] == [
        True, False, False, False
    ]  # fmt: skip

    # what a client computes itself: a salt and salted password of the wrong size, an empty name
    upsertion = k.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    salt = new_salt()
    entries = [
        upsertion(name=unique("short"), mechanism=1, iterations=4096, salt=b"x", salted_password=b"y" * 32),
        upsertion(name=unique("long"), mechanism=1, iterations=4096, salt=salt, salted_password=b"y" * 64),
        upsertion(name="", mechanism=1, iterations=4096, salt=salt, salted_password=salted_password("p", salt, 4096)),
        upsertion(name="a/b", mechanism=1, iterations=4096, salt=salt, salted_password=b"y" * 32),
        upsertion(name=unique("ok"), mechanism=1, iterations=4096, salt=salt, salted_password=b"y" * 32),
    ]
    with kafka_wire(cluster) as wire:
        response = wire.request(k.AlterUserScramCredentialsRequest[0](deletions=[], upsertions=entries))
    unacceptable = error_codes.UNACCEPTABLE_CREDENTIAL
    assert [r.error_code for r in response.results] == [unacceptable] * 4 + [NONE]
    assert "a salt must have 12 to 1024 bytes" in response.results[0].error_message
    assert "salted password has 32 bytes, got 64" in response.results[1].error_message
    assert "must not be empty" in response.results[2].error_message


# ------------------------------------------------------------------------------------ client quotas
def user_entity(name: str | None) -> Any:
    return [k.AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name=name)]


def quota_entry(entity: Any, **ops: float | None) -> Any:
    """An AlterClientQuotas entry: each key set to its value, or removed (None)."""
    op = k.AlterClientQuotasRequest.EntryData.OpData
    return k.AlterClientQuotasRequest.EntryData(
        entity=entity,
        ops=[op(key=key, value=value or 0.0, remove=value is None) for key, value in ops.items()],
    )


def described_quotas(wire: KafkaWire, *components: tuple[str, int, str | None], strict: bool = False) -> Any:
    component = k.DescribeClientQuotasRequest.ComponentData
    listed = [component(entity_type=t, match_type=m, match=name) for t, m, name in components]
    return wire.request(k.DescribeClientQuotasRequest[1](components=listed, strict=strict))


def quota_values(response: Any) -> dict[str | None, dict[str, float]]:
    assert response.error_code == NONE, response.error_message
    return {
        entry.entity[0].entity_name: {v.key: v.value for v in entry.values}
        for entry in response.entries
        if [e.entity_type for e in entry.entity] == ["user"]
    }


@pytest.mark.slow
def test_client_quotas_through_raw_requests(cluster: LocalCluster, sparklog_admin: Admin) -> None:
    erin, frank = unique("erin"), unique("frank")
    alter = k.AlterClientQuotasRequest[1]
    with kafka_wire(cluster) as wire:
        entries = [
            quota_entry(user_entity(erin), producer_byte_rate=1048576.0, request_rate=50.0),
            quota_entry(user_entity(frank), consumer_byte_rate=2048.0),
        ]
        response = wire.request(alter(entries=entries, validate_only=True))
        assert [r.error_code for r in response.entries] == [NONE, NONE]
        assert erin not in sparklog_admin.describe_client_quotas()  # validate_only wrote nothing

        response = wire.request(alter(entries=entries, validate_only=False))
        assert [r.error_code for r in response.entries] == [NONE, NONE]
        assert [r.entity[0].entity_name for r in response.entries] == [erin, frank]
        quotas = sparklog_admin.describe_client_quotas()  # through a broker's Flight actions
        assert quotas[erin] == Quota(producer_byte_rate=1048576, request_rate=50)
        assert quotas[frank] == Quota(consumer_byte_rate=2048)

        # one rate removed, another set: the third stays
        wire.request(alter(entries=[quota_entry(user_entity(erin), request_rate=None, consumer_byte_rate=10.0)],
                           validate_only=False))  # fmt: skip
        assert sparklog_admin.describe_client_quotas()[erin] == Quota(1048576, 10)

        listed = quota_values(described_quotas(wire, ("user", 0, erin)))
        assert listed == {erin: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 10.0}}
        assert {erin, frank} <= set(quota_values(described_quotas(wire, ("user", 2, None))))
        assert set(quota_values(described_quotas(wire))) >= {erin, frank}
        assert quota_values(described_quotas(wire, ("client-id", 2, None))) == {}  # sparklog's are per user

        # the default every user without its own has (set through sparklog, seen by Kafka's clients)
        sparklog_admin.set_client_quota("<default>", Quota(request_rate=1000))
        assert quota_values(described_quotas(wire, ("user", 1, None), strict=True)) == {None: {"request_rate": 1000.0}}
        wire.request(alter(entries=[quota_entry(user_entity(None), request_rate=None)], validate_only=False))
        assert "<default>" not in sparklog_admin.describe_client_quotas()

        # refusals, each entry its own
        refused = [
            quota_entry(user_entity(frank), request_percentage=200.0),
            quota_entry(user_entity(frank), controller_mutation_rate=5.0),
            quota_entry(user_entity(frank), producer_byte_rate=-1.0),
            quota_entry([k.AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name="c")],
                        producer_byte_rate=1.0),
            quota_entry(user_entity("a/b"), producer_byte_rate=1.0),
            quota_entry(user_entity(erin), producer_byte_rate=2.0),
        ]  # fmt: skip
        response = wire.request(alter(entries=refused, validate_only=False))
        # frank's entries name one entity three times: refused as one; erin's goes through
        codes = [(r.entity[0].entity_name, r.error_code) for r in response.entries]
        assert codes == [(frank, INVALID_REQUEST), ("c", INVALID_REQUEST), ("a/b", INVALID_REQUEST), (erin, NONE)]
        assert "listed more than once" in response.entries[0].error_message
        assert "per user" in response.entries[1].error_message
        assert sparklog_admin.describe_client_quotas()[frank] == Quota(consumer_byte_rate=2048)

        for ops, message in [
            ({"request_percentage": 200.0}, "request_percentage (a share of the broker's request threads' time)"),
            ({"producer_byte_rate": -1.0}, "producer_byte_rate must be a positive number"),
            ({"bogus": 1.0}, "unknown quota key 'bogus'; sparklog's user quotas are producer_byte_rate"),
        ]:
            response = wire.request(alter(entries=[quota_entry(user_entity(frank), **ops)], validate_only=False))
            assert response.entries[0].error_code == INVALID_REQUEST and message in response.entries[0].error_message

        bad_filter = described_quotas(wire, ("user", 0, None))
        assert bad_filter.error_code == INVALID_REQUEST and "names none" in bad_filter.error_message
        unknown_type = described_quotas(wire, ("tenant", 2, None))
        assert unknown_type.error_code == error_codes.UNSUPPORTED_VERSION


# ------------------------------------------------------------------------------------ log dirs
@pytest.mark.slow
def test_each_broker_describes_its_log_dir(cluster: LocalCluster, kafka_admin: AdminClient) -> None:
    from kafka.admin import KafkaAdminClient

    name = unique("logdirs")
    kafka_admin.create_topics([NewTopic(name, 2, 2)], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all", "log_level": 3})
    for i in range(20):
        producer.produce(name, value=b"x" * 1000, partition=0, key=str(i).encode())
    assert producer.flush(TIMEOUT_S) == 0

    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    data_dirs = {broker_id: str(broker.data_dir.resolve()) for broker_id, broker in cluster.brokers.items()}

    def sizes() -> dict[int, dict[int, int]]:
        """Each broker's partitions of the topic -> their bytes, from the one log dir it has
        (checked: its data dir, on a volume with room)."""
        found: dict[int, dict[int, int]] = {}
        for answer in client.describe_log_dirs([name]):  # every broker asked
            [log_dir] = answer["log_dirs"]
            assert log_dir["log_dir"] == data_dirs[answer["broker"]]
            assert log_dir["error_code"] == NONE and 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
            [topic] = log_dir["topics"]
            assert topic["name"] == name
            found[answer["broker"]] = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        return found

    try:
        wait_for(lambda: all(s.get(0, 0) > 20_000 for s in sizes().values()), TIMEOUT_S, "both replicas of p0")
        found = sizes()
        assert set(found) == {1, 2} and all(set(partitions) == {0, 1} for partitions in found.values())
        assert all(partitions[1] < 1_000 for partitions in found.values())  # nothing was written to partition 1
    finally:
        client.close()
    kafka_admin.delete_topics([name], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)


# ------------------------------------------------------------------------------------ without a cluster
def test_acl_numbers_both_ways() -> None:
    numbers = [
        (security_admin.RESOURCE_TYPES, {"Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5}),
        (security_admin.PATTERN_TYPES, {"literal": 3, "prefixed": 4}),
        (security_admin.PERMISSIONS, {"Deny": 2, "Allow": 3}),
        (
            security_admin.OPERATIONS,
            {"All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
             "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11},
        ),
    ]  # fmt: skip
    for table, expected in numbers:
        assert {member.value: number for member, number in table.items()} == expected  # every sparklog value

    for operation in Operation:  # a binding through Kafka's numbers and back, every operation
        resource_type = next(t for t in SparklogResourceType if operation in t.operations)
        name = CLUSTER_NAME if resource_type is SparklogResourceType.CLUSTER else "x"
        for pattern_type in PatternType if resource_type is not SparklogResourceType.CLUSTER else [PatternType.LITERAL]:
            for permission in Permission:
                binding = AclBinding(ResourcePattern(resource_type, name, pattern_type), "User:u", "::1", operation,
                                     permission)  # fmt: skip
                numbers_of = {
                    **security_admin.pattern_numbers(binding.pattern),
                    **security_admin.entry_numbers(binding),
                }
                numbers_of["resource_pattern_type"] = numbers_of.pop("pattern_type")
                assert security_admin.binding_of(k.CreateAclsRequest.AclCreation(**numbers_of)) == binding
                as_filter = acl_filter(
                    resource_type_filter=numbers_of["resource_type"],
                    resource_name_filter=name,
                    pattern_type_filter=numbers_of["resource_pattern_type"],
                    principal_filter="User:u",
                    host_filter="::1",
                    operation=numbers_of["operation"],
                    permission_type=numbers_of["permission_type"],
                )
                assert security_admin.filters_of(as_filter) == [AclFilter.of(binding)]

    assert security_admin.filters_of(acl_filter()) == [AclFilter()]  # ANY everywhere: every ACL
    # Kafka's values sparklog has no ACLs of: refused in an ACL, matching nothing in a filter
    for absent in ({"resource_type": 6}, {"resource_type": 7}, {"operation": 12}, {"operation": 13},
                   {"operation": 14}, {"operation": 15}):  # fmt: skip
        with pytest.raises(InvalidRequest, match="is not supported"):
            security_admin.binding_of(creation(**absent))
        key = "resource_type_filter" if "resource_type" in absent else "operation"
        assert security_admin.filters_of(acl_filter(**{key: next(iter(absent.values()))})) == []
    # MATCH with any resource type: one filter per type whose resources can have the name
    matched = security_admin.filters_of(acl_filter(resource_name_filter="orders", pattern_type_filter=2))
    assert [f.resource_type for f in matched] == [
        SparklogResourceType.TOPIC, SparklogResourceType.GROUP, SparklogResourceType.TRANSACTIONAL_ID
    ]  # fmt: skip
    assert all(f.match and f.name == "orders" for f in matched)
    # MATCH without a name is any pattern, as in Kafka
    assert security_admin.filters_of(acl_filter(pattern_type_filter=2)) == [AclFilter()]
    for bad, message in [
        ({"resource_type": 1}, "resource type ANY (1) selects ACLs in a filter"),
        ({"resource_pattern_type": 1}, "pattern type ANY (1) selects ACLs in a filter"),
        ({"permission_type": 1}, "permission type ANY (1)"),
        ({"operation": 0}, "unknown operation 0"),
    ]:
        with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
            security_admin.binding_of(creation(**bad))
    with pytest.raises(InvalidRequest, match="unknown permission type 9; use one of Deny"):
        security_admin.filters_of(acl_filter(permission_type=9))


class FakeBroker:
    """The calls the security administration handlers make, answering as a broker would."""

    broker_id = 1
    stored = AclBinding.parse(ResourcePattern.parse("Topic", "t"), "User:ann", "*", "Read", "Allow")

    def scram_iterations(self, users: Sequence[str] | None) -> Mapping[str, int]:
        return {u: 4096 for u in (users if users is not None else ["ann"]) if u != "ghost"}

    def upsert_scram_credential(self, *_: Any) -> bool:
        return True

    def delete_scram_credential(self, user: str) -> bool:
        return user != "ghost"

    def describe_acls(self, acl_filter: AclFilter) -> Sequence[AclBinding]:
        return [self.stored] if acl_filter.matches(self.stored) else []

    def create_acls(self, bindings: Sequence[AclBinding]) -> None: ...

    def delete_acls(self, filters: Sequence[AclFilter]) -> Sequence[AclBinding]:
        return [self.stored] if any(f.matches(self.stored) for f in filters) else []

    def client_quotas(self) -> Mapping[str | None, Mapping[str, float]]:
        return {None: {"request_rate": 10.0}, "ann": {"producer_byte_rate": 1024.0}}

    def alter_client_quota(self, *_: Any) -> None: ...

    def log_dir(self) -> LogDir:
        return LogDir("/data/broker-1", 100, 50, [ReplicaSize("t", 0, 10, 0), ReplicaSize("u", 3, 0, 2)])


def _requests() -> dict[str, Any]:
    """A request of each API as a function of its version: every kind of entry, good and bad."""
    upsertion = k.AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    deletion = k.AlterUserScramCredentialsRequest.ScramCredentialDeletion
    component = k.DescribeClientQuotasRequest.ComponentData
    dirs = k.DescribeLogDirsRequest.DescribableLogDirTopic
    return {
        "DescribeAcls": lambda v: acl_filter(k.DescribeAclsRequest[v]),
        "CreateAcls": lambda v: k.CreateAclsRequest[v](creations=[creation(), creation(resource_type=6)]),
        "DeleteAcls": lambda v: k.DeleteAclsRequest[v](filters=[acl_filter(), acl_filter(operation=99)]),
        "DescribeUserScramCredentials": lambda v: k.DescribeUserScramCredentialsRequest[v](
            users=[k.DescribeUserScramCredentialsRequest.UserName(name=n) for n in ("ann", "ghost", "x", "x")]
        ),
        "AlterUserScramCredentials": lambda v: k.AlterUserScramCredentialsRequest[v](
            deletions=[deletion(name="ghost", mechanism=1), deletion(name="ann", mechanism=2)],
            upsertions=[upsertion(name="bob", mechanism=1, iterations=4096, salt=b"s" * 12, salted_password=b"p" * 32)],
        ),
        "DescribeClientQuotas": lambda v: k.DescribeClientQuotasRequest[v](
            components=[component(entity_type="user", match_type=2, match=None)], strict=False
        ),
        "AlterClientQuotas": lambda v: k.AlterClientQuotasRequest[v](
            entries=[
                quota_entry(user_entity("ann"), request_rate=5.0),
                quota_entry(user_entity(None), request_rate=None),
            ],
            validate_only=False,
        ),
        "DescribeLogDirs": lambda v: k.DescribeLogDirsRequest[v](topics=[dirs(topic="t", partitions=[0])]),
    }


SECURITY_APIS = list(_requests())


def _handler(api: str) -> Any:
    return next(h for h in HANDLERS.values() if h.spec.name == f"{api}Request")  # served


def _answer(api: str, version: int, may: ApiPermissions | None = None) -> Any:
    """The handler's response to :func:`_requests`'s request, encoded and decoded as a client
    reads it."""
    handler = _handler(api)
    request = _requests()[api](version)
    request = handler.spec.request.decode(request.encode(), version=version)  # as the listener gets it
    ctx = RequestContext(version, 7, "test", ("127.0.0.1", 1), FakeBroker(), ListenerState(()), lambda: False)  # type: ignore[arg-type]
    if may is not None:
        ctx.may = may
    encoded = bytes(handler.handle(request, ctx).encode())
    decoded = handler.spec.response.decode(encoded, version=version)
    assert bytes(decoded.encode()) == encoded, f"{api} v{version}"
    return decoded


@pytest.mark.parametrize("api", SECURITY_APIS)
def test_every_served_version_encodes(api: str) -> None:
    spec = _handler(api).spec
    answers = [_answer(api, version) for version in range(spec.min_version, spec.max_version + 1)]
    if api == "DescribeUserScramCredentials":
        assert [(r.user, r.error_code) for r in answers[-1].results] == [
            ("ann", NONE), ("ghost", error_codes.RESOURCE_NOT_FOUND), ("x", error_codes.DUPLICATE_RESOURCE)
        ]  # fmt: skip
    elif api == "AlterUserScramCredentials":
        assert [(r.user, r.error_code) for r in answers[-1].results] == [
            ("ghost", error_codes.RESOURCE_NOT_FOUND), ("ann", error_codes.UNSUPPORTED_SASL_MECHANISM), ("bob", NONE)
        ]  # fmt: skip
    elif api == "DescribeLogDirs":
        [log_dir] = answers[-1].results
        assert (log_dir.log_dir, [t.name for t in log_dir.topics], log_dir.total_bytes) == (
            "/data/broker-1",
            ["t"],
            100,
        )


class Refuses:
    """An authorizer that refuses everything."""

    def authorize(self, *_: Any) -> bool:
        return False


@pytest.mark.parametrize("api", SECURITY_APIS)
def test_a_principal_without_the_cluster_acl_is_refused_where_kafka_says_it(api: str) -> None:
    spec = _handler(api).spec
    may = ApiPermissions(KAFKA_APIS[spec.key], Refuses(), "User:mallory", "10.0.0.9")
    answer = _answer(api, spec.max_version, may)
    refused = error_codes.CLUSTER_AUTHORIZATION_FAILED
    operation = (
        "DescribeConfigs" if api == "DescribeClientQuotas" else "AlterConfigs" if api == "AlterClientQuotas" else None
    )
    per_entry = {
        "CreateAcls": "results",
        "DeleteAcls": "filter_results",
        "AlterUserScramCredentials": "results",
        "AlterClientQuotas": "entries",
    }
    if api in per_entry:
        entries = getattr(answer, per_entry[api])
        assert entries and all(e.error_code == refused for e in entries)
        message = entries[0].error_message
    else:
        assert answer.error_code == refused
        message = getattr(answer, "error_message", None) or ""
        if api == "DescribeClientQuotas":
            assert answer.entries is None
    if api != "DescribeLogDirs":  # whose response has no message
        assert message.startswith("User:mallory is not authorized to do ")
        assert operation is None or operation in message
