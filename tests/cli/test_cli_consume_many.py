"""``sparklog consume`` of a topic with many partitions stops on SIGTERM while it waits (it once
needed SIGKILL, with a thread per partition), and waits without burning CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparklog import Admin, Producer

CLI = [sys.executable, "-m", "sparklog.cli.main"]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


@pytest.mark.slow
def test_consume_of_a_thousand_partitions_exits_on_sigterm_while_waiting(
    start_broker: Any, sparklog_connect: str
) -> None:
    broker = start_broker(1)
    topic = "many-cli"
    partitions = 1000
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, partitions)
    with Producer(sparklog_connect) as producer:
        producer.send_batch(topic, {"value": [b"hello"]}, partition=partitions // 2)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_DEBUG")}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [*CLI, "--zookeeper", sparklog_connect, "consume", topic, "--from-beginning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"hello\n"  # it is in its loop, every partition fetched
        time.sleep(2.0)  # now it waits: nothing more comes
        cpu_before, broker_before, started = _cpu_seconds(proc.pid), _cpu_seconds(broker.proc.pid), time.monotonic()
        time.sleep(5.0)
        took = time.monotonic() - started
        idle_cpu = (_cpu_seconds(proc.pid) - cpu_before) / took
        broker_cpu = (_cpu_seconds(broker.proc.pid) - broker_before) / took
        threads = _threads(proc.pid)
        print(
            f"waiting on {partitions} partitions: {idle_cpu:.1%} of a core, {threads} threads "
            f"(the broker meanwhile: {broker_cpu:.1%} of a core)"
        )
        sent = time.monotonic()
        proc.terminate()
        code = proc.wait(timeout=10)
        print(f"exited {time.monotonic() - sent:.2f} s after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Processed a total of 1 messages" in stderr, stderr
