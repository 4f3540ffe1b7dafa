"""Each app's status: processing lag per input, watermark lag, rates and its last batch.

Definitions (docs/monitoring.md shows them with examples):

- processing lag in records, per input stream: the stream's end offsets minus the offsets
  the app has committed, summed over the buckets. An app with several queries reading one
  stream counts its slowest query. Committed offsets come from the app's checkpoints, and
  from its published batches when a checkpoint is not readable.
- processing lag in seconds, per input: in the bucket furthest behind, the append time of
  the newest record minus that of the last record the app has processed (0 when caught up).
- watermark lag: the newest event time the app has read minus its watermark (the smallest
  over its queries). `watermark_age_s` is the wall clock minus the watermark.
- latency: from a record's arrival on the bus to the end of the batch that read it, median
  and 99th percentile over the records of the last minute's batches (`millrace.monitor.latency`).
- what the app costs: `batches_last_minute`, the micro-batches its queries ran in the last
  minute (from its published batches), and `driver_cpu`, the CPU seconds its driver's
  process tree used in the last minute, as the driver records it (`millrace.ops.driver_cpu`;
  None for an app whose driver does not run here now).
- output watermark and watermark behind source: what the pipeline of apps says of the app
  (`millrace.monitor.pipeline`), filled in by the monitor once it has every app's status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from millrace.bus.internal import append_times_at, end_offsets, is_internal_stream
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import Offsets
from millrace.errors import StreamNotFoundError
from millrace.monitor.latency import Latency, recent_latency
from millrace.monitor.metrics_log import Batch, MetricsLog
from millrace.ops.checkpoints import QueryCheckpoint, app_checkpoints
from millrace.ops.driver_cpu import DriverCpu, last_minute

RATE_WINDOW_MS = 60_000
"""Input rates are averaged over the batches of the last minute, which are counted too."""
BUSY_MS = 60_000
"""An app with a batch in the last minute is `processing`."""


@dataclass(frozen=True)
class InputLag:
    """How far behind one input stream an app is."""

    stream: str
    end_offsets: dict[int, int]
    committed_offsets: dict[int, int]
    lag_records: int
    lag_seconds: float


@dataclass(frozen=True)
class InputWatermark:
    """One input's low watermark as the app's latest batches tell it.

    `progress_ms` is each bucket's largest event time read (by bucket number, as text);
    `held_back_by` the bucket with the least, which holds the input's watermark back (or one
    the app has read no record of); `future_dated` the records dated too far ahead of their
    arrival in the recent batches, which went to the dead-letter stream.
    """

    stream: str
    progress_ms: dict[str, int]
    held_back_by: str | None
    future_dated: int


@dataclass(frozen=True)
class AppStatus:
    """One app's progress and lag, as the monitor sees it.

    `activity` is `processing` (a batch in the last minute), `stalled` (no batch in the last
    minute, records waiting) or `idle` (caught up); whether the process runs is the
    registry's to say.
    """

    name: str
    queries: list[str]
    inputs: list[InputLag]
    activity: str
    last_batch_id: int | None = None
    last_batch_ms: int | None = None
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    watermark_ms: int | None = None
    max_event_ms: int | None = None
    state_rows: int = 0
    state_memory_bytes: int = 0
    recent_input_rows: int = 0
    recent_late_rows: int = 0
    recent_duplicate_rows: int = 0
    recent_dead_letter_rows: int = 0
    watermarks: list[InputWatermark] = field(default_factory=list)
    batches_last_minute: int = 0
    """Micro-batches the app's queries ran in the last minute, all queries together."""
    driver_cpu: DriverCpu | None = None
    """The CPU the app's driver used in the last minute; None when no driver records it."""
    latency: Latency | None = None
    """The latency of the records the last minute's batches read; None when they read none."""
    output_watermark_ms: int | None = None
    """The least, over the streams the app writes, of the newest watermark it published."""
    sources: list[str] = field(default_factory=list)
    """The apps at the start of the pipeline feeding this app (itself when it is one)."""
    watermark_behind_source_seconds: float | None = None
    """The least watermark of the app's sources minus its own, in seconds (0 for a source)."""

    @property
    def lag_records(self) -> int:
        """Records waiting, over all inputs."""
        return sum(lag.lag_records for lag in self.inputs)

    @property
    def lag_seconds(self) -> float:
        """Seconds behind, in the input furthest behind."""
        return max((lag.lag_seconds for lag in self.inputs), default=0.0)

    @property
    def watermark_lag_seconds(self) -> float | None:
        """The newest event time read minus the watermark, in seconds."""
        if self.watermark_ms is None or self.max_event_ms is None:
            return None
        return max(0.0, (self.max_event_ms - self.watermark_ms) / 1000)

    def watermark_age_seconds(self, now_ms: int) -> float | None:
        """The wall clock minus the watermark, in seconds."""
        return None if self.watermark_ms is None else (now_ms - self.watermark_ms) / 1000

    def dead_letter_ratio(self, batches: list[Batch]) -> float:
        """Dead-lettered rows per input row in `batches` (0 without input)."""
        return _per_input_row(batches, "dead_letter_rows")

    def late_ratio(self, batches: list[Batch]) -> float:
        """Rows dropped (or set aside) as late per input row in `batches` (0 without input)."""
        return _per_input_row(batches, "late_rows")


