"""The audit report as one self-contained HTML page (jinja2 + matplotlib, charts as inline SVG).

Nothing is fetched when the page is opened: styles are inline, charts are SVG elements in the
page (text kept as text, so it scales and can be searched), there is no script. Every chart has a
caption saying what it shows and how to read it against the profile (IP_012's 30 ms, IP_016,
IP_032/033), and a table next to it with the numbers. No pyspark here.
"""
from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Sequence
from typing import Any
from importlib import resources

import jinja2
import matplotlib
import matplotlib.dates as mdates
from matplotlib.ticker import MaxNLocator
from matplotlib.axes import Axes
from matplotlib.figure import Figure  # figures without pyplot: no global figure state, no display backend

from spark.report_model import LATENCY_LIMIT_MS, ReportData, RunMetrics, Series, StatusChange

#: How many of the latest validate runs the history table lists (the chart shows all of the history).
HISTORY_TABLE_RUNS = 6

STATUS_COLOURS = {"CREATED": "#2e7d32", "REQUESTED": "#f9a825", "MODIFIED": "#1565c0", "ILLEGAL": "#c62828",
                  "NOT_VALID": "#c62828", "NO_OVERLAP": "#6d4c41", "GIVE_UP": "#000000", "ERROR": "#c62828",
                  "RESUBSCRIBE": "#8e24aa", "DELETED": "#9e9e9e"}
_STYLE: dict[Any, Any] = {"svg.fonttype": "none", "svg.hashsalt": "interchange-report", "font.size": 9,
          "axes.spines.top": False, "axes.spines.right": False}


def iso(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time(epoch_ms: int) -> float:
    """An epoch-ms instant as matplotlib's date number (the date locator and formatter read these)."""
    return float(mdates.date2num(dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc)))


def _svg(draw: Callable[[Figure], None], height: float = 2.8) -> str:
    """Run ``draw`` on a new figure and return it as an inline <svg> element."""
    with matplotlib.rc_context(_STYLE):
        figure = Figure(figsize=(9, height))
        draw(figure)
        figure.tight_layout()
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    return text[text.index("<svg"):]  # no XML prolog or DOCTYPE inside HTML


def _time_axis(ax: Axes, first_ms: int | None = None, end_ms: int | None = None) -> None:
    """A UTC time axis; with ``first_ms``/``end_ms`` it spans exactly them (matplotlib's own limits
    of a short log, one bucket or one point, spread over years)."""
    ax.xaxis_date(tz=dt.timezone.utc)  # x values are date numbers (see _time)
    locator = mdates.AutoDateLocator(tz=dt.timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.timezone.utc))
    if first_ms is not None and end_ms is not None:
        ax.set_xlim(_time(first_ms), _time(max(end_ms, first_ms + 1000)))
    ax.set_xlabel("time (UTC)")


#: Element ids of the drawn bars: ``<gid>-<bucket start>-<key>`` (a test measures them in the browser).
BAR_GID = "bar"


def series_chart(series: Series, ylabel: str, stacked: bool = True, limit: float | None = None,
                 gid: str = BAR_GID) -> str | None:
    """Counts per bucket as stacked bars, each a whole bucket wide (the last bucket too), or values per
    bucket as lines (``stacked`` False; with ``limit``, on a symmetric log axis that keeps the limit
    readable whatever an outlier's size)."""
    if series.empty:
        return None
    starts = sorted({start for points in series.points.values() for start in points})

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        keys = sorted(series.points)
        width = _time(starts[0] + series.bucket_ms) - _time(starts[0])
        if stacked:
            bottoms = dict.fromkeys(starts, 0.0)
            for key in keys:
                heights = [series.points[key].get(start, 0.0) for start in starts]
                bars = ax.bar([_time(start) for start in starts], heights, width=width, align="edge",
                              bottom=[bottoms[start] for start in starts], label=key, linewidth=0)
                for bar, start in zip(bars, starts):
                    bar.set_gid(f"{gid}-{start}-{key}")
                for start, height in zip(starts, heights):
                    bottoms[start] += height
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            centres = [_time(start) + width / 2 for start in starts]
            for key in keys:
                ax.plot(centres, [series.points[key].get(start, float("nan")) for start in starts], label=key,
                        marker="o", markersize=3)
        if limit is not None:
            ax.set_yscale("symlog", linthresh=max(1.0, limit / 10))
            ax.axhline(limit, color="#c62828", linestyle="--", linewidth=1, label=f"IP_012 limit ({limit:g} ms)")
        _time_axis(ax, starts[0], starts[-1] + series.bucket_ms)
        ax.set_ylabel(ylabel)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    return _svg(draw)


def bar_chart(labels: Sequence[str], values: Sequence[float], xlabel: str, limit: float | None = None,
              colours: Sequence[str] | None = None) -> str | None:
    if not labels:
        return None

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        positions = range(len(labels))
        ax.barh(list(positions), list(values), color=list(colours) if colours else "#1565c0")
        ax.set_yticks(list(positions), list(labels))
        ax.invert_yaxis()
        if limit is not None:
            ax.axvline(limit, color="#c62828", linestyle="--", linewidth=1)
            ax.text(limit, -0.6, f" {limit:g} ms (IP_012)", color="#c62828", va="bottom")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole numbers
        ax.set_xlabel(xlabel)

    return _svg(draw, height=max(1.6, 0.35 * len(labels) + 1.0))


