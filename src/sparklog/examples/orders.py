"""Orders keyed by customer with JSON values: the data of notebook 4 (``04-topic-history-in-delta``),
a topic whose history is tiered into Delta Lake.

- :func:`make_orders` (and :func:`month_of_orders`, one table per day) draws orders as an Arrow
  table of facts (``order_id``, ``customer``, ``amount_cents``, ``items``, ``timestamp`` in ms;
  numpy draws, no per-order Python) and :func:`to_records` turns them into what a plain topic
  stores: ``key`` = the customer, ``value`` = the order as JSON (built with ``pyarrow.compute``),
  ``timestamp``.
- :func:`customer_totals` and :func:`enriched_reference` compute with pyarrow alone what the
  notebook's Spark SQL and its stream-static join must produce.
- :func:`lake_state` and :func:`wait_until_tiered` read each partition's lake offset and local log
  start (``Admin.describe_topic``) and wait until every closed segment is in the lake.
- :func:`plot_orders_per_day`: the notebook's chart.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOPIC = "orders"
DAY_MS = 86_400_000
# what Spark's from_json parses the value with (amounts are decimals with two digits in the JSON)
ORDER_JSON_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(10,2), items INT"
SEGMENT_SUFFIX = ".arrows"  # a broker's segment files (sparklog.broker.log.segment)


def customer_ids(first: int, count: int) -> list[str]:
    """``c-001``, ``c-002``, ... (``count`` ids from number ``first``)."""
    return [f"c-{i:03d}" for i in range(first, first + count)]


def make_orders(
    n: int, first_id: int, customers: list[str], start_ms: int, end_ms: int, seed: int, *, popular: float = 1.1
) -> pa.Table:
    """``n`` orders with ids from ``first_id``, stamped uniformly in ``[start_ms, end_ms)`` (in
    time order), from ``customers`` with Zipf-like popularity (the first ones order most)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(customers) + 1) ** popular
    who = rng.choice(len(customers), size=n, p=weights / weights.sum())
    items = rng.integers(1, 6, size=n)
    cents = items * rng.integers(299, 4_999, size=n)
    stamps = np.sort(rng.integers(start_ms, end_ms, size=n))
    return pa.table(
        {
            "order_id": pa.array(np.arange(first_id, first_id + n), pa.int64()),
            "customer": pc.take(pa.array(customers, pa.string()), pa.array(who)),
            "amount_cents": pa.array(cents, pa.int64()),
            "items": pa.array(items, pa.int32()),
            "timestamp": pa.array(stamps, pa.int64()),
        }
    )


