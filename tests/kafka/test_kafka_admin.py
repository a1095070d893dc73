"""Topic administration through the Kafka listener (CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs, AlterConfigs, DescribeCluster), by Kafka's own clients
against a real three-broker cluster: confluent-kafka's ``AdminClient`` (librdkafka), kafka-python's
``KafkaAdminClient``, and Kafka's Java tools ``kafka-topics`` and ``kafka-configs`` (their main
classes, from the jars ``benchmarks/fetch_kafka.sh`` fetches).

What they create, alter and delete is what sparklog's own ``Admin`` then sees (the same ZooKeeper
znodes, the same checks); sparklog's refusals reach the Kafka client as Kafka's error codes with
sparklog's message; ``validate_only`` changes nothing. A fake broker checks that every served
version of every response encodes.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from sparklog import Admin
from sparklog.coordination.cluster import TopicMetadata
from sparklog.errors import KafkaNotInstalled, TopicExists, UnknownTopic
from sparklog.kafka.handlers import HANDLERS
from sparklog.local_cluster import LocalCluster
from waiting import wait_for

TIMEOUT_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-admin"), brokers=3) as running:
        yield running


@pytest.fixture(scope="module")
def kafka_admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers, "log_level": 3})


@pytest.fixture(scope="module")
def sparklog_admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        yield admin


def kafka_error(future: Any) -> KafkaError:
    """The Kafka error a client's future ended with (it must end with one)."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error


def create(admin: AdminClient, topic: NewTopic, validate_only: bool = False) -> Any:
    return admin.create_topics([topic], operation_timeout=TIMEOUT_S, validate_only=validate_only)[topic.topic]


def topic_configs(admin: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs: dict[str, Any] = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    return configs


def sparklog_sees(admin: Admin, name: str, check: Callable[[TopicMetadata | None], bool], what: str) -> None:
    """Wait until sparklog's own ``Admin`` sees topic ``name`` (None: no such topic) as ``check``
    wants: it asks a broker, whose view follows ZooKeeper by watch, an instant behind a change."""

    def seen() -> bool:
        try:
            meta: TopicMetadata | None = admin.topic(name)
        except UnknownTopic:
            meta = None
        return check(meta)

    wait_for(seen, TIMEOUT_S, f"sparklog's Admin to see {what}")


def partition_count(admin: AdminClient, name: str) -> int | None:
    """The topic's partition count as the Metadata of whichever broker librdkafka asks says (None:
    not listed)."""
    topics = admin.list_topics(timeout=TIMEOUT_S).topics
    return len(topics[name].partitions) if name in topics else None


# ------------------------------------------------------------------------------------ confluent-kafka
@pytest.mark.slow
def test_a_topic_created_altered_grown_and_deleted_by_confluent_kafka(
    kafka_admin: AdminClient, sparklog_admin: Admin
) -> None:
    name = unique("lifecycle")
    assert create(kafka_admin, NewTopic(name, 3, 2, config={"retention.ms": "3600000"})).result(TIMEOUT_S) is None

    listed = kafka_admin.list_topics(timeout=TIMEOUT_S).topics[name]
    assert sorted(listed.partitions) == [0, 1, 2]
    assert all(len(p.replicas) == 2 and p.leader in p.replicas for p in listed.partitions.values())

    configs = topic_configs(kafka_admin, name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].is_default

    meta = sparklog_admin.topic(name)  # sparklog's own view: the same topic
    assert meta.partitions == 3 and all(len(r) == 2 for r in meta.replicas)
    assert meta.configs["retention.ms"] == "3600000"
    assert meta.configs["partitioner"] == "murmur2"  # created as sparklog creates topics

    changes = [
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
    ]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=changes)
    assert kafka_admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S) is None
    configs = topic_configs(kafka_admin, name)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == ("7200000", "compact")
    sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.configs["retention.ms"] == "7200000", "7200000")

    deleted = [ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=deleted)
    assert kafka_admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S) is None
    assert topic_configs(kafka_admin, name)["cleanup.policy"].is_default
    sparklog_sees(sparklog_admin, name, lambda m: m is not None and "cleanup.policy" not in m.configs, "no policy")

    grown = kafka_admin.create_partitions([NewPartitions(name, 5)], operation_timeout=TIMEOUT_S)
    assert grown[name].result(TIMEOUT_S) is None
    sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.partitions == 5, "5 partitions")
    wait_for(lambda: partition_count(kafka_admin, name) == 5, TIMEOUT_S, "the Kafka listeners to list 5 partitions")

    done = kafka_admin.delete_topics([name], operation_timeout=TIMEOUT_S)
    assert done[name].result(TIMEOUT_S) is None
    assert name not in kafka_admin.list_topics(timeout=TIMEOUT_S).topics
    assert name not in sparklog_admin.list_topics()
    sparklog_sees(sparklog_admin, name, lambda m: m is None, "the topic gone")


