"""The kazoo client every sparklog process talks to ZooKeeper with (brokers, clients, tools), made to
find a ZooKeeper that was away (restarted) again soon enough to keep its session, and with it its
ephemeral nodes (a broker's registration) and locks (a consumer group member's partitions).

ZooKeeper keeps sessions in its data dir and, once it is up again, gives each its whole timeout
anew: a client back within that keeps everything. Two of kazoo's defaults made clients miss it:

- after each failed connection attempt kazoo waits twice as long, up to an hour, so a ZooKeeper
  that was away for a while is found again up to about as long again later (attempts 3.3 s and
  6.6 s after the loss, then 13 s...), past a broker's 4 s session. Here attempts are at most
  ``RECONNECT_MAX_DELAY_S`` apart (0.7 s with kazoo's jitter).
- kazoo waits the whole session timeout for the answer to its session request. ZooKeeper (3.8)
  accepts connections a little before it serves them and leaves a connection it refused in that
  gap open without an answer, so a client reconnecting to a starting ZooKeeper sat in it for its
  whole timeout and came back to an expired session (a consumer lost its group membership). Here
  the answer is awaited at most a third of the session timeout, then the client connects anew.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry

RECONNECT_MAX_DELAY_S = 0.5
CONNECT_ANSWER_SHARE = 1 / 3  # of the session timeout: how long a session request's answer is awaited


def zookeeper_client(hosts: str, timeout: float, **options: Any) -> KazooClient:
    """A kazoo client of ``hosts`` with a ``timeout`` s session (``options``: more ``KazooClient``
    arguments, e.g. authentication), not started."""
    client = KazooClient(
        hosts=hosts,
        timeout=timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S),
        **options,
    )
    kazoo_handler = client._connection
    client._connection = _PromptConnection(
        client, client._conn_retry.copy(), logger=client.logger, sasl_options=kazoo_handler.sasl_options
    )
    return client


class _PromptConnection(ConnectionHandler):
    """kazoo's connection handler, giving up on a session request unanswered for a third of the
    session timeout (kazoo's own waits all of it): the client then connects again."""

    def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        if isinstance(request, Connect):
            timeout = min(timeout, self.client._session_timeout / 1000.0 * CONNECT_ANSWER_SHARE)
        return super()._invoke(timeout, request, xid)
