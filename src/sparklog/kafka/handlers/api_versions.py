"""ApiVersions: which APIs and versions this listener answers. A version it does not know is
answered in version 0 with ``UNSUPPORTED_VERSION`` and the table (the server does that before any
handler), so a newer client falls back to a version both sides speak."""

from __future__ import annotations

from collections.abc import Iterable

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext

API = ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 4)


def version_table(specs: Iterable[ApiSpec]) -> list[Message]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
        for s in sorted(specs, key=lambda s: s.key)
    ]


def answer(version: int, specs: Iterable[ApiSpec], error: int = error_codes.NONE) -> Message:
    fields = {"error_code": error, "api_keys": version_table(specs)}
    if version >= 1:
        fields["throttle_time_ms"] = 0
    return ApiVersionsResponse[version](**fields)


def handle(_request: Message, ctx: RequestContext) -> Message:
    return answer(ctx.api_version, ctx.listener.specs)
