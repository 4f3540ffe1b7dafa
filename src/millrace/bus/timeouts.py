"""How long the bus's clients wait for Kafka, and a bound on it for callers that must answer soon.

Kafka clients wait up to 15 s for an answer by default, which suits commands: a busy broker
gets time to reply. A caller that must answer quickly, such as the HTTP service with the bus
down, bounds every wait within a block; the bound holds for the code run in that context
(`contextvars`), so other threads keep their own waits.

Example:
    >>> with bus_timeouts_at_most(2.0):
    ...     bounded(15.0)
    2.0
    >>> bounded(15.0)
    15.0
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_LIMIT_S: ContextVar[float | None] = ContextVar("millrace_bus_timeout_limit_s", default=None)


def bounded(timeout_s: float) -> float:
    """`timeout_s`, or the bound of the enclosing `bus_timeouts_at_most` when that is shorter."""
    limit = _LIMIT_S.get()
    return timeout_s if limit is None else min(timeout_s, limit)


@contextlib.contextmanager
def bus_timeouts_at_most(seconds: float) -> Iterator[None]:
    """Within the block, every wait of the bus's clients for Kafka lasts at most `seconds`."""
    token = _LIMIT_S.set(seconds)
    try:
        yield
    finally:
        _LIMIT_S.reset(token)
