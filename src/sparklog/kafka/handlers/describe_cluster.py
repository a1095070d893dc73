"""DescribeCluster: the live brokers at their advertised Kafka addresses, the controller and the
cluster's id (what Metadata says of them, without topics). Only brokers are described (endpoint
type 1): sparklog has no KRaft controllers to list (type 2 is ``UNSUPPORTED_ENDPOINT_TYPE``).
Authorized operations are not reported."""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext

API = ApiSpec(DescribeClusterRequest, DescribeClusterResponse, 0, 2)

BROKERS = 1  # endpoint_type

Broker = DescribeClusterResponse.DescribeClusterBroker


def handle(request: Message, ctx: RequestContext) -> Message:
    cluster = ctx.broker.cluster([], ctx.listener.protocol)
    if ctx.api_version >= 1 and request.endpoint_type != BROKERS:
        return ctx.response(
            API,
            throttle_time_ms=0,
            error_code=error_codes.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"endpoint type {request.endpoint_type} is not served: only brokers (1) are described",
            endpoint_type=request.endpoint_type,
            cluster_id=cluster.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    brokers = [
        Broker(broker_id=b.broker_id, host=b.host, port=b.port, rack=None, is_fenced=False) for b in cluster.brokers
    ]
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=error_codes.NONE,
        error_message=None,
        endpoint_type=BROKERS,
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        brokers=brokers,
    )
