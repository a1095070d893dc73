"""Start a streaming query over a Python data source, surviving Spark's 10 s worker start limit.

For every streaming query over a Python source (``sparklog``, or any other), Spark starts one Python
process (``pyspark.sql.streaming.python_streaming_source_runner``) while the query initializes its
sources, and gives it 10 s to connect back, a limit hard-coded in ``PythonWorkerFactory``. That
process imports pyspark and pyarrow first. Where those files are not in the page cache, the imports
read them from disk: 16.8 s measured on this project's VM, whose kernel pages out file pages unused
for a minute. The query then fails before reading anything, with ``Python worker failed to connect
back``.

:func:`start_stream` starts the query and waits until its sources are initialized. If the worker did
not connect back in time, it imports the runner's modules in a child process without a time limit
(which brings the files into the page cache) and starts the query again. Nothing was read, so no
offset was committed: the new start resumes from the same checkpoint, exactly as the failed one would
have.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("sparklog.datasource.query_start")

SOURCE_RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
WORKER_DID_NOT_CONNECT = "Python worker failed to connect back"
ATTEMPTS = 3


def start_stream(
    start: Callable[[], Any],
    checkpoint: str | Path | None = None,
    attempts: int = ATTEMPTS,
    init_timeout_s: float = 300.0,
) -> Any:
    """``start()`` a ``StreamingQuery`` and return it once its sources are initialized; restart it
    (up to ``attempts`` starts in all) when its source's Python worker did not start within Spark's
    limit. Any other failure while initializing is raised as is.

    ``checkpoint``: the query's local checkpoint directory. The failed start left an empty offset
    log there, and sinks that cannot recover from a checkpoint (the memory sink in append mode)
    refuse to start where an offset log exists; an empty one is removed before the next start."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    attempt = 1
    while (failure := _await_sources(query := start(), init_timeout_s)) is not None:
        if attempt == attempts or WORKER_DID_NOT_CONNECT not in str(failure):
            raise failure
        attempt += 1
        took = warm_source_runner()
        if checkpoint is not None:
            _drop_empty_offset_log(Path(checkpoint))
        log.warning(
            "the streaming query's Python source worker did not connect back within Spark's 10 s "
            "(cold page cache); its modules took %.1f s to import, starting the query again (%d of %d)",
            took,
            attempt,
            attempts,
        )
    return query


def warm_source_runner() -> float:
    """Import the streaming source runner's modules in a child process of the Python that Spark's
    workers run; returns the seconds it took."""
    from pyspark import SparkContext

    python = SparkContext.getOrCreate().pythonExec
    began = time.monotonic()
    subprocess.run([python, "-c", f"import {SOURCE_RUNNER_MODULE}"], check=True, capture_output=True, timeout=600)
    return time.monotonic() - began


def _drop_empty_offset_log(checkpoint: Path) -> None:
    """Remove ``checkpoint``'s offset log if it holds no entry (no micro-batch was ever planned)."""
    offsets = checkpoint / "offsets"
    if offsets.is_dir() and not any(offsets.iterdir()):
        offsets.rmdir()


def _await_sources(query: Any, timeout_s: float) -> BaseException | None:
    """Wait until ``query`` is past initializing its sources; the exception it ended with, if any."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["message"].startswith("Initializing"):
        if time.monotonic() > deadline:
            query.stop()
            return TimeoutError(f"the streaming query did not initialize its sources within {timeout_s:.0f} s")
        time.sleep(0.05)
    return query.exception()
