"""The dashboard drawn with matplotlib from a :class:`~sparklog.dashboard.promql.Recording`: each
panel of :data:`~sparklog.dashboard.panels.PANELS` with its queries evaluated as Grafana would,
for the docs (Grafana itself is not needed to see what the dashboard shows)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparklog.dashboard.panels import PANELS, Panel, Query
from sparklog.dashboard.promql import Labels, Recording, evaluate

COLUMNS = 3


def legend(query: Query, labels: Labels) -> str:
    """Grafana's legend format filled in with a series' labels."""
    text = query.legend
    for key, value in labels:
        text = text.replace("{{" + key + "}}", value)
    return text


def draw(recording: Recording, out: Path, events: Sequence[tuple[float, str]] = (), title: str = "sparklog") -> Path:
    """Write the picture (PNG) of every panel over ``recording``; ``events``: (time, what) marked
    on each panel (a broker killed, ...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = -(-len(PANELS) // COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(6 * COLUMNS, 3.4 * rows), squeeze=False)
    for i, panel in enumerate(PANELS):
        _draw_panel(axes[i // COLUMNS][i % COLUMNS], panel, recording, events)
    for j in range(len(PANELS), rows * COLUMNS):
        axes[j // COLUMNS][j % COLUMNS].axis("off")
    figure.suptitle(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)
    plt.close(figure)
    return out


def _with_gaps(points: list[tuple[float, float]], gap_s: float) -> tuple[list[float], list[float]]:
    """The points' times and values, a NaN between two points further apart than ``gap_s``: a
    series that was not scraped (its broker down) shows a gap, as in Grafana, not a slope."""
    times: list[float] = []
    values: list[float] = []
    for t, v in points:
        if times and t - times[-1] > gap_s:
            times.append((t + times[-1]) / 2)
            values.append(math.nan)
        times.append(t)
        values.append(v)
    return times, values


def _draw_panel(ax: Any, panel: Panel, recording: Recording, events: Sequence[tuple[float, str]]) -> None:
    steps = [b - a for a, b in zip(recording.times, recording.times[1:], strict=False)]
    gap_s = 2.5 * statistics.median(steps) if steps else math.inf
    drawn = 0
    for query in panel.queries:
        for labels, points in sorted(evaluate(query.expr, recording).items(), key=lambda item: sorted(item[0])):
            times, values = _with_gaps(points, gap_s)
            ax.plot(times, values, label=legend(query, labels), linewidth=1.2)
            drawn += 1
    for at, what in events:
        ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        ax.annotate(what, (at, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top")
    ax.set_title(f"{panel.title} [{panel.unit}]", fontsize=10)
    ax.set_xlabel("seconds", fontsize=8)
    ax.tick_params(labelsize=7)
    if drawn:
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
