"""A raw Kafka-protocol connection for tests that play a client nobody should trust: requests
encoded by kafka-python's generated classes (or any bytes at all), responses decoded by them."""

from __future__ import annotations

import socket
import struct
from typing import Any

from sparklog.kafka.record_batch import BatchFields, encode_batch


class KafkaWire:
    """One TCP connection to a Kafka listener."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Any) -> int:
        """Send a kafka-python request message (its version set); its correlation id."""
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="sparklog-tests")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        return self.correlation_id

    def send_raw(self, payload: bytes) -> None:
        """Any bytes as one frame (size prefix added)."""
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def receive(self) -> bytes | None:
        """The next response frame's bytes; None once the broker closed the connection."""
        head = self._exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._exactly(size)

    def request(self, request: Any) -> Any:
        """Send ``request`` and decode its response (same API and version)."""
        version = request.API_VERSION
        self.send(request)
        payload = self.receive()
        assert payload is not None, "the broker closed the connection"
        response_class = request.header.get_response_class()
        return response_class.decode(payload, version=version, header=True)

    def closed_by_broker(self) -> bool:
        """Whether the broker closes the connection (reading until it does, or a timeout)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes | None:
        out = bytearray()
        while len(out) < size:
            chunk = self.sock.recv(size - len(out))
            if not chunk:
                return None
            out += chunk
        return bytes(out)


def kafka_batch(
    values: list[bytes], keys: list[bytes | None] | None = None, timestamp_ms: int = 1_700_000_000_000
) -> bytes:
    """An uncompressed v2 record batch as a producer sends it (base offset 0)."""
    import pyarrow as pa

    n = len(values)
    records = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([timestamp_ms + i for i in range(n)], pa.int64()),
            "key": pa.array(keys if keys is not None else [None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    return encode_batch(records, BatchFields(0))
