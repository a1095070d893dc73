"""Every Kafka API against a user with few ACLs: the Kafka listener's authorization holes hunted API
by API, the way a hostile tenant of a shared cluster would.

On a secured one-broker cluster (SASL_SSL, SCRAM, ACLs) the user may Read and Write ``sw-own`` and
read its group ``sw-own-group``, only Write ``sw-drop``, and do nothing on ``sw-secret`` or the
group ``sw-secret-group``. The admin fills ``sw-drop`` and ``sw-secret`` with records carrying a
marker and commits the secret group's offsets on ``sw-secret``. Then each served API is sent,
logged in as the user, naming what it may and what it may not touch. Asserted for every answer:
no byte of it holds the marker, a refusal is Kafka's error for the resource (topic, group,
cluster), and what the ACLs allow is not refused; afterwards nothing the admin owns changed (ACLs,
users, topics, records, the secret group's offsets). A new API served without a case here fails
the coverage test."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kafka_wire import KafkaWire, kafka_batch
from sparklog.fuzz.kafka_wire import client_tls, decode_response
from sparklog.kafka.handlers import HANDLERS
from sparklog.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(300)

USER, PASSWORD = "sweeper", "sweeper-secret"
OWN, DROP, SECRET = "sw-own", "sw-drop", "sw-secret"
OWN_GROUP, SECRET_GROUP = "sw-own-group", "sw-secret-group"
MARKER = b"TOPSECRET-sweep"
NONE, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 0, 29, 30, 31


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-sweep"), brokers=1, secure=True) as running:
        yield running


def _wait(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=60)


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> AdminClient:
    """The admin's client, once the cluster holds the topics, records, offsets, user and ACLs."""
    config = cluster.kafka_client_config()
    client = AdminClient(config)
    _wait(client.create_topics([NewTopic(t, 2, 1) for t in (OWN, DROP, SECRET)]))
    producer = KafkaProducer({**config, "partitioner": "murmur2_random"})
    for topic in (DROP, SECRET):
        for i in range(20):
            producer.produce(topic, key=b"k%d" % i, value=MARKER + b":%s:%d" % (topic.encode(), i))
    assert producer.flush(30) == 0
    consumer = KafkaConsumer({**config, "group.id": SECRET_GROUP, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(SECRET, 0, 7), TopicPartition(SECRET, 1, 3)], asynchronous=False)
    consumer.close()
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    _wait(client.alter_user_scram_credentials([UserScramCredentialUpsertion(USER, info, PASSWORD.encode())]))
    grants = [
        (ResourceType.TOPIC, OWN, AclOperation.READ),
        (ResourceType.TOPIC, OWN, AclOperation.WRITE),
        (ResourceType.TOPIC, DROP, AclOperation.WRITE),
        (ResourceType.GROUP, OWN_GROUP, AclOperation.READ),
    ]
    bindings = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{USER}", "*", op, AclPermissionType.ALLOW)
        for kind, name, op in grants
    ]
    _wait(client.create_acls(bindings))
    return client


# ----------------------------------------------------------------------------------- the sweep
Check = Callable[[Any], None]


def _errors(items: list[Any], field: str = "error_code") -> list[int]:
    return [getattr(item, field) for item in items]


def _partitions(response: Any, topics_field: str, partitions_field: str) -> dict[str, list[int]]:
    return {
        (getattr(t, "name", None) or getattr(t, "topic", "")): _errors(getattr(t, partitions_field))
        for t in getattr(response, topics_field)
    }


def _produce(topic: str) -> Any:
    T = ProduceRequest.TopicProduceData
    data = [T.PartitionProduceData(index=0, records=kafka_batch([b"from-the-sweep"]))]
    return ProduceRequest[9](
        transactional_id=None, acks=1, timeout_ms=5000, topic_data=[T(name=topic, partition_data=data)]
    )


def _fetch(topic: str) -> Any:
    T = FetchRequest.FetchTopic
    partitions = [T.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)]
    return FetchRequest[12](
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[T(topic=topic, partitions=partitions)],
        forgotten_topics_data=[],
        rack_id="",
    )


def _list_offsets(topic: str) -> Any:
    T = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest[6](
        topics=[T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=-1)])]
    )


def _epochs(topic: str) -> Any:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    part = T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)
    return OffsetForLeaderEpochRequest[4](replica_id=-1, topics=[T(topic=topic, partitions=[part])])


def _commit(group: str, topic: str) -> Any:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    part = T.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
    return OffsetCommitRequest[9](group_id=group, topics=[T(name=topic, partitions=[part])])


def _config_resource(kind: int, name: str) -> Any:
    return DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=kind, resource_name=name, configuration_keys=None
    )


