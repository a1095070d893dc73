"""Embedded standalone ZooKeeper server, run as a Java subprocess on the loopback interface.

ZooKeeper itself is installed by ``scripts/install_zookeeper.sh`` (Debian package, or jars
fetched from Maven Central into ``.deps/zookeeper/``). This module only finds it, writes a
``zoo.cfg`` into the data directory, starts ``QuorumPeerMain`` and waits until the server
actually serves requests (the ``srvr`` four-letter command reports ``Mode: standalone``):
the client port opens a little before the server is ready, and a client that connects in
that gap stalls for its whole session timeout.

Everything the server writes (logs, snapshots, transaction logs, ``zoo.cfg``) stays in the
data directory; the server log is ``<data_dir>/zookeeper.log``. A ``secure`` server (the one of a
secured cluster) answers only the ``ruok`` and ``srvr`` four-letter words, and keeps its data
directory readable by its owner only: its snapshots and transaction log hold users' stored keys.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from sparklog.child_process import preexec
from sparklog.coordination.ports import free_port, port_is_open
from sparklog.dir_lock import DirLock
from sparklog.errors import InvalidConfig, ZooKeeperNotAvailable, ZooKeeperStartError
from sparklog.file_modes import DIRECTORY_MODE, OWNER_ONLY_UMASK, open_for_append, restrict_tree
from sparklog.netns import inside

__all__ = [
    "CLASSPATH_ENV",
    "EmbeddedZooKeeper",
    "ZooKeeperNotAvailable",
    "ZooKeeperStartError",
    "find_java",
    "find_zookeeper_classpath",
    "four_letter_word",
]

CLASSPATH_ENV = "SPARKLOG_ZOOKEEPER_CLASSPATH"
"""Environment variable overriding the classpath: a classpath string, or a directory of jars."""

INSTALL_HINT = "run scripts/install_zookeeper.sh"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
LOG_FILE_NAME = "zookeeper.log"

_DEBIAN_JAVA_DIR = Path("/usr/share/java")
# The Debian zookeeper.jar pulls its dependencies in through its manifest Class-Path, but that
# only contains slf4j-api: without a binding every log line is dropped (SLF4J "NOP" logger).
_DEBIAN_LOG_BINDING_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
_DEPS_SUBDIR = Path(".deps") / "zookeeper"

_DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dzookeeper.admin.enableServer=false",
)

FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr,cons"
"""The four-letter words a server answers (``cons`` lists clients: tests map connections to processes)."""
SECURE_FOUR_LETTER_WORDS = "ruok,srvr"
"""Those of a ``secure`` server: ``stat``, ``mntr`` and ``cons`` would tell anyone its clients' addresses."""

_LOG4J_PROPERTIES = """\
# Written by sparklog EmbeddedZooKeeper (Debian ZooKeeper logs through log4j 1.2).
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
# One INFO line per four-letter command: start() polls srvr.
log4j.logger.org.apache.zookeeper.server.NIOServerCnxn=WARN
"""

_LOGBACK_XML = """\
<!-- Written by sparklog EmbeddedZooKeeper (Maven Central ZooKeeper logs through logback). -->
<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>
  </appender>
  <!-- One INFO line per four-letter command: start() polls srvr. -->
  <logger name="org.apache.zookeeper.server.NIOServerCnxn" level="WARN"/>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
</configuration>
"""


