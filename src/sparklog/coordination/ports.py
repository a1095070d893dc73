"""Small networking helpers for local (loopback) services."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free at the time of the call.

    The port is found by binding to port 0 and closing the socket again, so another
    process may grab it before the caller does; callers must cope with that (rare) race.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
