"""Charts of a report: throughput over time, latency over time, latency distribution.

Each chart is written twice: ``<name>.png`` and ``<name>.html``, a self-contained page
with the same chart as inline SVG (no scripts, nothing fetched) and the figures it
shows. Drawn with matplotlib's non-interactive Agg backend, so no display is needed.
Without matplotlib installed, :func:`write_charts` writes nothing and says so.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CHARTS", "charts_available", "write_charts"]

CHARTS = ("throughput", "latency", "latency_distribution")
ACTOR_LINES_MAX = 16
"""Above this many actors, only the group lines are drawn."""


def charts_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _title(report: dict[str, Any]) -> str:
    p = report["params"]
    mode = p["embedded"] if p["embedded"] != "none" else "remote"
    return (
        f"{p['kind']} · {p['producers_effective'] + p['producing_consumers_effective']} writers, "
        f"{p['consumers_effective']} readers · {p['message_size']} B x "
        f"{p['messages_per_batch']} · {mode}, {p['durability']} · sdk {p['sdk']}"
    )


def _throughput(report: dict[str, Any], axes: Any) -> None:
    actors = report["individual_metrics"]
    for group in report["group_metrics"]:
        if group["group"] == "aggregate":
            continue
        ts = group["throughput_mb_ts"]
        axes.plot(ts["time_s"], ts["value"], linewidth=2, label=f"{group['group']} (total)")
    if len(actors) <= ACTOR_LINES_MAX:
        for actor in actors:
            ts = actor["throughput_mb_ts"]
            axes.plot(ts["time_s"], ts["value"], linewidth=0.6, alpha=0.6, label=actor["actor"])
    window = report["params"]["moving_average_window"]
    sampling_ms = report["params"]["sampling_s"] * 1000
    axes.set_xlabel("time since the measured start (s)")
    axes.set_ylabel(f"MB/s (10^6 B of user data; SMA of {window} x {sampling_ms:g} ms)")


def _latency(report: dict[str, Any], axes: Any) -> None:
    actors = report["individual_metrics"]
    for group in report["group_metrics"]:
        if group["group"] == "aggregate":
            continue
        ts = group["latency_ts"]
        axes.plot(ts["time_s"], ts["value"], linewidth=1.5, label=f"{group['group']} (mean)")
    if len(actors) <= ACTOR_LINES_MAX:
        for actor in actors:
            ts = actor["latency_ts"]
            axes.plot(ts["time_s"], ts["value"], linewidth=0.5, alpha=0.5, label=actor["actor"])
    axes.set_xlabel("time since the measured start (s)")
    axes.set_ylabel("batch latency (ms, mean per bucket)")
    axes.set_yscale("log")


def _distribution(report: dict[str, Any], axes: Any) -> None:
    for group in report["group_metrics"]:
        if group["group"] == "aggregate":
            continue
        d = group["distribution"]
        edges, counts = d["bin_edges_ms"], d["counts"]
        if not counts:
            continue
        width = edges[1] - edges[0]
        total = sum(counts)
        density = [c / total / width for c in counts]
        axes.bar(edges[:-1], density, width=width, align="edge", alpha=0.45, label=group["group"])
        mu, sigma = d["lognormal_mu"], d["lognormal_sigma"]
        if sigma > 0:
            xs = [edges[0] + (edges[-1] - edges[0]) * i / 200 for i in range(1, 201)]
            ys = [
                math.exp(-((math.log(x) - mu) ** 2) / (2 * sigma**2))
                / (x * sigma * math.sqrt(2 * math.pi))
                for x in xs
                if x > 0
            ]
            axes.plot(xs[-len(ys) :], ys, linewidth=1.5, label=f"{group['group']} log-normal fit")
        for name in ("p50", "p95", "p99"):
            axes.axvline(d[name], linestyle=":", linewidth=0.8)
    axes.set_xlabel("batch latency (ms; dotted: p50, p95, p99)")
    axes.set_ylabel("density")


_DRAW: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "throughput": _throughput,
    "latency": _latency,
    "latency_distribution": _distribution,
}


def _figures_table(report: dict[str, Any]) -> str:
    rows = []
    for g in report["group_metrics"]:
        lat = g["average_latency_ms"]
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    g["group"],
                    g["actors"],
                    f"{g['total_throughput_megabytes_per_second']:.2f}",
                    f"{g['total_throughput_messages_per_second']:.0f}",
                    *(f"{lat[k]:.3f}" for k in ("p50", "p90", "p99", "p999", "avg")),
                )
            )
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("group", "actors", "MB/s", "msg/s", "p50", "p90", "p99", "p999", "avg")
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_charts(report: dict[str, Any], folder: Path) -> list[Path]:
    """Write every chart of ``report`` into ``folder``; returns the files written
    (none when matplotlib is missing)."""
    if not charts_available():
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    written: list[Path] = []
    for name in CHARTS:
        figure, axes = pyplot.subplots(figsize=(11, 5.5))
        try:
            _DRAW[name](report, axes)
            axes.set_title(_title(report), fontsize=9)
            axes.grid(True, alpha=0.3)
            if axes.get_legend_handles_labels()[0]:
                axes.legend(fontsize=7, loc="best", ncol=2)
            figure.tight_layout()
            png = folder / f"{name}.png"
            figure.savefig(png, dpi=110)
            svg = io.StringIO()
            figure.savefig(svg, format="svg")
        finally:
            pyplot.close(figure)
        page = folder / f"{name}.html"
        page.write_text(
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(name)}: {html.escape(_title(report))}</title>"
            "<style>body{font-family:sans-serif;margin:2em}"
            "td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #ddd}</style>"
            f"</head><body><h2>{html.escape(name.replace('_', ' '))}</h2>"
            f"<p>{html.escape(_title(report))} · run {html.escape(report['uuid'])} at "
            f"{html.escape(report['timestamp'])}</p>"
            f"{svg.getvalue()[svg.getvalue().find('<svg') :]}"
            f"{_figures_table(report)}</body></html>\n",
            encoding="utf-8",
        )
        written += [png, page]
    return written
