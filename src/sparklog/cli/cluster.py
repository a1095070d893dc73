"""``sparklog up``, ``sparklog zookeeper`` and ``sparklog broker``: running the servers in the foreground."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from sparklog.cli.common import CliError, add_zookeeper_option, check_zookeeper

DEFAULT_DATA_DIR = "data"
DEFAULT_BROKER_PORT = 9092
BROKER_START_TIMEOUT_S = 60.0
BROKER_STOP_TIMEOUT_S = 15.0

UP_DESCRIPTION = """\
Runs a local cluster in the foreground: a standalone ZooKeeper (unless --zookeeper or
SPARKLOG_ZOOKEEPER names one to use) and N brokers (ids 1..N) as child processes. Data goes under
DIR: DIR/zookeeper, DIR/broker-<id>; each broker's output goes to DIR/broker-<id>.log. Broker i
listens on port BASE+i-1 (--broker-port, default 9092) when that port is free, else on any free
port; --broker-port 0 always picks free ports. Prints one line per server once all brokers are
registered in ZooKeeper. Ctrl-C or SIGTERM stops the brokers (SIGTERM, then SIGKILL after 15 s),
then ZooKeeper, and exits 0."""


def add_up(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run a local cluster (ZooKeeper and N brokers) in the foreground",
        description=UP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--brokers", type=int, default=1, metavar="N", help="number of brokers (default 1)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help="where data goes (default ./data)")
    p.add_argument(
        "--zookeeper-port",
        type=int,
        default=2181,
        metavar="PORT",
        help="port of the ZooKeeper that up starts (default 2181; 0 = any free port)",
    )
    p.add_argument(
        "--broker-port",
        type=int,
        default=DEFAULT_BROKER_PORT,
        metavar="BASE",
        help="first broker's port (default 9092)",
    )
    add_zookeeper_option(p)
    p.set_defaults(handler=run_up)


def add_zookeeper(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zookeeper", help="run the embedded standalone ZooKeeper in the foreground")
    p.add_argument("--port", type=int, default=2181, help="client port (default 2181; 0 = any free port)")
    p.add_argument("--data-dir", default=os.path.join(DEFAULT_DATA_DIR, "zookeeper"), help="default ./data/zookeeper")
    p.set_defaults(handler=run_zookeeper)


def add_broker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "broker",
        help="run one broker in the foreground",
        description="Runs one broker until Ctrl-C or SIGTERM; it registers in ZooKeeper as broker N.",
    )
    p.add_argument("--id", type=int, required=True, metavar="N", help="broker id (unique in the cluster)")
    p.add_argument("--port", type=int, default=DEFAULT_BROKER_PORT, metavar="P", help="port (default 9092; 0 = free)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and announce (default 127.0.0.1)")
    p.add_argument("--data-dir", metavar="DIR", help="where its partitions live (default ./data/broker-N)")
    add_zookeeper_option(p)
    p.set_defaults(handler=run_broker, logs=True)


# ----------------------------------------------------------------- sparklog zookeeper
def run_zookeeper(args: argparse.Namespace) -> int:
    from sparklog.coordination.ports import free_port
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    if args.port < 0:
        raise CliError(f"--port must be >= 0, got {args.port}")
    stop = _StopSignal()
    server = EmbeddedZooKeeper(args.data_dir, port=args.port or free_port())
    try:
        server.start()
        if not stop.is_set():
            print(
                f"zookeeper listening on {server.connect_string} (data in {args.data_dir}); Ctrl-C stops it",
                flush=True,
            )
        while not stop.wait(0.5):
            if not server.is_running():
                raise CliError(f"ZooKeeper exited unexpectedly; see {server.log_path}")
    finally:
        server.stop()
        stop.restore()
    return 0


# ----------------------------------------------------------------- sparklog broker
def run_broker(args: argparse.Namespace) -> int:
    from sparklog.broker.broker import main as broker_main
    from sparklog.coordination.ports import port_is_open

    if args.id < 0:
        raise CliError(f"--id must be >= 0, got {args.id}")
    if args.port != 0 and port_is_open(args.host, args.port, timeout=0.5):
        raise CliError(f"cannot listen on {args.host}:{args.port}: something is already listening there")
    check_zookeeper(args.zookeeper)
    data_dir = args.data_dir or os.path.join(DEFAULT_DATA_DIR, f"broker-{args.id}")
    return broker_main(args.id, args.port, data_dir, args.zookeeper, args.host)


# ----------------------------------------------------------------- sparklog up
class _StopSignal:
    """SIGINT/SIGTERM set a flag instead of interrupting (the caller stops things in order)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, _signum: int, _frame: object) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In a broker child (Linux): get SIGTERM if ``sparklog up`` dies without stopping it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except Exception:  # not Linux: the brokers outlive a killed parent
        pass


