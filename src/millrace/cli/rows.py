"""How the CLI prints rows of tables: JSON lines and table cells, with times in UTC.

A time prints as ISO-8601 UTC with milliseconds and `Z`, the form `millrace tail` and the HTTP
API use: `2026-01-01T12:00:00.000Z`. Spark gives a `TIMESTAMP` as a datetime without a zone in
the local time of the process, which is read as such.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime


def json_line(row: Mapping[str, object]) -> str:
    """One row as a line of JSON, times as ISO-8601 UTC with milliseconds.

    Example:
        >>> json_line({"window_start": datetime(2026, 1, 1, 12, tzinfo=UTC), "n": 3})
        '{"window_start": "2026-01-01T12:00:00.000Z", "n": 3}'
    """
    return json.dumps(row, default=_json_default, ensure_ascii=False)


def cell(value: object) -> str:
    """One value as a table cell: NULL, JSON for lists and maps, times in UTC.

    Example:
        >>> cell(datetime(2026, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC))
        '2026-01-01T12:00:00.250Z'
    """
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    if isinstance(value, datetime):
        return format_time(value)
    return str(value)


def format_time(moment: datetime) -> str:
    """`moment` as ISO-8601 UTC with milliseconds and `Z`; without a zone, it is local time.

    Example:
        >>> format_time(datetime.fromisoformat("2026-01-01T13:00:00.5+01:00"))
        '2026-01-01T12:00:00.500Z'
    """
    utc = moment.astimezone(UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
