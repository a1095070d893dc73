"""Administration through brokers (users, ACLs, client quotas, partition reassignment): on a secured
cluster (``LocalCluster(secure=True)``, what ``sparklog up --secure`` runs) the ``sparklog`` commands
given ``--bootstrap-server`` and ``--command-config`` run with no ZooKeeper connect string and no
ZooKeeper digest in their environment, and what they do takes effect: a user added can log in, an
ACL added lets it read, a removed one stops it, a removed user cannot log in, a quota set is
described, a reassignment completes. A user without ACLs on the cluster is refused every admin
action with the typed authorization error; bad requests are typed errors that store nothing; the
password never reaches a broker.

One cluster (two brokers) for the module: starting a secured one is expensive."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    InvalidRequest,
    InvalidUserName,
    SparklogError,
    UnacceptableCredential,
)
from sparklog.local_cluster import LocalCluster
from sparklog.protocol import wire
from sparklog.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.credentials import new_salt, salted_password
from sparklog.security.quotas import Quota
from waiting import wait_for

CLI = [sys.executable, "-m", "sparklog.cli.main"]
# what must not be in the environment of a command that administers through brokers
ZOOKEEPER_ENV = ("SPARKLOG_ZOOKEEPER", "SPARKLOG_ZOOKEEPER_DIGEST", "SPARKLOG_BOOTSTRAP_SERVERS", "SPARKLOG_DEBUG")
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("admin") / "data", brokers=2, secure=True) as started:
        yield started


def properties(cluster: LocalCluster, user: str, password: str, directory: Path) -> Path:
    """A ``--command-config`` file of ``user`` (the admin's settings with another login)."""
    settings = {**cluster.client_config(), "sasl.username": user, "sasl.password": password}
    path = directory / f"{user}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def config_of(cluster: LocalCluster, user: str, password: str) -> dict[str, str]:
    return {**cluster.client_config(), "sasl.username": user, "sasl.password": password}


def sparklog(cluster: LocalCluster, command_config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``sparklog ARGS --bootstrap-server ... --command-config FILE`` with neither a ZooKeeper
    connect string nor the ZooKeeper digest in its environment."""
    env = {k: v for k, v in os.environ.items() if k not in ZOOKEEPER_ENV}
    servers = cluster.client_config()["bootstrap.servers"]
    command = [*CLI, *args, "--bootstrap-server", servers, "--command-config", str(command_config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args[3:6]} failed:\n{result.stderr}"
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparklog: error: "), result.stderr
    assert fragment in lines[0], lines[0]


def read(cluster: LocalCluster, topic: str, config: dict[str, str], expected: int) -> list[bytes]:
    """Every value of ``topic`` as the user of ``config`` reads it (AuthorizationFailed if refused)."""
    got: list[bytes] = []
    with Consumer(topic, auto_offset_reset="earliest", config=config, retry_timeout_s=5) as consumer:
        for _ in range(150):
            for batch in consumer.poll_batches(timeout=0.2):
                got.extend(batch.column("value").to_pylist())
            if len(got) >= expected:
                break
    return got


def refused(action: Callable[[], object]) -> bool:
    try:
        action()
    except AuthorizationFailed:
        return True
    return False


def produce(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    with Producer(acks="all", config=cluster.client_config()) as producer:
        for future in [producer.send(topic, value, partition=0) for value in values]:
            future.result(TIMEOUT_S)


# ----------------------------------------------------------------- the admin commands, through brokers
def test_users_acls_and_quotas_administered_through_brokers(cluster: LocalCluster, tmp_path: Path) -> None:
    admin_config = cluster.security.client_properties  # type: ignore[union-attr]
    password_file = tmp_path / "carol.txt"
    password_file.write_text("carol-secret\n")
    carol = config_of(cluster, "carol", "carol-secret")
    with Admin(config=cluster.client_config()) as admin:
        admin.create_topic("ledger", 1, 2)
    values = [b"entry-%d" % i for i in range(20)]
    produce(cluster, "ledger", values)

    # a user added through a broker logs in with SCRAM
    assert ok(sparklog(cluster, admin_config, "users", "add", "carol", "--password-file", str(password_file))) == (
        "added user 'carol'\n"
    )
    assert "carol" in ok(sparklog(cluster, admin_config, "users", "list")).split()
    with Admin(config=carol) as as_carol:
        assert as_carol.list_topics() == []  # logged in; may Describe no topic
    assert refused(lambda: read(cluster, "ledger", carol, len(values)))

    # an ACL added through a broker lets her read; removed, it stops her again
    acl = ("--allow-principal", "User:carol", "--operation", "Read", "--topic", "ledger")
    assert ok(sparklog(cluster, admin_config, "acls", "add", *acl)) == "added 1 ACL to topic 'ledger'\n"
    listed = ok(sparklog(cluster, admin_config, "acls", "list", "--topic", "ledger")).splitlines()
    assert [line.split() for line in listed[1:]] == [["Topic", "ledger", "literal", "User:carol", "*", "Read", "Allow"]]
    got = wait_for(lambda: not refused(lambda: read(cluster, "ledger", carol, len(values))), TIMEOUT_S, "Read")
    assert got and read(cluster, "ledger", carol, len(values)) == values
    assert ok(sparklog(cluster, admin_config, "acls", "remove", *acl)) == "removed 1 ACL from topic 'ledger'\n"
    wait_for(lambda: refused(lambda: read(cluster, "ledger", carol, len(values))), TIMEOUT_S, "Read to go")

    # a quota set through a broker is described (by the command and the Python Admin)
    ok(sparklog(cluster, admin_config, "quotas", "set", "--user", "carol", "--producer-byte-rate", "1048576"))
    assert ok(sparklog(cluster, admin_config, "quotas", "list")) == "carol producer_byte_rate=1048576\n"
    with Admin(config=cluster.client_config()) as admin:
        assert admin.describe_client_quotas() == {"carol": Quota(producer_byte_rate=1048576)}
    assert ok(sparklog(cluster, admin_config, "quotas", "remove", "--user", "carol")) == (
        "removed the quota of user 'carol'\n"
    )
    one_line_error(sparklog(cluster, admin_config, "quotas", "remove", "--user", "carol"), "there is no quota")

    # a user removed through a broker cannot log in any more
    assert ok(sparklog(cluster, admin_config, "users", "remove", "carol")) == "removed user 'carol'\n"
    with pytest.raises(AuthenticationFailed), Admin(config=carol) as as_carol:
        as_carol.list_topics()
    one_line_error(sparklog(cluster, admin_config, "users", "remove", "carol"), "there is no user 'carol'")


def test_a_reassignment_started_through_a_broker_completes(cluster: LocalCluster) -> None:
    admin_config = cluster.security.client_properties  # type: ignore[union-attr]
    with Admin(config=cluster.client_config()) as admin:
        admin.create_topic("moving", 1, 1)
        [before] = admin.describe_topic("moving")["partitions"]
    values = [b"moved-%d" % i for i in range(50)]
    produce(cluster, "moving", values)
    target = 2 if before["replicas"] == [1] else 1

    out = ok(sparklog(cluster, admin_config, "partitions", "reassign", "moving", "--replicas", str(target)))
    assert out.splitlines() == ["PARTITION  REPLICAS", f"0          {target}"]
    with Admin(config=cluster.client_config()) as admin:
        [after] = admin.describe_topic("moving")["partitions"]
    assert (after["replicas"], after["leader"], after["isr"]) == ([target], target, [target])
    assert read(cluster, "moving", cluster.client_config(), len(values)) == values  # from the new replica
    old = cluster.data_dir / f"broker-{before['replicas'][0]}"
    wait_for(lambda: not list(old.glob("moving-*")), TIMEOUT_S, "the old replica to be deleted")


# ----------------------------------------------------------------- authorization
def test_a_user_without_cluster_acls_is_refused_every_admin_action(cluster: LocalCluster, tmp_path: Path) -> None:
    with Admin(config=cluster.client_config()) as admin:
        admin.upsert_scram_credential("dave", "dave-secret", 4096)
        admin.create_topic("daves", 1, 1)
        admin.create_acls([_allow("dave", Operation.ALL, ResourceType.TOPIC, "daves")])  # not the cluster
    binding = _allow("dave", Operation.READ, ResourceType.TOPIC, "daves")
    refusals = {
        "Alter": [
            lambda a: a.upsert_scram_credential("mallory", "mallory-secret"),
            lambda a: a.delete_scram_credential("dave"),
            lambda a: a.create_acls([binding]),
            lambda a: a.delete_acls([AclFilter.of(binding)]),
            lambda a: a.reassign_partitions("daves", {0: [1, 2]}),
        ],
        "Describe": [
            lambda a: a.describe_scram_credentials(),
            lambda a: a.describe_acls(),
        ],
        "AlterConfigs": [
            lambda a: a.set_client_quota("dave", Quota(request_rate=1000)),
            lambda a: a.remove_client_quota("dave"),
        ],
        "DescribeConfigs": [lambda a: a.describe_client_quotas()],
    }
    with Admin(config=config_of(cluster, "dave", "dave-secret")) as dave:
        for operation, actions in refusals.items():
            for action in actions:
                with pytest.raises(
                    AuthorizationFailed, match=f"^User:dave may not {operation} cluster 'kafka-cluster'"
                ):
                    action(dave)
    dave_config = properties(cluster, "dave", "dave-secret", tmp_path)
    for args, operation in (
        (("users", "add", "mallory", "--password", "mallory-secret"), "Alter"),
        (("users", "list"), "Describe"),
        (("acls", "add", "--allow-principal", "User:dave", "--cluster"), "Alter"),
        (("acls", "remove", "--allow-principal", "User:dave", "--topic", "daves"), "Alter"),
        (("acls", "list"), "Describe"),
        (("quotas", "set", "--user", "dave", "--request-rate", "1000"), "AlterConfigs"),
        (
            (
                "quotas",
                "list",
            ),
            "DescribeConfigs",
        ),
        (("partitions", "reassign", "daves", "--replicas", "1,2"), "Alter"),
    ):
        one_line_error(sparklog(cluster, dave_config, *args), f"User:dave may not {operation} cluster 'kafka-cluster'")

    with Admin(config=cluster.client_config()) as admin:
        assert admin.describe_scram_credentials(["mallory"]) == {}  # nothing was done
        assert admin.describe_acls(AclFilter(principal="User:dave")) == [
            _allow("dave", Operation.ALL, ResourceType.TOPIC, "daves")
        ]
        # Describe on the cluster lets dave look, not change; AlterConfigs also lets him describe quotas
        admin.create_acls(
            [
                _allow("dave", op, ResourceType.CLUSTER, CLUSTER_NAME)
                for op in (Operation.DESCRIBE, Operation.ALTER_CONFIGS)
            ]
        )
    with Admin(config=config_of(cluster, "dave", "dave-secret")) as dave:
        wait_for(lambda: not refused(dave.describe_acls), TIMEOUT_S, "Describe on the cluster")
        assert "dave" in dave.describe_scram_credentials()
        assert refused(lambda: dave.create_acls([binding]))
        dave.set_client_quota("dave", Quota(request_rate=1000))
        assert dave.describe_client_quotas()["dave"] == Quota(request_rate=1000)
        assert dave.remove_client_quota("dave")


def _allow(user: str, operation: Operation, resource_type: ResourceType, name: str) -> AclBinding:
    return AclBinding.parse(ResourcePattern(resource_type, name), f"User:{user}", "*", operation, "Allow")


# ----------------------------------------------------------------- what the broker is sent
def test_the_password_never_reaches_the_broker(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    password = "erin-\u00fcnique-secret"
    sent: list[tuple[str, dict[str, Any]]] = []
    with Admin(config=cluster.client_config()) as admin:
        ask = admin.view._ask  # type: ignore[attr-defined]

        def spy(location: str, action: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
            sent.append((action, json.loads(wire.encode(body))))  # what goes on the wire
            return ask(location, action, body, timeout_s)

        monkeypatch.setattr(admin.view, "_ask", spy)
        assert admin.upsert_scram_credential("erin", password, iterations=4096) is True
    [(action, body)] = [(a, b) for a, b in sent if a == wire.ALTER_USER_SCRAM_CREDENTIALS]
    [upsertion] = body["upsertions"]
    assert set(upsertion) == {"name", "mechanism", "iterations", "salt", "salted_password"}
    assert (upsertion["name"], upsertion["mechanism"], upsertion["iterations"]) == ("erin", "SCRAM-SHA-256", 4096)
    salt, salted = base64.b64decode(upsertion["salt"]), base64.b64decode(upsertion["salted_password"])
    assert len(salt) == 32 and salted == salted_password(password, salt, 4096)
    everything = json.dumps(sent)
    for form in (password, password.encode().hex(), base64.b64encode(password.encode()).decode()):
        assert form not in everything
    with Admin(config=config_of(cluster, "erin", password)) as erin:  # the credential stored works
        assert erin.list_topics() == []


# ----------------------------------------------------------------- bad requests
def test_bad_admin_requests_are_typed_errors_and_store_nothing(cluster: LocalCluster) -> None:
    good_salt = new_salt()
    good = {
        "name": "frank",
        "mechanism": "SCRAM-SHA-256",
        "iterations": 4096,
        "salt": base64.b64encode(good_salt).decode(),
        "salted_password": base64.b64encode(salted_password("frank-secret", good_salt, 4096)).decode(),
    }
    acl = _allow("frank", Operation.READ, ResourceType.TOPIC, "franks").to_json()
    bad: list[tuple[str, dict[str, Any], type[SparklogError], str]] = [
        (
            wire.ALTER_USER_SCRAM_CREDENTIALS,
            {"upsertions": [{**good, "iterations": 10}]},
            UnacceptableCredential,
            "4096",
        ),
        (wire.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [{**good, "salt": "%%%"}]}, InvalidRequest, "base64"),
        (
            wire.ALTER_USER_SCRAM_CREDENTIALS,
            {"upsertions": [{**good, "salted_password": "AAAA"}]},
            UnacceptableCredential,
            "32 bytes",
        ),
        (
            wire.ALTER_USER_SCRAM_CREDENTIALS,
            {"upsertions": [{**good, "mechanism": "MD5"}]},
            UnacceptableCredential,
            "MD5",
        ),
        (wire.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": [good, {**good, "name": "../x"}]}, InvalidUserName, "../x"),
        (
            wire.ALTER_USER_SCRAM_CREDENTIALS,
            {"upsertions": [good], "deletions": [{"name": "frank", "mechanism": "SCRAM-SHA-256"}]},
            InvalidRequest,
            "more than once",
        ),
        (wire.ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": "frank"}, InvalidRequest, "'upsertions' must be a list"),
        (wire.ALTER_USER_SCRAM_CREDENTIALS, {}, InvalidRequest, "names no user"),
        (wire.CREATE_ACLS, {"acls": [acl, {**acl, "operation": "Fly"}]}, InvalidRequest, "unknown operation 'Fly'"),
        (wire.CREATE_ACLS, {"acls": [acl, {**acl, "principal": "alice"}]}, InvalidRequest, "User:<name>"),
        (wire.DELETE_ACLS, {"filters": [{"principal": "User:admin"}]}, InvalidRequest, "resource pattern"),
        (wire.DESCRIBE_ACLS, {"filter": {"pattern_type": "match"}}, InvalidRequest, "needs a resource"),
        (
            wire.ALTER_CLIENT_QUOTAS,
            {
                "entries": [
                    {"user": "frank", "quota": {"request_rate": 10}},
                    {"user": "gina", "quota": {"request_rate": -1}},
                ]
            },
            InvalidRequest,
            "positive",
        ),
        (
            wire.ALTER_CLIENT_QUOTAS,
            {"entries": [{"user": "frank", "quota": {"speed": 1}}]},
            InvalidRequest,
            "unknown quota rate",
        ),
        (
            wire.ALTER_PARTITION_REASSIGNMENTS,
            {"topic": "ledger-x", "partitions": {"0": ["1"]}},
            InvalidRequest,
            "broker ids",
        ),
        (wire.ALTER_PARTITION_REASSIGNMENTS, {"topic": "../x", "partitions": {"0": [1]}}, InvalidRequest, "topic name"),
    ]
    with Admin(config=cluster.client_config()) as admin:
        admin.create_topic("franks", 1, 1)
        for action, body, error, fragment in bad:
            with pytest.raises(error, match=re.escape(fragment)):
                admin.view.call(action, body)  # type: ignore[attr-defined]
        with pytest.raises(InvalidRequest, match=r"brokers \[9\] are not live"):  # the ZooKeeper path's check
            admin.reassign_partitions("franks", {0: [9]})
        assert admin.describe_scram_credentials(["frank", "gina"]) == {}
        assert admin.describe_acls(AclFilter(principal="User:frank")) == []
        assert "frank" not in admin.describe_client_quotas()
        assert admin.describe_topic("franks")["partitions"][0]["replicas"] in ([1], [2])
        assert admin.view.call(wire.LIST_PARTITION_REASSIGNMENTS, {"topic": "franks"}) == {"partitions": None}  # type: ignore[attr-defined]


# ----------------------------------------------------------------- the ZooKeeper way still works
def test_users_through_zookeeper_as_before(sparklog_connect: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ZOOKEEPER_ENV}

    def users(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        command = [*CLI, "users", *args, "--zookeeper", sparklog_connect]
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, env=env)

    assert users("add", "hank", stdin="hank-secret\n").stdout == "added user 'hank'\n"
    assert (
        users("add", "hank", "--iterations", "16384", stdin="new\n").stdout == "changed the password of user 'hank'\n"
    )
    assert users("list").stdout == "hank\n"
    one_line_error(users("add", "ivan", "--iterations", "100", stdin="x\n"), "iterations must be from 4096 to 16384")
    assert users("remove", "hank").stdout == "removed user 'hank'\n"
    assert users("list").stdout == ""