def _alter_config(kind: int, name: str) -> Any:
    R = AlterConfigsRequest.AlterConfigsResource
    return AlterConfigsRequest[2](
        resources=[
            R(resource_type=kind, resource_name=name, configs=[R.AlterableConfig(name="retention.ms", value="1")])
        ]
    )


def _incremental_alter(kind: int, name: str) -> Any:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    config = R.AlterableConfig(name="retention.ms", config_operation=0, value="1")
    return IncrementalAlterConfigsRequest[1](resources=[R(resource_type=kind, resource_name=name, configs=[config])])


def _by_topic(expected: dict[str, int], topics: str = "responses", partitions: str = "partitions") -> Check:
    def check(response: Any) -> None:
        found = _partitions(response, topics, partitions)
        for topic, code in expected.items():
            assert found[topic] and set(found[topic]) == {code}, (topic, found[topic])

    return check


def _metadata_listing(response: Any) -> None:
    names = {t.name for t in response.topics}
    assert {OWN, DROP} <= names and SECRET not in names, names


def _single(field: str, code: int) -> Check:
    def check(response: Any) -> None:
        assert getattr(response, field) == code, response

    return check


def _each(items: str, code: int, field: str = "error_code") -> Check:
    def check(response: Any) -> None:
        found = _errors(getattr(response, items), field)
        assert found and set(found) == {code}, (items, found)

    return check


def _offset_fetch_all(response: Any) -> None:
    (group,) = response.groups
    assert group.error_code == NONE and all(t.name != SECRET for t in group.topics), group


def _groups_listed(response: Any) -> None:
    listed = {g.group_id for g in response.groups}
    assert SECRET_GROUP not in listed, listed


def _log_dirs_refused(response: Any) -> None:
    assert response.error_code == CLUSTER_DENIED and not response.results, response


def _cluster_described(response: Any) -> None:
    assert response.error_code == NONE and response.brokers


def _coordinators(expected: dict[str, int]) -> Check:
    def check(response: Any) -> None:
        found = {c.key: c.error_code for c in response.coordinators}
        assert found == expected, found

    return check


def _produced_id(response: Any) -> None:
    assert response.error_code == NONE and response.producer_id >= 0


def _topics_result(expected: dict[str, int], items: str = "topics") -> Check:
    def check(response: Any) -> None:
        found = {t.name: t.error_code for t in getattr(response, items)}
        assert found == expected, found

    return check


def _configs(expected: list[int], items: str = "results") -> Check:
    def check(response: Any) -> None:
        assert _errors(getattr(response, items)) == expected, getattr(response, items)

    return check


TOPIC_CONFIG, BROKER_CONFIG = 2, 4
LITERAL, ALLOW, READ_OP, TOPIC_RESOURCE = 3, 3, 3, 2

