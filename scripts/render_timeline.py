"""Draws a `--perfetto` timeline as a standalone SVG page, to look at it where Perfetto's UI cannot be
reached (a machine without network) and to take the README's screenshot with a headless browser:

    python scripts/render_timeline.py step.json.gz step.html [--start=US --end=US]
    chromium --headless --screenshot=step.png --window-size=1400,700 step.html

One row per process and thread, as Perfetto shows them: slices as boxes named by op (nested slices
below their parent), transfers as arrows from the send to the receive with their bytes, counters
("live bytes") as a step line under their device. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
from collections import defaultdict

COLOURS = {"op": "#4e79a7", "function call": "#59a14f", "function nodes": "#9c755f", "failed op": "#e15759",
           "transfer": "#f28e2b", "function node": "#76b7b2"}
ROW, LEFT, WIDTH = 26, 330, 1040


def load(path: str) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    return json.loads(gzip.decompress(data) if path.endswith(".gz") else data)


def render(trace: dict, start: float | None = None, end: float | None = None) -> str:
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    timed = [e for e in events if e["ph"] in "XC"]
    first = start if start is not None else min(e["ts"] for e in timed)
    last = end if end is not None else max(e["ts"] + e.get("dur", 0) for e in timed)
    scale = WIDTH / max(last - first, 1e-9)
    x = lambda ts: LEFT + (ts - first) * scale  # noqa: E731
    used = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"} |
                  {(e["pid"], "counter") for e in events if e["ph"] == "C"},
                  key=lambda k: (order.get(k[0], k[0]), str(k[1]) if k[1] == "counter" else f"{k[1]:04d}"))
    rows = {key: i for i, key in enumerate(used)}
    parts = []
    for (pid, tid), i in rows.items():
        y = 40 + i * ROW
        label = f"{processes.get(pid, pid)} · {'live bytes' if tid == 'counter' else threads.get((pid, tid), tid)}"
        parts.append(f'<rect x="0" y="{y}" width="{LEFT + WIDTH + 20}" height="{ROW}" '
                     f'fill="{"#f4f4f4" if i % 2 else "#ffffff"}"/>'
                     f'<text x="6" y="{y + 17}" font-size="12">{html.escape(label[-52:])}</text>')
    ends: dict = defaultdict(list)
    for e in sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] + e["dur"] < first or e["ts"] > last:
            continue
        stack = ends[(e["pid"], e["tid"])]
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        depth = len(stack)
        stack.append(e["ts"] + e["dur"])
        y = 40 + rows[(e["pid"], e["tid"])] * ROW + 3 + depth * 5
        left, width = x(max(e["ts"], first)), max(1.5, (min(e["ts"] + e["dur"], last) - max(e["ts"], first)) * scale)
        colour = COLOURS.get(e.get("cat", ""), "#bab0ac")
        name = e["name"] + (f" {e['args']['bytes']} B" if e.get("args", {}).get("bytes") else "")
        parts.append(f'<rect x="{left:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 6 - depth * 5}" fill="{colour}" '
                     f'stroke="#333" stroke-width="0.3">'
                     f'<title>{html.escape(json.dumps(e.get("args", {})))}</title></rect>')
        if width > 7 * len(name) * 0.8:
            parts.append(f'<text x="{left + 3:.1f}" y="{y + 14}" font-size="11" fill="#fff">{html.escape(name)}</text>')
    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in "sf":
            flows[e["id"]][e["ph"]] = e
    for pair in flows.values():
        if "s" in pair and "f" in pair and all(first <= p["ts"] <= last for p in pair.values()):
            (s, f) = pair["s"], pair["f"]
            y1 = 40 + rows[(s["pid"], s["tid"])] * ROW + ROW / 2
            y2 = 40 + rows[(f["pid"], f["tid"])] * ROW + ROW / 2
            parts.append(f'<line x1="{x(s["ts"]):.1f}" y1="{y1}" x2="{x(f["ts"]):.1f}" y2="{y2}" stroke="#d62728" '
                         'stroke-width="1.4" marker-end="url(#arrow)"/>')
    series = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            series[e["pid"]].append((e["ts"], next(iter(e["args"].values()))))
    for pid, points in series.items():
        points.sort()
        top = max(v for _, v in points) or 1
        base = 40 + rows[(pid, "counter")] * ROW + ROW - 3
        path = " ".join(f"L{x(max(min(ts, last), first)):.1f},{base - (ROW - 8) * v / top:.1f}" for ts, v in points)
        parts.append(f'<path d="M{x(points[0][0]):.1f},{base} {path}" fill="none" stroke="#7b3294" stroke-width="1.5"/>'
                     f'<text x="{LEFT + WIDTH - 120}" y="{base - ROW + 14}" font-size="10">peak {top} B</text>')
    height = 60 + len(rows) * ROW
    clock = html.escape(trace.get("otherData", {}).get("clock", "")[:150])
    return (f'<!doctype html><html><body style="margin:0;font-family:sans-serif">'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" height="{height}">'
            '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="3" orient="auto">'
            '<path d="M0,0 L7,3 L0,6 z" fill="#d62728"/></marker></defs>'
            f'<text x="6" y="22" font-size="13" font-weight="bold">{clock}</text>{"".join(parts)}</svg></body></html>')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("html")
    parser.add_argument("--start", type=float)
    parser.add_argument("--end", type=float)
    flags = parser.parse_args()
    with open(flags.html, "w", encoding="utf-8") as out:
        out.write(render(load(flags.trace), flags.start, flags.end))
