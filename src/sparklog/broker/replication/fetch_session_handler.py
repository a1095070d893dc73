"""A follower's side of a fetch session with one leader (Kafka's ``FetchSessionHandler``): turns the
positions of every partition fetched this round into the request to send, the first one full, the
next ones listing only what changed since the previous request (see
:mod:`sparklog.broker.replication.fetch_request`).

The epoch moves on only once an answer was read to its end; anything else (an error, a timeout,
an answer abandoned) starts a new session, whose full request makes both sides agree again."""

from __future__ import annotations

import random
from collections.abc import Callable

from sparklog.broker.replication.fetch_request import FetchPosition, SessionRef

TopicPartition = tuple[str, int]


def new_session_id() -> int:
    return random.getrandbits(62) + 1  # not 0: 0 is "no session"


class FetchSessionHandler:
    """Builds one fetcher's requests to one leader (not thread-safe: the fetcher's thread only)."""

    def __init__(self, new_id: Callable[[], int] = new_session_id) -> None:
        self._new_id = new_id
        self._session_id = 0  # 0: the next request opens a new session
        self._epoch = 0
        self._sent: dict[TopicPartition, FetchPosition] = {}  # what the leader holds for the session

    def build(self, positions: list[FetchPosition]) -> tuple[list[FetchPosition], SessionRef]:
        """The positions to list and the session part of the next request, for fetching
        ``positions`` (every partition fetched from this leader this round)."""
        current = {(p.topic, p.partition): p for p in positions}
        if self._session_id == 0:
            self._session_id, self._epoch = self._new_id(), 0
            self._sent = current
            return positions, SessionRef(self._session_id, 0)
        sent = self._sent
        changed = [p for key, p in current.items() if sent.get(key) != p]
        forget = tuple(key for key in sent if key not in current)
        self._sent = current
        return changed, SessionRef(self._session_id, self._epoch, forget)

    def answered(self) -> None:
        """The leader's answer to the last request was read to its end."""
        self._epoch += 1

    def reset(self) -> None:
        """The last request failed or its answer was not read to the end: open a new session."""
        self._session_id = 0
        self._sent = {}
