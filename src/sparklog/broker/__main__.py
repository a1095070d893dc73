"""``python -m sparklog.broker --id N --port P --data-dir DIR [--zookeeper HOST:PORT]``: one broker."""

from __future__ import annotations

import argparse
import os
import sys

from sparklog.broker.broker import main
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP
from sparklog.broker.log_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS

if __name__ == "__main__":
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
    args = parser.parse_args()
    sys.exit(
        main(
            args.id,
            args.port,
            args.data_dir,
            args.zookeeper,
            args.host,
            args.max_connections_per_ip,
            args.producer_id_expiration_ms,
            args.config,
            args.lake_dir,
        )
    )
