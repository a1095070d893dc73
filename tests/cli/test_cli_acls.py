"""``sparklog acls add|remove|list`` run as subprocesses against a real ZooKeeper (each test under its
own chroot)."""

from __future__ import annotations

import os
import subprocess
import sys

from sparklog.coordination.cluster import ClusterMetadata
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern, ResourceType

CLI = [sys.executable, "-m", "sparklog.cli.main"]
HEADER = "RESOURCE-TYPE"


def run(*args: str, zk: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_DEBUG")}
    command = [*CLI, "acls", *args, *(["--zookeeper", zk] if zk else [])]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def ok(*args: str, zk: str) -> str:
    result = run(*args, zk=zk)
    assert result.returncode == 0, f"sparklog acls {' '.join(args)} failed:\n{result.stderr}"
    assert result.stderr == "", result.stderr
    return result.stdout


def rows(output: str) -> list[tuple[str, ...]]:
    """The rows of ``acls list``'s table, as tuples of its columns (the header checked)."""
    lines = output.splitlines()
    assert lines[0].split() == ["RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    return [tuple(line.split()) for line in lines[1:]]


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sparklog: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_acls_add_list_remove(sparklog_connect: str) -> None:
    zk = sparklog_connect
    out = ok(
        "add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "read",
        "--operation",
        "Write",
        "--topic",
        "events",
        zk=zk,
    )
    assert out.strip() == "added 2 ACLs to topic 'events'"
    out = ok("add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "events", zk=zk)
    assert out.strip() == "added 0 ACLs to topic 'events'; 1 was there already"
    ok(
        "add",
        "--deny-principal",
        "User:bob",
        "--deny-host",
        "10.0.0.9",
        "--topic",
        "events-",
        "--resource-pattern-type",
        "PREFIXED",
        zk=zk,
    )  # no --operation: All, as in kafka-acls
    ok("add", "--allow-principal", "User:*", "--operation", "Describe", "--topic", "*", zk=zk)
    ok("add", "--allow-principal", "User:broker", "--operation", "ClusterAction", "--cluster", zk=zk)
    ok(
        "add",
        "--allow-principal",
        "User:etl",
        "--allow-principal",
        "User:bob",
        "--operation",
        "Read",
        "--group",
        "etl",
        zk=zk,
    )

    everything = rows(ok("list", zk=zk))
    assert everything == [
        ("Cluster", "kafka-cluster", "literal", "User:broker", "*", "ClusterAction", "Allow"),
        ("Group", "etl", "literal", "User:bob", "*", "Read", "Allow"),
        ("Group", "etl", "literal", "User:etl", "*", "Read", "Allow"),
        ("Topic", "*", "literal", "User:*", "*", "Describe", "Allow"),
        ("Topic", "events", "literal", "User:alice", "*", "Read", "Allow"),
        ("Topic", "events", "literal", "User:alice", "*", "Write", "Allow"),
        ("Topic", "events-", "prefixed", "User:bob", "10.0.0.9", "All", "Deny"),
    ]
    assert rows(ok("list", "--topic", "events", zk=zk)) == everything[4:6]
    assert rows(ok("list", "--principal", "User:bob", zk=zk)) == [everything[1], everything[6]]
    assert rows(ok("list", "--topic", "events-1", "--resource-pattern-type", "match", zk=zk)) == [
        everything[3],
        everything[6],
    ]
    assert rows(ok("list", "--topic", "events-", "--resource-pattern-type", "any", zk=zk)) == [everything[6]]
    assert rows(ok("list", "--cluster", zk=zk)) == [everything[0]]

    # what the CLI wrote is what the store (and so a broker's cache) reads
    with ClusterMetadata(zk) as meta:
        stored = AclStore(meta.zk, meta.layout).list_acls(ResourceType.TOPIC, "events")
    pattern = ResourcePattern(ResourceType.TOPIC, "events")
    assert stored == [
        AclBinding.parse(pattern, "User:alice", "*", "Read", "Allow"),
        AclBinding.parse(pattern, "User:alice", "*", "Write", "Allow"),
    ]

    out = ok(
        "remove",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--operation",
        "Alter",
        "--topic",
        "events",
        zk=zk,
    )
    assert out.strip() == "removed 1 ACL from topic 'events'; 1 was not there"
    assert rows(ok("list", "--topic", "events", zk=zk)) == [everything[4]]
    one_line_error(run("remove", "--group", "etl", zk=zk), "or --force to remove every ACL of group 'etl'")
    assert ok("remove", "--group", "etl", "--force", zk=zk).strip() == "removed 2 ACLs from group 'etl'"
    assert rows(ok("list", "--group", "etl", zk=zk)) == []

    # the Spark sink's state: its transactional id (a batch write's is batch-<uuid>)
    out = ok(
        "add",
        "--allow-principal",
        "User:etl",
        "--operation",
        "Write",
        "--transactional-id",
        "batch-",
        "--resource-pattern-type",
        "prefixed",
        zk=zk,
    )
    assert out.strip() == "added 1 ACL to transactional ids prefixed 'batch-'"
    assert rows(ok("list", "--transactional-id", "batch-42", "--resource-pattern-type", "match", zk=zk)) == [
        ("TransactionalId", "batch-", "prefixed", "User:etl", "*", "Write", "Allow")
    ]


def test_acls_errors_are_one_clear_line(sparklog_connect: str) -> None:
    # checked before connecting: no ZooKeeper needed for these
    one_line_error(
        run("add", "--allow-principal", "User:alice", "--operation", "Reed", "--topic", "t"),
        "unknown operation 'Reed'; use one of Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
        "DescribeConfigs, AlterConfigs, All",
    )
    one_line_error(
        run("add", "--allow-principal", "alice", "--topic", "t"), "principal 'alice' must be written 'User:<name>'"
    )
    one_line_error(
        run("add", "--allow-principal", "User:alice", "--operation", "Write", "--group", "g"),
        "operation Write does not apply to groups; use one of Read, Delete, Describe, All",
    )
    one_line_error(
        run("add", "--allow-principal", "User:alice", "--topic", "t", "--resource-pattern-type", "wild"),
        "unknown resource pattern type 'wild'; use one of literal, prefixed",
    )
    one_line_error(
        run("add", "--topic", "t", zk=sparklog_connect), "at least one --allow-principal or --deny-principal"
    )
    one_line_error(
        run("add", "--allow-principal", "User:a", "--deny-host", "10.0.0.1", "--topic", "t"),
        "--deny-host goes with --deny-principal",
    )
    one_line_error(run("list", "--topic", "a/b", zk=sparklog_connect), "invalid topic name 'a/b'")
    # argparse's own errors are one line too
    one_line_error(run("add", "--allow-principal", "User:a", "--topic", "t", "--cluster"), "not allowed with argument")
    # nothing was written by any of them
    assert rows(ok("list", zk=sparklog_connect)) == []
