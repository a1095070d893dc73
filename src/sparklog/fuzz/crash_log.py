"""What a broker's log says about how it died: the fatal error ``faulthandler`` printed and the
stacks that were doing something (the crashing thread, or, when it crashed in a thread without
Python frames such as an Arrow worker, the threads that were not idle)."""

from __future__ import annotations

import re
from pathlib import Path

START_MARKER = "=== starting"
_FATAL = re.compile(r"^Fatal Python error: (.*)$", re.M)
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)')
_IDLE = ("threading.py", "queue.py", "selectors.py", "socket.py", "/kazoo/", "<frozen", "__main__.py")
MAX_FRAMES = 5


def fatal_error(log_path: Path, tail_bytes: int = 1 << 20) -> str | None:
    """One line: the fatal error of the broker's last run and where it happened (None if its log
    shows no fatal error)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    text = text.rsplit(START_MARKER, 1)[-1]
    matches = list(_FATAL.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    blocks = text[last.end() :].split("\n\n")
    current = [b for b in blocks if b.lstrip().startswith("Current thread")]
    busy = current if current and _frames(current[0]) else [b for b in blocks if _busy(b)]
    where = " | ".join(" < ".join(_frames(b)[:MAX_FRAMES]) for b in busy[:2])
    return f"{last.group(1).strip()}" + (f" in {where}" if where else "")


def _frames(block: str) -> list[str]:
    out = []
    for line in block.splitlines():
        match = _FRAME.match(line)
        if match:
            path, number, function = match.groups()
            out.append(f"{'/'.join(Path(path).parts[-2:])}:{number} {function}")
    return out


def _busy(block: str) -> bool:
    first = next((line for line in block.splitlines() if _FRAME.match(line)), None)
    return first is not None and not any(idle in first for idle in _IDLE)