# (API key, what the case tries, the request, the check of its answer)
CASES: list[tuple[int, str, Any, Check]] = [
    (
        0,
        "produce to own, drop box and secret",
        None,
        _by_topic({OWN: NONE, DROP: NONE, SECRET: TOPIC_DENIED}, "responses", "partition_responses"),
    ),
    (1, "fetch own, drop box and secret", None, _by_topic({OWN: NONE, DROP: TOPIC_DENIED, SECRET: TOPIC_DENIED})),
    (2, "list offsets", None, _by_topic({OWN: NONE, DROP: NONE, SECRET: TOPIC_DENIED}, "topics")),
    (3, "list every topic", MetadataRequest[12](topics=None), _metadata_listing),
    (
        3,
        "name the secret topic",
        MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=SECRET)]),
        _topics_result({SECRET: TOPIC_DENIED}),
    ),
    (
        3,
        "auto-create a topic",
        MetadataRequest[12](
            topics=[MetadataRequest.MetadataRequestTopic(name="sw-new")], allow_auto_topic_creation=True
        ),
        _topics_result({"sw-new": TOPIC_DENIED}),
    ),
    (8, "commit own group on own topic", _commit(OWN_GROUP, OWN), _by_topic({OWN: NONE}, "topics")),
    (
        8,
        "commit own group on the secret topic",
        _commit(OWN_GROUP, SECRET),
        _by_topic({SECRET: TOPIC_DENIED}, "topics"),
    ),
    (8, "commit the secret group", _commit(SECRET_GROUP, OWN), _by_topic({OWN: GROUP_DENIED}, "topics")),
    (
        9,
        "every offset of own group",
        OffsetFetchRequest[8](groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=OWN_GROUP, topics=None)]),
        _offset_fetch_all,
    ),
    (
        9,
        "offsets of the secret group",
        OffsetFetchRequest[8](groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=SECRET_GROUP, topics=None)]),
        _each("groups", GROUP_DENIED),
    ),
    (
        10,
        "find both groups' coordinator",
        FindCoordinatorRequest[4](key_type=0, coordinator_keys=[OWN_GROUP, SECRET_GROUP]),
        _coordinators({OWN_GROUP: NONE, SECRET_GROUP: GROUP_DENIED}),
    ),
    (
        11,
        "join the secret group",
        JoinGroupRequest[9](
            group_id=SECRET_GROUP,
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        ),
        _single("error_code", GROUP_DENIED),
    ),
    (
        12,
        "heartbeat in the secret group",
        HeartbeatRequest[4](group_id=SECRET_GROUP, generation_id=1, member_id="m"),
        _single("error_code", GROUP_DENIED),
    ),
    (
        13,
        "leave the secret group",
        LeaveGroupRequest[5](group_id=SECRET_GROUP, members=[LeaveGroupRequest.MemberIdentity(member_id="m")]),
        _single("error_code", GROUP_DENIED),
    ),
    (
        14,
        "sync in the secret group",
        SyncGroupRequest[5](
            group_id=SECRET_GROUP,
            generation_id=1,
            member_id="m",
            protocol_type="consumer",
            protocol_name="range",
            assignments=[],
        ),
        _single("error_code", GROUP_DENIED),
    ),
    (15, "describe the secret group", DescribeGroupsRequest[5](groups=[SECRET_GROUP]), _each("groups", GROUP_DENIED)),
    (16, "list groups", ListGroupsRequest[4](), _groups_listed),
    (
        19,
        "create a topic",
        CreateTopicsRequest[7](
            topics=[CreateTopicsRequest.CreatableTopic(name="sw-created", num_partitions=1, replication_factor=1)],
            timeout_ms=5000,
        ),
        _topics_result({"sw-created": TOPIC_DENIED}),
    ),
    (
        20,
        "delete own and secret topics",
        DeleteTopicsRequest[5](topic_names=[OWN, SECRET], timeout_ms=5000),
        _topics_result({OWN: TOPIC_DENIED, SECRET: TOPIC_DENIED}, "responses"),
    ),
    (
        22,
        "an idempotent producer id",
        InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1),
        _produced_id,
    ),
    (23, "epochs of own and secret topics", None, _by_topic({OWN: NONE, SECRET: TOPIC_DENIED}, "topics")),
    (
        29,
        "describe ACLs",
        DescribeAclsRequest[3](
            resource_type_filter=1,
            pattern_type_filter=1,
            operation=1,
            permission_type=1,
            resource_name_filter=None,
            principal_filter=None,
            host_filter=None,
        ),
        _single("error_code", CLUSTER_DENIED),
    ),
    (
        30,
        "grant itself Read on the secret topic",
        CreateAclsRequest[3](
            creations=[
                CreateAclsRequest.AclCreation(
                    resource_type=TOPIC_RESOURCE,
                    resource_name=SECRET,
                    resource_pattern_type=LITERAL,
                    principal=f"User:{USER}",
                    host="*",
                    operation=READ_OP,
                    permission_type=ALLOW,
                )
            ]
        ),
        _each("results", CLUSTER_DENIED),
    ),
    (
        31,
        "delete every ACL",
        DeleteAclsRequest[3](
            filters=[
                DeleteAclsRequest.DeleteAclsFilter(
                    resource_type_filter=1,
                    resource_name_filter=None,
                    pattern_type_filter=1,
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                )
            ]
        ),
        _each("filter_results", CLUSTER_DENIED),
    ),
    (
        32,
        "describe own, secret and broker configs",
        DescribeConfigsRequest[4](
            resources=[
                _config_resource(TOPIC_CONFIG, OWN),
                _config_resource(TOPIC_CONFIG, SECRET),
                _config_resource(BROKER_CONFIG, "1"),
            ]
        ),
        _configs([TOPIC_DENIED, TOPIC_DENIED, CLUSTER_DENIED]),
    ),
    (
        33,
        "alter the secret topic's configs",
        _alter_config(TOPIC_CONFIG, SECRET),
        _configs([TOPIC_DENIED], "responses"),
    ),
    (35, "describe log dirs", DescribeLogDirsRequest[4](topics=None), _log_dirs_refused),
    (
        37,
        "add partitions to own topic",
        CreatePartitionsRequest[3](
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=OWN, count=3)], timeout_ms=5000
        ),
        _topics_result({OWN: TOPIC_DENIED}, "results"),
    ),
    (
        42,
        "delete own and secret groups",
        DeleteGroupsRequest[2](groups_names=[OWN_GROUP, SECRET_GROUP]),
        _each("results", GROUP_DENIED),
    ),
    (44, "alter own topic's configs", _incremental_alter(TOPIC_CONFIG, OWN), _configs([TOPIC_DENIED], "responses")),
    (
        47,
        "delete the secret group's offsets",
        OffsetDeleteRequest[0](
            group_id=SECRET_GROUP,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=SECRET,
                    partitions=[
                        OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)
                    ],
                )
            ],
        ),
        _single("error_code", GROUP_DENIED),
    ),
    (
        48,
        "describe quotas",
        DescribeClientQuotasRequest[1](components=[], strict=False),
        _single("error_code", CLUSTER_DENIED),
    ),
    (
        49,
        "lift its own quota",
        AlterClientQuotasRequest[1](
            entries=[
                AlterClientQuotasRequest.EntryData(
                    entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name=USER)],
                    ops=[AlterClientQuotasRequest.EntryData.OpData(key="producer_byte_rate", value=1e12, remove=False)],
                )
            ]
        ),
        _each("entries", CLUSTER_DENIED),
    ),
    (50, "describe users", DescribeUserScramCredentialsRequest[0](users=None), _single("error_code", CLUSTER_DENIED)),
    (
        51,
        "change the admin's password",
        AlterUserScramCredentialsRequest[0](
            upsertions=[
                AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                    name="admin", mechanism=1, iterations=8192, salt=b"s" * 32, salted_password=b"p" * 32
                )
            ],
            deletions=[],
        ),
        _each("results", CLUSTER_DENIED),
    ),
    (60, "describe the cluster", DescribeClusterRequest[1](endpoint_type=1), _cluster_described),
]
LOGIN_APIS = {ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY}


