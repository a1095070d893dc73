"""The part of PromQL the sparklog dashboard's panels use, evaluated over recorded scrapes, so the
dashboard's picture is drawn from the very queries Grafana runs (no second copy of each panel's
arithmetic that could drift from it).

Understood: a selector ``name{label="v",label!="v"}``, ``rate(selector[60s|1m])``, ``sum``/
``max``/``min``/``avg`` with an optional ``by (labels)``, ``histogram_quantile(q, vector)``, and
``a / b`` between two vectors with the same labels. Anything else is a :class:`PromQLError`
naming what it met. Semantics follow Prometheus where it matters for a picture: ``rate`` is the
increase over the window (counter resets counted as restarts from 0) per second between the
window's first and last samples; ``histogram_quantile`` interpolates linearly inside the bucket.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sparklog.errors import PromQLError

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]  # an instant vector: one value per label set
Sample = Mapping[tuple[str, Labels], float]  # one scrape of every instance, instance as a label


_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<duration>\[\d+[smh]\])|(?P<string>\"[^\"]*\")|"
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<op>!=|[{}(),=/]))"
)
AGGREGATIONS = {"sum": sum, "max": max, "min": min, "avg": lambda values: sum(values) / len(values)}


@dataclass(frozen=True)
class Recording:
    """Scrapes at times ``times`` (seconds), ``samples[i]`` taken at ``times[i]``."""

    times: Sequence[float]
    samples: Sequence[Sample]


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise PromQLError(f"cannot read {text[at : at + 20]!r} in {text!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


Node = Callable[[Recording, int], Vector]  # evaluates at scrape i


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        got_kind, got = self.peek()
        if (value is not None and got != value) or (kind is not None and got_kind != kind):
            raise PromQLError(f"expected {value or kind} at {got!r} in {self.text!r}")
        self.at += 1
        return got

    def parse(self) -> Node:
        node = self.expression()
        if self.peek()[0] != "end":
            raise PromQLError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        return node

    def expression(self) -> Node:
        left = self.term()
        while self.peek()[1] == "/":
            self.take("/")
            right = self.term()
            left = _divide(left, right)
        return left

    def term(self) -> Node:
        kind, word = self.peek()
        if kind != "name":
            raise PromQLError(f"expected a metric or function at {word!r} in {self.text!r}")
        if word in AGGREGATIONS:
            self.take()
            by: tuple[str, ...] | None = None
            if self.peek()[1] == "by":
                self.take("by")
                by = self.label_list()
            self.take("(")
            inner = self.expression()
            self.take(")")
            return _aggregate(AGGREGATIONS[word], by, inner)
        if word == "rate":
            self.take()
            self.take("(")
            name, matchers = self.selector()
            window = self.take(kind="duration")
            self.take(")")
            return _rate(name, matchers, _seconds(window[1:-1]))
        if word == "histogram_quantile":
            self.take()
            self.take("(")
            q = float(self.take(kind="number"))
            self.take(",")
            inner = self.expression()
            self.take(")")
            return _quantile(q, inner)
        name, matchers = self.selector()
        return _instant(name, matchers)

    def label_list(self) -> tuple[str, ...]:
        self.take("(")
        names = [self.take(kind="name")]
        while self.peek()[1] == ",":
            self.take(",")
            names.append(self.take(kind="name"))
        self.take(")")
        return tuple(names)

    def selector(self) -> tuple[str, list[tuple[str, str, str]]]:
        name = self.take(kind="name")
        matchers: list[tuple[str, str, str]] = []
        if self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label = self.take(kind="name")
                op = self.take()
                if op not in ("=", "!="):
                    raise PromQLError(f"matcher {op!r} is not understood in {self.text!r}")
                matchers.append((label, op, self.take(kind="string")[1:-1]))
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("}")
        return name, matchers


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def _matches(labels: Labels, matchers: list[tuple[str, str, str]]) -> bool:
    held = dict(labels)
    return all((held.get(label, "") == value) == (op == "=") for label, op, value in matchers)


def _select(sample: Sample, name: str, matchers: list[tuple[str, str, str]]) -> Vector:
    return {labels: v for (n, labels), v in sample.items() if n == name and _matches(labels, matchers)}


def _instant(name: str, matchers: list[tuple[str, str, str]]) -> Node:
    return lambda rec, i: _select(rec.samples[i], name, matchers)


def _rate(name: str, matchers: list[tuple[str, str, str]], window_s: float) -> Node:
    def evaluate(rec: Recording, i: int) -> Vector:
        now = rec.times[i]
        first = i
        while first > 0 and rec.times[first - 1] >= now - window_s:
            first -= 1
        if first == i:
            return {}
        series: dict[Labels, list[tuple[float, float]]] = {}
        for j in range(first, i + 1):
            for labels, v in _select(rec.samples[j], name, matchers).items():
                series.setdefault(labels, []).append((rec.times[j], v))
        out: Vector = {}
        for labels, points in series.items():
            if len(points) < 2:
                continue
            increase = sum(b - a if b >= a else b for (_, a), (_, b) in zip(points, points[1:], strict=False))
            out[labels] = increase / (points[-1][0] - points[0][0])
        return out

    return evaluate


def _aggregate(reduce: Callable[[list[float]], float], by: tuple[str, ...] | None, inner: Node) -> Node:
    def evaluate(rec: Recording, i: int) -> Vector:
        groups: dict[Labels, list[float]] = {}
        for labels, v in inner(rec, i).items():
            key = frozenset((k, val) for k, val in labels if by is not None and k in by)
            groups.setdefault(key, []).append(v)
        return {key: reduce(values) for key, values in groups.items()}

    return evaluate


def _quantile(q: float, inner: Node) -> Node:
    def evaluate(rec: Recording, i: int) -> Vector:
        histograms: dict[Labels, list[tuple[float, float]]] = {}
        for labels, v in inner(rec, i).items():
            held = dict(labels)
            if "le" not in held:
                continue
            key = frozenset((k, val) for k, val in labels if k != "le")
            histograms.setdefault(key, []).append((float(held["le"]), v))
        out: Vector = {}
        for key, buckets in histograms.items():
            buckets.sort()
            total = buckets[-1][1] if buckets else 0.0
            if total <= 0:
                continue
            rank = q * total
            lower_bound, lower_count = 0.0, 0.0
            for bound, count in buckets:
                if count >= rank:
                    if math.isinf(bound):
                        out[key] = lower_bound  # Prometheus: the highest finite bound
                    else:
                        width = count - lower_count
                        share = (rank - lower_count) / width if width > 0 else 1.0
                        out[key] = lower_bound + (bound - lower_bound) * share
                    break
                lower_bound, lower_count = bound, count
        return out

    return evaluate


def _divide(left: Node, right: Node) -> Node:
    def evaluate(rec: Recording, i: int) -> Vector:
        below = right(rec, i)
        return {labels: v / below[labels] for labels, v in left(rec, i).items() if below.get(labels)}

    return evaluate


def parse(query: str) -> Node:
    """The query as a function of (recording, scrape index) -> instant vector."""
    return _Parser(query).parse()


def evaluate(query: str, recording: Recording) -> dict[Labels, list[tuple[float, float]]]:
    """The query's series over the whole recording: label set -> [(time, value), ...]."""
    node = parse(query)
    out: dict[Labels, list[tuple[float, float]]] = {}
    for i, t in enumerate(recording.times):
        for labels, v in node(recording, i).items():
            out.setdefault(labels, []).append((t, v))
    return out