@pytest.mark.slow
def test_sparklog_refusals_are_kafka_errors_with_their_message(kafka_admin: AdminClient, sparklog_admin: Admin) -> None:
    name = unique("refusals")
    create(kafka_admin, NewTopic(name, 2, 1)).result(TIMEOUT_S)

    again = kafka_error(create(kafka_admin, NewTopic(name, 1, 1)))
    assert again.code() == KafkaError.TOPIC_ALREADY_EXISTS and "already exists" in again.str()

    bad = kafka_error(create(kafka_admin, NewTopic("no/slashes", 1, 1)))
    assert bad.code() == KafkaError.TOPIC_EXCEPTION and "'/'" in bad.str()
    internal = kafka_error(create(kafka_admin, NewTopic("__sparklog_mine", 1, 1)))
    assert internal.code() == KafkaError.TOPIC_EXCEPTION and "reserved" in internal.str()

    too_many = kafka_error(create(kafka_admin, NewTopic(unique("rf"), 1, 4)))
    assert too_many.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "4 needs that many live brokers; 3 registered" in too_many.str()

    value = kafka_error(create(kafka_admin, NewTopic(unique("cfg"), 1, 1, config={"retention.ms": "soon"})))
    assert value.code() == KafkaError.INVALID_CONFIG and "retention.ms must be an integer" in value.str()
    unknown = kafka_error(create(kafka_admin, NewTopic(unique("cfg"), 1, 1, config={"retention.mins": "5"})))
    assert unknown.code() == KafkaError.INVALID_CONFIG and "unknown topic config 'retention.mins'" in unknown.str()

    fewer = kafka_error(kafka_admin.create_partitions([NewPartitions(name, 1)])[name])
    assert fewer.code() == KafkaError.INVALID_PARTITIONS and "can only be increased" in fewer.str()

    def altered(op: AlterConfigOpType, key: str, value: str | None) -> Any:
        resource = ConfigResource(
            ResourceType.TOPIC, name, incremental_configs=[ConfigEntry(key, value, incremental_operation=op)]
        )
        return kafka_admin.incremental_alter_configs([resource])[resource]

    negative = kafka_error(altered(AlterConfigOpType.SET, "min.insync.replicas", "0"))
    assert negative.code() == KafkaError.INVALID_CONFIG and "min.insync.replicas must be >= 1" in negative.str()
    appended = kafka_error(altered(AlterConfigOpType.APPEND, "cleanup.policy", "compact"))
    assert appended.code() == KafkaError.INVALID_REQUEST and "APPEND" in appended.str()
    kept = kafka_error(altered(AlterConfigOpType.DELETE, "partitioner", None))
    assert kept.code() == KafkaError.INVALID_CONFIG and "cannot be deleted" in kept.str()

    ghost = unique("ghost")
    assert kafka_error(kafka_admin.delete_topics([ghost])[ghost]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    resource = ConfigResource(ResourceType.TOPIC, ghost)
    assert kafka_error(kafka_admin.describe_configs([resource])[resource]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert sparklog_admin.topic(name).partitions == 2  # nothing refused changed anything
    assert set(sparklog_admin.topic(name).configs) == {"partitioner"}


@pytest.mark.slow
def test_validate_only_checks_and_changes_nothing(kafka_admin: AdminClient, sparklog_admin: Admin) -> None:
    name = unique("validate")
    assert (
        create(kafka_admin, NewTopic(name, 4, 3, config={"retention.ms": "60000"}), validate_only=True).result(
            TIMEOUT_S
        )
        is None
    )
    assert name not in kafka_admin.list_topics(timeout=TIMEOUT_S).topics
    with pytest.raises(UnknownTopic):
        sparklog_admin.topic(name)
    refused = kafka_error(create(kafka_admin, NewTopic(name, 1, 4), validate_only=True))
    assert refused.code() == KafkaError.INVALID_REPLICATION_FACTOR

    sparklog_admin.create_topic(name, 2, 1, {"retention.ms": "60000"})  # now it exists: sparklog's own create
    exists = kafka_error(create(kafka_admin, NewTopic(name, 1, 1), validate_only=True))
    assert exists.code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(TopicExists):  # and the other way round
        sparklog_admin.create_topic(name, 1, 1)

    grown = kafka_admin.create_partitions([NewPartitions(name, 6)], validate_only=True)
    assert grown[name].result(TIMEOUT_S) is None
    change = [ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=change)
    assert kafka_admin.incremental_alter_configs([resource], validate_only=True)[resource].result(TIMEOUT_S) is None
    meta = sparklog_admin.topic(name)
    assert meta.partitions == 2 and meta.configs["retention.ms"] == "60000"


@pytest.mark.slow
def test_explicit_replica_assignments(kafka_admin: AdminClient, sparklog_admin: Admin) -> None:
    name = unique("assigned")
    # librdkafka wants the partition count too (it sends -1 with the assignment)
    create(kafka_admin, NewTopic(name, 3, replica_assignment=[[2, 3], [3, 1], [1, 2]])).result(TIMEOUT_S)
    assert sparklog_admin.topic(name).replicas == [[2, 3], [3, 1], [1, 2]]
    grown = kafka_admin.create_partitions([NewPartitions(name, 4, replica_assignment=[[3, 2]])])
    assert grown[name].result(TIMEOUT_S) is None
    grown_to = [[2, 3], [3, 1], [1, 2], [3, 2]]
    sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.replicas == grown_to, f"replicas {grown_to}")

    absent = kafka_error(create(kafka_admin, NewTopic(unique("assigned"), 1, replica_assignment=[[1, 9]])))
    assert absent.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "not live" in absent.str()
    twice = kafka_error(create(kafka_admin, NewTopic(unique("assigned"), 1, replica_assignment=[[1, 1]])))
    assert twice.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "twice" in twice.str()
    narrow = kafka_error(kafka_admin.create_partitions([NewPartitions(name, 5, replica_assignment=[[1]])])[name])
    assert narrow.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "must have 2" in narrow.str()


@pytest.mark.slow
def test_describe_cluster_and_broker_configs(cluster: LocalCluster, kafka_admin: AdminClient) -> None:
    described = kafka_admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    ports = {b.broker_id: b.kafka_port for b in cluster.brokers.values()}
    assert {node.id: node.port for node in described.nodes} == ports
    assert described.controller.id in ports
    assert described.cluster_id and len(described.cluster_id) == 22
    assert kafka_admin.list_topics(timeout=TIMEOUT_S).cluster_id == described.cluster_id

    resource = ConfigResource(ResourceType.BROKER, "2")
    configs = kafka_admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["broker.id"].value == "2" and configs["broker.id"].is_read_only
    assert configs["num.partitions"].value == "1" and configs["default.replication.factor"].value == "1"


# ------------------------------------------------------------------------------------ kafka-python
@pytest.mark.slow
def test_kafka_python_admin_client(cluster: LocalCluster, sparklog_admin: Admin) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import TopicAlreadyExistsError

    name = unique("kafka-python")
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        created = client.create_topics([KNewTopic(name, 2, 2, topic_configs={"retention.ms": "120000"})])
        assert [(t["name"], t["error_code"], t["num_partitions"]) for t in created["topics"]] == [(name, 0, 2)]
        assert name in client.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([KNewTopic(name, 1, 1)])

        client.alter_configs([KConfigResource(ConfigResourceType.TOPIC, name, configs={"segment.ms": "3600000"})])
        altered = {"retention.ms": "120000", "segment.ms": "3600000", "partitioner": "murmur2"}
        sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.configs == altered, f"configs {altered}")
        # through the legacy AlterConfigs, which replaces every override: the client sends the ones to keep
        client.reset_configs(
            [KConfigResource(ConfigResourceType.TOPIC, name, configs=["retention.ms"])], incremental=False
        )
        kept = {"segment.ms": "3600000", "partitioner": "murmur2"}
        sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.configs == kept, f"configs {kept}")

        assert client.delete_topics([name])["topics"][0]["error_code"] == 0
        assert name not in client.list_topics()
    finally:
        client.close()
    assert name not in sparklog_admin.list_topics()


