"""What a Kafka API handler is: the API it serves (request and response classes generated from
Kafka's JSON message schemas by kafka-python's ``kafka.protocol``, and the versions answered) and
the function answering one request, given the request's context."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparklog.kafka.authorization import ApiPermissions
from sparklog.kafka.coordinator import GroupCoordinator
from sparklog.kafka.session import ConnectionSession
from sparklog.security.principal import ANONYMOUS

if TYPE_CHECKING:
    from sparklog.kafka.broker_access import KafkaBroker

# kafka-python's generated message classes carry no type information
Message = Any


@dataclasses.dataclass(frozen=True)
class ApiSpec:
    """One Kafka API as served here: its classes and the versions answered (``min_version`` at
    Kafka 4's floor, ``max_version`` where the API starts naming topics by id, which sparklog's
    topics do not have)."""

    request: Any  # a kafka.protocol ApiMessage request class
    response: Any
    min_version: int
    max_version: int

    @property
    def key(self) -> int:
        return int(self.request.API_KEY)

    @property
    def name(self) -> str:
        return str(self.request.name)


@dataclasses.dataclass
class ListenerState:
    """What the handlers of one broker's Kafka listener share between requests and connections."""

    specs: tuple[ApiSpec, ...]  # every API served (ApiVersions lists them)
    groups: GroupCoordinator = dataclasses.field(default_factory=GroupCoordinator)  # classic groups here
    auto_create_topics: bool = True  # auto.create.topics.enable: Metadata may create what it is asked for
    fetch_compression: int = 3  # the codec fetched batches go out with (Kafka's numbers: 3 lz4, 0 none)
    protocol: str = "PLAINTEXT"  # the listener's security protocol: brokers are answered at theirs


def _connected() -> bool:
    return False


def _everything() -> ApiPermissions:
    """Permissions that allow everything, with no API row (a context made outside a listener)."""
    return ApiPermissions(None, None, ANONYMOUS, "")


@dataclasses.dataclass
class RequestContext:
    """One request as its handler sees it: the version it came in (the response goes out in the
    same), who sent it (``may``: its principal and what its API's row lets it do,
    :mod:`sparklog.kafka.authorization`), and the broker and listener-wide state the handler may
    use. A handler that waits (a long-poll fetch) gives up once the listener is ``stopping`` or the
    client is gone (``client_gone``: it closed the connection), so a client that leaves frees its
    connection."""

    api_version: int
    correlation_id: int
    client_id: str | None
    peer: tuple[str, int]
    broker: KafkaBroker
    listener: ListenerState
    stopping: Callable[[], bool]
    client_gone: Callable[[], bool] = _connected
    may: ApiPermissions = dataclasses.field(default_factory=_everything)  # what the principal may do
    session: ConnectionSession = dataclasses.field(default_factory=ConnectionSession)  # the connection's login
    close_after: bool = False  # set by a handler: close the connection once this answer is sent
    remote_s: float = 0.0  # set by a handler: the time it waited for other brokers (acks=all: followers)

    @property
    def principal(self) -> str:
        return self.may.principal

    def response(self, spec: ApiSpec, **fields: Any) -> Message:
        """The response to this request, in its version."""
        return spec.response[self.api_version](**fields)


Handler = Callable[[Message, RequestContext], Message | None]  # None: no response (acks=0 produce)


@dataclasses.dataclass(frozen=True)
class ApiHandler:
    spec: ApiSpec
    handle: Handler
