"""Parsing of human-written durations such as `3d`, `10m`, `30 seconds` or `1 hour`."""

from __future__ import annotations

import re

from millrace.errors import ConfigError

_UNIT_MS = {
    "ms": 1,
    "millisecond": 1,
    "s": 1_000,
    "sec": 1_000,
    "second": 1_000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "w": 604_800_000,
    "week": 604_800_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


def parse_duration_ms(text: str, *, what: str = "duration") -> int:
    """Return the number of milliseconds that `text` names.

    Accepts a number followed by a unit: ms, s, m, h, d, w, or their English names in the
    singular or plural (`30 seconds`, `1 hour`).

    Example:
        >>> parse_duration_ms("3d")
        259200000
    """
    match = _DURATION.match(text.lower())
    unit = match.group(2) if match else ""
    if unit not in _UNIT_MS and unit.endswith("s"):
        unit = unit[:-1]
    if match is None or unit not in _UNIT_MS:
        raise ConfigError(
            f"{what} {text!r} is not a duration",
            hint="write a number and a unit, such as 500ms, 30s, 10m, 2h, 3d or '30 seconds'",
        )
    return int(float(match.group(1)) * _UNIT_MS[unit])