def latency_chart(data: ReportData) -> str | None:
    rows = [row for row in data.latency if row.deliveries]
    if not rows:
        return None

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        positions = list(range(len(rows)))
        ax.barh([p - 0.2 for p in positions], [r.p50 for r in rows], height=0.4, label="median (p50)",
                color="#90caf9")
        ax.barh([p + 0.2 for p in positions], [r.p99 for r in rows], height=0.4, label="p99", color="#1565c0")
        ax.set_yticks(positions, [r.message_type for r in rows])
        ax.invert_yaxis()
        # a symmetric log axis: one slow message type does not squash the others and the limit
        ax.set_xscale("symlog", linthresh=LATENCY_LIMIT_MS / 10)
        ax.axvline(LATENCY_LIMIT_MS, color="#c62828", linestyle="--", linewidth=1,
                   label=f"IP_012: {LATENCY_LIMIT_MS} ms")
        ax.set_xlabel("arrival to departure (ms, logarithmic above 3 ms)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    return _svg(draw, height=max(1.8, 0.45 * len(rows) + 1.0))


def neighbours_chart(points: Sequence[tuple[int, int]], last_ms: int | None) -> str | None:
    if not points:
        return None

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        times = [_time(at) for at, _ in points]
        counts = [count for _, count in points]
        if last_ms is not None and last_ms > points[-1][0]:
            times.append(_time(last_ms))
            counts.append(counts[-1])
        ax.step(times, counts, where="post", color="#2e7d32")
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("neighbours known")
        _time_axis(ax, points[0][0], max(points[-1][0], last_ms or 0))

    return _svg(draw, height=2.2)


def status_chart(changes: Sequence[StatusChange], last_ms: int | None) -> str | None:
    """One bar per outgoing subscription, coloured by its status over time (ii_subscription_status)."""
    if not changes:
        return None
    keys = sorted({(c.neighbour, c.selector) for c in changes})
    end = max([c.at_ms for c in changes] + ([last_ms] if last_ms else [])) + 1

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        seen: set[str] = set()
        for row, key in enumerate(keys):
            mine = sorted((c for c in changes if (c.neighbour, c.selector) == key), key=lambda c: c.at_ms)
            for index, change in enumerate(mine):
                stop = mine[index + 1].at_ms if index + 1 < len(mine) else end
                start = _time(change.at_ms)
                width = _time(stop) - start
                label = change.status if change.status not in seen else None
                seen.add(change.status)
                ax.broken_barh([(start, width)], (row - 0.35, 0.7), color=STATUS_COLOURS.get(change.status, "#607d8b"),
                               label=label)
        ax.set_yticks(list(range(len(keys))), [f"{n}: {s[:40]}" for n, s in keys])
        ax.invert_yaxis()
        _time_axis(ax, min(c.at_ms for c in changes), end)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="status")

    return _svg(draw, height=max(1.8, 0.5 * len(keys) + 1.2))


def history_rules(history: Sequence[RunMetrics], most: int = 8) -> list[tuple[str, str]]:
    """The (rule, check) pairs with violations in any run, most violations over the runs first."""
    totals: dict[tuple[str, str], int] = {}
    for run in history:
        for key, count in run.violations.items():
            totals[key] = totals.get(key, 0) + count
    return sorted((key for key, total in totals.items() if total), key=lambda k: (-totals[k], k))[:most]


def history_chart(history: Sequence[RunMetrics]) -> str | None:
    """Violations per rule and check (the most frequent) in each validate run, oldest run first."""
    shown = history_rules(history)
    if not history or not shown:
        return None

    def draw(figure: Figure) -> None:
        ax = figure.add_subplot()
        positions = list(range(len(history)))
        for key in shown:
            ax.plot(positions, [run.violations.get(key, 0) for run in history], marker="o", markersize=4,
                    label=f"{key[0]} {key[1]}")
        ax.set_xticks(positions, [run.run_id for run in history], rotation=30, ha="right")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("validate run (oldest first)")
        ax.set_ylabel("violations")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    return _svg(draw, height=3.4)


def charts(data: ReportData) -> dict[str, str | None]:
    """Every chart of the page by name (None: no data for it)."""
    rules = data.violations[:15]
    severity = {"error": "#c62828", "warning": "#f9a825", "info": "#90a4ae"}
    return {
        "volumes": series_chart(data.volumes, "messages received per bucket", gid="volume"),
        "latency": latency_chart(data),
        "latency_series": series_chart(data.latency_series, "ms (logarithmic)", stacked=False, limit=LATENCY_LIMIT_MS),
        "violations": bar_chart([f"{r.rule} {r.check}" for r in rules], [r.count for r in rules], "violations",
                                colours=[severity.get(r.severity, "#607d8b") for r in rules]),
        "history": history_chart(data.history),
        "losses": series_chart(data.loss_series, "messages per bucket", gid="loss"),
        "neighbours": neighbours_chart(data.neighbour_counts, data.last_ms),
        "subscriptions": status_chart(data.status_changes, data.last_ms),
    }


def _bucket_text(bucket_ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if bucket_ms % size == 0:
            count = bucket_ms // size
            return f"{count} {unit}{'s' if count != 1 else ''}" if count != 1 else unit
    return f"{bucket_ms} ms"


def render(data: ReportData, title: str = "C-Roads interchange audit report") -> str:
    """The whole page as text."""
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                     loader=jinja2.FunctionLoader(_template))
    environment.filters["iso"] = iso
    environment.filters["bucket"] = _bucket_text
    environment.filters["pct"] = lambda share: f"{share * 100:.2f} %"
    return environment.get_template("report.html.j2").render(
        title=title, data=data, charts=charts(data), limit_ms=LATENCY_LIMIT_MS,
        history_keys=sorted({key for run in data.history for key in run.violations}),
        history_runs=data.history[-HISTORY_TABLE_RUNS:])


def _template(name: str) -> str:
    return resources.files("spark").joinpath("templates", name).read_text(encoding="utf-8")
