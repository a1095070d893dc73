"""CreateAcls: ACLs added to the ones in ZooKeeper that every broker enforces and ``sparklog acls``
manages (Kafka's numbers: :mod:`sparklog.kafka.security_admin`), each creation with its own result:
a bad one (a resource type, operation or pattern type sparklog has no ACLs of, ANY or MATCH, a
cluster resource not named ``kafka-cluster``, an operation that does not apply to the resource
type, a principal not ``User:<name>``, a host not ``*`` or an IP address) is ``INVALID_REQUEST``
naming what is wrong, and the others are stored together, in one change. An ACL already stored is
no error. Answered whether or not the brokers enforce ACLs, as sparklog's own ACL administration
is; Alter on the cluster when they do."""

from __future__ import annotations

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.security.acl_store import MAX_ACLS
from sparklog.security.acls import AclBinding

API = ApiSpec(CreateAclsRequest, CreateAclsResponse, 1, 3)

Result = CreateAclsResponse.AclCreationResult


def _parsed(creation: Message) -> AclBinding | SparklogError:
    try:
        return security_admin.binding_of(creation)
    except SparklogError as exc:
        return exc


def handle(request: Message, ctx: RequestContext) -> Message:
    creations = request.creations
    refused = security_admin.refused_on_cluster(ctx) or security_admin.too_many(len(creations), MAX_ACLS, "ACLs")
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, results=[Result(**refused) for _ in creations])
    parsed = [_parsed(creation) for creation in creations]
    bindings = [binding for binding in parsed if isinstance(binding, AclBinding)]
    failed: SparklogError | None = None
    if bindings:
        try:
            ctx.broker.create_acls(bindings)
        except SparklogError as exc:
            failed = exc
    results = [Result(**admin.error_fields(p if isinstance(p, SparklogError) else failed)) for p in parsed]
    return ctx.response(API, throttle_time_ms=0, results=results)
