"""Publishing the progress of every micro-batch of every app to the `_millrace.metrics` stream.

`publish_metrics` installs, once per SparkSession, a query listener that turns each progress
event of an app's queries into one JSON record: the app, the query, the batch id and time,
input rows and rates, durations, the watermark, each Kafka source's offsets, state rows and
memory, rows dropped as late and rows dead-lettered, per input the progress of each bucket,
the bucket holding the input's low watermark back and the records dated too far ahead, and
when the oldest record the batch left waiting arrived on the bus (`OldestWaiting`). The
monitor (`millrace.monitor`) reads them back to compute lag and to evaluate alerts.

Spark calls listeners on a thread of its own after the micro-batch is done, so publishing
never holds up a batch; the producer queues records and returns. A bus that does not answer
never stops the app: failures are counted in `MetricsListener.failures` and logged, and
the bus is tried again 30 seconds later (the stream created again if it was missing).

Each record's id is `metrics:<run id>:<batch id>`, so a reader can drop a second copy.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import NotRequired, TypedDict

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    SourceProgress,
    StreamingQueryListener,
    StreamingQueryProgress,
)

from millrace.bus.internal import (
    METRICS_STREAM,
    StreamWatch,
    create_internal_stream,
    is_internal_stream,
)
from millrace.bus.publisher import Publisher
from millrace.bus.timeouts import bus_timeouts_at_most
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import kafka_offsets
from millrace.engine.low_watermark import INPUT_METRICS_PREFIX
from millrace.engine.session import add_listener
from millrace.errors import MillraceError
from millrace.records import format_time_ms

_log = logging.getLogger(__name__)
_OUTPUT_METRICS = "millrace.outputs."
"""Prefix of the observed metric (dead_letters, late) that `observe_outputs` adds."""

_RETRY_AFTER_S = 30.0
"""After a failure, records are counted as failed, without trying the bus, for this long."""
WAITING_LOOKUP_TIMEOUT_S = 2.0
"""The longest each wait for the bus of a batch's oldest-waiting lookup lasts."""


class SourceRecord(TypedDict):
    """One source of a metrics record: its rows read and, for Kafka, its offsets per stream.

    The offsets are `{stream: {bucket: offset}}`; a source other than Kafka has `{}`.
    """

    description: str
    input_rows: int
    start_offsets: dict[str, dict[str, int]]
    end_offsets: dict[str, dict[str, int]]
    latest_offsets: dict[str, dict[str, int]]


class InputRecord(TypedDict):
    """One input stream of a metrics record: its records dated ahead and its buckets' times.

    `max_event_ms` is the newest event time each bucket gave this batch; `arrivals` counts
    the records it read and `arrival_ms` holds when they arrived on the bus, as quantiles at
    `millrace.engine.arrival_quantiles.ARRIVAL_LEVELS` (None without a record), from which
    `millrace.monitor.latency` tells the app's latency. `InputProgress` adds `progress_ms`
    and `held_back_by`.
    """

    future_dated: int
    max_event_ms: dict[str, int]
    arrivals: int
    arrival_ms: list[int] | None
    progress_ms: NotRequired[dict[str, int]]
    held_back_by: NotRequired[str | None]


class MetricsRecord(TypedDict):
    """The record `metrics_record` makes of one progress event, as the metrics stream holds it.

    `OldestWaiting` adds `oldest_waiting_arrival_ms`.
    """

    time: str
    app: str
    query: str
    run_id: str
    batch_id: int
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    batch_duration_ms: int
    durations_ms: dict[str, int]
    watermark: str | None
    event_time: dict[str, str]
    sources: list[SourceRecord]
    state_rows: int
    state_memory_bytes: int
    late_rows: int
    duplicate_rows: int
    dead_letters: dict[str, int]
    dead_letter_rows: int
    inputs: dict[str, InputRecord]
    oldest_waiting_arrival_ms: NotRequired[dict[str, int] | None]


_listeners: dict[int, MetricsListener] = {}
_lock = threading.Lock()


def publish_metrics(spark: SparkSession, workspace: Workspace, app: str) -> MetricsListener:
    """Publish the progress of app `app`'s queries (named `<app>.<query>`) from now on.

    One listener per session serves every app that calls this; calling it again is cheap.
    """
    with _lock:
        listener = _listeners.get(id(spark))
        if listener is None:
            listener = MetricsListener(workspace)
            add_listener(spark, listener)
            _listeners[id(spark)] = listener
        listener.apps.add(app)
    return listener


