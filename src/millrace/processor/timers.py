"""Per-key timers: the `Timer` a callback receives, and one key's table of pending timers.

A key has at most one timer per tag; setting a tag again replaces its timer, whatever its
domain. Event-time timers are due once the watermark has reached them (`time_ms <= watermark`),
processing-time timers once the clock has (`time_ms <= processing time`). Due timers fire in
order of time, then tag, both domains mixed, since both are epoch milliseconds.

A key's timers are stored as plain JSON-able data, `{tag: [domain, time_ms]}`.

Example:
    >>> timers = KeyTimers({})
    >>> timers.set(Timer("close", 2000, "event_time"))
    >>> timers.pop_next_due(watermark_ms=2000, processing_time_ms=0)
    Timer(tag='close', time_ms=2000, domain='event_time')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

TimeDomain = Literal["event_time", "processing_time"]
"""Which clock a timer waits for: the watermark (event time) or the wall clock."""

StoredTimers = Mapping[str, list[Any]]  # Any: each is the JSON pair [domain, time_ms]
"""A key's timers as stored, `{tag: [domain, time_ms]}`, as they come back from the store."""


@dataclass(frozen=True)
class Timer:
    """A timer of the current key: its tag, the time it is set for, and its time domain.

    Example:
        >>> timer = Timer("close-1000", 2000, "event_time")
        >>> timer.time_ms - 1000
        1000
    """

    tag: str
    time_ms: int
    domain: TimeDomain

    def is_due(self, watermark_ms: int | None, processing_time_ms: int) -> bool:
        """True when this timer's clock has reached its time."""
        if self.domain == "processing_time":
            return self.time_ms <= processing_time_ms
        return watermark_ms is not None and self.time_ms <= watermark_ms


class KeyTimers:
    """One key's pending timers, read from and written back to their stored form.

    Example:
        >>> timers = KeyTimers({"close": ["event_time", 2000]})
        >>> timers.delete("close")
        >>> timers.stored()
        {}
    """

    def __init__(self, stored: StoredTimers | None) -> None:
        self._timers = {
            tag: Timer(tag, int(time_ms), domain)
            for tag, (domain, time_ms) in (stored or {}).items()
        }

    def set(self, timer: Timer) -> None:
        """Add `timer`, replacing the key's timer of the same tag."""
        self._timers[timer.tag] = timer

    def delete(self, tag: str) -> None:
        """Remove the timer of `tag`, if there is one."""
        self._timers.pop(tag, None)

    def get(self, tag: str) -> Timer | None:
        """The pending timer of `tag`, or None."""
        return self._timers.get(tag)

    def pending(self) -> list[Timer]:
        """Every pending timer, in firing order: by time, then tag."""
        return sorted(self._timers.values(), key=_firing_order)

    def pop_next_due(self, *, watermark_ms: int | None, processing_time_ms: int) -> Timer | None:
        """Remove and return the first due timer in firing order, or None when none is due."""
        due = [
            timer
            for timer in self._timers.values()
            if timer.is_due(watermark_ms, processing_time_ms)
        ]
        if not due:
            return None
        first = min(due, key=_firing_order)
        del self._timers[first.tag]
        return first

    def snapshot(self) -> dict[str, Timer]:
        """A copy of the table, for `restore` after a failed callback."""
        return dict(self._timers)

    def restore(self, snapshot: dict[str, Timer]) -> None:
        """Undo every change made since `snapshot` was taken."""
        self._timers = dict(snapshot)

    def stored(self) -> dict[str, list[str | int]]:
        """The stored form: `{tag: [domain, time_ms]}`."""
        return {tag: [timer.domain, timer.time_ms] for tag, timer in self._timers.items()}


def has_due_timer(
    stored: StoredTimers | None, *, watermark_ms: int | None, processing_time_ms: int
) -> bool:
    """True when a key's stored timers hold one that is due, without decoding them all.

    Example:
        >>> has_due_timer({"t": ["processing_time", 5]}, watermark_ms=None, processing_time_ms=5)
        True
    """
    for domain, time_ms in (stored or {}).values():
        if domain == "processing_time":
            if time_ms <= processing_time_ms:
                return True
        elif watermark_ms is not None and time_ms <= watermark_ms:
            return True
    return False


def _firing_order(timer: Timer) -> tuple[int, str, str]:
    return (timer.time_ms, timer.tag, timer.domain)
