"""``sparklog topics create --if-not-exists``: a command that can run again (a script, the README's
examples) leaves an existing topic as it is and succeeds, through ZooKeeper or through brokers;
without the flag an existing topic is still an error.

Real ZooKeeper, one real broker process, the command line as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

CLI = [sys.executable, "-m", "sparklog.cli.main"]


def sparklog(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_BOOTSTRAP_SERVERS")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def test_if_not_exists_leaves_an_existing_topic_alone(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    zk = ("--zookeeper", sparklog_connect)
    brokers = ("--bootstrap-server", f"127.0.0.1:{broker.port}")

    first = sparklog("topics", "create", "events", "--partitions", "3", "--if-not-exists", *zk)
    assert first.returncode == 0, first.stderr
    assert "created topic events with 3 partition(s)" in first.stdout

    for cluster in (zk, brokers):
        again = sparklog("topics", "create", "events", "--partitions", "5", "--if-not-exists", *cluster)
        assert again.returncode == 0, again.stderr
        assert again.stdout == "topic events exists already: left as it is\n"
        refused = sparklog("topics", "create", "events", "--partitions", "5", *cluster)
        assert refused.returncode == 1 and "already exists" in refused.stderr

    described = sparklog("topics", "describe", "events", "--json", *zk)
    assert described.returncode == 0, described.stderr
    assert len(json.loads(described.stdout)["partitions"]) == 3  # as first created