def observe_outputs(
    spark: SparkSession, workspace: Workspace, app: str, outputs: DataFrame, kind: Column
) -> DataFrame:
    """`outputs`, counting its dead-letter and late rows per micro-batch; publishes metrics.

    For a processor app, whose operator's output rows say what they are in column `kind`
    (`dead_letter`, `late`, `duplicate` or a production): the counts go into the app's batch
    metrics.
    """
    publish_metrics(spark, workspace, app)
    return outputs.observe(
        f"{_OUTPUT_METRICS}{app}",
        F.count_if(kind == F.lit("dead_letter")).alias("dead_letters"),
        F.count_if(kind == F.lit("late")).alias("late"),
        F.count_if(kind == F.lit("duplicate")).alias("duplicates"),
    )


class MetricsListener(StreamingQueryListener):
    """Publishes one metrics record per progress event of the queries of `apps`."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.apps: set[str] = set()
        self.published = 0
        """Records handed to the producer."""
        self.failures = 0
        """Records that could not be published (bus down, stream missing, refused)."""
        self._publisher: Publisher | None = None
        self._inputs = InputProgress()
        self._waiting = OldestWaiting(workspace.settings)
        self._send_lock = threading.Lock()
        self._retry_at = 0.0

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's callback names
        """Nothing to publish before the first batch."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        """Publish the batch's record, if the query belongs to an app."""
        try:
            record = metrics_record(event.progress, self.apps)
        except Exception:
            # A progress event of an unexpected shape must not take the listener down.
            _log.exception("could not read a progress event for the metrics stream")
            self.failures += 1
            return
        if record is not None:
            self._inputs.follow(record)
            if time.monotonic() >= self._retry_at:
                # A bus that just failed would fail the lookup too, after its timeout.
                self._waiting.follow(record)
            self._send(record)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """An idle query ran no batch: nothing to publish."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Deliver what is queued, so a stopping app's last batches are not lost."""
        self._waiting.close()
        with self._send_lock:
            if self._publisher is not None:
                self._flush()

    def _send(self, record: MetricsRecord) -> None:
        with self._send_lock:
            if time.monotonic() < self._retry_at:
                # Spark's listeners share one event queue: waiting on a bus that just failed,
                # for every batch, would delay the other listeners' events.
                self.failures += 1
                return
            try:
                if self._publisher is None:
                    create_internal_stream(self.workspace.settings, METRICS_STREAM)
                    self._publisher = Publisher(
                        METRICS_STREAM, settings=self.workspace.settings, time_field="time"
                    )
                self._publisher.send(
                    record,
                    key=record["app"],
                    record_id=f"metrics:{record['run_id']}:{record['batch_id']}",
                )
                self.published += 1
            except MillraceError as error:
                # Earlier records the bus refused surface here: counted, and the publisher
                # made again, since its connection may be what failed.
                self.failures += 1 + _refused_count(error)
                self._publisher = None
                self._retry_at = time.monotonic() + _RETRY_AFTER_S
                _log.warning("metrics of %s not published: %s", record.get("query"), error)
            except Exception:
                self.failures += 1
                self._publisher = None
                self._retry_at = time.monotonic() + _RETRY_AFTER_S
                _log.exception("metrics of %s not published", record.get("query"))

    def _flush(self) -> None:
        assert self._publisher is not None
        try:
            self._publisher.flush()
        except MillraceError as error:
            self.failures += _refused_count(error)
            _log.warning("metrics not published: %s", error)


class InputProgress:
    """Each input's bucket progress over a run of a query, and the bucket holding it back.

    A bucket's progress is the largest event time read from it by this run of the query,
    or the largest watermark its writer's markers promised for a stream a millrace app
    writes (`millrace.bus.markers`); its watermark is that minus the input's lateness. The
    input's watermark is held back by the bucket with the least, or by a bucket the query
    reads and has read no record of, which holds it at its start. Feed it every metrics
    record of a run, in order.

    Example:
        >>> inputs = InputProgress()
        >>> clicks = {"max_event_ms": {"0": 5, "1": 3}}
        >>> record = {"run_id": "r", "sources": [], "inputs": {"clicks": clicks}}
        >>> inputs.follow(record)
        >>> record["inputs"]["clicks"]["held_back_by"]
        '1'
    """

    def __init__(self) -> None:
        self._progress: dict[tuple[str, str], dict[str, int]] = {}

    def follow(self, record: MetricsRecord) -> None:
        """Add `progress_ms` and `held_back_by` to each input of `record` (`metrics_record`)."""
        for stream, read in record["inputs"].items():
            progress = self._progress.setdefault((record["run_id"], stream), {})
            for bucket, time_ms in read["max_event_ms"].items():
                progress[bucket] = max(progress.get(bucket, time_ms), time_ms)
            buckets = {
                bucket
                for source in record["sources"]
                for bucket in (source["end_offsets"] or {}).get(stream, {})
            } | set(progress)
            unread = sorted(buckets - set(progress), key=int)
            read["progress_ms"] = dict(sorted(progress.items(), key=lambda item: int(item[0])))
            read["held_back_by"] = (
                unread[0] if unread else min(progress, key=progress.__getitem__, default=None)
            )


