"""A Spark standalone cluster on the hosts of a :class:`~sparklog.hosts.network.HostNetwork`: a
master on one host, a worker on each of others, and drivers on yet another, so that a job's
executors read and write sparklog over the network from hosts of their own, as on several machines.

The master and workers are the pip ``pyspark``'s own (``bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each JVM in its host's namespace
(``ip netns exec``), bound to the host's address (``SPARK_LOCAL_IP``), with its logs, work and
scratch directories under the cluster's data directory. Only the network is separate: the hosts
share the filesystem, so executors run this same interpreter (a driver's ``PYSPARK_PYTHON``) and
import this same ``sparklog`` (the workers, hence their executors, inherit this process's
environment, ``PYTHONPATH`` included), and a Delta table in a local directory is one table for all.

:meth:`SparkCluster.start` returns once the master lists every worker as ``ALIVE`` (its JSON status
page, read from inside the master's host). :meth:`SparkCluster.driver` runs ``python -m module`` on a
host as a Spark driver would run there (``SPARK_LOCAL_IP`` = the host's address, so the driver binds
and announces it; its Python and Delta settings, :meth:`SparkCluster.driver_env`); a job passes
:attr:`SparkCluster.master_url` as its master. :meth:`SparkCluster.tasks_run` tells from the
executors' logs how many tasks of an application ran on each worker host.

The master declares a silent worker dead after :data:`WORKER_TIMEOUT_S` (Spark's default is 60 s):
a worker whose host is cut off loses its executors within seconds, and its tasks run elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from sparklog.child_process import preexec
from sparklog.coordination.zookeeper_server import find_java
from sparklog.errors import InvalidRequest, SparkClusterError
from sparklog.hosts.network import HostNetwork

MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_PORT = 7078
WORKER_UI_PORT = 8081
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
WORKER_TIMEOUT_S = 10
DAEMON_MEMORY = "256m"  # the master's and each worker's own heap (Spark's default is 1 GiB)
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
RUNNING_TASK = re.compile(r"Running task \S+ in stage \S+ \(TID \d+\)")


def spark_home() -> Path:
    """The pip ``pyspark``'s directory: its ``bin/spark-class`` and ``jars/`` are a Spark install."""
    try:
        import pyspark
    except ImportError as exc:
        raise SparkClusterError("a Spark cluster needs the pyspark package (pip install pyspark)") from exc
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise SparkClusterError(f"{home} has no bin/spark-class: not a full pip pyspark install")
    return home


def java_home() -> str:
    """The ``JAVA_HOME`` of the ``java`` the project runs (``$JAVA_HOME``, else ``java`` on PATH)."""
    java = find_java()
    if java is None:
        raise SparkClusterError("a Spark cluster needs Java: no java on PATH or in $JAVA_HOME")
    return str(Path(java).resolve().parent.parent)


