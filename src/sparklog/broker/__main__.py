"""``python -m sparklog.broker --id N --port P --data-dir DIR [--zookeeper HOST:PORT]``: one broker
process in the foreground (also ``sparklog broker``)."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys

from sparklog.broker.broker import Broker
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP
from sparklog.broker.log_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from sparklog.errors import BrokerIdInUse, DirectoryInUse, PortInUse
from sparklog.file_modes import owner_only_files_if
from sparklog.security.broker_config import BrokerSecurity
from sparklog.security.client_config import load_properties
from sparklog.stop_signal import StopSignal


def main(
    broker_id: int,
    port: int,
    data_dir: str,
    zookeeper: str,
    host: str = "127.0.0.1",
    max_calls_per_ip: int = DEFAULT_MAX_CALLS_PER_IP,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    config_file: str | None = None,
    lake_dir: str | None = None,
    kafka_port: int | None = None,
    metrics_port: int | None = None,
) -> int:
    """Run one broker in the foreground (``sparklog broker``); ``config_file``: a properties file
    with its listeners and security settings (:mod:`sparklog.security.broker_config`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faulthandler.enable()  # a crash in native code prints every thread's stack to stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` shows what every thread is doing
    security = None
    if config_file is not None:
        security = BrokerSecurity.from_properties(load_properties(config_file), host, port)
    # log.dirs.owner.only: before the broker writes anything (umask 077 reaches every thread's files)
    owner_only_files_if(security is not None and security.owner_only, data_dir)
    stop = StopSignal()  # before start-up: a signal during it still stops cleanly
    broker = Broker(
        broker_id,
        data_dir,
        zookeeper,
        port=port,
        host=host,
        max_calls_per_ip=max_calls_per_ip,
        producer_id_expiration_ms=producer_id_expiration_ms,
        security=security,
        lake_dir=lake_dir,
        kafka_port=kafka_port,
        metrics_port=metrics_port,
    )
    try:
        broker.start()
    except (DirectoryInUse, BrokerIdInUse, PortInUse) as exc:  # another broker has this dir, id or port: say so
        print(f"broker {broker_id}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"broker {broker_id} listening on {host}:{broker.port} (data in {data_dir})", flush=True)
    if config_file is not None:
        listed = ", ".join(f"{e.protocol}://{e.host}:{e.port}" for e in broker.endpoints)
        print(f"broker {broker_id} listeners: {listed}", flush=True)
    if broker.kafka_endpoints:
        listed = ", ".join(f"{e.protocol}://{e.host}:{e.port}" for e in broker.kafka_endpoints)
        print(f"broker {broker_id} Kafka listeners: {listed}", flush=True)
    if broker.metrics_url is not None:
        print(f"broker {broker_id} metrics at {broker.metrics_url}", flush=True)
    broker.run_until_signalled(stop)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m sparklog.broker``."""
    parser = argparse.ArgumentParser(prog="python -m sparklog.broker")
    parser.add_argument("--id", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--zookeeper", default=os.environ.get("SPARKLOG_ZOOKEEPER", "127.0.0.1:2181"))
    parser.add_argument("--max-connections-per-ip", type=int, default=DEFAULT_MAX_CALLS_PER_IP)
    parser.add_argument("--producer-id-expiration-ms", type=int, default=DEFAULT_PRODUCER_ID_EXPIRATION_MS)
    parser.add_argument("--config", default=None, help="properties file: listeners, TLS, SASL (server.properties)")
    parser.add_argument("--lake-dir", default=None, help="where lake-enabled topics' Delta tables are (dir or URI)")
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        help="a plaintext Kafka-protocol listener on --host at this port (0: any free port); default: "
        "only what the --config file's kafka.listeners says",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics on --host (0: any free port); default: none",
    )
    return parser


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main(
        args.id,
        args.port,
        args.data_dir,
        args.zookeeper,
        args.host,
        args.max_connections_per_ip,
        args.producer_id_expiration_ms,
        args.config,
        args.lake_dir,
        args.kafka_port,
        args.metrics_port,
    )


if __name__ == "__main__":
    sys.exit(run())