# ------------------------------------------------------------------------------------ Kafka's Java tools
def kafka_tool(main_class: str, bootstrap: str, *args: str) -> str:
    """Run one of Kafka's command-line tools (its main class: what ``kafka-topics.sh`` and
    ``kafka-configs.sh`` run); its output, after checking it succeeded."""
    from sparklog.bench.kafka_peer import COMMAND_JVM_OPTS, java_command

    command = java_command(main_class, ["--bootstrap-server", bootstrap, *args], COMMAND_JVM_OPTS)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{main_class} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def kafka_tools() -> None:
    """Kafka's jars (fetched by benchmarks/fetch_kafka.sh when absent) and a Java to run them."""
    from sparklog.bench.kafka_peer import _java, kafka_classpath

    try:
        _java()
        kafka_classpath(fetch=True)
    except KafkaNotInstalled as exc:
        pytest.skip(f"Kafka's tools cannot be run here: {exc}")


@pytest.mark.slow
def test_kafka_topics_and_kafka_configs(cluster: LocalCluster, kafka_tools: None, sparklog_admin: Admin) -> None:
    topics, configs = "org.apache.kafka.tools.TopicCommand", "kafka.admin.ConfigCommand"
    bootstrap = cluster.kafka_bootstrap_servers.split(",")[1]
    name = unique("kafka-tools")

    out = kafka_tool(
        topics, bootstrap, "--create", "--topic", name, "--partitions", "3", "--replication-factor", "2",
        "--config", "retention.ms=123456",
    )  # fmt: skip
    assert f"Created topic {name}." in out
    meta = sparklog_admin.topic(name)
    assert meta.partitions == 3 and all(len(r) == 2 for r in meta.replicas)
    assert meta.configs["retention.ms"] == "123456"

    assert name in kafka_tool(topics, bootstrap, "--list").split()

    described = kafka_tool(topics, bootstrap, "--describe", "--topic", name)
    assert "PartitionCount: 3" in described and "ReplicationFactor: 2" in described
    assert "retention.ms=123456" in described
    for p, replicas in enumerate(meta.replicas):
        assert f"Partition: {p}\tLeader: {replicas[0]}\tReplicas: {','.join(map(str, replicas))}" in described

    out = kafka_tool(
        configs, bootstrap, "--alter", "--entity-type", "topics", "--entity-name", name,
        "--add-config", "cleanup.policy=compact,segment.ms=3600000", "--delete-config", "retention.ms",
    )  # fmt: skip
    assert "Completed updating config" in out
    expected = {"cleanup.policy": "compact", "segment.ms": "3600000", "partitioner": "murmur2"}
    sparklog_sees(sparklog_admin, name, lambda m: m is not None and m.configs == expected, f"configs {expected}")
    out = kafka_tool(configs, bootstrap, "--describe", "--entity-type", "topics", "--entity-name", name)
    assert f"Dynamic configs for topic {name} are:" in out
    assert "cleanup.policy=compact" in out and "DEFAULT_CONFIG:cleanup.policy=delete" in out
    assert "retention.ms" not in out

    kafka_tool(topics, bootstrap, "--delete", "--topic", name)
    assert name not in sparklog_admin.list_topics()