def _many_topics(build: Callable[[str], Any], topics: list[str]) -> Any:
    """One request naming several topics: ``build``'s per-topic requests merged."""
    first = build(topics[0])
    field = next(f for f in ("topic_data", "topics") if hasattr(first, f))
    merged = [item for topic in topics for item in getattr(build(topic), field)]
    setattr(first, field, merged)
    return first


PER_TOPIC: dict[int, tuple[Callable[[str], Any], list[str]]] = {
    0: (_produce, [OWN, DROP, SECRET]),
    1: (_fetch, [OWN, DROP, SECRET]),
    2: (_list_offsets, [OWN, DROP, SECRET]),
    23: (_epochs, [OWN, SECRET]),
}


def test_every_served_api_has_a_case() -> None:
    swept = {key for key, *_ in CASES} | LOGIN_APIS  # the login APIs: tests/kafka/test_kafka_security.py
    assert set(HANDLERS) <= swept, sorted(set(HANDLERS) - swept)


@pytest.mark.parametrize("key, what, request_, check", CASES, ids=[f"{k}-{w}" for k, w, *_ in CASES])
def test_a_user_gets_what_its_acls_allow_and_no_more(
    cluster: LocalCluster, admin: AdminClient, key: int, what: str, request_: Any, check: Check
) -> None:
    if request_ is None:
        build, topics = PER_TOPIC[key]
        request_ = _many_topics(build, topics)
    assert cluster.security is not None and cluster.brokers[1].kafka_port is not None
    tls = client_tls(str(cluster.security.ca.certificate))
    with KafkaWire("127.0.0.1", cluster.brokers[1].kafka_port, timeout=15, tls=tls) as wire:
        assert wire.login(USER, PASSWORD).response.error_code == NONE
        version = request_.API_VERSION
        wire.send(request_)
        raw = wire.receive()
        assert isinstance(raw, bytes), f"{what}: {raw}"
        assert MARKER not in raw, f"{what}: the answer carries records the user may not read"
        answer = decode_response(request_.API_KEY, version, raw, wire.correlation_id)
        assert answer.response is not None, answer.problem
        check(answer.response)


def test_nothing_the_admin_owns_changed(cluster: LocalCluster, admin: AdminClient) -> None:
    """After the sweep (this module's tests run in order): the user's ACLs are the four it was
    given, the secret topic still has its records and the secret group its offsets, no topic was
    created or deleted, and the admin's password still works."""
    acls = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
    ).result(timeout=30)
    assert len(acls) == 4 and {a.principal for a in acls} == {f"User:{USER}"}, acls
    topics = set(admin.list_topics(timeout=20).topics)
    assert {OWN, DROP, SECRET} <= topics and not {"sw-new", "sw-created"} & topics
    config = cluster.kafka_client_config()
    consumer = KafkaConsumer({**config, "group.id": SECRET_GROUP, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(SECRET, 0), TopicPartition(SECRET, 1)], timeout=20)
        assert [c.offset for c in committed] == [7, 3]
        consumer.assign([TopicPartition(SECRET, p, 0) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
        assert len(got) == 20 and all(v.startswith(MARKER) for v in got)
    finally:
        consumer.close()  # (it logged in as the admin: the admin's password is unchanged)
