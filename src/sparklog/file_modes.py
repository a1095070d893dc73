"""Data readable by its owner only: what a secured cluster's processes write (segments, indexes,
Delta tables, ZooKeeper's snapshots and transaction log, which hold users' stored keys) is created
with umask 077 (directories 0700, files 0600), and what is already there is made so on start.

The umask is process-wide, so it covers every file any thread (or library: Arrow, deltalake)
creates later. A broker sets it from ``log.dirs.owner.only=true`` in its properties file
(:func:`owner_only_files_if`), the embedded ZooKeeper's JVM gets it from ``Popen(umask=...)``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

OWNER_ONLY_UMASK = 0o077
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def restrict_tree(top: str | os.PathLike[str]) -> None:
    """``top`` and everything under it: directories 0700, files 0600 (symbolic links below ``top``
    are neither followed nor changed; a missing ``top`` is fine). The top first: once it is 0700
    nobody else can reach what is below while the rest is changed."""
    top = Path(top)
    if not top.is_dir():
        return
    os.chmod(top, DIRECTORY_MODE)
    for directory, subdirectories, files in os.walk(top):
        for name in subdirectories:
            _chmod(os.path.join(directory, name), DIRECTORY_MODE)
        for name in files:
            _chmod(os.path.join(directory, name), FILE_MODE)


def _chmod(path: str, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):  # gone in the meantime (a rolled log, a temp file)
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            os.chmod(path, mode)


def owner_only_files_if(secure: bool, *directories: str | os.PathLike[str]) -> None:
    """When ``secure``: from now on this process creates files 0600 and directories 0700
    (umask 077), and ``directories`` (each one's whole tree) are made so now."""
    if not secure:
        return
    os.umask(OWNER_ONLY_UMASK)
    for directory in directories:
        restrict_tree(directory)


def open_for_append(path: str | os.PathLike[str], owner_only: bool) -> BinaryIO:
    """``path`` opened for appending bytes (a child process's log); when ``owner_only`` it is
    created 0600, or made 0600 if it exists."""
    if not owner_only:
        return open(path, "ab")  # noqa: SIM115 - the caller closes it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "ab")
