"""Line charts drawn as SVG on the server: no script, no library in the browser; and
the numbers, times and rates the pages show as text.

Written here because the charts are one polyline each; a plotting package would
bring its own browser bundle for that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

# Points drawn per chart at most: a window of 720 samples is averaged down to this.
MAX_POINTS = 240
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 56, 8, 18, 18


# Values from here up show no decimals ("123", not "1.2e+02").
_WHOLE_FROM = 100
_MINUTE_S, _HOUR_S, _DAY_S = 60, 3600, 86400


def human(value: float, unit: str = "") -> str:
    """1234 -> "1.2k", with an optional unit ("B" uses KiB-style steps of 1024)."""
    step = 1024.0 if unit == "B" else 1000.0
    for prefix in ("", "k", "M", "G", "T"):
        if abs(value) < step or prefix == "T":
            text = (
                f"{value:.0f}"
                if value == int(value) or abs(value) >= _WHOLE_FROM
                else f"{value:.2g}"
            )
            if prefix:
                text = f"{value:.1f}"
            return f"{text}{prefix}{unit}" if prefix or unit else text
        value /= step
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    """An age as people read it: 42s, 3m 5s, 2h 1m, 3d 4h."""
    s = int(seconds)
    if s < _MINUTE_S:
        return f"{s}s"
    if s < _HOUR_S:
        return f"{s // _MINUTE_S}m {s % _MINUTE_S}s"
    if s < _DAY_S:
        return f"{s // _HOUR_S}h {s % _HOUR_S // _MINUTE_S}m"
    return f"{s // _DAY_S}d {s % _DAY_S // _HOUR_S}h"


def _thin(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POINTS:
        return list(points)
    step = len(points) / MAX_POINTS
    out = []
    for i in range(MAX_POINTS):
        chunk = points[int(i * step) : int((i + 1) * step)] or [points[-1]]
        out.append((chunk[-1][0], sum(v for _, v in chunk) / len(chunk)))
    return out


def line(
    points: Sequence[tuple[float, float]],
    *,
    now: float,
    window_s: float,
    title: str,
    unit: str = "",
    width: int = 480,
    height: int = 140,
) -> Markup:
    """A titled chart of ``(time, value)`` over the ``window_s`` before ``now``."""
    shown = _thin([(t, v) for t, v in points if t >= now - window_s])
    top = max((v for _, v in shown), default=0.0) or 1.0
    plot_w = width - _PAD_LEFT - _PAD_RIGHT
    plot_h = height - _PAD_TOP - _PAD_BOTTOM

    def x(t: float) -> float:
        return _PAD_LEFT + plot_w * (1 - (now - t) / window_s)

    def y(v: float) -> float:
        return _PAD_TOP + plot_h * (1 - v / top)

    coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in shown)
    latest = human(shown[-1][1], unit) if shown else "no data yet"
    minutes = round(window_s / 60)
    parts = [
        f'<svg class="chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" data-points="{len(shown)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_PAD_LEFT}" y="12" class="t">{escape(title)}: {escape(latest)}</text>',
        f'<rect x="{_PAD_LEFT}" y="{_PAD_TOP}" width="{plot_w}" height="{plot_h}" class="bg"/>',
        f'<text x="{_PAD_LEFT - 4}" y="{_PAD_TOP + 8}" class="a" text-anchor="end">'
        f"{escape(human(top, unit))}</text>",
        f'<text x="{_PAD_LEFT - 4}" y="{_PAD_TOP + plot_h}" class="a" text-anchor="end">0</text>',
        f'<text x="{_PAD_LEFT}" y="{height - 4}" class="a">-{minutes}m</text>',
        f'<text x="{width - _PAD_RIGHT}" y="{height - 4}" class="a" text-anchor="end">now</text>',
    ]
    if len(shown) > 1:
        parts.append(f'<polyline points="{coords}" class="l"/>')
    elif shown:
        px, py = coords.split(",")
        parts.append(f'<circle cx="{px}" cy="{py}" r="2" class="d"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def spark(
    points: Sequence[tuple[float, float]], *, now: float, window_s: float, label: str
) -> Markup:
    """A small chart for a table row, without axes."""
    width, height = 120, 24
    shown = _thin([(t, v) for t, v in points if t >= now - window_s])
    top = max((v for _, v in shown), default=0.0) or 1.0
    coords = " ".join(
        f"{width * (1 - (now - t) / window_s):.1f},{height - 2 - (height - 4) * v / top:.1f}"
        for t, v in shown
    )
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" aria-label="{escape(label)}" '
        f'data-points="{len(shown)}"><polyline points="{coords}" class="l"/></svg>'
    )


@dataclass(frozen=True)
class Window:
    """What a page's charts show: the ``span_s`` seconds up to ``now``."""

    now: float
    span_s: float

    def line(self, points: Sequence[tuple[float, float]], *, title: str, unit: str = "") -> Markup:
        return line(points, now=self.now, window_s=self.span_s, title=title, unit=unit)

    def spark(self, points: Sequence[tuple[float, float]], *, label: str) -> Markup:
        return spark(points, now=self.now, window_s=self.span_s, label=label)


# -- times, rates and series -------------------------------------------------------------


def when(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rate_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def series_of(points: list[Any], attr: str) -> list[tuple[float, float]]:
    return [(p.t, float(getattr(p, attr))) for p in points]