def _per_input_row(batches: list[Batch], field: str) -> float:
    rows = sum(int(batch.fields.get("input_rows", 0)) for batch in batches)
    counted = sum(int(batch.fields.get(field, 0)) for batch in batches)
    return counted / rows if rows else 0.0


def app_status(
    workspace: Workspace, app: str, metrics: MetricsLog, *, now_ms: int | None = None
) -> AppStatus:
    """The status of `app`, from its checkpoints, its published batches and the inputs' ends."""
    now_ms = now_ms or int(time.time() * 1000)
    checkpoints = app_checkpoints(workspace, app)
    latest = metrics.latest(app)
    committed: dict[str, list[Offsets]] = {}
    for checkpoint in checkpoints:
        for stream, offsets in checkpoint.offsets.items():
            committed.setdefault(stream, []).append(offsets)
    checkpointed = {checkpoint.query for checkpoint in checkpoints if checkpoint.offsets}
    for batch in latest.values():
        # A query whose checkpoint is elsewhere (or unreadable) counts from its batches.
        if batch.query.removeprefix(app + ".") in checkpointed:
            continue
        # The query's offsets of a stream, over all its sources.
        reached: dict[str, Offsets] = {}
        for source in batch.fields.get("sources", []):
            for stream, offsets in (source.get("end_offsets") or {}).items():
                reached.setdefault(stream, {}).update(
                    {int(bucket): int(offset) for bucket, offset in offsets.items()}
                )
        for stream, offsets in reached.items():
            committed.setdefault(stream, []).append(offsets)
    lags = [
        _input_lag(workspace, stream, offsets)
        for stream, offsets in sorted(committed.items())
        if not is_internal_stream(stream)
    ]
    inputs = [lag for lag in lags if lag is not None]
    recent = metrics.batches(app)
    last = max(recent, key=lambda batch: (batch.time_ms, batch.batch_id), default=None)
    last_ms = max(
        [batch.time_ms for batch in recent]
        + [c.committed_ms for c in checkpoints if c.committed_ms is not None],
        default=None,
    )
    in_window = [batch for batch in recent if batch.time_ms >= now_ms - RATE_WINDOW_MS]
    watermarks = [b.watermark_ms for b in latest.values() if b.watermark_ms is not None]
    event_times = [b.max_event_ms for b in recent if b.max_event_ms is not None]
    lag_records = sum(lag.lag_records for lag in inputs)
    if last_ms is not None and now_ms - last_ms <= BUSY_MS:
        activity = "processing"
    elif lag_records > 0:
        activity = "stalled"
    else:
        activity = "idle"
    return AppStatus(
        name=app,
        queries=sorted(
            {c.query for c in checkpoints} | {q.removeprefix(app + ".") for q in latest}
        ),
        inputs=inputs,
        activity=activity,
        last_batch_id=last.batch_id if last else _last_checkpoint_batch(checkpoints),
        last_batch_ms=last_ms,
        input_rows_per_second=sum(
            _rate(in_window, query, "input_rows_per_second") for query in latest
        ),
        processed_rows_per_second=sum(
            _rate(in_window, query, "processed_rows_per_second") for query in latest
        ),
        watermark_ms=min(watermarks) if watermarks else None,
        max_event_ms=max(event_times) if event_times else None,
        state_rows=sum(int(b.fields.get("state_rows", 0)) for b in latest.values()),
        state_memory_bytes=sum(int(b.fields.get("state_memory_bytes", 0)) for b in latest.values()),
        recent_input_rows=sum(int(b.fields.get("input_rows", 0)) for b in recent),
        recent_late_rows=sum(int(b.fields.get("late_rows", 0)) for b in recent),
        recent_duplicate_rows=sum(int(b.fields.get("duplicate_rows", 0)) for b in recent),
        recent_dead_letter_rows=sum(int(b.fields.get("dead_letter_rows", 0)) for b in recent),
        watermarks=_input_watermarks(list(latest.values()), recent),
        batches_last_minute=len(in_window),
        driver_cpu=last_minute(workspace, app, now_ms=now_ms),
        latency=recent_latency(in_window),
    )


