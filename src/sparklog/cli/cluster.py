"""``sparklog up``, ``sparklog zookeeper`` and ``sparklog broker``: running the servers in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.cli.common import CliError, add_zookeeper_option, check_zookeeper
from sparklog.stop_signal import StopSignal

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from sparklog.local_cluster import BrokerProcess

DEFAULT_DATA_DIR = "data"
DEFAULT_BROKER_PORT = 9092
BROKER_START_TIMEOUT_S = 60.0

UP_DESCRIPTION = """\
Runs a local cluster in the foreground: a standalone ZooKeeper (unless --zookeeper or
SPARKLOG_ZOOKEEPER names one to use) and N brokers (ids 1..N) as child processes. Data goes under
DIR: DIR/zookeeper, DIR/broker-<id>, DIR/lake (the Delta tables of lake-enabled topics, unless
--lake-dir says elsewhere); each broker's output goes to DIR/broker-<id>.log. Broker i
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
    p.add_argument(
        "--kafka-port",
        type=int,
        default=0,
        metavar="BASE",
        help="first broker's Kafka-protocol listener (Kafka clients; plaintext, SASL_SSL with --secure), "
        "broker i on BASE+i-1 (default 0 = any free ports)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="BASE",
        help="first broker's Prometheus metrics endpoint (http://127.0.0.1:PORT/metrics), broker i on BASE+i-1 "
        "(default 0 = any free ports)",
    )
    p.add_argument(
        "--lake-dir",
        metavar="DIR_OR_URI",
        help="where lake-enabled topics' Delta tables go (default DIR/lake)",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="TLS, SCRAM and ACLs: a CA and broker certificate, an 'admin' super user and a locked ZooKeeper under "
        "DIR/security; writes DIR/client.properties (use it with --command-config)",
    )
    p.add_argument(
        "--hosts",
        action="store_true",
        help="spread the cluster over hosts of its own on this machine (root only): a 3-server ZooKeeper ensemble "
        "and each broker in a network namespace on a private switch, and a host for clients; prints the "
        "namespaces and addresses; Ctrl-C removes them",
    )
    add_zookeeper_option(p)
    p.set_defaults(handler=run_up)


def add_zookeeper(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "zookeeper",
        help="run the embedded standalone ZooKeeper in the foreground",
        description="Runs a standalone ZooKeeper on loopback until Ctrl-C or SIGTERM (what 'sparklog up' starts "
        "unless given one); prints the address it listens on.",
    )
    p.add_argument(
        "--port", type=int, default=2181, metavar="PORT", help="client port (default 2181; 0 = any free port)"
    )
    p.add_argument(
        "--data-dir",
        default=os.path.join(DEFAULT_DATA_DIR, "zookeeper"),
        metavar="DIR",
        help="where ZooKeeper keeps its snapshots and logs (default ./data/zookeeper)",
    )
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
    p.add_argument(
        "--max-connections-per-ip",
        type=int,
        default=4096,
        metavar="N",
        help="calls one client address may have open at once; more are refused (default 4096)",
    )
    p.add_argument(
        "--producer-id-expiration-ms",
        type=int,
        default=86_400_000,
        metavar="MS",
        help="forget an idempotent producer this long after its last write (default 1 day, as Kafka)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="properties file (server.properties): listeners, advertised.listeners, ssl.*, sasl.enabled.mechanisms, "
        "super.users, security.inter.broker.protocol, inter.broker.sasl.username/password",
    )
    p.add_argument(
        "--lake-dir",
        metavar="DIR_OR_URI",
        help="where lake-enabled topics' Delta tables are (<lake dir>/<topic>); without it this broker tiers nothing",
    )
    p.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        metavar="P",
        help="a plaintext Kafka-protocol listener on --host at this port (0: any free port); default: only what "
        "the --config file's kafka.listeners says",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="P",
        help="serve Prometheus metrics at http://HOST:P/metrics on --host (0: any free port); default: no endpoint",
    )
    add_zookeeper_option(p)
    p.set_defaults(handler=run_broker, logs=True)


