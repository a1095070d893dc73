"""``sparklog acls add|remove|list``: ACLs with kafka-acls' flags. With ``--bootstrap-server`` /
``--command-config`` through brokers (Kafka's CreateAcls/DeleteAcls/DescribeAcls: Alter, or for
``list`` Describe, on the cluster; no ZooKeeper access needed), else in ZooKeeper directly."""

from __future__ import annotations

import argparse

from sparklog.cli.common import CliError, add_cluster_options, admin, print_table
from sparklog.security.acls import (
    ANY_PATTERN,
    CLUSTER_NAME,
    MATCH,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    filter_pattern_type,
)
from sparklog.security.principal import parse_principal

LIST_HEADERS = ("RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
OPERATIONS = "|".join(op.value for op in Operation)
# list only: every pattern type, or every pattern that covers the named resource (kafka-acls' names)
ANY = ANY_PATTERN


def add_acls(sub: argparse._SubParsersAction) -> None:
    acls = sub.add_parser("acls", help="add, remove and list ACLs: who may do what to topics, groups and the cluster")
    asub = acls.add_subparsers(dest="acls_command", required=True, metavar="ACTION")

    p = asub.add_parser(
        "add",
        help="allow or deny principals operations on a resource",
        description="Adds one ACL per principal, host and operation given. A request is allowed when an ACL "
        "allows it and none denies it; a resource without ACLs is refused to everyone but super users.",
    )
    _binding_options(p)
    add_cluster_options(p)
    p.set_defaults(handler=_add)

    p = asub.add_parser(
        "remove",
        help="remove ACLs of a resource",
        description="Removes the ACLs given as for 'add' (same defaults); without any principal, removes every "
        "ACL of the resource pattern (needs --force).",
    )
    _binding_options(p)
    p.add_argument("--force", action="store_true", help="with no principal: remove every ACL of the resource pattern")
    add_cluster_options(p)
    p.set_defaults(handler=_remove)

    p = asub.add_parser(
        "list",
        help="list ACLs, optionally of one resource or principal",
        description=f"Prints a table: {' '.join(LIST_HEADERS)}. With a resource, --resource-pattern-type "
        f"{ANY} lists its ACLs of every pattern type, and {MATCH} every ACL that applies to it (its name, "
        "'*' and the prefixes it starts with).",
    )
    _resource_options(p, required=False, pattern_types=f"literal|prefixed|{ANY}|{MATCH}")
    p.add_argument("--principal", metavar="User:NAME", help="only the ACLs of this principal")
    add_cluster_options(p)
    p.set_defaults(handler=_list)


def _resource_options(p: argparse.ArgumentParser, required: bool, pattern_types: str) -> None:
    resource = p.add_mutually_exclusive_group(required=required)
    resource.add_argument(
        "--topic", metavar="TOPIC", help="a topic, a prefix of topic names (prefixed), or '*' for every topic"
    )
    resource.add_argument("--group", metavar="GROUP", help="a consumer group, a prefix (prefixed), or '*'")
    resource.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    resource.add_argument(
        "--transactional-id",
        metavar="ID",
        help="an exactly-once Spark sink's state: its streaming query id (batch writes: 'batch-<uuid>'), "
        "a prefix, or '*'",
    )
    p.add_argument(
        "--resource-pattern-type",
        metavar=pattern_types,
        help="literal: the name itself (default); prefixed: every name starting with it",
    )


def _binding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME", help="repeat for several")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME", help="repeat for several")
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="an IP address or '*' (default: *)"
    )
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="an IP address or '*' (default: *)")
    p.add_argument(
        "--operation", action="append", default=[], metavar=OPERATIONS, help="repeat for several (default: All)"
    )
    _resource_options(p, required=True, pattern_types="literal|prefixed")


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str] | None:
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    return None


def _pattern(args: argparse.Namespace) -> ResourcePattern:
    resource = _resource(args)
    assert resource is not None  # argparse requires one for add and remove
    return ResourcePattern(*resource, PatternType.parse(args.resource_pattern_type or PatternType.LITERAL))


def _bindings(args: argparse.Namespace, pattern: ResourcePattern) -> list[AclBinding]:
    """The ACLs the options describe: each principal x host x operation, allowed or denied."""
    for side in ("allow", "deny"):
        if getattr(args, f"{side}_host") and not getattr(args, f"{side}_principal"):
            raise CliError(f"--{side}-host goes with --{side}-principal")
    operations = [Operation.parse(op) for op in args.operation] or [Operation.ALL]
    out = []
    for permission, principals, hosts in (
        (Permission.ALLOW, args.allow_principal, args.allow_host or ["*"]),
        (Permission.DENY, args.deny_principal, args.deny_host or ["*"]),
    ):
        for principal in principals:
            for host in hosts:
                out.extend(AclBinding.parse(pattern, principal, host, op, permission) for op in operations)
    return list(dict.fromkeys(out))


def _count(n: int) -> str:
    return f"{n} ACL{'' if n == 1 else 's'}"


def _add(args: argparse.Namespace) -> int:
    pattern = _pattern(args)
    bindings = _bindings(args, pattern)
    if not bindings:
        raise CliError("give at least one --allow-principal or --deny-principal")
    with admin(args) as client:
        added = client.create_acls(bindings)
    there = len(bindings) - len(added)
    print(
        f"added {_count(len(added))} to {pattern}"
        + (f"; {there} {'was' if there == 1 else 'were'} there already" if there else "")
    )
    return 0


def _remove(args: argparse.Namespace) -> int:
    pattern = _pattern(args)
    bindings = _bindings(args, pattern)
    if not bindings and not args.force:
        raise CliError(f"give the principals whose ACLs to remove, or --force to remove every ACL of {pattern}")
    filters = [AclFilter.of(b) for b in bindings] if bindings else [AclFilter.of_pattern(pattern)]
    with admin(args) as client:
        removed = client.delete_acls(filters)
    missing = len(bindings) - len(removed)
    print(
        f"removed {_count(len(removed))} from {pattern}"
        + (f"; {missing} {'was' if missing == 1 else 'were'} not there" if bindings and missing else "")
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    resource = _resource(args)
    principal = parse_principal(args.principal) if args.principal is not None else None
    pattern_type, match = filter_pattern_type(args.resource_pattern_type or ("literal" if resource else ANY))
    if match and resource is None:
        raise CliError(
            f"--resource-pattern-type {MATCH} needs a resource (--topic, --group, --transactional-id or --cluster)"
        )
    rt, name = resource if resource is not None else (None, None)
    found_filter = AclFilter(rt, name, pattern_type, match, principal)  # a bad name is the error, before connecting
    with admin(args) as client:
        found = client.describe_acls(found_filter)
    print_table(
        LIST_HEADERS,
        (
            (
                b.pattern.resource_type,
                b.pattern.name,
                b.pattern.pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission,
            )
            for b in found
        ),
    )
    return 0