class OldestWaiting:
    """When the oldest record a batch left waiting in its inputs arrived on the bus.

    A batch reads each bucket up to its end offset; when the bucket had more (its latest
    offset is beyond that end), the record at the end offset is the first left waiting, and
    its append time, Kafka's timestamp, is when it arrived (a watermark marker's arrival
    counts as a record's). `follow` sets the metrics record's `oldest_waiting_arrival_ms`:
    per input stream with records waiting, the least arrival over its buckets; `{}` when the
    batch read everything, with no lookup. Internal streams, such as an app's ticks, are left
    out.

    The lookup runs on the driver, after the batch, over one bus connection per stream kept
    from batch to batch: no work per record in the query. Each wait for the bus lasts at
    most `timeout_s`; a lookup that fails, or a bucket whose record did not come or that
    retention removed, leaves the field None for that batch, and the app goes on.

    Example:
        >>> from millrace.config.settings import Settings
        >>> read = {"end_offsets": {"clicks": {"0": 9}}, "latest_offsets": {"clicks": {"0": 9}}}
        >>> record = {"sources": [read]}
        >>> OldestWaiting(Settings()).follow(record)  # read to its end: nothing to look up
        >>> record["oldest_waiting_arrival_ms"]
        {}
    """

    def __init__(self, settings: Settings, *, timeout_s: float = WAITING_LOOKUP_TIMEOUT_S) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._watches: dict[str, StreamWatch] = {}

    def follow(self, record: MetricsRecord) -> None:
        """Add `oldest_waiting_arrival_ms` to `record` (`metrics_record`)."""
        waiting = _first_waiting_offsets(record["sources"])
        record["oldest_waiting_arrival_ms"] = self._arrivals(waiting) if waiting else {}

    def close(self) -> None:
        """Let go of the bus connections; the next lookup opens them again."""
        watches, self._watches = self._watches, {}
        for watch in watches.values():
            watch.close()

    def _arrivals(self, waiting: dict[str, dict[int, int]]) -> dict[str, int] | None:
        arrivals: dict[str, int] = {}
        try:
            with bus_timeouts_at_most(self.timeout_s):
                for stream, offsets in sorted(waiting.items()):
                    watch = self._watches.get(stream)
                    if watch is None:
                        watch = self._watches[stream] = StreamWatch(self.settings, stream)
                    found = watch.append_times_at(offsets)
                    if set(found) != set(offsets):
                        return None
                    arrivals[stream] = min(found.values())
        except MillraceError as error:
            # A connection that failed is made again for the next batch.
            self.close()
            _log.warning("oldest waiting records of %s not looked up: %s", sorted(waiting), error)
            return None
        except Exception:
            self.close()
            _log.exception("oldest waiting records of %s not looked up", sorted(waiting))
            return None
        return arrivals


def _first_waiting_offsets(sources: list[SourceRecord]) -> dict[str, dict[int, int]]:
    """Per input stream, the offset of the first record each bucket left waiting, if any."""
    waiting: dict[str, dict[int, int]] = {}
    for source in sources:
        for stream, latest in source["latest_offsets"].items():
            if is_internal_stream(stream):
                continue
            ended = source["end_offsets"].get(stream, {})
            for bucket, offset in latest.items():
                end = ended.get(bucket)
                if end is not None and offset > end:
                    waiting.setdefault(stream, {})[int(bucket)] = end
    return waiting


