"""What holds a processor's output watermark back: its buckets' pending event-time timers.

A processor's productions are dated by the processor, and an event-time timer fires when the
watermark passes it, producing at the timer's time. Its output watermark
(`millrace.engine.output_watermark`) is therefore held back to its earliest pending
event-time timer. The bucket runner reports a bucket's earliest timer whenever it changes;
`PendingTimers` keeps those reports, with the streams the processor has produced to, in a
file beside the query's checkpoint, so that a restarted app knows them before each bucket
runs again. The file is written within the micro-batch that changed it: a micro-batch run
again after a crash reports the same timers.
"""

from __future__ import annotations

import json
import threading

from millrace.config.storage import StoragePath, write_whole


class PendingTimers:
    """A processor's earliest pending event-time timer per bucket, and its output streams.

    Example:
        >>> timers = PendingTimers(tmp_path / "pending_timers.json")
        >>> timers.report({3: 1_767_225_610_000, 5: 1_767_225_620_000}, {"counts"})
        >>> timers.earliest_ms()
        1767225610000
        >>> PendingTimers(tmp_path / "pending_timers.json").streams
        {'counts'}
    """

    def __init__(self, path: StoragePath) -> None:
        self.path = path
        saved = json.loads(path.read_text()) if path.is_file() else {}
        self._timers: dict[int, int] = {int(b): ms for b, ms in saved.get("timers", {}).items()}
        self.streams: set[str] = set(saved.get("streams", []))
        """The streams the processor has produced to."""
        # Reports come from the query's thread, looks from the marker publisher's.
        self._lock = threading.Lock()

    def earliest_ms(self) -> int | None:
        """The earliest pending event-time timer of any bucket (epoch ms); None when none."""
        with self._lock:
            return min(self._timers.values(), default=None)

    def report(self, timers: dict[int, int | None], streams: set[str]) -> None:
        """Take a micro-batch's reports.

        `timers` holds each reporting bucket's earliest timer (None: it has none now);
        `streams` the streams the micro-batch produced to.
        """
        with self._lock:
            before = (dict(self._timers), set(self.streams))
            for bucket, time_ms in timers.items():
                if time_ms is None:
                    self._timers.pop(bucket, None)
                else:
                    self._timers[bucket] = time_ms
            self.streams |= streams
            if (self._timers, self.streams) != before:
                self._save()

    def _save(self) -> None:
        write_whole(
            self.path,
            json.dumps({"timers": self._timers, "streams": sorted(self.streams)}, sort_keys=True),
        )
