"""``make demo`` (``python -m sparklog.demo``): run twice in a row into the same data dir, each run's Delta
table read back with the ``deltalake`` package (no Spark) and checked against the events the demo's
generator produces; and everything the demo starts is stopped, also when it fails. Against a running
cluster (``--zookeeper``) it refuses one that has a ``clicks`` topic already."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from sparklog.coordination.ports import port_is_open
from sparklog.examples.clickstream import StreamSpec, expected, make_stream
from sparklog.examples.pipeline import as_reference

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tests/examples/...)


def _run_demo(data_dir: Path, *args: str) -> tuple[str, float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.demo", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - began
    assert done.returncode == 0, f"the demo failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout, took


def _ports(stdout: str) -> list[int]:
    """The ZooKeeper and broker ports the demo printed."""
    found = re.search(r"ZooKeeper at 127\.0\.0\.1:(\d+), broker 1 at 127\.0\.0\.1:(\d+)", stdout)
    assert found, stdout
    return [int(found.group(1)), int(found.group(2))]


@pytest.mark.timeout(1500)  # two demo runs: ~2 min on an idle 2-core machine, ~6 min on a busy one
def test_demo_twice_lands_what_was_produced_in_delta(tmp_path: Path) -> None:
    """``make demo`` as shipped (400,000 events in 4 waves), then again into the same data dir with
    2 smaller waves (a re-run starts over: its table holds its own run only)."""
    data_dir = tmp_path / "demo"
    smaller = StreamSpec(waves=2, events_per_wave=20_000)
    runs = [(StreamSpec(), ()), (smaller, ("--waves", "2", "--events-per-wave", "20000"))]
    for attempt, (spec, args) in enumerate(runs, 1):
        waves = make_stream(spec)
        reference = expected(waves)
        # the reference is not trivial: stragglers exist and some are too late, in every wave after the first
        assert reference.produced == spec.events == (400_000 if attempt == 1 else 40_000)
        assert reference.dropped_per_wave[0] == 0 and all(n > 0 for n in reference.dropped_per_wave[1:])
        stdout, took = _run_demo(data_dir, *args)
        print(f"demo run {attempt}: {took:.1f} s")
        assert "OK in" in stdout

        table_path = data_dir / "delta" / "clicks_per_minute"
        delta = DeltaTable(str(table_path))
        assert delta.version() == spec.waves  # version 0 is the empty table, then one MERGE per wave
        landed = delta.to_pyarrow_table()
        assert landed.num_rows == reference.aggregates.num_rows
        assert pc.sum(landed["events"]).as_py() == reference.produced - reference.dropped
        assert pc.sum(landed["purchases"]).as_py() == pc.sum(reference.aggregates["purchases"]).as_py()
        assert pc.sum(landed["revenue_cents"]).as_py() == pc.sum(reference.aggregates["revenue_cents"]).as_py()
        assert as_reference(landed).equals(reference.aggregates)
        # time travel with the independent reader: after the first wave, nothing was late yet
        first = DeltaTable(str(table_path), version=1).to_pyarrow_table()
        assert pc.sum(first["events"]).as_py() == waves[0].events

        summary = json.loads((data_dir / "summary.json").read_text())
        assert summary["ok"] and all(summary["checks"].values())
        assert summary["rows_read"] == reference.produced
        assert summary["dropped_too_late"] == reference.dropped
        assert summary["lag"] == {"0": 0, "1": 0, "2": 0, "3": 0}
        assert "LAG" in stdout and "sparklog groups describe clicks-per-minute" in stdout
        assert (data_dir / "clicks-per-minute.png").stat().st_size > 10_000
        assert not any(port_is_open("127.0.0.1", port) for port in _ports(stdout)), "something still listens"


def test_demo_stops_what_it_started_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparklog import demo, local_cluster
    from sparklog.examples import pipeline

    started: list[local_cluster.LocalCluster] = []

    class Recorded(local_cluster.LocalCluster):
        def start(self, timeout: float = local_cluster.BROKER_START_TIMEOUT_S) -> local_cluster.LocalCluster:
            started.append(self)
            return super().start(timeout)

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(local_cluster, "LocalCluster", Recorded)
    monkeypatch.setattr(pipeline, "create_topic", fail)
    with pytest.raises(RuntimeError, match="boom"):
        demo.run(tmp_path / "demo", StreamSpec(waves=1, events_per_wave=10))
    assert len(started) == 1
    cluster = started[0]
    assert cluster.embedded is not None
    assert not any(b.alive() for b in cluster.brokers.values())
    ports = [cluster.embedded.port, *(b.port for b in cluster.brokers.values())]
    assert not any(port_is_open("127.0.0.1", port) for port in ports)


def test_demo_on_a_running_cluster_refuses_one_with_a_clicks_topic(
    start_broker: object, sparklog_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparklog import Admin, demo
    from sparklog.examples import pipeline

    start_broker(1)  # type: ignore[operator]
    with Admin(sparklog_connect) as admin:
        admin.create_topic(pipeline.TOPIC, 1, 1)
    args = ["--zookeeper", sparklog_connect, "--data-dir", str(tmp_path / "demo"), "--waves", "1"]
    assert demo.main(args) == 2  # before any Spark session: the user's topic is left as it was
    assert f"the demo needs a cluster without a '{pipeline.TOPIC}' topic" in capsys.readouterr().out
