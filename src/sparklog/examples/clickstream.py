"""A synthetic click stream for the demo and the notebooks, and what a correct pipeline makes of it.

The stream arrives in *waves* (say, what a web shop's servers send in 15 minutes, picked up by a
scheduled ``availableNow`` run). Traffic rises through the morning and peaks with a flash sale, when
more visitors look at products and buy. Each event is keyed by its user and stamped with its event time, a
little out of order (up to 90 s). From the second wave on, a small share are *stragglers*: events
from phones that were offline, 5 to 45 minutes older than the rest of their wave.

:func:`expected` is the reference the Spark job is checked against. It applies Structured
Streaming's rule for a windowed aggregation with a watermark, one micro-batch per run: the
watermark of a run is the largest event time seen in earlier runs minus the delay, and an event
whose window ended at or before that watermark is dropped as too late.

Everything here is columnar (numpy, pyarrow): no Python loop per event.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

T0_MS = 1_767_258_000_000  # 2026-01-01T09:00:00Z
MINUTE_MS = 60_000
WINDOW_MS = MINUTE_MS  # tumbling 1-minute windows
WATERMARK_DELAY_MS = 10 * MINUTE_MS

PAGES = ("home", "search", "product", "cart", "checkout", "account", "help", "blog")
PAGE_WEIGHTS = (0.24, 0.2, 0.26, 0.1, 0.05, 0.05, 0.04, 0.06)
ACTIONS = ("view", "click", "add_to_cart", "purchase")
ACTION_WEIGHTS = (0.62, 0.28, 0.07, 0.03)
SALE_PAGE_BOOST = (0.0, 0.0, 0.3, 0.1, 0.08, 0.0, 0.0, 0.0)  # added at the flash sale's peak
SALE_ACTION_BOOST = (0.0, 0.0, 0.05, 0.06)
DEVICES = ("web", "ios", "android")

# the topic's Avro value schema: a typed topic, so Spark sees `value` as a struct
CLICK_SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "sparklog.examples",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "action", "type": "string"},
        {"name": "amount_cents", "type": "long"},
        {"name": "device", "type": "string"},
    ],
}
CLICK_SCHEMA_JSON = json.dumps(CLICK_SCHEMA)


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """How much to generate. The defaults are the demo's: 400,000 events in 4 waves of 15 minutes
    (``events_per_wave`` is the average: each wave's share follows :func:`traffic`)."""

    waves: int = 4
    events_per_wave: int = 100_000
    wave_minutes: int = 15
    straggler_share: float = 0.02
    users: int = 20_000
    seed: int = 7
    t0_ms: int = T0_MS

    @property
    def events(self) -> int:
        return self.waves * self.events_per_wave


def _pick(rng: np.random.Generator, names: Sequence[str], weights: np.ndarray) -> pa.DictionaryArray:
    """One of ``names`` per row of ``weights`` (shape ``(n, len(names))``, each row its own odds),
    dictionary-encoded: no string per event is built in Python."""
    cumulative = np.cumsum(weights, axis=1)
    draw = rng.random(len(weights)) * cumulative[:, -1]
    indices = (draw[:, None] >= cumulative[:, :-1]).sum(axis=1).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(names, pa.string()))


def _odds(base: Sequence[float], boost: Sequence[float], sale: np.ndarray) -> np.ndarray:
    return np.asarray(base)[None, :] + sale[:, None] * np.asarray(boost)[None, :]


def traffic(spec: StreamSpec) -> tuple[np.ndarray, np.ndarray]:
    """Per second of the stream: the relative event rate (rising through the morning, with a flash
    sale peaking at 62% of the stream) and the sale's intensity (0..1)."""
    seconds = spec.waves * spec.wave_minutes * 60
    t = np.arange(seconds) / seconds
    sale = np.exp(-0.5 * ((t - 0.62) / 0.04) ** 2)
    return 1.0 + 0.7 * t + 1.6 * sale, sale


def wave_sizes(spec: StreamSpec) -> list[int]:
    """Events per wave: ``spec.events`` shared out by the traffic curve."""
    rate, _ = traffic(spec)
    per_wave = rate.reshape(spec.waves, -1).sum(axis=1)
    sizes = np.floor(spec.events * per_wave / per_wave.sum()).astype(int)
    sizes[-1] += spec.events - sizes.sum()
    return [int(n) for n in sizes]


@dataclasses.dataclass(frozen=True)
class Wave:
    """One wave of events: ``table`` has the producer's columns ``key`` (the user), ``value`` (a
    struct matching :data:`CLICK_SCHEMA`) and ``timestamp`` (event time, ms), in arrival order."""

    index: int
    table: pa.Table
    stragglers: int

    @property
    def events(self) -> int:
        return self.table.num_rows

    @property
    def first_ms(self) -> int:
        return int(pc.min(self.table["timestamp"]).as_py())

    @property
    def last_ms(self) -> int:
        return int(pc.max(self.table["timestamp"]).as_py())