def own_address(peer: str, port: int = 9) -> str:
    """This process's address towards ``peer``, as its network namespace's routing picks it (a
    UDP socket's ``connect`` sends nothing): on a host of a :class:`HostNetwork`, the host's own
    address, which proves which host a process (a Spark executor's Python worker) runs on."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((peer, port))
        return str(probe.getsockname()[0])


class _Process:
    """One child process started on a host in a process group of its own (``ip netns exec``
    execs it: the same pid), its output in ``log_path``; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, net: HostNetwork, host: int, argv: Sequence[str], env: Mapping[str, str], **options: Any) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open while the process runs
        self._log.write(f"\n=== starting on host {host}: {' '.join(argv)}\n".encode())
        self._log.flush()
        options.setdefault("stdout", self._log)
        self.process = net.popen(
            host,
            list(argv),
            stdin=subprocess.DEVNULL,
            stderr=self._log,
            env=dict(env),
            start_new_session=True,  # signals reach the JVM and what it started (executors), not us
            preexec_fn=preexec(),  # and they go away with this process, even after its kill -9
            **options,
        )

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.alive():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM to its process group, SIGKILL if it has not exited within ``timeout``; the exit
        code (None when it had to be killed)."""
        code = None
        if self.process is not None:
            self.signal_group(signal.SIGTERM)
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.process.wait()
            with contextlib.suppress(ProcessLookupError):  # what it left in its group (an executor)
                os.killpg(self.process.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class SparkDriver(_Process):
    """A driver program (``python -m module``) running on a host: its standard output in
    ``out_path``, Spark's log (its standard error) in ``log_path``."""

    def __init__(self, name: str, log_path: Path, out_path: Path) -> None:
        super().__init__(name, log_path)
        self.out_path = out_path

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait(self, timeout: float) -> str:
        """What the driver printed once it exited 0; :class:`SparkClusterError` with its log's
        tail if it failed, or did not finish within ``timeout`` (it is stopped then)."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise SparkClusterError(
                f"driver {self.name} did not finish within {timeout:.0f} s (log {self.log_path}):\n{self.log_tail()}"
            ) from None
        self.stop()
        if code != 0:
            raise SparkClusterError(
                f"driver {self.name} exited with code {code} (log {self.log_path}):\n{self.output()[-2000:]}\n"
                f"{self.log_tail(40)}"
            )
        return self.output()


class SparkCluster:
    """``with SparkCluster(net, master_host, worker_hosts, data_dir) as spark: ...`` (see the
    module's docstring). Each worker offers ``worker_cores`` cores and ``worker_memory`` to
    executors (one executor per worker and application, with every core of it, as standalone
    Spark hands them out)."""

    def __init__(
        self,
        net: HostNetwork,
        master_host: int,
        worker_hosts: Sequence[int],
        data_dir: str | Path,
        worker_cores: int = 1,
        worker_memory: str = "1g",
    ) -> None:
        hosts = [master_host, *worker_hosts]
        if not worker_hosts or len(set(hosts)) != len(hosts):
            raise InvalidRequest(f"a Spark cluster needs a master and workers on hosts of their own, got {hosts}")
        self.net = net
        self.master_host = master_host
        self.worker_hosts = list(worker_hosts)
        self.data_dir = Path(data_dir).resolve()
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.master = _Process("master", self.data_dir / "master" / "master.log")
        self.workers = {
            host: _Process(f"worker on host {host}", self.data_dir / f"worker-{host}" / "worker.log")
            for host in self.worker_hosts
        }
        self.drivers: list[tuple[int, SparkDriver]] = []

    # ----------------------------------------------------------------- addresses
    @property
    def master_address(self) -> str:
        return self.net.address(self.master_host)

    @property
    def master_url(self) -> str:
        """What a driver passes as its master: ``spark://<master's address>:7077``."""
        return f"spark://{self.master_address}:{MASTER_PORT}"

    def work_dir(self, host: int) -> Path:
        """The worker's work directory: an application's executors keep their logs in it."""
        return self.data_dir / f"worker-{host}" / "work"

    # ----------------------------------------------------------------- environments
    def _daemon_env(self, host: int, directory: Path) -> dict[str, str]:
        address = self.net.address(host)
        conf_dir = self.data_dir / "conf"  # empty: no spark-defaults or log settings from elsewhere
        conf_dir.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "JAVA_HOME": java_home(),
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": address,
            "SPARK_LOCAL_HOSTNAME": address,
            "SPARK_LOG_DIR": str(directory),
            "SPARK_LOCAL_DIRS": str(directory / "local"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # both read it: the master's timeout, the workers' heartbeat interval (a quarter of it)
            "SPARK_DAEMON_JAVA_OPTS": f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}",
        }

    def driver_env(self, host: int) -> dict[str, str]:
        """The environment of a driver on ``host``: bound to and announcing the host's address,
        executors running this interpreter (``PYSPARK_PYTHON``), Delta from the project's jars (a
        host reaches nothing outside the machine, so no download is tried)."""
        address = self.net.address(host)
        scratch = self.data_dir / f"driver-{host}" / "local"
        scratch.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "JAVA_HOME": java_home(),
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.data_dir / "conf"),
            "SPARK_LOCAL_IP": address,
            "SPARK_LOCAL_HOSTNAME": address,
            "SPARK_LOCAL_DIRS": str(scratch),
            "PYSPARK_PYTHON": sys.executable,
            "SPARKLOG_DELTA_SOURCE": "jars",
        }

    # ----------------------------------------------------------------- life cycle
    def start(self, timeout: float = START_TIMEOUT_S) -> SparkCluster:
        """Start the master and the workers (together: a JVM takes seconds to start, and a worker
        retries until the master answers); return once every worker is registered."""
        spark_class = str(spark_home() / "bin" / "spark-class")
        try:
            directory = self.master.log_path.parent
            address = self.master_address
            argv = [spark_class, MASTER_CLASS, "--host", address, "--port", str(MASTER_PORT)]
            argv += ["--webui-port", str(MASTER_UI_PORT)]
            self.master.start(self.net, self.master_host, argv, self._daemon_env(self.master_host, directory))
            for host, worker in self.workers.items():
                directory = worker.log_path.parent
                address = self.net.address(host)
                argv = [spark_class, WORKER_CLASS, self.master_url, "--host", address, "--port", str(WORKER_PORT)]
                argv += ["--webui-port", str(WORKER_UI_PORT), "--cores", str(self.worker_cores)]
                argv += ["--memory", self.worker_memory, "--work-dir", str(self.work_dir(host))]
                worker.start(self.net, host, argv, self._daemon_env(host, directory))
            self.wait_workers(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[str]:
        """Stop the drivers, the workers (their executors with them) and the master, SIGTERM then
        SIGKILL; then end anything still running on their hosts, drivers' hosts included (a Python
        worker daemon that put itself in a process group of its own): those hosts are the cluster's
        alone. Returns what had to be killed."""
        problems: list[str] = []
        for _host, driver in self.drivers:
            running = driver.alive()
            if driver.stop() is None and running:
                problems.append(f"driver {driver.name} did not stop within {STOP_TIMEOUT_S:.0f} s")
        for process in [*self.workers.values(), self.master]:
            running = process.alive()
            if process.stop() is None and running:
                problems.append(f"the Spark {process.name} did not stop within {STOP_TIMEOUT_S:.0f} s")
        hosts = {self.master_host, *self.worker_hosts, *(host for host, _ in self.drivers)}
        for host in sorted(hosts):
            left = self._pids_on(host)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if left:
                problems.append(f"killed {len(left)} process(es) left on host {host}")
        return problems

    def _pids_on(self, host: int) -> list[int]:
        """Processes whose network is host ``host``'s namespace (all started by this cluster)."""
        try:
            done = subprocess.run(
                ["ip", "netns", "pids", self.net.namespace(host)], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [int(p) for p in done.stdout.split() if p.isdigit()]

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """The master's status page as JSON (workers, applications), read on the master's host."""
        url = f"http://{self.master_address}:{MASTER_UI_PORT}/json/"
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy is reachable from a host
        with self.net.inside(self.master_host), direct.open(url, timeout=5) as reply:
            found: dict[str, Any] = json.load(reply)
        return found

    def alive_workers(self) -> set[int]:
        """The hosts of the workers the master lists as ``ALIVE``."""
        by_address = {self.net.address(h): h for h in self.worker_hosts}
        try:
            workers = self.state().get("workers", [])
        except OSError:
            return set()
        return {by_address[w["host"]] for w in workers if w.get("state") == "ALIVE" and w.get("host") in by_address}

    def wait_workers(self, hosts: Sequence[int] | None = None, timeout: float = START_TIMEOUT_S) -> float:
        """Seconds until the master lists every worker of ``hosts`` (default: all) as ``ALIVE``."""
        wanted = set(self.worker_hosts if hosts is None else hosts)
        return self._wait(lambda: self.alive_workers() >= wanted, timeout, f"Spark workers on hosts {sorted(wanted)}")

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> float:
        """Seconds until ``check()`` holds (an unreachable or garbled status page counts as not
        yet); :class:`SparkClusterError` if the master or a worker exits meanwhile, or on timeout."""
        start = time.monotonic()
        while True:
            with contextlib.suppress(OSError, ValueError):
                if check():
                    return time.monotonic() - start
            for process in [self.master, *self.workers.values()]:
                code = process.exited()
                if code is not None:
                    raise SparkClusterError(
                        f"the Spark {process.name} exited with code {code} (log {process.log_path}):\n"
                        f"{process.log_tail()}"
                    )
            if time.monotonic() - start > timeout:
                raise SparkClusterError(f"{what}: not within {timeout:.0f} s (log {self.master.log_path})")
            time.sleep(0.5)

    def tasks_run(self, app_id: str) -> dict[int, int]:
        """How many tasks of application ``app_id`` each worker host's executors started, from the
        executors' own logs (``Running task ... (TID n)``) in the workers' work directories."""
        counts: dict[int, int] = {}
        for host in self.worker_hosts:
            logs = (self.work_dir(host) / app_id).glob("*/stderr")
            counts[host] = sum(len(RUNNING_TASK.findall(p.read_text(errors="replace"))) for p in logs)
        return counts

    # ----------------------------------------------------------------- drivers
    def driver(self, host: int, module: str, args: Sequence[str], name: str | None = None) -> SparkDriver:
        """``python -m module args`` (this interpreter) started on ``host`` as a Spark driver
        there (:meth:`driver_env`); it is passed nothing about the cluster but what ``args`` say
        (give it :attr:`master_url`). Stopped by :meth:`stop` at the latest."""
        if host == self.master_host or host in self.workers:
            raise InvalidRequest(f"a driver runs on a host of its own, not on the master's or a worker's ({host})")
        name = name or f"{module.rsplit('.', 1)[-1]}-{len(self.drivers) + 1}"
        directory = self.data_dir / f"driver-{host}"
        directory.mkdir(parents=True, exist_ok=True)
        driver = SparkDriver(name, directory / f"{name}.log", directory / f"{name}.out")
        out = open(driver.out_path, "wb")  # noqa: SIM115 - the child has its own copy once started
        try:
            driver.start(self.net, host, [sys.executable, "-m", module, *args], self.driver_env(host), stdout=out)
        finally:
            out.close()
        self.drivers.append((host, driver))
        return driver