# ------------------------------------------------------------------------------------ every version encodes
class FakeBroker:
    """The calls the admin handlers make, answering as a broker would (no cluster)."""

    broker_id = 1

    def create_topic(self, name: str, partitions: int | None, rf: int | None, *_: Any) -> Any:
        from sparklog.broker.kafka_gateway import topic_config_entries
        from sparklog.kafka.broker_access import CreatedTopic

        if name == "taken":
            raise TopicExists("topic 'taken' already exists")
        return CreatedTopic(name, partitions or 1, rf or 1, topic_config_entries({"retention.ms": "5"}))

    def delete_topic(self, name: str, deadline: float | None) -> None:
        if name == "ghost":
            raise UnknownTopic("unknown topic 'ghost'")

    def create_partitions(self, *_: Any) -> None: ...

    def topic_configs(self, name: str) -> Sequence[Any]:
        from sparklog.broker.kafka_gateway import topic_config_entries

        return topic_config_entries({"cleanup.policy": "compact"})

    def alter_topic_configs(self, name: str, configs: Mapping[str, str], *_: Any) -> None: ...

    def replace_topic_configs(self, *_: Any) -> None: ...

    def broker_configs(self) -> Sequence[Any]:
        from sparklog.kafka.broker_access import ConfigEntry as Entry
        from sparklog.kafka.broker_access import ConfigSource as Source

        return [Entry("broker.id", "1", Source.BROKER, "-1", "long", read_only=True)]

    def cluster(self, topics: Sequence[str] | None, listener: str = "PLAINTEXT") -> Any:
        from sparklog.kafka.broker_access import BrokerEndpoint, ClusterInfo

        return ClusterInfo("AAAAAAAAAAAAAAAAAAAAAA", 1, [BrokerEndpoint(1, "127.0.0.1", 9092)], [])


