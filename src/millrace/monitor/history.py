"""An app's batches over a span of time, as chart series, read from `_millrace.metrics`.

`app_history` reads the metrics stream from the start of the span in chunks of
`CHUNK_RECORDS` and folds each batch of the app into a slice of the span (`buckets` slices,
aligned on multiples of their width so that a point stays put from one look to the next while
the span moves on), per query and figure: the memory it holds is one chunk and the slices,
however long the span. A slice's point is the mean of its batches (time and value), so a
chart of 15 minutes or of a day has at most `buckets` + 1 points per query (the span's ends
fall inside slices). A batch delivered twice counts twice, which leaves a mean as it is and
keeps the memory bounded.

The figures (`SERIES`), per batch: input and processed rows per second, the batch's duration,
the processing lag in records when it was planned (the records its sources had beyond what it
read) and in seconds (how long the oldest record it left waiting had waited when it started),
the latency of the records it read (`millrace.monitor.latency`: median and p99), the
watermark lag (newest event time read minus the watermark), state rows and memory, and the
rows dropped as late, dropped as duplicates and dead-lettered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

from millrace.bus.internal import METRICS_STREAM, read_after
from millrace.config.settings import Settings
from millrace.engine.checkpoint_log import records_waiting
from millrace.errors import StreamNotFoundError
from millrace.monitor.latency import Latency, recent_latency
from millrace.monitor.metrics_log import Batch, batch_of

CHUNK_RECORDS = 2_000
"""Metrics records read from the bus at a time."""
DEFAULT_BUCKETS = 120


def _lag_s(batch: Batch) -> float | None:
    """The batch's time minus the arrival of the oldest record it left waiting (0: none left)."""
    arrivals = batch.fields.get("oldest_waiting_arrival_ms")
    if not isinstance(arrivals, dict):
        # The lookup failed for this batch, or an older app's record does not carry it.
        return None
    oldest = min((int(ms) for ms in arrivals.values()), default=None)
    return 0.0 if oldest is None else max(0.0, (batch.time_ms - oldest) / 1000)


def _watermark_lag_s(batch: Batch) -> float | None:
    if batch.watermark_ms is None or batch.max_event_ms is None:
        return None
    return max(0.0, (batch.max_event_ms - batch.watermark_ms) / 1000)


def _latency_s(figure: Callable[[Latency], float]) -> Callable[[Batch], float | None]:
    def read(batch: Batch) -> float | None:
        latency = recent_latency([batch])
        return None if latency is None else figure(latency)

    return read


def _field(name: str, scale: float = 1.0) -> Callable[[Batch], float | None]:
    def read(batch: Batch) -> float | None:
        value = batch.fields.get(name)
        return float(value) * scale if isinstance(value, int | float) else None

    return read


SERIES: dict[str, tuple[str, Callable[[Batch], float | None]]] = {
    "input_rows_per_second": ("input rows/s", _field("input_rows_per_second")),
    "processed_rows_per_second": ("processed rows/s", _field("processed_rows_per_second")),
    "batch_duration_seconds": ("batch duration (s)", _field("batch_duration_ms", 0.001)),
    "lag_records": ("lag (records)", lambda batch: float(records_waiting(batch.sources))),
    "lag_seconds": ("lag (s)", _lag_s),
    "latency_median_seconds": ("latency, median (s)", _latency_s(attrgetter("median_s"))),
    "latency_p99_seconds": ("latency, p99 (s)", _latency_s(attrgetter("p99_s"))),
    "watermark_lag_seconds": ("watermark lag (s)", _watermark_lag_s),
    "state_rows": ("state rows", _field("state_rows")),
    "state_memory_bytes": ("state memory (bytes)", _field("state_memory_bytes")),
    "late_rows": ("late rows per batch", _field("late_rows")),
    "duplicate_rows": ("duplicates per batch", _field("duplicate_rows")),
    "dead_letter_rows": ("dead-lettered per batch", _field("dead_letter_rows")),
}
"""Each figure's name, its title, and how to read it from a batch (None: not known)."""


@dataclass
class AppHistory:
    """The chart series of one app over `[since_ms, until_ms]`.

    `series[figure][query]` is a list of `(time_ms, value)` points, oldest first; `batches`
    the number of the app's batches in the span.
    """

    app: str
    since_ms: int
    until_ms: int
    batches: int = 0
    series: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)


def app_history(
    settings: Settings,
    app: str,
    *,
    span_ms: int,
    until_ms: int | None = None,
    buckets: int = DEFAULT_BUCKETS,
) -> AppHistory:
    """The series of `app`'s batches in the `span_ms` before `until_ms` (now by default).

    An app with no batch in the span, or a bus with no metrics stream yet, gives empty series.
    """
    until_ms = until_ms or int(time.time() * 1000)
    since_ms = until_ms - span_ms
    width = max(1, span_ms // buckets)
    # (figure, query, slice) -> [sum of times, sum of values, batches]
    sums: dict[tuple[str, str, int], list[float]] = {}
    positions: dict[int, int] = {}
    batches = 0
    while True:
        try:
            records, positions = read_after(
                settings, METRICS_STREAM, positions, since_ms=since_ms, limit=CHUNK_RECORDS
            )
        except StreamNotFoundError:
            break
        for stamped in records:
            if stamped.record.value.get("app") != app:
                continue
            batch = batch_of(stamped.record.value)
            if batch is None or not since_ms <= batch.time_ms <= until_ms:
                continue
            batches += 1
            slot = batch.time_ms // width
            for figure, (_, value_of) in SERIES.items():
                value = value_of(batch)
                if value is None:
                    continue
                total = sums.setdefault((figure, batch.query, slot), [0.0, 0.0, 0])
                total[0] += batch.time_ms
                total[1] += value
                total[2] += 1
        if not records:
            # A read stops at its limit or at the bus's deadline: go on until nothing is left.
            break
    history = AppHistory(app, since_ms, until_ms, batches)
    for (figure, query, _), (times, values, count) in sorted(sums.items()):
        points = history.series.setdefault(figure, {}).setdefault(query, [])
        points.append((int(times / count), values / count))
    return history
