"""``sparklog.examples.orders`` (notebook 4's data): the JSON values say what the facts say, the
daily volumes, and the reference answers of the notebook's SQL and stream-static join."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa

from sparklog.examples import orders


def test_records_carry_the_orders_as_json_keyed_by_customer() -> None:
    facts = orders.make_orders(500, 7, orders.customer_ids(1, 20), 1_000, 2_000, seed=3)
    facts = facts.set_column(2, "amount_cents", pa.array([5, 70, 100, 12_345, *facts["amount_cents"][4:].to_pylist()]))
    records = orders.to_records(facts)
    values = [json.loads(v, parse_float=Decimal) for v in records["value"].to_pylist()]
    assert [v["order_id"] for v in values] == list(range(7, 507))
    assert [v["customer"].encode() for v in values] == records["key"].to_pylist()
    assert [v["amount"] for v in values[:4]] == [Decimal("0.05"), Decimal("0.70"), Decimal("1.00"), Decimal("123.45")]
    assert [int(v["amount"] * 100) for v in values] == facts["amount_cents"].to_pylist()
    assert [v["items"] for v in values] == facts["items"].to_pylist()
    stamps = records["timestamp"].to_pylist()
    assert stamps == sorted(stamps) and stamps[0] >= 1_000 and stamps[-1] < 2_000


def test_a_month_of_orders_grows_and_dips_on_weekends() -> None:
    monday = 4 * orders.DAY_MS  # 1970-01-05
    volumes = orders.daily_volumes(14, 400, monday)
    assert sum(volumes) == 14 * 400
    assert volumes[5] < volumes[4] and volumes[6] < volumes[7]  # Saturday and Sunday
    assert volumes[7] > volumes[0]
    days = orders.month_of_orders(14, 400, orders.customer_ids(1, 5), monday)
    ids = pa.concat_tables(days)["order_id"].to_pylist()
    assert [d.num_rows for d in days] == volumes and ids == list(range(1, sum(volumes) + 1))


def test_each_live_order_gets_its_customers_history_or_nulls() -> None:
    history = pa.table(
        {"order_id": [1, 2, 3], "customer": ["a", "b", "a"], "amount_cents": [100, 250, 50]},
    )
    live = pa.table({"order_id": [5, 4], "customer": ["c", "a"], "amount_cents": [10, 20]})
    assert orders.customer_totals(history).to_pylist() == [
        {"customer": "a", "orders": 2, "total_cents": 150},
        {"customer": "b", "orders": 1, "total_cents": 250},
    ]
    assert orders.enriched_reference(live, history).to_pylist() == [
        {"order_id": 4, "customer": "a", "amount_cents": 20, "history_orders": 2, "history_total_cents": 150},
        {"order_id": 5, "customer": "c", "amount_cents": 10, "history_orders": None, "history_total_cents": None},
    ]
