"""``sparklog bench append``: the storage engine alone, appending and reading back a partition log."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.broker.log import PartitionLog
from sparklog.config import TopicConfig
from sparklog.records import to_record_batch


def make_values(count: int, value_bytes: int, seed: int = 7) -> pa.Array:
    """``count`` random binary values of ``value_bytes`` each, built without a per-record loop."""
    rng = np.random.default_rng(seed)
    data = pa.py_buffer(rng.integers(0, 256, size=count * value_bytes, dtype=np.uint8).tobytes())
    offsets = pa.py_buffer((np.arange(count + 1, dtype=np.int32) * value_bytes).tobytes())
    return pa.Array.from_buffers(pa.binary(), count, [None, offsets, data])


def _one_run(directory: str, batch: pa.RecordBatch, batches: int, compression: str) -> dict[str, float]:
    log = PartitionLog(directory, TopicConfig.from_dict({"compression": compression}))
    start = time.perf_counter()
    for _ in range(batches):
        log.append(batch)
    appended = time.perf_counter() - start
    log.flush()
    flushed = time.perf_counter() - start
    size = log.size_bytes
    start = time.perf_counter()
    offset, seen = 0, 0
    while offset < log.log_end_offset:
        got = log.read(offset, max_bytes=64 << 20)
        seen += sum(b.num_rows for b in got)
        offset = got[-1].column(0)[-1].as_py() + 1
    read = time.perf_counter() - start
    log.close()
    shutil.rmtree(directory)
    if seen != batches * batch.num_rows:
        raise AssertionError(f"read back {seen} records, appended {batches * batch.num_rows}")
    return {"append_s": appended, "flush_s": flushed, "read_s": read, "size": size}


def _baseline_run(directory: str, batch: pa.RecordBatch, batches: int) -> float:
    """Seconds for plain pyarrow to write the same stored batches to one IPC stream file: the
    physical ceiling on this machine right now, measured beside sparklog in the same run."""
    stored = to_record_batch(batch)
    os.makedirs(directory)
    path = os.path.join(directory, "plain.arrows")
    start = time.perf_counter()
    with pa.ipc.new_stream(path, stored.schema) as writer:
        for _ in range(batches):
            writer.write_batch(stored)
    took = time.perf_counter() - start
    shutil.rmtree(directory)
    return took


def run(
    records: int = 10_000_000,
    value_bytes: int = 100,
    batch_records: int = 10_000,
    compression: str = "none",
    repeat: int = 3,
    data_dir: str | None = None,
) -> dict[str, Any]:
    """Append ``records`` records in batches, fsync, read them all back; medians of ``repeat`` runs
    after one warm-up run (freshly freed VM memory is slow to touch: see FACTS.md). Plain pyarrow
    writing the same batches to one file is measured alongside (``plain_ipc_records_per_s``)."""
    batch = pa.record_batch({"value": make_values(batch_records, value_bytes)})
    batches = max(1, records // batch_records)
    total = batches * batch_records
    with tempfile.TemporaryDirectory(dir=data_dir, prefix="sparklog-bench-") as tmp:
        _one_run(os.path.join(tmp, "warm-up"), batch, batches, compression)
        runs, baseline = [], []
        for i in range(repeat):  # interleaved, so both see the same machine
            runs.append(_one_run(os.path.join(tmp, f"run-{i}"), batch, batches, compression))
            baseline.append(_baseline_run(os.path.join(tmp, f"plain-{i}"), batch, batches))

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    size = runs[0]["size"]
    return {
        "scenario": "append",
        "records": total,
        "value_bytes": value_bytes,
        "batch_records": batch_records,
        "compression": compression,
        "repeat": repeat,
        "records_per_s": round(total / median("append_s")),
        "mb_per_s": round(size / median("append_s") / 1e6, 1),
        "records_per_s_with_fsync": round(total / median("flush_s")),
        "read_records_per_s": round(total / median("read_s")),
        "read_mb_per_s": round(size / median("read_s") / 1e6, 1),
        "stored_bytes": size,
        "plain_ipc_records_per_s": round(total / statistics.median(baseline)),
        "append_vs_plain_ipc": round(statistics.median(baseline) / median("append_s"), 2),
    }
