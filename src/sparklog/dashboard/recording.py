"""Recording brokers' metrics as Prometheus would scrape them: every broker's endpoint at a fixed
interval, each sample labelled with its ``instance`` (here ``broker-<id>``), for the dashboard's
picture (:mod:`.picture`) to evaluate the dashboard's queries over."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from sparklog.dashboard.promql import Labels, Recording

SCRAPE_TIMEOUT_S = 5.0


def fetch(url: str) -> str | None:
    """One endpoint's exposition text (None if it does not answer: a broker down)."""
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
            return str(response.read().decode())
    except (OSError, urllib.error.URLError):
        return None


def scrape(url: str, instance: str) -> dict[tuple[str, Labels], float]:
    """One endpoint's samples, labelled ``instance`` (nothing if it does not answer: a broker down)."""
    text = fetch(url)
    if text is None:
        return {}
    return {
        (s.name, frozenset({**s.labels, "instance": instance}.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class Recorder:
    """Scrapes ``endpoints()`` (instance -> URL, asked before each round: brokers come and go)
    every ``interval_s`` on its own thread, from :meth:`start` to :meth:`stop`."""

    def __init__(self, endpoints: Callable[[], Mapping[str, str]], interval_s: float = 1.0) -> None:
        self.endpoints = endpoints
        self.interval_s = interval_s
        self.times: list[float] = []
        self.samples: list[dict[tuple[str, Labels], float]] = []
        # False: only fetch each endpoint's text, keep only the times: the load a Prometheus
        # server puts on the brokers (it parses elsewhere), not a recording
        self.keep = True
        self.complete = 0  # rounds in which every endpoint answered
        self._began = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-recorder", daemon=True)

    def start(self) -> Recorder:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.is_set():
            at = time.monotonic()
            merged: dict[tuple[str, Labels], float] = {}
            answered = 0
            endpoints = self.endpoints()
            for instance, url in sorted(endpoints.items()):
                if self.keep:
                    got = scrape(url, instance)
                    answered += bool(got)
                    merged.update(got)
                else:
                    answered += bool(fetch(url))
            self.complete += answered == len(endpoints)
            self.times.append(at - self._began)
            if self.keep:
                self.samples.append(merged)
            self._stopped.wait(max(0.0, self.interval_s - (time.monotonic() - at)))

    def stop(self) -> Recording:
        self._stopped.set()
        self._thread.join(SCRAPE_TIMEOUT_S * 4)
        return Recording(list(self.times), list(self.samples))


def main(argv: list[str] | None = None) -> int:
    """``python -m sparklog.dashboard.recording --every S URL...``: fetch the URLs every S seconds
    (what a Prometheus server asks of the brokers; it parses elsewhere) until stdin closes, then print
    how many rounds every URL answered: a scraper in a process of its own, beside a benchmark."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m sparklog.dashboard.recording")
    parser.add_argument("--every", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args(argv)
    recorder = Recorder(lambda: {str(i): url for i, url in enumerate(args.urls)}, args.every)
    recorder.keep = False
    recorder.start()
    sys.stdin.read()  # until the benchmark closes it
    recorder.stop()
    print(recorder.complete, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
