#!/usr/bin/env python3
"""Table and chart of `scripts/overload.sh` runs: goodput against offered load, per queue mode.

Usage: overload_chart.py DIR OUT.svg    (DIR holds RATE-MODE.json, one `deadline load --json` each)
"""
import json
import pathlib
import sys
from html import escape

MODES = [
    ("baseline", "without deadlines", "#888888", "6 4"),
    ("fifo", "FIFO", "#d62728", ""),
    ("edf", "EDF", "#ff7f0e", "2 3"),
    ("edf-admission", "EDF + admission", "#1f77b4", ""),
    ("edf-admission-cap", "EDF + admission + wait cap", "#2ca02c", ""),
    ("edf-admission-retries", "EDF + admission, 3 attempts a hop", "#9467bd", "1 2"),
    ("edf-admission-cap-retries", "EDF + admission + wait cap, 3 attempts a hop", "#8c564b", "1 2"),
]
CHARTED = {"baseline", "fifo", "edf", "edf-admission", "edf-admission-cap"}


def load(directory):
    runs = {}
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        rate, mode = path.stem.split("-", 1)
        doc = json.loads(path.read_text())
        runs[(int(float(rate)), mode)] = doc["runs"][0]
    return runs


def table(runs):
    classes = sorted({c["wait_ms"] for r in runs.values() for c in r.get("budget_classes", [])})
    extra = "".join(f" | in time, {w} ms users" for w in classes)
    print("| offered | mode | goodput /s (of 80) | in-time p50 / p99 | refused: n, p50 / p99 "
          "| shed (p99 time to refuse) | sheds per user | inventory work for missed users "
          f"| work after users left{extra} |")
    print("|---|---|---|---|---|---|---|---|---|" + "---|" * len(classes))
    for rate in sorted({r for r, _ in runs}):
        for mode, label, _, _ in MODES:
            run = runs.get((rate, mode))
            if run is None:
                continue
            cap = run["capacity_per_s"]
            print(
                f"| {rate}/s ({rate / cap:.0f}x) | {label} "
                f"| {run['goodput_per_s']:.1f} ({100 * run['goodput_per_s'] / cap:.0f} %) "
                f"| {run['in_time_p50_ms']} / {run['in_time_p99_ms']} ms "
                f"| {run['refused']}, {run['refused_p50_ms']} / {run['refused_p99_ms']} ms "
                f"| {run['shed']} ({run['shed_p99_ms']:.1f} ms) "
                f"| {run['shed'] / run['requests']:.2f} "
                f"| {run['inventory_worker_ms_on_missed'] / 1000:.1f} s "
                f"| {run['worker_ms_after_users_left'] / 1000:.1f} s |"
                + "".join(
                    f" {c['in_time_share'] * 100:.0f} % ({c['in_time_p50_ms']} ms) |"
                    for w in classes
                    for c in run.get("budget_classes", [])
                    if c["wait_ms"] == w
                )
            )


def chart(runs, out):
    width, height, left, right, top, bottom = 640, 400, 60, 180, 40, 50
    rates = sorted({r for r, _ in runs})
    capacity = next(iter(runs.values()))["capacity_per_s"]
    ymax = max([capacity * 1.25] + [r["goodput_per_s"] * 1.1 for r in runs.values()])
    xmax = max(rates) / capacity
    px = lambda x: left + (width - left - right) * x / xmax
    py = lambda y: height - bottom - (height - top - bottom) * y / ymax
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="14">Goodput against offered load: inventory, '
        f'8 slots x 100 ms</text>',
        f'<line x1="{left}" y1="{py(0)}" x2="{px(xmax)}" y2="{py(0)}" stroke="black"/>',
        f'<line x1="{left}" y1="{py(0)}" x2="{left}" y2="{py(ymax)}" stroke="black"/>',
        f'<line x1="{left}" y1="{py(capacity)}" x2="{px(xmax)}" y2="{py(capacity)}" '
        f'stroke="#2ca02c" stroke-dasharray="4 4"/>',
        f'<text x="{px(xmax) + 4}" y="{py(capacity) + 4}" fill="#2ca02c">capacity '
        f'{capacity:.0f}/s</text>',
        f'<text x="{(left + px(xmax)) / 2}" y="{height - 12}" text-anchor="middle">'
        f'offered load (x capacity)</text>',
        f'<text x="16" y="{(top + py(0)) / 2}" transform="rotate(-90 16 {(top + py(0)) / 2})" '
        f'text-anchor="middle">users answered in time per second</text>',
    ]
    for x in [0] + [r / capacity for r in rates]:
        parts.append(f'<text x="{px(x)}" y="{py(0) + 16}" text-anchor="middle">{x:g}</text>')
    step = 20
    for y in range(0, int(ymax) + 1, step):
        parts.append(f'<text x="{left - 6}" y="{py(y) + 4}" text-anchor="end">{y}</text>')
    for i, (mode, label, colour, dash) in enumerate(m for m in MODES if m[0] in CHARTED):
        points = [(r / capacity, runs[(r, mode)]["goodput_per_s"]) for r in rates if (r, mode) in runs]
        if not points:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                     f'stroke-dasharray="{dash}"/>')
        for x, y in points:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = top + 30 + 20 * i
        parts.append(f'<line x1="{px(xmax) + 10}" y1="{ly}" x2="{px(xmax) + 34}" y2="{ly}" '
                     f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        parts.append(f'<text x="{px(xmax) + 40}" y="{ly + 4}">{escape(label)}</text>')
    parts.append("</svg>")
    pathlib.Path(out).write_text("\n".join(parts) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    runs = load(sys.argv[1])
    if not runs:
        sys.exit(f"no runs in {sys.argv[1]}")
    table(runs)
    chart(runs, sys.argv[2])


if __name__ == "__main__":
    main()
