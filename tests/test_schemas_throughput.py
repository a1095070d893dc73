"""Throughput of the value codecs for a 20-field record (printed; run with -s to see the figures).

The columnar codecs must beat fastavro's record-by-record path clearly; the absolute figures depend on
the machine (see ``python -m sparklog.schemas.bench`` for a bigger run)."""

from __future__ import annotations

import json

from sparklog.schemas.bench import measure


def test_codec_throughput_20_fields() -> None:
    figures = measure(20_000, repeat=3)
    print("\nschemas throughput:", json.dumps(figures))
    assert figures["fields"] == 20
    assert figures["decode_records_per_s"] > 2 * figures["fastavro_decode_records_per_s"]
    assert figures["encode_records_per_s"] > 2 * figures["fastavro_encode_records_per_s"]
    assert figures["project_2_of_20_records_per_s"] > figures["decode_records_per_s"]
