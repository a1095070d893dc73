"""A broker's Flight clients to the other brokers of its cluster: one per address, made on first use
over the inter-broker listener (``security.inter.broker.protocol``, with its TLS and SASL), kept
until the broker stops; and the leader endpoints its replica fetchers use
(:class:`~sparklog.broker.replication.leader_endpoint.FlightLeaderEndPoint`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow.flight as flight

from sparklog.broker.replication.leader_endpoint import FlightLeaderEndPoint
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable
from sparklog.protocol import wire
from sparklog.security.client_config import ClientSecurity

PEER_CALL_TIMEOUT_S = 5.0  # a frozen peer must not hang us


class PeerClients:
    """``live_brokers()``: the registrations this broker's watch keeps; ``read_brokers()``: read
    them from ZooKeeper now (a broker just registered may not have reached the watch)."""

    def __init__(
        self,
        broker_id: int,
        security: ClientSecurity,
        live_brokers: Callable[[], Mapping[int, BrokerInfo]],
        read_brokers: Callable[[], Mapping[int, BrokerInfo]],
    ) -> None:
        self.broker_id = broker_id
        self.security = security
        self.live_brokers = live_brokers
        self.read_brokers = read_brokers
        self._clients: dict[str, flight.FlightClient] = {}
        self._lock = threading.Lock()

    def client(self, broker_id: int) -> flight.FlightClient:
        """The client of broker ``broker_id`` (:class:`BrokerNotAvailable` if it is not live)."""
        info = self.live_brokers().get(broker_id) or self.read_brokers().get(broker_id)
        if info is None:
            raise BrokerNotAvailable(f"broker {broker_id} is not live")
        location = info.location_for(self.security.protocol)
        with self._lock:
            client = self._clients.get(location)
        if client is None:
            made = wire.flight_client(location, security=self.security)
            with self._lock:
                client = self._clients.setdefault(location, made)
            if client is not made:
                made.close()
        return client

    @staticmethod
    def call_action(client: flight.FlightClient, name: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            options = flight.FlightCallOptions(timeout=PEER_CALL_TIMEOUT_S)
            results = list(client.do_action(flight.Action(name, wire.encode(body)), options))
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc, "peer broker") from None
        return json.loads(results[0].body.to_pybytes())

    def high_watermarks(self, leader_id: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermarks of ``partitions`` broker ``leader_id`` leads, in one ``list_offsets``
        action; a partition it did not answer for (it no longer leads it, ...) is left out."""
        body = {"partitions": [{"topic": topic, "partition": p} for topic, p in partitions]}
        answers = self.call_action(self.client(leader_id), wire.LIST_OFFSETS, body)["results"]
        return {tp: int(a["high_watermark"]) for tp, a in zip(partitions, answers, strict=True) if "error" not in a}

    def leader_endpoint(self, leader_id: int) -> FlightLeaderEndPoint:
        """What a replica fetcher following ``leader_id`` calls."""
        return FlightLeaderEndPoint(leader_id, self.broker_id, lambda: self.client(leader_id), self.call_action)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
