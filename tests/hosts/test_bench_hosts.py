"""``sparklog bench failover --hosts`` end to end on a small run, and ``bench faults``'s figures (the
same run with other faults): their figures are measured by ``sparklog bench``, never asserted here;
what is asserted is that they measured something and that the checker found every acknowledged
record once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparklog.bench import hosts_scenarios
from sparklog.cli.main import main
from sparklog.hosts.network import namespaces_available

CLI = [sys.executable, "-m", "sparklog.cli.main"]
CHECKED = ("lost", "misplaced", "duplicated", "strangers", "out_of_order", "group_missed")


def bench(*args: str) -> dict[str, object]:
    done = subprocess.run([*CLI, "bench", *args, "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))
@pytest.mark.timeout(900)
@pytest.mark.slow
def test_failover_on_hosts_reports_what_it_measured() -> None:
    failover = bench("failover", "--hosts", "--repeat", "1")
    assert failover["hosts"] is True and len(failover["failover_all_s"]) == 1  # type: ignore[arg-type]
    assert failover["failover_s"] is not None and failover["failover_s"] > 0  # type: ignore[operator]
    assert failover["acked"] > 0 and all(failover[k] == 0 for k in CHECKED), failover  # type: ignore[operator]


def test_a_fault_run_reports_each_fault_and_the_checkers_figures() -> None:
    """``bench faults`` is the failover run's :func:`run_faults` with other faults; its figures."""
    happened = [{"fault": "zookeeper-node-lost", "zookeeper_host": 2, "recovered_s": 0.1}]
    report = {"acked": 10, "stored": 10, **dict.fromkeys(CHECKED, 0), "unacked_sent": 1, "unacked_stored": 0}
    figures = hosts_scenarios.faults_figures(happened, {**report, "probe": [(1.0, 1.1)]}, 3)
    assert figures["faults"] == happened and figures["acked"] == 10 and figures["unacked_sent"] == 1
    assert "probe" not in figures and all(figures[k] == 0 for k in CHECKED)
    json.dumps(figures)  # what --json prints


def test_bench_on_hosts_refuses_what_it_cannot_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "produce", "--hosts"]) == 1
    assert "--hosts is for the failover and faults scenarios" in capsys.readouterr().err
    assert main(["bench", "faults", "--faults", "meteor-strike"]) == 1
    error = capsys.readouterr().err
    assert "unknown fault meteor-strike; known: leader-host-cut-off," in error
    assert main(["bench", "failover", "--faults", "rolling-restart"]) == 1
    assert "--faults is for the faults scenario" in capsys.readouterr().err
