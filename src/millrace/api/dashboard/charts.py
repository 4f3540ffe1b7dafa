"""Line charts as SVG, drawn on the server: a figure's lines over a span of time.

The time axis runs from the start of the span on the left to its end (now) on the right, so
a point drifts left as the page refreshes and new batches come in at the right. The value
axis starts at 0 and ends at the largest value shown. Each point is a circle too, so a
line of one point shows; each line carries `data-points`, its number of points.
"""

from __future__ import annotations

import time

from millrace.api.dashboard.html import escape, number

WIDTH, HEIGHT = 460, 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 10, 22, 34
_COLOURS = 4


def line_chart(
    title: str,
    lines: list[tuple[str, list[tuple[int, float]]]],
    since_ms: int,
    until_ms: int,
) -> str:
    """The SVG of `lines` (a label and `(time_ms, value)` points each) over the span.

    Example:
        >>> svg = line_chart("input rows/s", [("q", [(1_000, 2.0), (2_000, 4.0)])], 0, 3_000)
        >>> svg.count("<circle")
        2
    """
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    span = max(1, until_ms - since_ms)
    top = max((value for _, points in lines for _, value in points), default=0.0)
    top = top if top > 0 else 1.0

    def x(time_ms: int) -> float:
        return _LEFT + (time_ms - since_ms) / span * plot_w

    def y(value: float) -> float:
        return _TOP + plot_h - value / top * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text class="title" x="{_LEFT}" y="14">{escape(title)}</text>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{WIDTH - _RIGHT}" '
        f'y2="{_TOP + plot_h}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{number(top)}</text>',
        f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end">0</text>',
        f'<text x="{_LEFT}" y="{_TOP + plot_h + 14}">{_clock(since_ms)}</text>',
        f'<text x="{WIDTH - _RIGHT}" y="{_TOP + plot_h + 14}" text-anchor="end">'
        f"{_clock(until_ms)} UTC</text>",
    ]
    shown = [(label, points) for label, points in lines if points]
    if not shown:
        parts.append(
            f'<text x="{_LEFT + plot_w / 2}" y="{_TOP + plot_h / 2}" text-anchor="middle">'
            "no batches in this span</text>"
        )
    for n, (label, points) in enumerate(shown):
        colour = f"series-{n % _COLOURS}"
        coordinates = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        parts.append(
            f'<polyline class="{colour}" data-points="{len(points)}" points="{coordinates}">'
            f"<title>{escape(label)}</title></polyline>"
        )
        parts += [
            f'<circle class="{colour}" cx="{x(t):.1f}" cy="{y(v):.1f}" r="1.8">'
            f"<title>{escape(label)}: {number(v, 2)} at {_clock(t)}</title></circle>"
            for t, v in points
        ]
        parts.append(
            f'<text class="{colour}" x="{_LEFT + n * 140}" y="{HEIGHT - 4}" stroke="none">'
            f"{escape(label[-24:])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _clock(time_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(time_ms / 1000))