def find_java() -> str | None:
    """Return the ``java`` executable (``$JAVA_HOME/bin/java``, else ``java`` on PATH), or None."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def _candidate_roots() -> Iterator[Path]:
    """Directories that may be the project root: parents of this module, then of the cwd."""
    seen: set[Path] = set()
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for directory in (start, *start.parents):
            if directory not in seen:
                seen.add(directory)
                yield directory


def _jars_in(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.jar") if p.is_file())


def find_zookeeper_classpath() -> str | None:
    """Return a Java classpath that runs a ZooKeeper server, or None if none is installed.

    Looked up in order: ``$SPARKLOG_ZOOKEEPER_CLASSPATH`` (a classpath, or a directory of jars);
    the Debian package (``/usr/share/java/zookeeper.jar`` plus an SLF4J->log4j binding);
    ``.deps/zookeeper/*.jar`` in the project root, found by walking up from this module or
    from the current directory (filled by the Maven fallback of the install script).
    """
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        if Path(override).is_dir():
            return os.pathsep.join(_jars_in(Path(override).resolve())) or None
        # The JVM runs with the data dir as cwd: make relative entries absolute.
        return os.pathsep.join(os.path.abspath(entry) for entry in override.split(os.pathsep) if entry)

    debian_jar = _DEBIAN_JAVA_DIR / "zookeeper.jar"
    if debian_jar.is_file():
        jars = [debian_jar] + [
            _DEBIAN_JAVA_DIR / name for name in _DEBIAN_LOG_BINDING_JARS if (_DEBIAN_JAVA_DIR / name).is_file()
        ]
        return os.pathsep.join(str(j) for j in jars)

    for root in _candidate_roots():
        deps = root / _DEPS_SUBDIR
        if any(deps.glob("zookeeper-3*.jar")):
            return os.pathsep.join(_jars_in(deps))
    return None


def four_letter_word(host: str, port: int, cmd: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (``srvr``, ``ruok``, ``mntr``...) and return the reply.

    Raises OSError (e.g. ConnectionRefusedError, TimeoutError) if the server does not answer.
    The command must be in the server's ``4lw.commands.whitelist``.
    """
    if len(cmd) != 4:
        raise ValueError(f"four-letter word must have 4 characters, got {cmd!r}")
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(cmd.encode("ascii"))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete reply to {cmd!r} from {host}:{port} within {timeout}s")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (it was started in a new session)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _kill_at_exit(proc: subprocess.Popen[bytes]) -> None:
    """Finalizer: never leave a ZooKeeper JVM behind when the owner is garbage collected or exits."""
    _signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server in a child JVM, listening on ``host:port`` only.

    >>> with EmbeddedZooKeeper("/tmp/zk", port=free_port()) as zk:  # doctest: +SKIP
    ...     client = KazooClient(hosts=zk.connect_string)
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 2181,
        host: str = "127.0.0.1",
        *,
        tick_time_ms: int = 500,
        jvm_options: Sequence[str] = (),
        secure: bool = False,
        ensemble: Mapping[int, str] | None = None,
        server_id: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Configure (but do not start) a server storing its state in ``data_dir``.

        ``tick_time_ms`` is ZooKeeper's clock: sessions expire on tick boundaries, so a dead broker's
        session ends within one tick of its timeout (a 2 s tick could add 2 s to every failover).
        Session timeouts from 2 ticks up to 60 s are accepted.
        ``jvm_options`` are appended to the default JVM options (small heap, serial GC).
        ``secure``: a secured cluster's server: only the ``ruok`` and ``srvr`` four-letter words, and
        ``data_dir`` owner-only (directories 0700, files 0600: the JVM runs with umask 077).
        ``ensemble``: every server of a replicated ensemble by id (its host; quorum port 2888,
        election port 3888 on each, as ZooKeeper's defaults), this one being ``server_id``; serving
        then means having joined a quorum (leader or follower), so start the servers together.
        ``namespace``: the network namespace the JVM runs in (``ip netns exec``; a host of
        :mod:`sparklog.hosts.network`), where readiness is probed too.
        """
        self.data_dir = Path(data_dir).resolve()
        self._dir_lock: DirLock | None = None  # held from start until the server has exited
        self.port = int(port) or free_port()  # 0: any free port
        self.host = host
        self.tick_time_ms = int(tick_time_ms)
        self.jvm_options = tuple(jvm_options)
        self.secure = secure
        self.ensemble = dict(ensemble or {})
        self.server_id = server_id
        self.namespace = namespace
        if self.ensemble and server_id not in self.ensemble:
            raise InvalidConfig(f"server id {server_id} is not one of the ensemble's {sorted(self.ensemble)}")
        self.startup_seconds: float | None = None
        """Seconds from the last ``start()`` call until the server was ready."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._log_offset = 0
        self._started_at = 0.0

    # ----------------------------------------------------------------- properties

    @property
    def connect_string(self) -> str:
        """ZooKeeper connect string for clients, e.g. ``"127.0.0.1:2181"``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the JVM (also its process group id), or None if never started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE_NAME

    def is_running(self) -> bool:
        """True while the JVM process is alive (it may not be serving yet during ``start``)."""
        return self._proc is not None and self._proc.poll() is None

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 30.0, wait: bool = True) -> None:
        """Start the server and return once it serves requests (``wait`` False: once its JVM is
        started; :meth:`wait_until_serving` then waits, as the servers of an ensemble need, each
        serving only once a quorum of them runs).

        Raises ZooKeeperNotAvailable if Java or ZooKeeper is not installed, and
        ZooKeeperStartError (with the tail of the server log) if the port is taken, the
        process exits, or it is not ready within ``timeout`` seconds.
        """
        if self.is_running():
            raise ZooKeeperStartError(f"ZooKeeper (pid {self.pid}) is already running on {self.connect_string}")
        self._release_dir()  # a previous server of this object that died without stop()
        t0 = time.monotonic()
        java = find_java()
        if java is None:
            raise ZooKeeperNotAvailable(f"Java is not installed (no java on PATH or in $JAVA_HOME): {INSTALL_HINT}")
        classpath = find_zookeeper_classpath()
        if classpath is None:
            raise ZooKeeperNotAvailable(
                f"ZooKeeper is not installed (no {_DEBIAN_JAVA_DIR / 'zookeeper.jar'}, "
                f"no {_DEPS_SUBDIR}/*.jar in the project root, ${CLASSPATH_ENV} unset): {INSTALL_HINT}"
            )
        with self._on_host():
            busy = port_is_open(self.host, self.port, timeout=0.5)
        if busy:
            raise ZooKeeperStartError(
                f"cannot start ZooKeeper on {self.connect_string}: something is already listening there"
            )

        lock = DirLock(self.data_dir, "ZooKeeper's data dir").acquire()  # one server per data dir
        try:
            self._start_locked(java, classpath, lock)
        except BaseException:
            lock.release()
            raise
        self._started_at = t0
        if wait:
            self.wait_until_serving(timeout)

    def wait_until_serving(self, timeout: float = 30.0) -> None:
        """Return once the started server serves requests; ZooKeeperStartError (the server
        killed) if it exits or is not ready within ``timeout`` seconds."""
        try:
            self._wait_until_serving(time.monotonic() + timeout, timeout)
        except BaseException:
            self.kill()
            raise
        self.startup_seconds = time.monotonic() - self._started_at

    def _start_locked(self, java: str, classpath: str, lock: DirLock) -> None:
        self._dir_lock = lock
        if self.secure:
            os.chmod(self.data_dir, DIRECTORY_MODE)  # first: nobody else reaches what is below
        self._write_config()
        command = [java, *self._jvm_arguments(), "-cp", classpath, MAIN_CLASS, str(self.config_path)]
        if self.namespace is not None:
            command = ["ip", "netns", "exec", self.namespace, *command]  # execs the JVM: the same pid
        with open_for_append(self.log_path, owner_only=self.secure) as log:
            log.write(f"\n=== sparklog EmbeddedZooKeeper starting: {' '.join(command)}\n".encode())
            log.flush()
            self._log_offset = log.tell()
            if self.secure:
                restrict_tree(self.data_dir)  # what an earlier run and this one wrote
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # own process group: signals go to the JVM only
                preexec_fn=preexec(),  # and it goes away with its parent, even after a kill -9
                umask=OWNER_ONLY_UMASK if self.secure else -1,
                pass_fds=(lock.fileno(),),  # the JVM holds the data dir's lock too, while it runs
            )
        self._finalizer = weakref.finalize(self, _kill_at_exit, self._proc)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout`` seconds; waits for exit."""
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        self._detach_finalizer()
        self._release_dir()

    def kill(self) -> None:
        """Kill the server abruptly with SIGKILL (simulates a crash) and wait for it to exit."""
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        self._detach_finalizer()
        self._release_dir()

    def _release_dir(self) -> None:
        lock, self._dir_lock = self._dir_lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> EmbeddedZooKeeper:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running() else "stopped"
        secure = ", secure" if self.secure else ""
        return f"EmbeddedZooKeeper({self.connect_string}, data_dir={str(self.data_dir)!r}{secure}, {state})"

    # ----------------------------------------------------------------- internals

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines the server wrote to its log during the current run."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_until_serving(self, deadline: float, timeout: float) -> None:
        assert self._proc is not None
        last_reply = ""
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} exited with code {code} during startup; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} was not ready after {timeout}s "
                    f"(last srvr reply: {last_reply.strip()!r}); log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                # Short per-probe timeout: during startup ZooKeeper 3.8.4 may answer "not currently
                # serving requests" and then fail to close the socket (NPE in removeCnxn).
                with self._on_host():
                    last_reply = four_letter_word(self.host, self.port, "srvr", timeout=min(0.25, remaining))
            except OSError:
                pass
            else:
                modes = ("Mode: leader", "Mode: follower") if self.ensemble else ("Mode: standalone",)
                if any(mode in last_reply for mode in modes):
                    return
            time.sleep(0.05)

    def _write_config(self) -> None:
        def escape(value: str) -> str:  # java.util.Properties treats backslash as an escape
            return value.replace("\\", "\\\\")

        config = {
            "tickTime": str(self.tick_time_ms),
            "minSessionTimeout": str(2 * self.tick_time_ms),
            "maxSessionTimeout": str(max(60_000, 2 * self.tick_time_ms)),
            "dataDir": escape(str(self.data_dir)),
            "clientPort": str(self.port),
            "clientPortAddress": self.host,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": SECURE_FOUR_LETTER_WORDS if self.secure else FOUR_LETTER_WORDS,
            # Every client of an embedded server comes from the same IP: lift the default cap of 60.
            "maxClientCnxns": "0",
            # Keep a long-lived data dir bounded: purge old snapshots/txn logs every hour.
            "autopurge.snapRetainCount": "3",
            "autopurge.purgeInterval": "1",
        }
        if self.ensemble:
            config.update({"initLimit": "10", "syncLimit": "5"})
            config.update({f"server.{i}": f"{host}:2888:3888" for i, host in sorted(self.ensemble.items())})
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        text = "# Written by sparklog EmbeddedZooKeeper; rewritten on every start.\n"
        text += "".join(f"{key}={value}\n" for key, value in config.items())
        self.config_path.write_text(text)
        (self.data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)
        (self.data_dir / "logback.xml").write_text(_LOGBACK_XML)

    def _on_host(self) -> contextlib.AbstractContextManager[None]:
        """Where this server is reached from: its namespace, or where the caller is."""
        return contextlib.nullcontext() if self.namespace is None else inside(self.namespace)

    def _jvm_arguments(self) -> list[str]:
        return [
            *_DEFAULT_JVM_OPTIONS,
            f"-Dzookeeper.log.dir={self.data_dir}",
            f"-Dzookeeper.log.file={LOG_FILE_NAME}",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            f"-Dlog4j.configuration={(self.data_dir / 'log4j.properties').as_uri()}",
            f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
            *self.jvm_options,
        ]

    def _detach_finalizer(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
