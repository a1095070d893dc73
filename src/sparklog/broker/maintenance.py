"""A broker's background round: quick repairs every half second (re-reading what a ZooKeeper blip
left unread, shrinking ISRs of lagging followers), and the logs' retention and compaction every
maintenance interval. A failing step is logged; the loop goes on (it must not kill the broker)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

TICK_S = 0.5

Step = Callable[[], None]


class MaintenanceLoop:
    """Runs ``every_tick`` steps each tick and ``every_interval`` steps each ``interval_s``, on one
    daemon thread, until ``stopped`` is set."""

    def __init__(
        self,
        stopped: threading.Event,
        every_tick: Sequence[Step],
        every_interval: Sequence[Step],
        interval_s: float,
    ) -> None:
        self._stopped = stopped
        self._every_tick = list(every_tick)
        self._every_interval = list(every_interval)
        self._interval_s = interval_s

    def start(self) -> MaintenanceLoop:
        threading.Thread(target=self._run, name="broker-maintenance", daemon=True).start()
        return self

    def _run(self) -> None:
        tick = 0
        while not self._stopped.wait(TICK_S):
            self._steps(self._every_tick)
            tick += 1
            if tick * TICK_S >= self._interval_s:
                tick = 0
                self._steps(self._every_interval)

    @staticmethod
    def _steps(steps: Sequence[Step]) -> None:
        for step in steps:
            try:
                step()
            except Exception:
                log.exception("broker maintenance step %s failed", getattr(step, "__qualname__", step))