def daily_volumes(days: int, per_day: int, first_day_ms: int) -> list[int]:
    """Orders per day: ``per_day`` on average, growing through the period, fewer on weekends."""
    growth = np.linspace(0.75, 1.25, days)
    weekday = ((first_day_ms // DAY_MS + np.arange(days)) + 3) % 7  # 1970-01-01 was a Thursday (3)
    weekend = np.where(weekday >= 5, 0.6, 1.0)
    return [int(n) for n in np.rint(per_day * growth * weekend / np.mean(growth * weekend))]


def month_of_orders(days: int, per_day: int, customers: list[str], first_day_ms: int) -> list[pa.Table]:
    """One table of orders per day (:func:`daily_volumes`), day ``d`` stamped within
    ``[first_day_ms + d days, first_day_ms + d + 1 days)``, order ids 1, 2, ... in time order."""
    volumes = daily_volumes(days, per_day, first_day_ms)
    first_ids = np.cumsum([1, *volumes[:-1]])
    return [
        make_orders(n, int(first), customers, first_day_ms + d * DAY_MS, first_day_ms + (d + 1) * DAY_MS, seed=d)
        for d, (n, first) in enumerate(zip(volumes, first_ids, strict=True))
    ]


def _amount_text(cents: pa.ChunkedArray) -> pa.ChunkedArray:
    """Cents as decimal text with two digits: 1234 -> ``12.34``, 5 -> ``0.05``."""
    whole = pc.cast(pc.divide(cents, 100), pa.string())
    fraction = pc.utf8_lpad(pc.cast(pc.subtract(cents, pc.multiply(pc.divide(cents, 100), 100)), pa.string()), 2, "0")
    return pc.binary_join_element_wise(whole, fraction, ".")


def to_records(facts: pa.Table) -> pa.Table:
    """What the plain topic stores: ``key`` (the customer), ``value`` (the order as JSON, e.g.
    ``{"order_id":7,"customer":"c-003","amount":42.50,"items":2}``) and ``timestamp`` (ms)."""
    parts = [
        '{"order_id":',
        pc.cast(facts["order_id"], pa.string()),
        ',"customer":"',
        facts["customer"],
        '","amount":',
        _amount_text(facts["amount_cents"]),
        ',"items":',
        pc.cast(facts["items"], pa.string()),
        "}",
    ]
    value = pc.binary_join_element_wise(*parts, "")
    return pa.table(
        {
            "key": pc.cast(facts["customer"], pa.binary()),
            "value": pc.cast(value, pa.binary()),
            "timestamp": facts["timestamp"],
        }
    )


def produce(zookeeper: str, facts: pa.Table, topic: str = TOPIC) -> dict[int, int]:
    """Send the orders as one Arrow table (``acks=all``; each goes to its customer's partition).
    Returns, per partition, the offset after the last order it got."""
    from sparklog import Producer

    with Producer(zookeeper, acks="all") as producer:
        landed = producer.send_batch(topic, to_records(facts))
    return {m.partition: m.last_offset + 1 for m in landed}


# ------------------------------------------------------------------------------ reference answers
def customer_totals(facts: pa.Table) -> pa.Table:
    """Per customer: ``orders`` and ``total_cents``, sorted by customer."""
    totals = facts.group_by("customer").aggregate([("order_id", "count"), ("amount_cents", "sum")])
    totals = totals.rename_columns({"order_id_count": "orders", "amount_cents_sum": "total_cents"})
    return totals.select(["customer", "orders", "total_cents"]).sort_by("customer")


def enriched_reference(live: pa.Table, history: pa.Table) -> pa.Table:
    """Each live order with its customer's history (``history_orders``, ``history_total_cents``;
    null for a customer without history), sorted by ``order_id``: what the join must produce."""
    totals = customer_totals(history).rename_columns({"orders": "history_orders", "total_cents": "history_total_cents"})
    joined = live.select(["order_id", "customer", "amount_cents"]).join(totals, "customer", join_type="left outer")
    return joined.select(["order_id", "customer", "amount_cents", "history_orders", "history_total_cents"]).sort_by(
        "order_id"
    )


# ------------------------------------------------------------------------------ where the data is
def lake_state(zookeeper: str, topic: str = TOPIC) -> dict[int, dict[str, Any]]:
    """Per partition: ``log_start_offset`` (the earliest, in the lake once it holds the oldest
    records), ``local_log_start_offset``, ``lake_offset`` and ``log_end_offset``."""
    from sparklog import Admin

    with Admin(zookeeper) as admin:
        parts = admin.describe_topic(topic)["partitions"]
    keys = ("log_start_offset", "local_log_start_offset", "lake_offset", "log_end_offset")
    return {d["partition"]: {k: d.get(k) for k in keys} for d in parts}


def active_segment_base(log_dir: Path, topic: str, partition: int) -> int:
    """The base offset of the segment a broker is writing (its newest segment file)."""
    files = (log_dir / f"{topic}-{partition}").glob(f"*{SEGMENT_SUFFIX}")
    return max(int(f.name[: -len(SEGMENT_SUFFIX)]) for f in files)


def wait_until_tiered(
    zookeeper: str,
    log_dir: Path,
    topic: str = TOPIC,
    at_least: Mapping[int, int] | None = None,
    timeout_s: float = 120.0,
) -> dict[int, dict[str, Any]]:
    """Wait until each partition's lake offset is the base of the segment the broker (whose data
    dir is ``log_dir``, the leader) is writing: every closed segment is in the Delta table; and
    until local retention has deleted them (the local log starts there too). ``at_least``: lake
    offsets that must be reached besides. Returns :func:`lake_state`."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = lake_state(zookeeper, topic)
        done = all(
            s["lake_offset"] is not None
            and s["lake_offset"] == s["local_log_start_offset"] == active_segment_base(log_dir, topic, p)
            and s["lake_offset"] >= (at_least or {}).get(p, 0)
            for p, s in state.items()
        )
        if done:
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} was not tiered within {timeout_s:.0f} s: {state}")
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------- chart
def plot_orders_per_day(per_day: pa.Table, title: str = "orders per day") -> Figure:
    """Stacked bars of orders per day (``day``: a date, ``series``: a label, ``orders``: a count)."""
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    days = np.unique(per_day["day"].cast(pa.timestamp("ms")).cast(pa.int64()).to_numpy())
    position = np.searchsorted(days, per_day["day"].cast(pa.timestamp("ms")).cast(pa.int64()).to_numpy())
    times = days.astype("datetime64[ms]")
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.add_subplot()
    bottom = np.zeros(len(days))
    for label in sorted(set(per_day["series"].to_pylist())):
        mine = pc.equal(per_day["series"], label).to_numpy(zero_copy_only=False)
        counts = np.zeros(len(days))
        np.add.at(counts, position[mine], per_day["orders"].to_numpy()[mine])
        ax.bar(times, counts, width=0.8, bottom=bottom, label=label)
        bottom += counts
    ax.xaxis.set_major_formatter(DateFormatter("%b %d"))
    ax.set_ylabel("orders")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize="small", frameon=False)
    return fig
