"""Times as the CLI's options take them (`--from`, `--to`, `--to-time`) and its lines print them."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from millrace.errors import PublishError
from millrace.records import event_time_ms


def epoch_ms(option: str, text: str) -> int:
    """`text` read as a record's time is: ISO-8601 (UTC without an offset) or an epoch number.

    Example:
        >>> epoch_ms("--from", "2026-01-01T00:00:00Z")
        1767225600000
    """
    value: str | int = int(text) if text.isascii() and text.isdigit() else text
    try:
        time_ms = event_time_ms({option: value}, option)
    except PublishError:
        time_ms = None
    if time_ms is None:
        raise click.BadParameter(
            f"{text!r} is neither an ISO-8601 time such as 2026-01-01T00:00:00Z nor epoch "
            "milliseconds",
            param_hint=option,
        )
    return time_ms


def iso(time_ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with `Z`.

    Example:
        >>> iso(1767225600000)
        '2026-01-01T00:00:00Z'
    """
    return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
