"""The Flight clients one cluster client holds: one per broker location and connection number, each
on its own TCP connection (``wire.flight_client``), made on first use and kept until forgotten.

Connection 0 carries a client's requests (metadata, offsets, produce streams) and, in a consumer,
the fetches of the partitions that :func:`sparklog.client.cluster_client.fetch_connection` puts
there; the others carry fetches only. A client's metadata view (:class:`~sparklog.client.broker_view.BrokerView`)
shares connection 0 instead of opening one more connection: every Flight client costs a thread
(Arrow's gRPC transport keeps one per client) besides its socket.
"""

from __future__ import annotations

import threading

import pyarrow.flight as flight

from sparklog.protocol import wire
from sparklog.security.client_config import PLAINTEXT, ClientSecurity


class FlightClients:
    """Flight clients by ``(location, connection)``, safe to use from many threads."""

    def __init__(self, security: ClientSecurity = PLAINTEXT) -> None:
        self.security = security
        self._clients: dict[tuple[str, int], flight.FlightClient] = {}
        self._lock = threading.Lock()

    def get(self, location: str, connection: int = 0) -> flight.FlightClient:
        """The client of that location's connection, connecting (and, with SASL, authenticating:
        :class:`~sparklog.errors.AuthenticationFailed`) on first use."""
        key = (location, connection)
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    client = self._clients[key] = wire.flight_client(
                        location, own_connection=True, security=self.security
                    )
        return client

    def forget(self, location: str) -> None:
        """Drop the clients of an unreachable location (the next call connects anew). They are not
        closed here: another thread may be in a call on one; they close when collected."""
        with self._lock:
            for key in [k for k in self._clients if k[0] == location]:
                del self._clients[key]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