# ----------------------------------------------------------------- sparklog zookeeper
def run_zookeeper(args: argparse.Namespace) -> int:
    from sparklog.coordination.ports import free_port
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    if args.port < 0:
        raise CliError(f"--port must be >= 0, got {args.port}")
    stop = StopSignal()
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
    from sparklog.broker.__main__ import main as broker_main
    from sparklog.coordination.ports import port_is_open

    if args.id < 0:
        raise CliError(f"--id must be >= 0, got {args.id}")
    if args.port != 0 and port_is_open(args.host, args.port, timeout=0.5):
        raise CliError(f"cannot listen on {args.host}:{args.port}: something is already listening there")
    check_zookeeper(args.zookeeper)
    data_dir = args.data_dir or os.path.join(DEFAULT_DATA_DIR, f"broker-{args.id}")
    if args.max_connections_per_ip < 1:
        raise CliError(f"--max-connections-per-ip must be >= 1, got {args.max_connections_per_ip}")
    if args.producer_id_expiration_ms < 1:
        raise CliError(f"--producer-id-expiration-ms must be >= 1, got {args.producer_id_expiration_ms}")
    if args.kafka_port is not None and not 0 <= args.kafka_port < 65536:
        raise CliError(f"--kafka-port must be a port from 0 to 65535, got {args.kafka_port}")
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        raise CliError(f"--metrics-port must be a port from 0 to 65535, got {args.metrics_port}")
    return broker_main(
        args.id,
        args.port,
        data_dir,
        args.zookeeper,
        args.host,
        args.max_connections_per_ip,
        args.producer_id_expiration_ms,
        args.config,
        args.lake_dir,
        args.kafka_port,
        args.metrics_port,
    )


# ----------------------------------------------------------------- sparklog up
def _broker_ports(base: int, count: int, taken: list[int] | None = None) -> list[int]:
    """``base``, ``base+1``, ... where free and not ``taken`` (0: any free ports)."""
    from sparklog.coordination.ports import free_port, port_is_open

    ports: list[int] = []
    used = set(taken or ())
    for i in range(count):
        port = base + i if base > 0 else 0
        if not port or port in ports or port in used or port >= 65536 or port_is_open("127.0.0.1", port, timeout=0.2):
            port = free_port()
            while port in ports or port in used:
                port = free_port()
        ports.append(port)
    return ports


def run_up(args: argparse.Namespace) -> int:
    from sparklog.errors import BrokerNotAvailable
    from sparklog.local_cluster import LocalCluster

    if args.brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {args.brokers}")
    if args.hosts:
        return run_up_on_hosts(args)
    if min(args.broker_port, args.zookeeper_port, args.kafka_port, args.metrics_port) < 0:
        raise CliError("ports must be >= 0")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if args.zookeeper_given:
        check_zookeeper(args.zookeeper)
    stop = StopSignal()
    cluster = LocalCluster(
        data_dir,
        brokers=args.brokers,
        zookeeper=args.zookeeper if args.zookeeper_given else None,
        zookeeper_port=args.zookeeper_port or None,
        broker_ports=(flight := _broker_ports(args.broker_port, args.brokers)),
        kafka_ports=(kafka := _broker_ports(args.kafka_port, args.brokers, taken=flight)),
        metrics_ports=_broker_ports(args.metrics_port, args.brokers, taken=flight + kafka),
        log_dir=data_dir,
        secure=args.secure,
        lake_dir=args.lake_dir,
    )
    cluster.lock_data_dir()  # before anything there is touched: a second `up` on it is refused
    problems: list[str] = []
    try:
        if cluster.embedded is not None:
            cluster.embedded.start()
            print(f"zookeeper listening on {cluster.zookeeper} (data in {data_dir / 'zookeeper'})", flush=True)
        else:
            print(f"zookeeper at {cluster.zookeeper} (given; not started by up)", flush=True)
        secured = None
        if args.secure and not stop.is_set():
            secured = cluster.secure_brokers().client_properties
        for broker in cluster.brokers.values():
            if not stop.is_set():
                broker.start()
        if not stop.is_set():
            try:
                cluster.wait_for_brokers(list(cluster.brokers), BROKER_START_TIMEOUT_S)
            except BrokerNotAvailable as exc:
                raise CliError(str(exc).splitlines()[0]) from None
        if not stop.is_set():
            for b in cluster.brokers.values():
                print(
                    f"broker {b.broker_id} listening on 127.0.0.1:{b.port} (data in {b.data_dir}, log {b.log_path}); "
                    f"metrics at {b.metrics_url()}",
                    flush=True,
                )
            kafka_files = cluster.security
            if kafka_files is not None and kafka_files.kafka_client_properties is not None:
                print(
                    f"Kafka clients: bootstrap.servers={cluster.kafka_bootstrap_servers} (SASL_SSL: settings in "
                    f"{kafka_files.kafka_client_properties}; Kafka's Java tools: --command-config "
                    f"{kafka_files.kafka_java_client_properties})",
                    flush=True,
                )
            elif cluster.kafka_bootstrap_servers:
                print(f"Kafka clients: bootstrap.servers={cluster.kafka_bootstrap_servers}", flush=True)
            if secured is not None:
                print(
                    f"sparklog is up (TLS, SCRAM, ACLs): {len(cluster.brokers)} broker(s); clients use "
                    f"--command-config {secured} (user 'admin', a super user), and so does administration, "
                    f"through the brokers: `sparklog users add alice --command-config {secured}`, "
                    f"`sparklog acls add --allow-principal User:alice --operation Read --topic T "
                    f"--command-config {secured}` (also quotas and partitions reassign; no ZooKeeper access "
                    "needed); Ctrl-C stops it",
                    flush=True,
                )
            else:
                print(
                    f"sparklog is up: {len(cluster.brokers)} broker(s); clients use --zookeeper {cluster.zookeeper} "
                    f"(or SPARKLOG_ZOOKEEPER={cluster.zookeeper}); Ctrl-C stops it",
                    flush=True,
                )
            problems += _watch([z for z in [cluster.embedded] if z is not None], cluster.brokers.values(), stop)
    finally:
        problems += cluster.stop()
        stop.restore()
    if problems:
        raise CliError("; ".join(problems))
    return 0


