"""The figures of ``qsynth report`` (qsynth/benchmarks_report.py): matplotlib on its file backend, each
figure a function of plain numbers that returns PNG bytes, so the report writes them atomically and a
test can read them back. Sizes and fonts are chosen to stay readable at the width GitHub shows."""
from __future__ import annotations

import io
import math

DPI = 110
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf"]


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3, "axes.axisbelow": True})
    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return buffer.getvalue()


def _log_axis(axis) -> None:
    """A log axis labelled 1, 2, 5, 10, ... in plain numbers (not 6x10^0)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def grouped_bars(groups: list[str], series: dict[str, list[float | None]], title: str, ylabel: str,
                 log: bool = False, reference: float | None = None) -> bytes:
    """One cluster of bars per group (x axis), one bar per series (legend); None leaves a gap.
    ``reference``: a dashed horizontal line (e.g. 1x, the baseline's own time)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(min(13.0, max(6.0, 0.18 * len(groups) * len(series) + 2)), 4.2))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=name, color=COLORS[i % len(COLORS)])
    if reference is not None:
        ax.axhline(reference, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(groups)), groups, rotation=0 if max(map(len, groups)) <= 6 else 30,
                  ha="center" if max(map(len, groups)) <= 6 else "right")
    if log:
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))     # outside: never over a bar
    return _png(fig)


def horizontal_bars(labels: list[str], values: list[float], colors: list[str], legend: dict[str, str], title: str,
                    xlabel: str, limit: float | None = None) -> bytes:
    """One bar per label, top to bottom, colored by category (``legend``: name -> color)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 1.2 + 0.24 * len(labels)))
    ys = range(len(labels))[::-1]
    ax.barh(list(ys), values, color=colors)
    ax.set_yticks(list(ys), labels, fontsize=7.5)
    if limit is not None:
        ax.axvline(limit, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=n) for n, c in legend.items()], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


def pareto(points: dict[str, tuple[float, float]], front: list[str], title: str, xlabel: str, ylabel: str) -> bytes:
    """Scatter of (x, y) per name, names written beside, the front joined by a line (x log-scaled
    when it spans more than a decade)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.scatter([x], [y], color=COLORS[i % len(COLORS)], s=40, zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
    line = sorted(points[n] for n in front)
    ax.plot([p[0] for p in line], [p[1] for p in line], color="gray", linestyle="--", zorder=2)
    xs = [p[0] for p in points.values()]
    if min(xs) > 0 and math.log10(max(xs) / min(xs)) > 1:
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _png(fig)
