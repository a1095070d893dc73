"""The Kafka listener under fuzzing (``sparklog fuzz --kafka``, :mod:`sparklog.fuzz.kafka_cases`).

- ``test_kafka_profile``: a few hundred hypothesis-drawn Kafka cases with a fixed seed against one
  broker (Produce requests well-formed and mutated, whole-request mutations, hostile queries,
  half-sent requests, SASL logins: ``test_fuzz_kafka_login.py`` has their own profile), read
  back through the Kafka listener every 10 cases and through sparklog's own fetches every 100,
  restarts (SIGTERM, ``kill -9``) at the end: no invariant failure, no
  crash, no finding; then the case log replayed on a fresh cluster, equally clean.
- ``test_kafka_long_profile``: only with ``--fuzz-cases N`` (or ``SPARKLOG_FUZZ_CASES=N``) and
  ``SPARKLOG_FUZZ_KAFKA=1``; ``sparklog fuzz --kafka`` runs it from the command line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparklog.fuzz.kafka_cases import KAFKA_KINDS
from sparklog.fuzz.runner import FuzzConfig, read_case_log, run_fuzz

if TYPE_CHECKING:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from sparklog.fuzz.report import Report

KAFKA_SEED = 15
KAFKA_CASES = 400
REPLAYED = 120


def _clean(report: Report, tmp_path: Path, name: str, log: Path) -> None:
    (tmp_path / f"{name}.json").write_text(json.dumps(report.to_json(), default=repr, indent=1))
    assert report.cases > 0, "no case ran"
    assert not report.outcomes.get("fuzzer-error"), f"the fuzzer failed on some cases (cases: {log})"
    assert not report.crashes, report.summary()
    assert report.ok and not report.findings, f"{report.summary()}\n(cases: {log}; report: {tmp_path / name}.json)"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kafka_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path) -> None:
    log = tmp_path / "cases.jsonl"
    config = FuzzConfig(
        seed=KAFKA_SEED,
        cases=KAFKA_CASES,
        check_every=10,
        full_every=100,
        work_dir=tmp_path / "run",
        zookeeper=zookeeper.connect_string,
        log_path=log,
        kafka=True,
    )
    report = run_fuzz(config)
    _clean(report, tmp_path, "report", log)
    assert report.cases == KAFKA_CASES
    assert set(report.by_kind) == set(KAFKA_KINDS), report.by_kind
    assert report.acked_batches > 0 and report.restarts == 2, report.summary()
    assert report.outcomes.get("ack", 0) > 0 and report.outcomes.get("refused", 0) > 0, report.outcomes

    cases = read_case_log(log, upto=REPLAYED - 1)  # the case log is the input again
    assert [c.index for c in cases] == list(range(REPLAYED))
    replay_log = tmp_path / "replay.jsonl"
    replay = FuzzConfig(
        seed=KAFKA_SEED,
        work_dir=tmp_path / "replay",
        zookeeper=zookeeper.connect_string,
        log_path=replay_log,
        replay=cases,
        kafka=True,
        restarts_at_end=False,
    )
    replayed = run_fuzz(replay)
    _clean(replayed, tmp_path, "replay", replay_log)
    assert replayed.cases == REPLAYED


@pytest.mark.slow
def test_kafka_long_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path, fuzz_options: dict[str, int | None]) -> None:
    cases = fuzz_options["cases"]
    if not cases or not os.environ.get("SPARKLOG_FUZZ_KAFKA"):
        pytest.skip(
            "the long Kafka profile runs with --fuzz-cases N and SPARKLOG_FUZZ_KAFKA=1, or `sparklog fuzz --kafka`"
        )
    log = tmp_path / "cases.jsonl"
    config = FuzzConfig(
        seed=fuzz_options["seed"] if fuzz_options["seed"] is not None else KAFKA_SEED,
        cases=cases,
        brokers=fuzz_options["brokers"] or 1,
        restart_every=2500,
        work_dir=tmp_path / "run",
        zookeeper=zookeeper.connect_string,
        log_path=log,
        kafka=True,
    )
    report = run_fuzz(config)
    _clean(report, tmp_path, "report", log)
