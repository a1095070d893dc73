"""``sparklog up --hosts``: a cluster spread over network namespaces for people to try. It prints
where each server runs and how clients reach it; a client on the printed client host creates a
topic, writes and reads it back (RF=2 across the two broker hosts, one of them cut off with the
printed command meanwhile); SIGTERM stops everything and removes every namespace it made. Where
namespaces cannot be made, or with options it cannot honour, it says so in one line."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparklog.cli.main import main
from sparklog.hosts.network import namespaces_available

CLI = [sys.executable, "-m", "sparklog.cli.main"]


def _netns() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


@pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))
@pytest.mark.timeout(300)
def test_up_hosts_serves_clients_on_the_client_host_and_removes_its_namespaces(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SPARKLOG_ZOOKEEPER", None)
    proc = subprocess.Popen(
        [*CLI, "up", "--hosts", "--brokers", "2", "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not any(line.startswith("sparklog is up on") for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        text = "".join(lines)
        assert len(re.findall(r"^zookeeper on host \S+ at 10\.\d+\.0\.\d:2181", text, re.M)) == 3, text
        brokers = re.findall(r"^broker (\d) on host (\S+) at (10\.\d+\.0\.\d):9092, Kafka clients \S+:9093", text, re.M)
        assert [b[0] for b in brokers] == ["1", "2"], text
        tag = re.search(r"network namespaces (\S+)-\*", text).group(1)  # type: ignore[union-attr]
        made = {ns for ns in _netns() if ns.startswith(f"{tag}-")}
        assert len(made) == 3 + 2 + 1 + 1, made  # the ensemble, the brokers, the client host, the switch
        hint = re.search(r"`ip netns exec (\S+) sparklog topics list --bootstrap-server (\S+)`", text)
        assert hint, text
        client_ns, bootstrap = hint.groups()
        assert bootstrap == ",".join(f"{b[2]}:9092" for b in brokers)

        def on_client(*args: str, input: str | None = None) -> str:
            done = subprocess.run(
                ["ip", "netns", "exec", client_ns, *CLI, *args, "--bootstrap-server", bootstrap],
                input=input,
                capture_output=True,
                text=True,
                timeout=90,
                env=env,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        on_client("topics", "create", "tried", "--partitions", "2", "--replication-factor", "2")
        on_client("produce", "tried", input="".join(f"v{i}\n" for i in range(50)))
        cut = re.search(r"off with `(ip -n \S+ link set p\d+ down)`", text).group(1)  # type: ignore[union-attr]
        subprocess.run(shlex.split(cut), check=True)  # broker 1's host off the network: broker 2 has it all
        read = on_client("consume", "tried", "--from-beginning", "--max-messages", "50", "--timeout-ms", "60000")
        assert sorted(read.splitlines()) == sorted(f"v{i}" for i in range(50))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, "".join(lines)
    assert not {ns for ns in _netns() if ns.startswith(f"{tag}-")}
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path / "data")], capture_output=True, text=True).stdout
    assert not leftovers.strip(), leftovers


def test_up_hosts_refuses_what_it_cannot_do_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["up", "--hosts", "--secure", "--data-dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert "--hosts runs a plaintext cluster" in error and "drop --secure" in error and "\n" not in error
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # as a user who may not make network namespaces
    assert main(["up", "--hosts", "--data-dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert "--hosts makes network namespaces, and cannot here: network namespaces need root" in error, error
    assert not list(tmp_path.iterdir())  # nothing started, nothing written