def metrics_record(progress: StreamingQueryProgress, apps: set[str]) -> MetricsRecord | None:
    """The metrics record of one `StreamingQueryProgress`, or None for a query of no app.

    A query belongs to the app its name starts with (`<app>.<query>`), the longest such.
    """
    name = progress.name or ""
    owners = [app for app in apps if name.startswith(app + ".")]
    if not owners:
        return None
    app = max(owners, key=len)
    observed = progress.observedMetrics or {}
    dead_letters: dict[str, int] = {}
    inputs: dict[str, InputRecord] = {}
    markers = 0
    for metric, row in observed.items():
        if metric.startswith(INPUT_METRICS_PREFIX + app + "."):
            stream = metric.removeprefix(INPUT_METRICS_PREFIX + app + ".")
            dead_letters[stream] = dead_letters.get(stream, 0) + int(row["bad"])
            read = inputs[stream] = {
                "future_dated": int(row["future"]),
                "max_event_ms": {},
                "arrivals": int(row["arrivals"]),
                "arrival_ms": [int(ms) for ms in row["arrival_ms"]] if row["arrival_ms"] else None,
            }
            markers += int(row["markers"])
            for bucket, time_ms in (row["max_ms"] or {}).items():
                if time_ms is not None:
                    read["max_event_ms"][str(bucket)] = int(time_ms)
    late_rows = sum(operator.numRowsDroppedByWatermark for operator in progress.stateOperators)
    # A SQL app's copies are dropped by Spark's deduplication operator, a processor's by its
    # execution core (the `duplicate` rows of its output).
    duplicate_rows = sum(
        int((operator.customMetrics or {}).get("numDroppedDuplicateRows", 0))
        for operator in progress.stateOperators
    )
    outputs = observed.get(f"{_OUTPUT_METRICS}{app}")
    if outputs is not None:
        dead_letters["*"] = int(outputs["dead_letters"])
        late_rows += int(outputs["late"])
        duplicate_rows += int(outputs["duplicates"])
    event_time = dict(progress.eventTime or {})
    newest = max(
        (ms for read in inputs.values() for ms in read["max_event_ms"].values()), default=None
    )
    if newest is not None:
        # Spark reports the figures of one watermark operator only, here one bucket's: the
        # buckets' own maxima tell the newest event time read.
        event_time["max"] = format_time_ms(newest)
    return {
        "time": progress.timestamp,
        "app": app,
        "query": name,
        "run_id": str(progress.runId),
        "batch_id": progress.batchId,
        # Watermark markers are no records (`millrace.bus.markers`).
        "input_rows": progress.numInputRows - markers,
        "input_rows_per_second": _number(progress.inputRowsPerSecond),
        "processed_rows_per_second": _number(progress.processedRowsPerSecond),
        "batch_duration_ms": progress.batchDuration,
        "durations_ms": dict(progress.durationMs or {}),
        "watermark": _time_or_none(event_time.get("watermark")),
        "event_time": {k: v for k, v in event_time.items() if k != "watermark"},
        "sources": [_source(source) for source in progress.sources],
        "state_rows": sum(operator.numRowsTotal for operator in progress.stateOperators),
        "state_memory_bytes": sum(operator.memoryUsedBytes for operator in progress.stateOperators),
        "late_rows": late_rows,
        "duplicate_rows": duplicate_rows,
        "dead_letters": dead_letters,
        "dead_letter_rows": sum(dead_letters.values()),
        "inputs": inputs,
    }


def _source(source: SourceProgress) -> SourceRecord:
    return {
        "description": source.description,
        "input_rows": source.numInputRows,
        "start_offsets": _kafka_offsets(source.startOffset),
        "end_offsets": _kafka_offsets(source.endOffset),
        "latest_offsets": _kafka_offsets(source.latestOffset),
    }


def _kafka_offsets(text: str | None) -> dict[str, dict[str, int]]:
    """`{stream: {bucket: offset}}` of a Kafka source's offsets, the buckets as JSON keeps them.

    {} for other sources (`millrace.engine.checkpoint_log.kafka_offsets` reads them).
    """
    return {
        stream: {str(bucket): offset for bucket, offset in buckets.items()}
        for stream, buckets in kafka_offsets(text).items()
    }


def _number(value: float | None) -> float:
    # Spark reports NaN for the rate of the first batch, which JSON cannot hold.
    return 0.0 if value is None or value != value else float(value)


def _time_or_none(text: str | None) -> str | None:
    # Spark's watermark is the epoch until an input has seen a record: that is no watermark.
    return None if not text or text.startswith("1970-01-01T00:00:00") else text


def _refused_count(error: MillraceError) -> int:
    words = error.message.split()
    return int(words[0]) if words and words[0].isdigit() else 0
