"""ACLs and the authorizer, as pure logic over plain lists of bindings (ZooKeeper: test_acl_store.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparklog.errors import AuthorizationFailed, InvalidRequest, InvalidTopic, SparklogError
from sparklog.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclIndex,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    acls_allow,
    parse_host,
)
from sparklog.security.authorizer import AclSource, Authorizer, host_of_peer, parse_super_users

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
READ, WRITE, DESCRIBE = Operation.READ, Operation.WRITE, Operation.DESCRIBE
HOST = "10.0.0.5"


def acl(
    principal: str = "User:alice",
    operation: str = "Read",
    name: str = "events",
    permission: str = "Allow",
    resource_type: str = "Topic",
    pattern_type: str = "literal",
    host: str = "*",
) -> AclBinding:
    return AclBinding.parse(
        ResourcePattern.parse(resource_type, name, pattern_type), principal, host, operation, permission
    )


def allowed(
    bindings: list[AclBinding],
    operation: Operation = READ,
    name: str = "events",
    principal: str = "User:alice",
    host: str = HOST,
    resource_type: ResourceType = TOPIC,
) -> bool:
    return Authorizer(bindings).authorize(principal, host, operation, resource_type, name)


# ------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Read", Operation.READ),
        ("read", Operation.READ),
        ("WRITE", Operation.WRITE),
        ("ClusterAction", Operation.CLUSTER_ACTION),
        ("cluster_action", Operation.CLUSTER_ACTION),
        ("CLUSTER-ACTION", Operation.CLUSTER_ACTION),
        ("all", Operation.ALL),
        ("Describe", Operation.DESCRIBE),
    ],
)
def test_operations_parse_in_any_case(text: str, expected: Operation) -> None:
    assert Operation.parse(text) is expected
    assert str(expected) == expected.value


def test_other_values_parse_in_any_case() -> None:
    assert ResourceType.parse("topic") is TOPIC
    assert ResourceType.parse("GROUP") is GROUP
    assert ResourceType.parse("Cluster") is CLUSTER
    assert PatternType.parse("Prefixed") is PatternType.PREFIXED
    assert PatternType.parse("LITERAL") is PatternType.LITERAL
    assert Permission.parse("deny") is Permission.DENY
    assert Permission.parse(Permission.ALLOW) is Permission.ALLOW


@pytest.mark.parametrize(
    ("parse", "text", "fragments"),
    [
        (
            Operation.parse,
            "Reed",
            [
                "operation 'Reed'",
                "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, All",
            ],
        ),
        (Operation.parse, "", ["operation ''", "ClusterAction"]),
        (Operation.parse, None, ["operation None"]),
        (ResourceType.parse, "Table", ["resource type 'Table'", "Topic, Group, Cluster"]),
        (PatternType.parse, "match", ["resource pattern type 'match'", "literal, prefixed"]),
        (Permission.parse, "maybe", ["permission 'maybe'", "Allow, Deny"]),
    ],
)
def test_bad_values_name_themselves_and_the_allowed_ones(
    parse: Callable[[object], object], text: object, fragments: list[str]
) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(text)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_binding_parse_normalizes_and_round_trips_through_its_entry() -> None:
    binding = AclBinding.parse(ResourcePattern.parse("TOPIC", "events"), "User:alice", " ::0:1 ", "read", "ALLOW")
    assert binding == AclBinding(ResourcePattern(TOPIC, "events"), "User:alice", "::1", READ, Permission.ALLOW)
    entry = binding.to_entry()
    assert entry == {"principal": "User:alice", "host": "::1", "operation": "Read", "permission": "Allow"}
    assert AclBinding.from_entry(binding.pattern, entry) == binding
    with pytest.raises(InvalidRequest, match="has no 'permission'"):
        AclBinding.from_entry(binding.pattern, {"principal": "User:alice", "host": "*", "operation": "Read"})
    hash(binding)  # frozen: usable in sets
    with pytest.raises(AttributeError):
        binding.host = "*"  # type: ignore[misc]


def test_bad_bindings_and_patterns_are_clear_errors() -> None:
    topic = ResourcePattern(TOPIC, "events")
    with pytest.raises(InvalidRequest, match="principal 'alice' must be written 'User:<name>'"):
        AclBinding.parse(topic, "alice", "*", "Read", "Allow")
    with pytest.raises(InvalidRequest, match="the only principal type is 'User'"):
        AclBinding.parse(topic, "Group:g", "*", "Read", "Allow")
    with pytest.raises(InvalidRequest, match="host 'broker.example.com' must be '\\*' or an IP address"):
        AclBinding.parse(topic, "User:alice", "broker.example.com", "Read", "Allow")
    with pytest.raises(InvalidRequest, match="host '::0:1' must be written '::1'"):
        AclBinding(topic, "User:alice", "::0:1", READ, Permission.ALLOW)
    with pytest.raises(InvalidRequest, match="operation ClusterAction does not apply to topics; use one of Read"):
        AclBinding.parse(topic, "User:alice", "*", "ClusterAction", "Allow")
    with pytest.raises(InvalidRequest, match="operation Write does not apply to groups; use one of Read, Delete"):
        acl(resource_type="Group", name="g1", operation="Write")
    with pytest.raises(InvalidRequest, match="operation Read does not apply to clusters"):
        acl(resource_type="Cluster", name=CLUSTER_NAME, operation="Read")
    with pytest.raises(InvalidRequest, match="the cluster resource is the literal name 'kafka-cluster'"):
        ResourcePattern(CLUSTER, "my-cluster")
    with pytest.raises(InvalidRequest, match="the cluster resource is the literal name 'kafka-cluster'"):
        ResourcePattern(CLUSTER, CLUSTER_NAME, PatternType.PREFIXED)
    with pytest.raises(InvalidRequest, match="the literal name '\\*' means every topic"):
        ResourcePattern(TOPIC, "*", PatternType.PREFIXED)
    with pytest.raises(InvalidTopic, match="invalid topic name 'a/b'"):
        ResourcePattern(TOPIC, "a/b")
    with pytest.raises(InvalidRequest, match="invalid group name '..'"):
        ResourcePattern(GROUP, "..", PatternType.PREFIXED)
    with pytest.raises(InvalidRequest, match="takes a ResourceType"):
        ResourcePattern("Topic", "events")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="takes an Operation"):
        AclBinding(topic, "User:alice", "*", "Read", Permission.ALLOW)  # type: ignore[arg-type]
    assert issubclass(InvalidRequest, SparklogError)


def test_hosts() -> None:
    assert parse_host("*") == "*"
    assert parse_host("10.0.0.1") == "10.0.0.1"
    assert parse_host("0:0::1") == "::1"
    for bad in ("", "10.0.0", "localhost", "10.0.0.1/24", 1):
        with pytest.raises(InvalidRequest, match="must be '\\*' or an IP address"):
            parse_host(bad)
    assert host_of_peer("ipv4:10.0.0.5:53412") == "10.0.0.5"
    assert host_of_peer("ipv6:[::1]:53412") == "::1"
    assert host_of_peer("ipv6:[0:0::1]:53412") == "::1"
    assert host_of_peer("ipv6:[::ffff:10.0.0.5]:53412") == "10.0.0.5"  # an IPv4 client of a dual-stack listener
    assert host_of_peer("unix:/tmp/socket") == "unix:/tmp/socket"


def test_patterns_describe_themselves() -> None:
    assert str(ResourcePattern(TOPIC, "events")) == "topic 'events'"
    assert str(ResourcePattern(TOPIC, "*")) == "every topic"
    assert str(ResourcePattern(GROUP, "etl-", PatternType.PREFIXED)) == "groups prefixed 'etl-'"
    assert str(ResourcePattern.cluster()) == "the cluster"


# ------------------------------------------------------------------------------------------ matching


def test_no_acl_means_denied() -> None:
    assert not allowed([])
    assert not allowed([acl(name="other")])  # ACLs exist, none on this topic
    assert not allowed([acl(principal="User:bob")])
    assert not allowed([acl(resource_type="Group", name="events")])  # same name, other resource type


def test_allow_grants_exactly_its_operation() -> None:
    bindings = [acl(operation="Read")]
    assert allowed(bindings, READ)
    assert not allowed(bindings, WRITE)
    assert not allowed(bindings, Operation.CREATE)
    assert not allowed(bindings, READ, name="events2")  # literal: not a prefix


@pytest.mark.parametrize("implying", ["Read", "Write", "Delete", "Alter"])
def test_read_write_delete_alter_imply_describe(implying: str) -> None:
    bindings = [acl(operation=implying)]
    assert allowed(bindings, DESCRIBE)
    assert allowed(bindings, Operation.parse(implying))


def test_describe_and_create_imply_nothing_else() -> None:
    assert not allowed([acl(operation="Describe")], READ)
    assert not allowed([acl(operation="Create")], DESCRIBE)
    assert not allowed(
        [acl(resource_type="Cluster", name=CLUSTER_NAME, operation="ClusterAction")],
        DESCRIBE,
        CLUSTER_NAME,
        resource_type=CLUSTER,
    )


def test_alter_configs_implies_describe_configs_on_the_cluster() -> None:
    """Kafka's rule for client quotas' operations: an Allow of AlterConfigs also allows
    DescribeConfigs; neither is allowed by Alter or Describe, nor applies to topics here."""
    cluster = {"resource_type": "Cluster", "name": CLUSTER_NAME}
    on_cluster = {"name": CLUSTER_NAME, "resource_type": CLUSTER}
    assert allowed([acl(operation="AlterConfigs", **cluster)], Operation.DESCRIBE_CONFIGS, **on_cluster)
    assert not allowed([acl(operation="DescribeConfigs", **cluster)], Operation.ALTER_CONFIGS, **on_cluster)
    assert not allowed([acl(operation="Alter", **cluster)], Operation.ALTER_CONFIGS, **on_cluster)
    assert not allowed([acl(operation="Describe", **cluster)], Operation.DESCRIBE_CONFIGS, **on_cluster)
    denied = [acl(operation="All", **cluster), acl(operation="AlterConfigs", permission="Deny", **cluster)]
    assert not allowed(denied, Operation.ALTER_CONFIGS, **on_cluster)
    assert allowed(denied, Operation.DESCRIBE_CONFIGS, **on_cluster)  # a Deny denies only its operation
    assert Operation.parse("describe_configs") is Operation.DESCRIBE_CONFIGS
    with pytest.raises(InvalidRequest, match="operation AlterConfigs does not apply to topics"):
        acl(operation="AlterConfigs")


def test_bindings_round_trip_through_json_and_bad_json_is_refused() -> None:
    binding = acl(pattern_type="prefixed", name="orders-", host="::0:1", permission="deny")
    assert binding.to_json() == {
        "resource_type": "Topic",
        "name": "orders-",
        "pattern_type": "prefixed",
        "principal": "User:alice",
        "host": "::1",
        "operation": "Read",
        "permission": "Deny",
    }
    assert AclBinding.from_json(binding.to_json()) == binding
    for bad, message in (
        ([], "must be a JSON object"),
        ({**binding.to_json(), "name": 7}, "resource 'name' must be a string"),
        ({**binding.to_json(), "pattern_type": None}, "resource pattern type None"),
        ({**binding.to_json(), "name": "../x"}, "topic name"),
        ({**binding.to_json(), "operation": "Fly"}, "unknown operation 'Fly'"),
        ({k: v for k, v in binding.to_json().items() if k != "host"}, "has no 'host'"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            AclBinding.from_json(bad)


def test_filters_select_bindings() -> None:
    literal = acl(name="orders")
    prefixed = acl(name="ord", pattern_type="prefixed", operation="Write")
    everyone = acl(name="*", principal="User:bob", operation="Describe")
    other = acl(name="clicks")
    group = acl(resource_type="Group", name="orders")
    bindings = [literal, prefixed, everyone, other, group]

    def selected(f: AclFilter) -> list[AclBinding]:
        return [b for b in bindings if f.matches(b)]

    assert selected(AclFilter()) == bindings
    assert selected(AclFilter(TOPIC, "orders")) == [literal]  # the name as stored
    assert selected(AclFilter(TOPIC, "orders", match=True)) == [literal, prefixed, everyone]
    assert selected(AclFilter(principal="User:bob")) == [everyone]
    assert selected(AclFilter(operation=Operation.WRITE)) == [prefixed]
    assert selected(AclFilter(pattern_type=PatternType.PREFIXED)) == [prefixed]
    assert selected(AclFilter.of(literal)) == [literal]
    assert AclFilter.of(literal).pattern == literal.pattern and AclFilter(TOPIC).pattern is None
    for f in (AclFilter(), AclFilter(TOPIC, "orders", match=True), AclFilter.of(prefixed)):
        assert AclFilter.from_json(f.to_json()) == f
    assert AclFilter.from_json({"pattern_type": "ANY", "principal": "User:bob"}) == AclFilter(principal="User:bob")
    for bad, message in (
        ({"pattern_type": "match"}, "needs a resource"),
        ({"resource_type": "Topic", "name": "x", "pattern_type": "fuzzy"}, "literal, prefixed, any, match"),
        ({"resource_type": "Topic", "name": "../x", "pattern_type": "literal"}, "topic name"),
        ({"principal": "alice"}, "must be written 'User:<name>'"),
        ({"host": "example.com"}, "IP address"),
        ({"name": 3}, "must be a string"),
        ({"owner": "me"}, "unknown ACL filter field"),
        ("all", "must be a JSON object"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            AclFilter.from_json(bad)


def test_all_matches_every_operation() -> None:
    bindings = [acl(operation="All")]
    for operation in ResourceType.TOPIC.operations:
        assert allowed(bindings, operation)
    cluster = [acl(resource_type="Cluster", name=CLUSTER_NAME, operation="All")]
    assert allowed(cluster, Operation.CLUSTER_ACTION, CLUSTER_NAME, resource_type=CLUSTER)
    assert allowed(cluster, Operation.ALTER, CLUSTER_NAME, resource_type=CLUSTER)


def test_deny_beats_allow() -> None:
    bindings = [acl(operation="Write"), acl(operation="Write", permission="Deny")]
    assert not allowed(bindings, WRITE)
    # order does not matter
    assert not allowed(list(reversed(bindings)), WRITE)
    # a Deny of everyone on every topic beats an Allow of alice on this topic
    assert not allowed([acl(operation="Read"), acl(principal="User:*", name="*", operation="Read", permission="Deny")])
    # a Deny of All denies every operation
    denied = [acl(operation="All"), acl(operation="All", permission="Deny")]
    assert not any(allowed(denied, op) for op in TOPIC.operations)


def test_deny_denies_only_its_operation_and_not_what_it_implies() -> None:
    bindings = [acl(operation="All"), acl(operation="Write", permission="Deny")]
    assert not allowed(bindings, WRITE)
    assert allowed(bindings, READ)
    assert allowed(bindings, DESCRIBE)  # Kafka: a Deny of Write does not deny Describe
    # a Deny of another principal, host or topic changes nothing
    others = [
        acl(operation="All"),
        acl(principal="User:bob", operation="All", permission="Deny"),
        acl(host="10.9.9.9", operation="All", permission="Deny"),
        acl(name="other", operation="All", permission="Deny"),
    ]
    assert allowed(others, WRITE)


def test_prefixed_patterns() -> None:
    bindings = [acl(name="team-a.", pattern_type="prefixed", operation="Write")]
    assert allowed(bindings, WRITE, "team-a.events")
    assert allowed(bindings, WRITE, "team-a.")
    assert not allowed(bindings, WRITE, "team-b.events")
    assert not allowed(bindings, WRITE, "team-a")  # shorter than the prefix
    assert not allowed(bindings, WRITE, "x-team-a.events")
    # a Deny on a longer prefix carves a hole
    holed = [*bindings, acl(name="team-a.secret", pattern_type="prefixed", operation="Write", permission="Deny")]
    assert allowed(holed, WRITE, "team-a.events")
    assert not allowed(holed, WRITE, "team-a.secret-2")


def test_wildcard_resource_principal_and_host() -> None:
    every_topic = [acl(name="*", operation="Read")]
    assert allowed(every_topic, READ, "events")
    assert allowed(every_topic, READ, "anything-else")
    assert not allowed(every_topic, READ, "events", resource_type=GROUP)

    everyone = [acl(principal="User:*", operation="Read")]
    assert allowed(everyone, READ, principal="User:alice")
    assert allowed(everyone, READ, principal="User:bob")
    assert allowed(everyone, READ, principal="User:ANONYMOUS")

    one_host = [acl(operation="Read", host="10.0.0.5")]
    assert allowed(one_host, READ, host="10.0.0.5")
    assert not allowed(one_host, READ, host="10.0.0.6")
    any_host = [acl(operation="Read", host="*")]
    assert allowed(any_host, READ, host="10.0.0.6")
    assert allowed(any_host, READ, host="::1")


def test_groups_and_cluster() -> None:
    bindings = [
        acl(resource_type="Group", name="etl", operation="Read"),
        acl(resource_type="Cluster", name=CLUSTER_NAME, operation="Create"),
    ]
    assert allowed(bindings, READ, "etl", resource_type=GROUP)
    assert allowed(bindings, DESCRIBE, "etl", resource_type=GROUP)
    assert not allowed(bindings, READ, "etl2", resource_type=GROUP)
    assert allowed(bindings, Operation.CREATE, CLUSTER_NAME, resource_type=CLUSTER)
    assert not allowed(bindings, Operation.CLUSTER_ACTION, CLUSTER_NAME, resource_type=CLUSTER)


def test_transactional_ids_guard_the_spark_sinks_state() -> None:
    tid = ResourceType.TRANSACTIONAL_ID
    assert ResourceType.parse("transactional-id") is tid and ResourceType.parse("TRANSACTIONAL_ID") is tid
    bindings = [acl(resource_type="TransactionalId", name="batch-", pattern_type="prefixed", operation="Write")]
    assert allowed(bindings, WRITE, "batch-0f3a", resource_type=tid)
    assert allowed(bindings, DESCRIBE, "batch-0f3a", resource_type=tid)  # Write implies Describe
    assert not allowed(bindings, WRITE, "3c1e-query-id", resource_type=tid)
    assert not allowed(bindings, WRITE, "batch-0f3a", resource_type=TOPIC)
    assert str(ResourcePattern(tid, "q1")) == "transactional id 'q1'"
    with pytest.raises(AuthorizationFailed, match="^User:bob may not Write transactional id 'q1'$"):
        Authorizer(bindings).check("User:bob", HOST, WRITE, tid, "q1")
    with pytest.raises(InvalidRequest, match="operation Read does not apply to transactional ids; use one of Write"):
        acl(resource_type="TransactionalId", name="q1", operation="Read")
    with pytest.raises(InvalidRequest, match="invalid transactional id name 'a/b'"):
        ResourcePattern(tid, "a/b")


def test_acls_allow_ignores_bindings_of_other_resources() -> None:
    # the plain function, given bindings that do not all match the resource
    bindings = [acl(name="other", operation="Read"), acl(name="events", operation="Write", permission="Deny")]
    assert not acls_allow(bindings, "User:alice", HOST, READ, TOPIC, "events")
    assert acls_allow(bindings, "User:alice", HOST, READ, TOPIC, "other")


def test_index_finds_exactly_the_bindings_that_could_match() -> None:
    literal = acl(name="events")
    wildcard = acl(name="*")
    short = acl(name="ev", pattern_type="prefixed")
    long = acl(name="events-", pattern_type="prefixed")
    unrelated = [acl(name="logs"), acl(name="x", pattern_type="prefixed"), acl(resource_type="Group", name="events")]
    index = AclIndex([literal, wildcard, short, long, *unrelated, literal])  # a duplicate is kept once
    assert set(index.matching(TOPIC, "events")) == {literal, wildcard, short}
    assert set(index.matching(TOPIC, "events-1")) == {wildcard, short, long}
    assert set(index.matching(TOPIC, "e")) == {wildcard}
    assert len(index) == 7
    assert isinstance(index, AclSource)


# ------------------------------------------------------------------------------------------ authorizer


def test_super_users_are_always_allowed() -> None:
    denied = [acl(principal="User:admin", operation="All", permission="Deny", name="*")]
    authorizer = Authorizer(denied, super_users={"User:admin"})
    assert authorizer.authorize("User:admin", HOST, WRITE, TOPIC, "events")
    assert authorizer.authorize("User:admin", HOST, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    assert not authorizer.authorize("User:alice", HOST, WRITE, TOPIC, "events")
    assert parse_super_users(" User:admin;User:ops ;") == {"User:admin", "User:ops"}
    with pytest.raises(InvalidRequest, match="must be written 'User:<name>'"):
        Authorizer([], super_users={"admin"})
    with pytest.raises(InvalidRequest, match="cannot be a super user"):
        Authorizer([], super_users={"User:*"})


def test_check_names_principal_operation_and_resource() -> None:
    authorizer = Authorizer([acl(operation="Read")])
    authorizer.check("User:alice", HOST, READ, TOPIC, "events")
    with pytest.raises(AuthorizationFailed) as info:
        authorizer.check("User:alice", HOST, WRITE, TOPIC, "events")
    assert str(info.value) == "User:alice may not Write topic 'events'"
    assert info.value.code == "AUTHORIZATION_FAILED"
    with pytest.raises(AuthorizationFailed, match="^User:bob may not Read group 'etl'$"):
        authorizer.check("User:bob", HOST, READ, GROUP, "etl")
    with pytest.raises(AuthorizationFailed, match="^User:bob may not ClusterAction cluster 'kafka-cluster'$"):
        authorizer.check("User:bob", HOST, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)


def test_authorizer_asks_its_source_for_the_resource() -> None:
    class Source:
        def __init__(self) -> None:
            self.asked: list[tuple[ResourceType, str]] = []

        def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
            self.asked.append((resource_type, name))
            return [acl(operation="Write")]

    source = Source()
    authorizer = Authorizer(source)
    assert authorizer.authorize("User:alice", HOST, WRITE, TOPIC, "events")
    assert source.asked == [(TOPIC, "events")]
    # what the source gives is still checked against the resource
    assert not authorizer.authorize("User:alice", HOST, WRITE, TOPIC, "logs")
