"""Small hand-written SVG line plots, inlined in the cockpit's pages: no JavaScript, no build."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from html import escape

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")


@dataclass(frozen=True)
class Line:
    """One named series of (ISO time, value) points."""

    label: str
    points: list[tuple[str, float]]


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def line_plot(title: str, lines: list[Line], *, start: str, end: str, unit: str = "",
              width: int = 460, height: int = 160) -> str:
    """An SVG of `lines` over the time range [start, end], y from 0 to the largest value."""
    left, right, top, bottom = 48, 8, 20, 22
    t0, t1 = _epoch(start), _epoch(end)
    span = max(t1 - t0, 1.0)
    peak = max((v for line in lines for _, v in line.points), default=0.0) or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def xy(stamp: str, value: float) -> str:
        x = left + plot_w * min(max((_epoch(stamp) - t0) / span, 0.0), 1.0)
        y = top + plot_h * (1 - value / peak)
        return f"{x:.1f},{y:.1f}"

    axis = 'stroke="#999"'
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<text x="{left}" y="13" font-size="12">{escape(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" {axis}/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" {axis}/>',
             f'<text x="{left - 4}" y="{top + 4}" font-size="10" text-anchor="end">'
             f'{peak:.4g}{escape(unit)}</text>',
             f'<text x="{left - 4}" y="{top + plot_h}" font-size="10" text-anchor="end">0</text>',
             f'<text x="{left}" y="{height - 6}" font-size="10">{escape(start[11:16])}</text>',
             f'<text x="{left + plot_w}" y="{height - 6}" font-size="10" text-anchor="end">'
             f'{escape(end[11:16])} UTC</text>']
    for index, line in enumerate(lines):
        colour = COLOURS[index % len(COLOURS)]
        if line.points:
            points = " ".join(xy(s, v) for s, v in line.points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        parts.append(f'<text x="{left + 6 + 150 * index}" y="{top + 12}" font-size="10" fill="{colour}">'
                     f'{escape(line.label)}</text>')
    if not any(line.points for line in lines):
        parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" font-size="11" '
                     f'text-anchor="middle" fill="#777">no progress in this window</text>')
    parts.append("</svg>")
    return "".join(parts)
