"""The dashboard's PromQL subset over hand-made recordings: values Prometheus would give."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.dashboard.panels import PANELS, dashboard_json
from sparklog.dashboard.picture import legend
from sparklog.dashboard.promql import Labels, PromQLError, Recording, evaluate, parse

DOCS_JSON = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sparklog.json"


def labels(**pairs: str) -> Labels:
    return frozenset(pairs.items())


def recording(*scrapes: dict[tuple[str, Labels], float], every_s: float = 10.0) -> Recording:
    return Recording([i * every_s for i in range(len(scrapes))], list(scrapes))


def last(series: dict[Labels, list[tuple[float, float]]]) -> dict[Labels, float]:
    return {k: points[-1][1] for k, points in series.items()}


def test_rate_is_the_increase_per_second_and_counts_a_reset_as_a_restart() -> None:
    a, b = labels(topic="a", instance="1"), labels(topic="b", instance="1")
    rec = recording(
        {("m_total", a): 100, ("m_total", b): 0},
        {("m_total", a): 200, ("m_total", b): 50},
        {("m_total", a): 30, ("m_total", b): 100},  # a restarted: 30 since
    )
    got = evaluate("rate(m_total[1m])", rec)
    assert got[a] == [(10.0, 10.0), (20.0, (100 + 30) / 20)]
    assert got[b] == [(10.0, 5.0), (20.0, 5.0)]
    assert last(evaluate('rate(m_total{topic="b"}[15s])', rec)) == {b: 5.0}  # only the last two scrapes


def test_aggregations_group_by_the_labels_named() -> None:
    rec = recording(
        {
            ("g", labels(topic="a", instance="1")): 1,
            ("g", labels(topic="a", instance="2")): 2,
            ("g", labels(topic="b", instance="1")): 5,
        }
    )
    assert last(evaluate("sum by (topic) (g)", rec)) == {labels(topic="a"): 3, labels(topic="b"): 5}
    assert last(evaluate("sum(g)", rec)) == {labels(): 8}
    assert last(evaluate("max by (instance) (g)", rec)) == {labels(instance="1"): 5, labels(instance="2"): 2}
    assert last(evaluate('sum(g{topic!="b"})', rec)) == {labels(): 3}


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    def buckets(counts: dict[str, float]) -> dict[tuple[str, Labels], float]:
        return {("h_bucket", labels(le=le, request="Produce")): c for le, c in counts.items()}

    rec = recording(buckets({"1.0": 0, "10.0": 0, "+Inf": 0}), buckets({"1.0": 50, "10.0": 100, "+Inf": 100}))
    got = last(evaluate("histogram_quantile(0.99, sum by (le, request) (rate(h_bucket[1m])))", rec))
    assert got[labels(request="Produce")] == pytest.approx(1 + 9 * (99 - 50) / 50)
    rec = recording(buckets({"1.0": 0, "10.0": 0, "+Inf": 0}), buckets({"1.0": 0, "10.0": 0, "+Inf": 10}))
    got = last(evaluate("histogram_quantile(0.5, sum by (le, request) (rate(h_bucket[1m])))", rec))
    assert got == {labels(request="Produce"): 10.0}  # past the last bound: the highest finite one


def test_a_division_matches_label_sets_and_skips_zero() -> None:
    one, two = labels(request="Produce"), labels(request="Fetch")
    rec = recording(
        {("t_sum", one): 0, ("t_count", one): 0, ("t_sum", two): 0, ("t_count", two): 0},
        {("t_sum", one): 30, ("t_count", one): 10, ("t_sum", two): 0, ("t_count", two): 0},
    )
    query = "sum by (request) (rate(t_sum[1m])) / sum by (request) (rate(t_count[1m]))"
    assert last(evaluate(query, rec)) == {one: 3.0}


@pytest.mark.parametrize(
    "query",
    ["rate(m[1m]", 'm{a=~"x"}', "topk(3, m)", "m * 2", "sum by topic (m)", "rate(m)"],
)
def test_a_query_outside_the_subset_is_refused_naming_it(query: str) -> None:
    with pytest.raises(PromQLError):
        parse(query)


def test_every_panel_query_parses_and_the_docs_json_is_the_generated_one() -> None:
    for panel in PANELS:
        for query in panel.queries:
            parse(query.expr)
    with open(DOCS_JSON) as held:
        assert held.read() == dashboard_json(), (
            f"{DOCS_JSON} is stale: python -m sparklog.dashboard json --out {DOCS_JSON}"
        )


def test_legends_fill_in_a_series_labels() -> None:
    query = PANELS[-1].queries[0]
    assert legend(query, labels(topic="clicks")) == "clicks"
