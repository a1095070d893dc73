"""ACLs as Kafka has them: who (principal, host) may or may not do what (operation) to which resources
(a resource pattern), and Kafka's rule for deciding a request with them.

- A :class:`ResourcePattern` names topics, groups, transactional ids (an exactly-once Spark sink's
  state) or the cluster (``kafka-cluster``): one name
  (``literal``; the literal name ``*`` is every resource of the type) or every name starting with a
  prefix (``prefixed``).
- An :class:`AclBinding` allows or denies one principal (``User:alice``, or ``User:*`` for everyone)
  one :class:`Operation` on a pattern, from one host (an IP address, or ``*`` for any).
- :func:`acls_allow` decides a request: a matching Deny wins over any Allow; without a matching
  Allow the request is refused. An Allow of Read, Write, Delete or Alter also allows Describe; All
  stands for every operation, an Allow of AlterConfigs also allows DescribeConfigs (Kafka's
  implication rules; a Deny of Read does not deny Describe).
- An :class:`AclFilter` selects bindings (Kafka's ``AclBindingFilter``): what describing and deleting
  ACLs take, through ZooKeeper or a broker alike.
- :class:`AclIndex` holds bindings grouped by pattern, so the ones that could match a resource are
  found with a few dict lookups (the ones of the name, of ``*``, and one per prefix length in use).

Every value is parsed case-insensitively from text (``read``, ``CLUSTER_ACTION``, ``Prefixed``), and a
bad one is an :class:`InvalidRequest` naming it and the allowed ones.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from typing import Self

from sparklog.errors import InvalidRequest
from sparklog.names import check_group_id, check_topic_name, check_transactional_id
from sparklog.security.principal import parse_principal

WILDCARD = "*"  # the literal resource name of every resource of a type; also a principal's name and a host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource (Kafka's name)


class _AclEnum(enum.Enum):
    """An enum parsed from its name in any case, with ``_`` and ``-`` ignored."""

    @classmethod
    def kind(cls) -> str:
        """What a value is called in error messages."""
        raise NotImplementedError

    @classmethod
    def parse(cls, text: object) -> Self:
        if isinstance(text, cls):
            return text
        if isinstance(text, str):
            key = text.replace("_", "").replace("-", "").lower()
            for member in cls:
                if member.value.lower() == key:
                    return member
        allowed = ", ".join(member.value for member in cls)
        raise InvalidRequest(f"unknown {cls.kind()} {text!r:.80}; use one of {allowed}")

    def __str__(self) -> str:
        return str(self.value)


class Operation(_AclEnum):
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"  # on the cluster: describe client quotas (Kafka's)
    ALTER_CONFIGS = "AlterConfigs"  # on the cluster: alter client quotas (Kafka's)
    ALL = "All"

    @classmethod
    def kind(cls) -> str:
        return "operation"

    def grants(self, requested: Operation) -> bool:
        """Whether an Allow of this operation allows ``requested``: itself, everything for All,
        Describe for Read, Write, Delete and Alter, and DescribeConfigs for AlterConfigs."""
        return (
            self is requested
            or self is Operation.ALL
            or (requested is Operation.DESCRIBE and self in _DESCRIBERS)
            or (requested is Operation.DESCRIBE_CONFIGS and self is Operation.ALTER_CONFIGS)
        )

    def denies(self, requested: Operation) -> bool:
        """Whether a Deny of this operation denies ``requested``: itself, and everything for All."""
        return self is requested or self is Operation.ALL


_DESCRIBERS = frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})


class ResourceType(_AclEnum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"  # an exactly-once Spark sink's state (its id: the query id)

    @classmethod
    def kind(cls) -> str:
        return "resource type"

    @property
    def label(self) -> str:
        """The type in a sentence (``topic``, ``transactional id``)."""
        return "transactional id" if self is ResourceType.TRANSACTIONAL_ID else self.value.lower()

    @property
    def operations(self) -> tuple[Operation, ...]:
        """The operations an ACL on this type may name (Kafka's lists, cut to sparklog's operations)."""
        return _OPERATIONS[self]


_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.ALL,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE, Operation.ALL),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.ALL,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.WRITE, Operation.DESCRIBE, Operation.ALL),
}


_NAME_CHECKS = {
    ResourceType.TOPIC: check_topic_name,
    ResourceType.GROUP: check_group_id,
    ResourceType.TRANSACTIONAL_ID: check_transactional_id,
}


class PatternType(_AclEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"

    @classmethod
    def kind(cls) -> str:
        return "resource pattern type"


class Permission(_AclEnum):
    ALLOW = "Allow"
    DENY = "Deny"

    @classmethod
    def kind(cls) -> str:
        return "permission"


def parse_host(text: object) -> str:
    """``*`` or an IP address as :mod:`ipaddress` writes it (``::1``); ACLs match the client's
    address, never a host name (as in Kafka)."""
    if text == WILDCARD:
        return WILDCARD
    try:
        if isinstance(text, str):
            return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        pass
    raise InvalidRequest(f"host {text!r:.80} must be '*' or an IP address such as 10.0.0.1 or ::1")


@dataclasses.dataclass(frozen=True)
class ResourcePattern:
    """The resources an ACL is about: ``name`` itself (``literal``; ``*`` = every resource of the
    type), or every name starting with ``name`` (``prefixed``). The cluster is ``literal kafka-cluster``."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if not isinstance(self.resource_type, ResourceType) or not isinstance(self.pattern_type, PatternType):
            raise InvalidRequest(
                f"a resource pattern takes a ResourceType and a PatternType, got "
                f"{self.resource_type!r:.40} and {self.pattern_type!r:.40}"
            )
        if self.resource_type is ResourceType.CLUSTER:
            if self.name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL:
                shown = f"{self.pattern_type} {self.name!r:.80}"
                raise InvalidRequest(f"the cluster resource is the literal name {CLUSTER_NAME!r}, got {shown}")
        elif self.name == WILDCARD:
            if self.pattern_type is PatternType.PREFIXED:
                label = self.resource_type.label
                raise InvalidRequest(f"no {label} name starts with '*'; the literal name '*' means every {label}")
        else:
            _NAME_CHECKS[self.resource_type](self.name)

    @classmethod
    def parse(
        cls, resource_type: ResourceType | str, name: str, pattern_type: PatternType | str = PatternType.LITERAL
    ) -> ResourcePattern:
        return cls(ResourceType.parse(resource_type), name, PatternType.parse(pattern_type))

    @classmethod
    def cluster(cls) -> ResourcePattern:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource ``name`` of ``resource_type``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def __str__(self) -> str:
        label = self.resource_type.label
        if self.resource_type is ResourceType.CLUSTER:
            return "the cluster"
        if self.pattern_type is PatternType.PREFIXED:
            return f"{label}s prefixed {self.name!r}"
        if self.name == WILDCARD:
            return f"every {label}"
        return f"{label} {self.name!r}"