def _input_watermarks(latest: list[Batch], recent: list[Batch]) -> list[InputWatermark]:
    """Each input's bucket progress, from the query whose held-back bucket is furthest behind."""
    found: dict[str, InputWatermark] = {}
    for batch in latest:
        for stream, read in (batch.fields.get("inputs") or {}).items():
            progress = {b: int(ms) for b, ms in (read.get("progress_ms") or {}).items()}
            holder = read.get("held_back_by")
            future = sum(
                int(((b.fields.get("inputs") or {}).get(stream) or {}).get("future_dated", 0))
                for b in recent
                if b.query == batch.query
            )
            candidate = InputWatermark(stream, progress, holder, future)
            known = found.get(stream)
            if known is None or _held_ms(candidate) < _held_ms(known):
                found[stream] = candidate
    return [found[stream] for stream in sorted(found)]


def _held_ms(watermark: InputWatermark) -> int:
    """The progress of the bucket holding `watermark` back (-1 for a bucket not read yet)."""
    if watermark.held_back_by is None:
        return 2**62
    return watermark.progress_ms.get(watermark.held_back_by, -1)


def _last_checkpoint_batch(checkpoints: list[QueryCheckpoint]) -> int | None:
    batches = [c.batch_id for c in checkpoints if c.batch_id is not None]
    return max(batches) if batches else None


def _rate(batches: list[Batch], query: str, name: str) -> float:
    """The mean rate of `query`'s batches in the window (0 without one)."""
    rates = [float(b.fields.get(name, 0.0)) for b in batches if b.query == query]
    return sum(rates) / len(rates) if rates else 0.0


def _input_lag(workspace: Workspace, stream: str, committed: list[Offsets]) -> InputLag | None:
    settings = workspace.settings
    try:
        ends = end_offsets(settings, stream)
    except StreamNotFoundError:
        return None
    # The slowest query of the app decides, bucket by bucket; a bucket no query has reached
    # yet counts from offset 0 (the records retention removed are not waiting).
    slowest = {bucket: min(offsets.get(bucket, 0) for offsets in committed) for bucket in ends}
    behind = {bucket: max(0, end - slowest[bucket]) for bucket, end in ends.items()}
    lag_records = sum(behind.values())
    lag_seconds = 0.0
    waiting = [bucket for bucket, count in behind.items() if count > 0]
    if waiting:
        newest = append_times_at(settings, stream, {b: ends[b] - 1 for b in waiting})
        processed = append_times_at(settings, stream, {b: max(0, slowest[b] - 1) for b in waiting})
        lag_seconds = max(
            (
                max(0.0, (newest[b] - processed[b]) / 1000)
                for b in waiting
                if b in newest and b in processed
            ),
            default=0.0,
        )
    return InputLag(stream, ends, slowest, lag_records, lag_seconds)