def _request(api: str) -> Any:
    """A request of ``api`` in a given version (a function of the version)."""
    from kafka.protocol import admin as k

    topic = k.CreateTopicsRequest.CreatableTopic
    config = topic.CreatableTopicConfig
    resource = k.DescribeConfigsRequest.DescribeConfigsResource
    alterable = k.IncrementalAlterConfigsRequest.AlterConfigsResource
    legacy = k.AlterConfigsRequest.AlterConfigsResource
    grown = k.CreatePartitionsRequest.CreatePartitionsTopic
    return {
        "CreateTopics": lambda v: k.CreateTopicsRequest[v](
            topics=[
                topic(
                    name=n,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[],
                    configs=[config(name="a", value="1")],
                )
                for n in ("new", "taken", "new2", "new2")
            ],
            timeout_ms=0,
            validate_only=False,
        ),
        "DeleteTopics": lambda v: k.DeleteTopicsRequest[v](topic_names=["old", "ghost"], timeout_ms=0),
        "CreatePartitions": lambda v: k.CreatePartitionsRequest[v](
            topics=[grown(name="t", count=3, assignments=None)], timeout_ms=0, validate_only=False
        ),
        "DescribeConfigs": lambda v: k.DescribeConfigsRequest[v](
            resources=[
                resource(resource_type=2, resource_name="t", configuration_keys=None),
                resource(resource_type=4, resource_name="1", configuration_keys=["broker.id"]),
                resource(resource_type=8, resource_name="1", configuration_keys=None),
            ],
            include_synonyms=True,
            include_documentation=False,
        ),
        "IncrementalAlterConfigs": lambda v: k.IncrementalAlterConfigsRequest[v](
            resources=[
                alterable(
                    resource_type=2,
                    resource_name="t",
                    configs=[
                        alterable.AlterableConfig(name="retention.ms", config_operation=op, value="1") for op in (0, 3)
                    ],
                )
            ],
            validate_only=False,
        ),
        "AlterConfigs": lambda v: k.AlterConfigsRequest[v](
            resources=[
                legacy(resource_type=2, resource_name="t", configs=[legacy.AlterableConfig(name="a", value="1")])
            ],
            validate_only=False,
        ),
        "DescribeCluster": lambda v: k.DescribeClusterRequest[v](
            include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=False
        ),
    }[api]


ADMIN_APIS = [
    "CreateTopics",
    "DeleteTopics",
    "CreatePartitions",
    "DescribeConfigs",
    "IncrementalAlterConfigs",
    "AlterConfigs",
    "DescribeCluster",
]


@pytest.mark.parametrize("api", ADMIN_APIS)
def test_every_served_version_of_the_admin_apis_encodes(api: str) -> None:
    from sparklog.kafka.api import ListenerState, RequestContext

    handler = next(h for h in HANDLERS.values() if h.spec.name == f"{api}Request")  # served
    for version in range(handler.spec.min_version, handler.spec.max_version + 1):
        request = _request(api)(version)
        request = handler.spec.request.decode(request.encode(), version=version)  # as the listener gets it
        ctx = RequestContext(version, 7, "test", ("127.0.0.1", 1), FakeBroker(), ListenerState(()), lambda: False)  # type: ignore[arg-type]
        response = handler.handle(request, ctx)
        encoded = bytes(response.encode())
        decoded = handler.spec.response.decode(encoded, version=version)
        assert bytes(decoded.encode()) == encoded, f"{api} v{version}"