def run_up_on_hosts(args: argparse.Namespace) -> int:
    """``sparklog up --hosts``: :class:`~sparklog.hosts.cluster.HostCluster` in the foreground."""
    from sparklog.errors import SparklogError
    from sparklog.hosts.cluster import HostCluster
    from sparklog.hosts.network import namespaces_available

    refused = [
        option
        for option, given in (
            ("--secure", args.secure),
            ("--zookeeper", args.zookeeper_given),
            ("--lake-dir", args.lake_dir is not None),
            ("--broker-port", args.broker_port != DEFAULT_BROKER_PORT),
            ("--kafka-port", args.kafka_port != 0),
            ("--metrics-port", args.metrics_port != 0),  # the hosts' brokers serve no metrics yet
            ("--zookeeper-port", args.zookeeper_port != 2181),
        )
        if given
    ]
    if refused:
        raise CliError(
            f"--hosts runs a plaintext cluster with its own ensemble and each server on its host's standard ports "
            f"(ZooKeeper 2181, brokers 9092, Kafka 9093): drop {', '.join(refused)}"
        )
    reason = namespaces_available()
    if reason is not None:
        raise CliError(f"--hosts makes network namespaces, and cannot here: {reason}")
    stop = StopSignal()
    cluster = HostCluster(Path(args.data_dir), brokers=args.brokers)
    problems: list[str] = []
    try:
        try:
            cluster.start()
        except SparklogError as exc:
            raise CliError(str(exc).splitlines()[0]) from None
        net = cluster.net
        for host, server in cluster.zookeepers.items():
            print(f"zookeeper on host {net.namespace(host)} at {server.connect_string} (data in {server.data_dir})")
        for b in cluster.brokers.values():
            print(
                f"broker {b.broker_id} on host {b.namespace} at {b.host}:{b.port}, Kafka clients {b.host}:"
                f"{b.kafka_port} (data in {b.data_dir}, log {b.log_path})"
            )
        client = net.namespace(cluster.client_host)
        print(
            f"clients run on host {client} ({net.address(cluster.client_host)}): e.g. `ip netns exec {client} "
            f"sparklog topics list --bootstrap-server {cluster.bootstrap_servers}`; Kafka clients there use "
            f"bootstrap.servers={cluster.kafka_bootstrap_servers}"
        )
        print(
            f"sparklog is up on {net.hosts} hosts (network namespaces {net.tag}-*, switch {net.switch}): cut host "
            f"{net.namespace(cluster.host_of_broker(1))} off with `ip -n {net.switch} link set p"
            f"{cluster.host_of_broker(1)} down` (`up` again to reconnect); Ctrl-C stops it and removes the namespaces",
            flush=True,
        )
        problems += _watch(cluster.zookeepers.values(), cluster.brokers.values(), stop)
    finally:
        problems += cluster.stop()
        stop.restore()
    if problems:
        raise CliError("; ".join(problems))
    return 0


def _watch(zookeepers: Iterable[EmbeddedZooKeeper], brokers: Iterable[BrokerProcess], stop: StopSignal) -> list[str]:
    """Until a stop signal (nothing to say), or one of these processes exits on its own: then what
    exited, said on stderr too (the caller stops the cluster: half a cluster would only look alive)."""
    zookeepers, brokers = list(zookeepers), list(brokers)
    while not stop.wait(0.5):
        died = next((f"its ZooKeeper exited (log {z.log_path})" for z in zookeepers if not z.is_running()), None)
        for b in brokers:
            code = b.exited()
            if died is None and code is not None:
                died = f"broker {b.broker_id} exited with code {code} (log {b.log_path})"
        if died is not None:
            print(f"sparklog: {died}: stopping the cluster", file=sys.stderr, flush=True)
            return [died]
    return []
