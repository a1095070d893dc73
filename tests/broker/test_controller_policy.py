"""The controller's whole policy, ``choose_state``: the state a partition should have given its
replicas and the live brokers."""

from __future__ import annotations

import pytest

from sparklog.broker.controller import choose_state
from sparklog.coordination.cluster import PartitionState as S


@pytest.mark.parametrize(
    ("state", "replicas", "live", "unclean", "wanted"),
    [
        # all well: unchanged
        (S(1, 3, [1, 2, 3]), [1, 2, 3], {1, 2, 3}, False, S(1, 3, [1, 2, 3])),
        # a dead follower leaves the ISR; the epoch stays
        (S(1, 3, [1, 2, 3]), [1, 2, 3], {1, 3}, False, S(1, 3, [1, 3])),
        # a dead leader: the first live in-sync replica leads in a new epoch
        (S(1, 3, [1, 2, 3]), [1, 2, 3], {2, 3}, False, S(2, 4, [2, 3])),
        # a dead leader whose followers are out of sync: offline, the last ISR kept
        (S(1, 3, [1]), [1, 2, 3], {2, 3}, False, S(-1, 3, [1])),
        # ... unless the topic allows unclean election
        (S(1, 3, [1]), [1, 2, 3], {2, 3}, True, S(2, 4, [2])),
        # the preferred replica back in sync: leadership returns to it
        (S(2, 4, [1, 2, 3]), [1, 2, 3], {1, 2, 3}, False, S(1, 5, [1, 2, 3])),
        # a broker no longer a replica (moved away) is no ISR member, even while alive
        (S(3, 2, [2, 3, 4]), [3, 4], {2, 3, 4}, False, S(3, 2, [3, 4])),
        # ... and never elected
        (S(1, 2, [2, 1]), [3, 1], {2, 3}, False, S(-1, 2, [2, 1])),
    ],
)
def test_choose_state(state: S, replicas: list[int], live: set[int], unclean: bool, wanted: S) -> None:
    assert choose_state(state, replicas, live, unclean) == wanted