def make_wave(spec: StreamSpec, index: int) -> Wave:
    """Wave ``index`` (0-based) of ``spec``; deterministic for a given spec and index."""
    rng = np.random.default_rng([spec.seed, index])
    n = wave_sizes(spec)[index]
    wave_s = spec.wave_minutes * 60
    rate, sale = (curve[index * wave_s : (index + 1) * wave_s] for curve in traffic(spec))
    second = np.sort(rng.choice(wave_s, size=n, p=rate / rate.sum()))
    arrival = spec.t0_ms + (index * wave_s + second) * 1000 + rng.integers(0, 1000, n)
    lateness = rng.integers(0, 90_000, n)  # ordinary disorder: up to 90 s
    late = np.zeros(n, dtype=bool)
    if index > 0:
        late = rng.random(n) < spec.straggler_share
        lateness[late] = rng.integers(5 * MINUTE_MS, 45 * MINUTE_MS, int(late.sum()))
    timestamp = arrival - lateness

    intensity = sale[second]
    user_ids = (rng.pareto(1.2, n) * 300).astype(np.int64) % spec.users  # a few heavy users, a long tail
    users = pc.binary_join_element_wise("user-", pa.array(user_ids).cast(pa.string()), "")
    actions = _pick(rng, ACTIONS, _odds(ACTION_WEIGHTS, SALE_ACTION_BOOST, intensity))
    pages = _pick(rng, PAGES, _odds(PAGE_WEIGHTS, SALE_PAGE_BOOST, intensity))
    purchase = np.asarray(actions.indices) == ACTIONS.index("purchase")
    amount = np.where(purchase, np.round(rng.lognormal(8.0, 0.8, n)), 0).astype(np.int64)
    devices = _pick(rng, DEVICES, np.broadcast_to(np.asarray([5.0, 3.0, 2.0]), (n, 3)))
    value = pa.StructArray.from_arrays(
        [users, pages, actions, pa.array(amount), devices],
        names=[f["name"] for f in CLICK_SCHEMA["fields"]],
    )
    table = pa.table({"key": users.cast(pa.binary()), "value": value, "timestamp": pa.array(timestamp, pa.int64())})
    return Wave(index, table, int(late.sum()))


def make_stream(spec: StreamSpec) -> list[Wave]:
    """Every wave of ``spec``."""
    return [make_wave(spec, i) for i in range(spec.waves)]


@dataclasses.dataclass(frozen=True)
class Expected:
    """What the windowed aggregation must produce from a stream, run by run."""

    produced: int
    dropped_per_wave: list[int]
    watermarks_ms: list[int | None]  # the watermark each wave's run starts with (None: none yet)
    aggregates: pa.Table  # window_start (ms), page, events, purchases, revenue_cents; sorted

    @property
    def dropped(self) -> int:
        return sum(self.dropped_per_wave)

    @property
    def counted(self) -> int:
        return self.produced - self.dropped


def expected(
    waves: Sequence[Wave | pa.Table], delay_ms: int = WATERMARK_DELAY_MS, window_ms: int = WINDOW_MS
) -> Expected:
    """The aggregates per (1-minute window, page) of the events the watermark lets through, when each
    wave is read by one run (one micro-batch) of the streaming query, in order."""
    kept: list[pa.Table] = []
    dropped: list[int] = []
    watermarks: list[int | None] = []
    max_seen: int | None = None
    produced = 0
    for wave in waves:
        table = wave.table if isinstance(wave, Wave) else wave
        produced += table.num_rows
        ts = table["timestamp"].to_numpy()
        window_start = ts - np.mod(ts, window_ms)
        watermark = None if max_seen is None else max_seen - delay_ms
        keep = np.ones(len(ts), dtype=bool) if watermark is None else window_start + window_ms > watermark
        watermarks.append(watermark)
        dropped.append(int(len(ts) - np.count_nonzero(keep)))
        value = table["value"]
        kept.append(
            pa.table(
                {
                    "window_start": window_start,
                    "page": pc.struct_field(value, "page").cast(pa.string()),
                    "purchase": pc.equal(pc.struct_field(value, "action").cast(pa.string()), "purchase").cast(
                        pa.int64()
                    ),
                    "amount_cents": pc.struct_field(value, "amount_cents"),
                }
            ).filter(pa.array(keep))
        )
        if len(ts):
            max_seen = int(ts.max()) if max_seen is None else max(max_seen, int(ts.max()))
    grouped = (
        pa.concat_tables(kept)
        .group_by(["window_start", "page"])
        .aggregate([("purchase", "count"), ("purchase", "sum"), ("amount_cents", "sum")])
        .rename_columns(["window_start", "page", "events", "purchases", "revenue_cents"])
        .sort_by([("window_start", "ascending"), ("page", "ascending")])
    )
    return Expected(produced, dropped, watermarks, grouped)
