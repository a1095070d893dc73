"""``make demo``: the main job end to end on the embedded default.

Until the broker and the Spark data source land, the demo exercises the storage engine: it writes a
click stream into a partition log under ``data/demo``, reads it back by offset and by time,
compacts a keyed "latest profile" log, and prints a summary a person can check.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.bench.append import make_values
from sparklog.broker.log import PartitionLog, compact
from sparklog.config import TopicConfig

DATA_DIR = Path("data") / "demo"


def main() -> int:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    events, batch_rows = 1_000_000, 10_000
    start_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    rng = np.random.default_rng(42)
    clicks = PartitionLog(DATA_DIR / "clicks-0", TopicConfig.from_dict({"segment.bytes": 32 << 20}))
    began = time.perf_counter()
    for i in range(events // batch_rows):
        users = pa.array(rng.integers(0, 1000, batch_rows)).cast(pa.string())
        keys = pc.binary_join_element_wise("user-", users, "").cast(pa.binary())
        ts = start_ms + (i * batch_rows + np.arange(batch_rows)) * 10
        clicks.append({"key": keys, "value": make_values(batch_rows, 100, seed=i), "timestamp": ts})
    took = time.perf_counter() - began
    total = sum(b.num_rows for b in clicks.read(0, max_bytes=1 << 40))
    one_hour_in = clicks.offset_for_time(start_ms + 3_600_000)
    print(
        f"clicks: appended {events:,} events in {took:.2f} s ({events / took / 1e6:.1f} M/s) "
        f"into {len(clicks.segments)} Arrow IPC segments; read back {total:,}"
    )
    print(f"clicks: first event at or after 01:00 UTC is offset {one_hour_in:,}")
    clicks.close()

    profiles = PartitionLog(DATA_DIR / "profiles-0", TopicConfig.from_dict({"cleanup.policy": "compact"}))
    for version in range(5):
        users = pa.array([f"user-{u}".encode() for u in range(1000)], pa.binary())
        profiles.append({"key": users, "value": pa.array([f"v{version}".encode()] * 1000, pa.binary())})
        profiles.roll()
    result = compact(profiles)
    latest = pa.Table.from_batches(list(profiles.iter_batches()))
    print(
        f"profiles: {result.records_before:,} records compacted to {result.records_after:,}; "
        f"every key's latest value kept: {pc.all(pc.equal(latest['value'], b'v4')).as_py()}, "
        f"offsets {latest['offset'][0]}..{latest['offset'][-1]} (unchanged, with gaps)"
    )
    profiles.close()
    return 0 if total == events else 1


if __name__ == "__main__":
    raise SystemExit(main())
