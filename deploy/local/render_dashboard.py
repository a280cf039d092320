"""Render the Grafana dashboard's panels from a real Prometheus into one PNG, for machines without Grafana.

    python deploy/local/render_dashboard.py --prometheus http://127.0.0.1:9090 --minutes 15 --out dashboard.png

Reads deploy/grafana/gateway-dashboard.json, runs every panel's PromQL through Prometheus'
``/api/v1/query_range`` (``$__rate_interval`` and ``$route`` substituted), and draws each panel at
its grid position: time series as lines (stacked when the panel stacks), stat panels as their last
value. Units follow the panel's unit (s, reqps, percentunit, currencyUSD). Needs matplotlib (dev extra).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

DASHBOARD = Path(__file__).resolve().parents[1] / "grafana" / "gateway-dashboard.json"
ROW_HEIGHT_IN = 0.42  # one Grafana grid unit (30 px) in inches
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def substitute(expr: str, rate_interval: str) -> str:
    return expr.replace("$__rate_interval", rate_interval).replace("$route", ".*")


def query_range(client: httpx.Client, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    response = client.get("/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": step})
    response.raise_for_status()
    body = response.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def legend(template: str, labels: dict[str, str]) -> str:
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template).strip() or str(labels or "value")


def scale(unit: str) -> tuple[float, str]:
    return {
        "percentunit": (100.0, "%"),
        "s": (1.0, "s"),
        "reqps": (1.0, "req/s"),
        "ops": (1.0, "/s"),
        "currencyUSD": (1.0, "USD"),
    }.get(unit, (1.0, ""))


def draw_timeseries(ax: Axes, panel: dict[str, Any], series: list[tuple[str, list[float], list[float]]]) -> None:
    factor, suffix = scale(panel["fieldConfig"]["defaults"].get("unit", ""))
    custom = panel["fieldConfig"]["defaults"].get("custom", {})
    stacking = custom.get("stacking", {}).get("mode")
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    elif stacking in ("normal", "percent"):
        grid = sorted({t for _, ts, _ in series for t in ts})
        stacks = []
        for _, ts, vs in series:
            lookup = dict(zip(ts, vs, strict=True))
            stacks.append([lookup.get(t, 0.0) if not math.isnan(lookup.get(t, 0.0)) else 0.0 for t in grid])
        if stacking == "percent":
            totals = [sum(col) or 1.0 for col in zip(*stacks, strict=True)]
            stacks = [[100.0 * v / t for v, t in zip(row, totals, strict=True)] for row in stacks]
            suffix = "%"
        ax.stackplot([t / 60 for t in grid], stacks, labels=[name for name, _, _ in series], alpha=0.75)
    else:
        for name, ts, vs in series:
            ax.plot([t / 60 for t in ts], [v * factor for v in vs], label=name, linewidth=1.2)
    ax.set_xlabel("minutes before the end of the window", fontsize=7)
    ax.set_ylabel(suffix, fontsize=7)
    ax.tick_params(labelsize=6)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=5.5, loc="upper left", ncol=2 if len(series) > 4 else 1, framealpha=0.6)


def draw_stat(ax: Axes, panel: dict[str, Any], series: list[tuple[str, list[float], list[float]]]) -> None:
    factor, suffix = scale(panel["fieldConfig"]["defaults"].get("unit", ""))
    # Grafana's "lastNotNull": the newest value that is a number.
    values = [
        next(v for v in reversed(vs) if not math.isnan(v)) for _, _, vs in series if any(not math.isnan(v) for v in vs)
    ]
    text = f"{values[0] * factor:.3g} {suffix}" if values else "no data"
    ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=18, transform=ax.transAxes, color="#1f77b4")
    ax.set_xticks([])
    ax.set_yticks([])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval becomes")
    parser.add_argument("--end-ago", type=float, default=0.0, help="end the window this many minutes ago")
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"))
    args = parser.parse_args()
    board = json.loads(args.dashboard.read_text(encoding="utf-8"))
    end = time.time() - args.end_ago * 60
    start = end - args.minutes * 60
    step = max(5.0, args.minutes * 60 / 240)
    panels = board["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 1  # one unit on top for the title
    fig = plt.figure(figsize=(20, height * ROW_HEIGHT_IN))
    window = time.strftime("%Y-%m-%d %H:%M", time.gmtime(start)) + " – " + time.strftime("%H:%M UTC", time.gmtime(end))
    fig.suptitle(f"{board['title']} — {window}, from {args.prometheus}", fontsize=12, y=0.999)
    with httpx.Client(base_url=args.prometheus, timeout=30) as client:
        for panel in panels:
            pos = panel["gridPos"]
            left, width = pos["x"] / 24, pos["w"] / 24
            top = 1 - (pos["y"] + 1) / height
            if panel["type"] == "row":
                fig.text(0.01, top - 0.3 / height, panel["title"], fontsize=11, weight="bold")
                continue
            ax = fig.add_axes(
                (left + 0.03, top - pos["h"] / height + 0.9 / height, width - 0.045, (pos["h"] - 1.6) / height)
            )
            ax.set_title(panel["title"], fontsize=9, loc="left")
            series = []
            for target in panel["targets"]:
                for result in query_range(client, substitute(target["expr"], args.rate_interval), start, end, step):
                    ts = [end - float(t) for t, _ in result["values"]]
                    vs = [float(v) for _, v in result["values"]]
                    series.append((legend(target.get("legendFormat", ""), result["metric"]), ts, vs))
            if panel["type"] == "stat":
                draw_stat(ax, panel, series)
            else:
                draw_timeseries(ax, panel, series)
                ax.set_xlim(args.minutes, 0)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len([p for p in panels if p['type'] != 'row'])} panels)")


if __name__ == "__main__":
    main()
