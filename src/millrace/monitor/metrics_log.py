"""Following the `_millrace.metrics` stream: the recent batches of every app.

`MetricsLog.refresh` reads what the apps' query listeners published since the last call and
keeps, per app, the batches of the last `lookback` (ten minutes by default), one per run and
batch id however often a record was delivered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from millrace.bus.internal import METRICS_STREAM, read_after
from millrace.config.settings import Settings
from millrace.errors import StreamNotFoundError
from millrace.records import JsonObject

DEFAULT_LOOKBACK_MS = 600_000


@dataclass(frozen=True)
class Batch:
    """One micro-batch of one query, as its metrics record tells it."""

    app: str
    query: str
    run_id: str
    batch_id: int
    time_ms: int
    fields: JsonObject
    """The whole record, as `millrace.engine.metrics.metrics_record` wrote it."""

    @property
    def watermark_ms(self) -> int | None:
        """The query's watermark after this batch, or None before it has one."""
        return _epoch_ms(self.fields.get("watermark"))

    @property
    def sources(self) -> list[JsonObject]:
        """Each Kafka source's offsets in this batch, as `engine.metrics.SourceRecord`s."""
        return [source for source in self.fields.get("sources") or [] if isinstance(source, dict)]

    @property
    def max_event_ms(self) -> int | None:
        """The newest event time this batch read, or None."""
        return _epoch_ms((self.fields.get("event_time") or {}).get("max"))


class MetricsLog:
    """The recent batches of every app, read from the metrics stream."""

    def __init__(self, settings: Settings, *, lookback_ms: int = DEFAULT_LOOKBACK_MS) -> None:
        self.settings = settings
        self.lookback_ms = lookback_ms
        self._positions: dict[int, int] = {}
        self._batches: dict[str, deque[Batch]] = {}
        self._seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def refresh(self, now_ms: int | None = None) -> None:
        """Read what was published since the last refresh; forget batches past the lookback."""
        now_ms = now_ms or int(time.time() * 1000)
        with self._lock:
            try:
                records, self._positions = read_after(
                    self.settings,
                    METRICS_STREAM,
                    self._positions,
                    since_ms=now_ms - self.lookback_ms,
                )
            except StreamNotFoundError:
                # No app has published a batch yet.
                return
            for stamped in records:
                batch = batch_of(stamped.record.value)
                if batch is None or (batch.run_id, batch.batch_id) in self._seen:
                    continue
                self._seen.add((batch.run_id, batch.batch_id))
                self._batches.setdefault(batch.app, deque()).append(batch)
            for app, batches in self._batches.items():
                while batches and batches[0].time_ms < now_ms - self.lookback_ms:
                    old = batches.popleft()
                    self._seen.discard((old.run_id, old.batch_id))
                self._batches[app] = batches

    def apps(self) -> list[str]:
        """The apps with a batch in the lookback, sorted."""
        with self._lock:
            return sorted(app for app, batches in self._batches.items() if batches)

    def batches(self, app: str, *, since_ms: int | None = None) -> list[Batch]:
        """The batches of `app` in the lookback (from `since_ms` on), oldest first."""
        with self._lock:
            batches = list(self._batches.get(app, ()))
        if since_ms is not None:
            batches = [batch for batch in batches if batch.time_ms >= since_ms]
        return sorted(batches, key=lambda batch: batch.time_ms)

    def latest(self, app: str) -> dict[str, Batch]:
        """The newest batch of each query of `app`, by query name."""
        latest: dict[str, Batch] = {}
        for batch in self.batches(app):
            latest[batch.query] = batch
        return latest


def batch_of(value: JsonObject) -> Batch | None:
    """The batch a metrics record tells of, or None for a record the listener did not write.

    Example:
        >>> batch_of({"app": "a", "query": "a.q", "run_id": "r", "batch_id": 3,
        ...           "time": "2026-01-01T00:00:00Z"}).batch_id
        3
    """
    try:
        time_ms = _epoch_ms(value["time"])
        if time_ms is None:
            return None
        return Batch(
            app=str(value["app"]),
            query=str(value["query"]),
            run_id=str(value["run_id"]),
            batch_id=int(value["batch_id"]),
            time_ms=time_ms,
            fields=value,
        )
    except (KeyError, TypeError, ValueError):
        # Not a record the listener wrote: skipped, as a reader skips a bad record.
        return None


def _epoch_ms(text: object) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
