"""A thread in another network namespace for a moment (``setns(2)`` through ctypes; Python 3.11's
``os`` has no ``setns``): what lets one process reach servers that run on the hosts of
:mod:`sparklog.hosts.network`, each in a namespace of its own. A socket belongs to the namespace
its thread was in when it was opened, for its whole life; a thread started meanwhile lives there
too."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from sparklog.errors import NetworkUnavailable

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"  # where `ip netns add` keeps a namespace's handle


_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """The calling thread in network namespace ``namespace`` (made by ``ip netns add``) for the
    block: sockets opened (and threads started) meanwhile belong to it; the thread's own namespace
    is restored after."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
        try:
            _setns(target, f"entering network namespace {namespace}")
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own, "returning to the thread's network namespace")
    finally:
        os.close(own)


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NetworkUnavailable(f"{what} failed: {os.strerror(errno)}")
