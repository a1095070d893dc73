"""Test-only fault injection for the sink (options ``sparklog.test.*``): a fault happens once per
marker file, whichever process reaches it first (the file is created atomically)."""

from __future__ import annotations

import os


def first_to_claim(marker: str, note: str) -> bool:
    """Whether this call created ``marker`` (writing ``note`` in it); False once it exists."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{note}\n".encode())
    os.close(fd)
    return True
