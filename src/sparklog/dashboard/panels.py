"""The sparklog Grafana dashboard: its panels (title, unit, PromQL queries over the brokers'
metrics) and the Grafana JSON made from them (``docs/grafana/sparklog.json``, written by
``python -m sparklog.dashboard json``). The picture in the docs is drawn from the same queries
(:mod:`.picture`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DASHBOARD_UID = "sparklog-overview"
RATE_WINDOW = "1m"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str  # Grafana's legend format: {{label}} placeholders


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str  # Grafana's unit id
    queries: tuple[Query, ...]
    description: str = ""


def _rate(metric: str, matchers: str = "") -> str:
    return f"rate({metric}{{{matchers}}}[{RATE_WINDOW}])"


def _p99(metric: str, matchers: str, by: str) -> str:
    return f"histogram_quantile(0.99, sum by (le, {by}) ({_rate(metric + '_bucket', matchers)}))"


def _average(metric: str, matchers: str, by: str) -> str:
    return f"sum by ({by}) ({_rate(metric + '_sum', matchers)}) / sum by ({by}) ({_rate(metric + '_count', matchers)})"


REQUEST = "kafka_network_requestmetrics_"
PANELS: tuple[Panel, ...] = (
    Panel(
        "Records in / out per second",
        "ops",
        (
            Query(f"sum by (topic) ({_rate('kafka_server_brokertopicmetrics_messagesin_total')})", "in {{topic}}"),
            Query(f"sum by (topic) ({_rate('kafka_server_brokertopicmetrics_messagesout_total')})", "out {{topic}}"),
        ),
        "Appended as leader, and sent to consumers (not to followers)",
    ),
    Panel(
        "Bytes in / out per second",
        "Bps",
        (
            Query(f"sum({_rate('kafka_server_brokertopicmetrics_bytesin_total')})", "in"),
            Query(f"sum({_rate('kafka_server_brokertopicmetrics_bytesout_total')})", "out"),
        ),
    ),
    Panel(
        "Produce p99 (ms)",
        "ms",
        (Query(_p99(REQUEST + "totaltimems", 'request="Produce"', "listener"), "{{listener}}"),),
        "From a request's first batch read to its answer",
    ),
    Panel(
        "Where produce time goes (mean ms)",
        "ms",
        tuple(
            Query(_average(REQUEST + part, 'request="Produce"', "request"), part.removesuffix("timems"))
            for part in ("localtimems", "remotetimems", "throttletimems")
        ),
        "local: the append here; remote: waiting for followers (acks=all); throttle: quotas",
    ),
    Panel(
        "Fetch p99 (ms)",
        "ms",
        (Query(_p99(REQUEST + "totaltimems", 'request="Fetch"', "listener"), "{{listener}}"),),
    ),
    Panel(
        "Requests per second",
        "reqps",
        (Query(f"sum by (request) ({_rate(REQUEST + 'requests_total')})", "{{request}}"),),
    ),
    Panel(
        "Partition health",
        "short",
        (
            Query("sum(kafka_server_replicamanager_underreplicatedpartitions)", "under-replicated"),
            Query("sum(kafka_server_replicamanager_underminisrpartitioncount)", "under min ISR"),
            Query("sum(kafka_controller_kafkacontroller_offlinepartitionscount)", "offline"),
            Query("sum(kafka_controller_kafkacontroller_activecontrollercount)", "active controllers"),
        ),
        "All 0 but one active controller on a healthy cluster",
    ),
    Panel(
        "ISR shrinks / expands per second",
        "ops",
        (
            Query(f"sum({_rate('kafka_server_replicamanager_isrshrinks_total')})", "shrinks"),
            Query(f"sum({_rate('kafka_server_replicamanager_isrexpands_total')})", "expands"),
        ),
    ),
    Panel(
        "Leaders per broker",
        "short",
        (Query("sum by (instance) (kafka_server_replicamanager_leadercount)", "{{instance}}"),),
    ),
    Panel(
        "Consumer group lag (records)",
        "short",
        (Query("sum by (consumergroup, topic) (kafka_consumergroup_lag)", "{{consumergroup}} / {{topic}}"),),
        "Exported by the active controller: high watermark minus committed offset",
    ),
    Panel(
        "Lake tiering lag (seconds)",
        "s",
        (Query("max by (topic) (sparklog_lake_tiering_lag_seconds)", "{{topic}}"),),
        "How long the oldest record not yet in the Delta table has waited",
    ),
    Panel(
        "Log size per topic",
        "bytes",
        (Query("sum by (topic) (kafka_log_log_size)", "{{topic}}"),),
        "Every replica's bytes",
    ),
)


def _target(query: Query, ref: str) -> dict[str, Any]:
    return {
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "expr": query.expr,
        "legendFormat": query.legend,
        "refId": ref,
    }


def grafana_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana imports it (a ``datasource`` variable picks the Prometheus)."""
    panels = []
    for i, panel in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": panel.title,
                "description": panel.description,
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": (i // 3) * 8},
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [_target(q, chr(ord("A") + j)) for j, q in enumerate(panel.queries)],
            }
        )
    return {
        "uid": DASHBOARD_UID,
        "title": "sparklog",
        "tags": ["sparklog", "kafka"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "panels": panels,
    }


def dashboard_json() -> str:
    return json.dumps(grafana_dashboard(), indent=2) + "\n"
