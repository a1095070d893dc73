"""One owner per data directory: the process that uses a directory (a broker's log dir, ZooKeeper's
data dir, ``sparklog up``'s data dir) holds an exclusive ``flock`` on its ``.lock`` file for as
long as it runs, as Kafka does with each log dir's ``.lock``. A second process is refused at once
with :class:`~sparklog.errors.DirectoryInUse` naming the holder's pid, before it reads or writes
anything there. The kernel releases the lock when its holder exits, even by ``kill -9``."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from sparklog.errors import DirectoryInUse

LOCK_FILE = ".lock"


class DirLock:
    """An exclusive lock on ``directory`` (created if missing), held until :meth:`release`."""

    def __init__(self, directory: str | Path, what: str) -> None:
        self.directory = Path(directory)
        self.what = what  # "broker 1's log dir", "ZooKeeper's data dir"...
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        """Take the lock (held already: nothing to do); DirectoryInUse if another holds it."""
        if self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise DirectoryInUse(
                f"{self.what} {self.directory} is in use by another process ({holder}); "
                f"stop it first, or use another directory"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def fileno(self) -> int:
        """The locked file's descriptor: a child process given it (``pass_fds``) holds the lock too,
        until both have closed it."""
        if self._fd is None:
            raise ValueError(f"{self.what} {self.directory} is not locked")
        return self._fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor releases the lock

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"