class _BrokerProcess:
    def __init__(self, broker_id: int, port: int, data_dir: Path, log_path: Path, zookeeper: str) -> None:
        self.broker_id = broker_id
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.zookeeper = zookeeper
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "sparklog.broker",
            "--id",
            str(self.broker_id),
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--zookeeper",
            self.zookeeper,
        ]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (kept open while the broker runs)
        self._log.write(f"\n=== sparklog up: starting {' '.join(command)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches up only; up stops the brokers before ZooKeeper
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _broker_port(base: int, index: int, taken: set[int]) -> int:
    from sparklog.coordination.ports import free_port, port_is_open

    if base > 0:
        port = base + index
        if port not in taken and port < 65536 and not port_is_open("127.0.0.1", port, timeout=0.2):
            return port
    while True:
        port = free_port()
        if port not in taken:
            return port


def run_up(args: argparse.Namespace) -> int:
    from sparklog.coordination.ports import free_port
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    if args.brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {args.brokers}")
    if args.broker_port < 0 or args.zookeeper_port < 0:
        raise CliError("ports must be >= 0")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = _StopSignal()
    zk_server: EmbeddedZooKeeper | None = None
    brokers: list[_BrokerProcess] = []
    failure: BaseException | None = None
    try:
        if args.zookeeper_given:
            check_zookeeper(args.zookeeper)
            connect = args.zookeeper
            print(f"zookeeper at {connect} (given; not started by up)", flush=True)
        else:
            zk_server = EmbeddedZooKeeper(data_dir / "zookeeper", port=args.zookeeper_port or free_port())
            zk_server.start()
            connect = zk_server.connect_string
            print(f"zookeeper listening on {connect} (data in {data_dir / 'zookeeper'})", flush=True)
        taken: set[int] = set()
        for i in range(0 if stop.is_set() else args.brokers):
            broker_id = i + 1
            port = _broker_port(args.broker_port, i, taken)
            taken.add(port)
            broker = _BrokerProcess(
                broker_id, port, data_dir / f"broker-{broker_id}", data_dir / f"broker-{broker_id}.log", connect
            )
            brokers.append(broker)
            broker.start()
        if brokers and _wait_for_brokers(connect, brokers, stop):
            for b in brokers:
                print(
                    f"broker {b.broker_id} listening on 127.0.0.1:{b.port} (data in {b.data_dir}, log {b.log_path})",
                    flush=True,
                )
            print(
                f"sparklog is up: {len(brokers)} broker(s); clients use --zookeeper {connect} "
                f"(or SPARKLOG_ZOOKEEPER={connect}); Ctrl-C stops it",
                flush=True,
            )
            _watch(brokers, stop)
    except BaseException as exc:  # stop what was started, then report
        failure = exc
    finally:
        problems = _stop_brokers(brokers)
        if zk_server is not None:
            zk_server.stop()
        stop.restore()
    if failure is not None:
        raise failure
    if problems:
        raise CliError("; ".join(problems))
    return 0


def _wait_for_brokers(connect: str, brokers: list[_BrokerProcess], stop: _StopSignal) -> bool:
    """Until every broker is registered in ZooKeeper at its port; False if a stop signal came first."""
    from sparklog.coordination.cluster import ClusterMetadata
    from sparklog.coordination.ports import port_is_open

    deadline = time.monotonic() + BROKER_START_TIMEOUT_S
    with ClusterMetadata(connect) as cluster:
        while True:
            for b in brokers:
                code = b.exited()
                if code is not None:
                    detail = b.last_log_line()
                    raise CliError(
                        f"broker {b.broker_id} exited with code {code} during startup"
                        + (f": {detail}" if detail else "")
                        + f" (log {b.log_path})"
                    )
            live = cluster.brokers()
            # The port check: a registration left by a crashed run (same id and port) lingers until its
            # ZooKeeper session expires; the broker serves before it registers.
            if all(
                b.broker_id in live and live[b.broker_id].port == b.port and port_is_open("127.0.0.1", b.port)
                for b in brokers
            ):
                return True
            if time.monotonic() > deadline:
                missing = [b.broker_id for b in brokers if b.broker_id not in live]
                raise CliError(
                    f"broker(s) {', '.join(map(str, missing))} did not register within {BROKER_START_TIMEOUT_S:.0f} s"
                )
            if stop.wait(0.1):
                return False


def _watch(brokers: list[_BrokerProcess], stop: _StopSignal) -> None:
    """Until a stop signal; reports (once) a broker that exits on its own."""
    reported: set[int] = set()
    while not stop.wait(0.5):
        for b in brokers:
            code = b.exited()
            if code is not None and b.broker_id not in reported:
                reported.add(b.broker_id)
                print(
                    f"sparklog: warning: broker {b.broker_id} exited with code {code} (log {b.log_path})",
                    file=sys.stderr,
                    flush=True,
                )


def _stop_brokers(brokers: list[_BrokerProcess]) -> list[str]:
    """SIGTERM every broker, wait, SIGKILL the ones still running; what went wrong, if anything."""
    problems: list[str] = []
    running = [b for b in brokers if b.exited() is None]
    for b in running:
        b.terminate()
    deadline = time.monotonic() + BROKER_STOP_TIMEOUT_S
    for b in running:
        assert b.proc is not None
        try:
            b.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            b.kill()
            problems.append(f"broker {b.broker_id} did not stop within {BROKER_STOP_TIMEOUT_S:.0f} s and was killed")
            continue
        code = b.proc.returncode
        if code not in (0, -signal.SIGTERM):
            problems.append(f"broker {b.broker_id} exited with code {code} (log {b.log_path})")
    for b in brokers:
        b.close_log()
    return problems