@dataclasses.dataclass(frozen=True)
class AclBinding:
    """One ACL: ``permission`` (Allow or Deny) of ``operation`` on ``pattern`` to ``principal``
    (``User:*``: everyone) calling from ``host`` (``*``: any). Values are checked: the principal
    written ``User:<name>``, the host normalized, the operation one that applies to the resource type
    (build from text with :meth:`parse`)."""

    pattern: ResourcePattern
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        if not isinstance(self.operation, Operation) or not isinstance(self.permission, Permission):
            raise InvalidRequest(
                f"an ACL takes an Operation and a Permission, got {self.operation!r:.40} and {self.permission!r:.40}"
            )
        if parse_principal(self.principal) != self.principal:
            raise InvalidRequest(f"principal {self.principal!r:.80} must be written 'User:<name>'")
        if parse_host(self.host) != self.host:
            raise InvalidRequest(f"host {self.host!r:.80} must be written {parse_host(self.host)!r}")
        allowed = self.pattern.resource_type.operations
        if self.operation not in allowed:
            raise InvalidRequest(
                f"operation {self.operation} does not apply to {self.pattern.resource_type.label}s; "
                f"use one of {', '.join(op.value for op in allowed)}"
            )

    @classmethod
    def parse(
        cls,
        pattern: ResourcePattern,
        principal: str,
        host: str,
        operation: Operation | str,
        permission: Permission | str,
    ) -> AclBinding:
        """A binding from text, each part checked and normalized (``read`` -> Read, ``::0:1`` -> ``::1``)."""
        principal, host = parse_principal(principal), parse_host(host)
        return cls(pattern, principal, host, Operation.parse(operation), Permission.parse(permission))

    def to_entry(self) -> dict[str, str]:
        """The binding as stored under its pattern's znode (the pattern is the znode's path)."""
        return {
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_entry(cls, pattern: ResourcePattern, entry: Mapping[str, object]) -> AclBinding:
        """The binding of a stored entry (:class:`InvalidRequest` if it is malformed)."""
        if not isinstance(entry, Mapping):
            raise InvalidRequest(f"an ACL entry must be an object, got {entry!r:.80}")
        try:
            return cls.parse(pattern, entry["principal"], entry["host"], entry["operation"], entry["permission"])  # type: ignore[arg-type]
        except KeyError as exc:
            raise InvalidRequest(f"ACL entry {dict(entry)!r:.120} has no {exc.args[0]!r}") from None

    def to_json(self) -> dict[str, str]:
        """The binding as the ACL actions carry it (pattern and entry)."""
        pattern = self.pattern
        return {
            "resource_type": pattern.resource_type.value,
            "name": pattern.name,
            "pattern_type": pattern.pattern_type.value,
            **self.to_entry(),
        }

    @classmethod
    def from_json(cls, raw: object) -> AclBinding:
        """A binding as :meth:`to_json` writes it, every part checked (:class:`InvalidRequest`)."""
        if not isinstance(raw, Mapping):
            raise InvalidRequest(f"an ACL must be a JSON object, got {raw!r:.80}")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidRequest(f"an ACL's resource 'name' must be a string, got {name!r:.80}")
        pattern = ResourcePattern.parse(raw.get("resource_type"), name, raw.get("pattern_type"))  # type: ignore[arg-type]
        return cls.from_entry(pattern, raw)

    def applies_to(self, principal: str, host: str) -> bool:
        """Whether this binding is about ``principal`` calling from ``host``."""
        return (self.principal == principal or self.principal == WILDCARD_PRINCIPAL) and (
            self.host == host or self.host == WILDCARD
        )

    def __str__(self) -> str:
        return f"{self.permission} {self.principal} {self.operation} on {self.pattern} from host {self.host}"


ANY_PATTERN = "any"  # a filter's pattern type: literal and prefixed patterns alike
MATCH = "match"  # a filter's pattern type: every pattern that covers the named resource
_FILTER_FIELDS = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission")


def filter_pattern_type(text: object) -> tuple[PatternType | None, bool]:
    """A filter's resource pattern type: ``literal`` or ``prefixed`` (that type), ``any`` or None
    (None: both), ``match`` (None, and True: every pattern covering the resource)."""
    if text is None or (isinstance(text, str) and text.lower() == ANY_PATTERN):
        return None, False
    if isinstance(text, str) and text.lower() == MATCH:
        return None, True
    try:
        return PatternType.parse(text), False
    except InvalidRequest:
        raise InvalidRequest(
            f"unknown resource pattern type {text!r:.80}; use one of literal, prefixed, {ANY_PATTERN}, {MATCH}"
        ) from None


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """Which ACLs a describe or a delete is about (Kafka's ``AclBindingFilter``): each field given
    must be equal, None matches anything. ``match``: every binding whose pattern covers the
    resource ``name`` of ``resource_type`` (its literal name, ``*``, the prefixes it starts with;
    kafka-acls' ``--resource-pattern-type match``), so both must be given and ``pattern_type``
    not. ``name`` is compared as stored otherwise (``*``, a prefix or a name)."""

    resource_type: ResourceType | None = None
    name: str | None = None
    pattern_type: PatternType | None = None
    match: bool = False
    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def __post_init__(self) -> None:
        if self.name is not None and not isinstance(self.name, str):
            raise InvalidRequest(f"an ACL filter's resource name must be a string, got {self.name!r:.80}")
        if self.match:
            if self.resource_type is None or self.name is None or self.pattern_type is not None:
                raise InvalidRequest(
                    f"resource pattern type {MATCH} needs a resource (its type and name) and no other pattern type"
                )
            ResourcePattern(self.resource_type, self.name)  # a name no resource can have is the error
        elif self.resource_type is not None and self.name is not None and self.pattern_type is not None:
            ResourcePattern(self.resource_type, self.name, self.pattern_type)

    @classmethod
    def of(cls, binding: AclBinding) -> AclFilter:
        """The filter that matches ``binding`` alone."""
        pattern = binding.pattern
        return cls(
            pattern.resource_type,
            pattern.name,
            pattern.pattern_type,
            principal=binding.principal,
            host=binding.host,
            operation=binding.operation,
            permission=binding.permission,
        )

    @classmethod
    def of_pattern(cls, pattern: ResourcePattern) -> AclFilter:
        """The filter that matches every binding of ``pattern``."""
        return cls(pattern.resource_type, pattern.name, pattern.pattern_type)

    @property
    def pattern(self) -> ResourcePattern | None:
        """The one resource pattern the filter names, if it names one (type, name, literal or prefixed)."""
        if self.match or self.resource_type is None or self.name is None or self.pattern_type is None:
            return None
        return ResourcePattern(self.resource_type, self.name, self.pattern_type)

    def matches(self, binding: AclBinding) -> bool:
        pattern = binding.pattern
        if self.match:
            assert self.resource_type is not None and self.name is not None
            if not pattern.matches(self.resource_type, self.name):
                return False
        elif (
            (self.resource_type is not None and pattern.resource_type is not self.resource_type)
            or (self.name is not None and pattern.name != self.name)
            or (self.pattern_type is not None and pattern.pattern_type is not self.pattern_type)
        ):
            return False
        return (
            (self.principal is None or binding.principal == self.principal)
            and (self.host is None or binding.host == self.host)
            and (self.operation is None or binding.operation is self.operation)
            and (self.permission is None or binding.permission is self.permission)
        )

    def to_json(self) -> dict[str, str | None]:
        """The filter as the ACL actions carry it (null: any)."""
        pattern_type = MATCH if self.match else (self.pattern_type.value if self.pattern_type else None)
        return {
            "resource_type": self.resource_type.value if self.resource_type else None,
            "name": self.name,
            "pattern_type": pattern_type,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.value if self.operation else None,
            "permission": self.permission.value if self.permission else None,
        }

    @classmethod
    def from_json(cls, raw: object) -> AclFilter:
        """A filter as :meth:`to_json` writes it (a missing field or null: any), every part checked
        and normalized (:class:`InvalidRequest`)."""
        if not isinstance(raw, Mapping):
            raise InvalidRequest(f"an ACL filter must be a JSON object, got {raw!r:.80}")
        unknown = sorted(str(key) for key in raw if key not in _FILTER_FIELDS)
        if unknown:
            raise InvalidRequest(
                f"unknown ACL filter field(s) {', '.join(unknown)[:200]}; known: {', '.join(_FILTER_FIELDS)}"
            )
        get = raw.get
        pattern_type, match = filter_pattern_type(get("pattern_type"))
        optional = lambda value, parse: None if value is None else parse(value)  # noqa: E731
        return cls(
            optional(get("resource_type"), ResourceType.parse),
            get("name"),
            pattern_type,
            match,
            optional(get("principal"), parse_principal),
            optional(get("host"), parse_host),
            optional(get("operation"), Operation.parse),
            optional(get("permission"), Permission.parse),
        )


def acls_allow(
    bindings: Iterable[AclBinding],
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Kafka's decision: ``principal`` calling from ``host`` may do ``operation`` on the resource
    ``name`` of ``resource_type`` if a binding allows it (directly, through All, or Describe through
    Read/Write/Delete/Alter) and none denies it (directly or through All). Bindings of other
    resources, principals or hosts are ignored; no binding at all means refused."""
    allowed = False
    for binding in bindings:
        if not binding.pattern.matches(resource_type, name) or not binding.applies_to(principal, host):
            continue
        if binding.permission is Permission.DENY:
            if binding.operation.denies(operation):
                return False
        elif not allowed and binding.operation.grants(operation):
            allowed = True
    return allowed


_Key = tuple[ResourceType, PatternType, str]


class AclIndex:
    """An immutable set of bindings, grouped by pattern for :meth:`matching`."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        by_pattern: dict[_Key, dict[AclBinding, None]] = {}  # a dict as an ordered set
        prefix_lengths: dict[ResourceType, set[int]] = {}
        for binding in bindings:
            pattern = binding.pattern
            by_pattern.setdefault((pattern.resource_type, pattern.pattern_type, pattern.name), {})[binding] = None
            if pattern.pattern_type is PatternType.PREFIXED:
                prefix_lengths.setdefault(pattern.resource_type, set()).add(len(pattern.name))
        self._by_pattern = {key: tuple(found) for key, found in by_pattern.items()}
        self._prefix_lengths = {rt: tuple(sorted(lengths)) for rt, lengths in prefix_lengths.items()}

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers the resource: those of ``name``, of ``*`` and of every
        prefix of ``name`` that a prefixed pattern uses."""
        get = self._by_pattern.get
        found = list(get((resource_type, PatternType.LITERAL, name), ()))
        if name != WILDCARD:
            found.extend(get((resource_type, PatternType.LITERAL, WILDCARD), ()))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found.extend(get((resource_type, PatternType.PREFIXED, name[:length]), ()))
        return found

    def __iter__(self) -> Iterator[AclBinding]:
        for found in self._by_pattern.values():
            yield from found

    def __len__(self) -> int:
        return sum(len(found) for found in self._by_pattern.values())
