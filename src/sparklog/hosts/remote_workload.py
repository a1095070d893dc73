"""The workload of :mod:`sparklog.hosts.workload` run on a client host, seen from the harness: its
progress as it prints it, and its report once told to stop."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

from sparklog.errors import WorkloadFailed
from sparklog.hosts.cluster import HostCluster

STOP_TIMEOUT_S = 300.0


class RemoteWorkload:
    """``python -m sparklog.hosts.workload`` on ``cluster``'s client host, writing ``topic`` (created
    with RF=3 and ``min.insync.replicas=2``); a context manager that stops it."""

    def __init__(
        self,
        cluster: HostCluster,
        topic: str,
        partitions: int = 3,
        writers: int = 3,
        members: int = 2,
        probe_partition: int | None = None,
    ) -> None:
        args = ["--bootstrap-server", cluster.bootstrap_servers, "--topic", topic, "--create"]
        args += ["--partitions", str(partitions), "--writers", str(writers), "--members", str(members)]
        args += [] if probe_partition is None else ["--probe-partition", str(probe_partition)]
        self.log_path = cluster.data_dir / f"workload-{topic}.log"
        with open(self.log_path, "ab") as log:  # a file, not a pipe nobody reads: it never fills up
            self.process = cluster.python(
                cluster.client_host, "sparklog.hosts.workload", args, stdin=subprocess.PIPE, stderr=log
            )
        self.latest: dict[str, int] = {"acked": 0, "consumed": 0, "errors": 0}
        self.report: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, name="workload-progress", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if "report" in found:
                self.report = found["report"]
            else:
                self.latest = found

    def wait_acked(self, more: int, timeout: float = 120.0) -> None:
        """Until ``more`` further records are acknowledged (writes flow)."""
        target = self.latest["acked"] + more
        deadline = time.monotonic() + timeout
        while self.latest["acked"] < target:
            if self.process.poll() is not None:
                raise WorkloadFailed(f"the workload exited ({self.process.returncode}): {self._stderr()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{more} more acknowledgements not within {timeout:.0f} s: {self.latest}")
            time.sleep(0.1)

    def stop(self) -> dict[str, Any]:
        """Stop writing, let the checker read everything; its report."""
        if self.report is None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._reader.join(10)
        if self.report is None:
            raise WorkloadFailed(f"the workload ended without a report ({self.process.returncode}): {self._stderr()}")
        return self.report

    def _stderr(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RemoteWorkload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
