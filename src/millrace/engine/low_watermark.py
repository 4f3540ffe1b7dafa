"""An input's low watermark: the least over its buckets, and idle buckets ticked forward.

Spark's watermark operator keeps the largest event time of all the rows it sees, minus the
delay. A stream read by one Kafka source would therefore get the largest event time over all
its buckets: a bucket read ahead of the others (a skewed backlog read in capped micro-batches,
a producer whose clock runs ahead) would move the watermark past the other buckets' records,
which would then be dropped as late. MillWheel's low watermark (section 5.4 of its paper) is
instead the oldest work not yet done.

millrace reads every bucket of an input with one Kafka source (`read_input`) and puts one
watermark operator on it (`low_watermarked`), planned by millrace's Spark extension
(`jvm/spark-extensions`, `LowWatermarkExec`) as Spark's operator whose statistics keep each
bucket's largest event time and report the least: so an input's watermark is the least over
its buckets of each bucket's largest event time minus the lateness, and none until every
bucket has been read. Spark's watermark tracking, its checkpoint and its stateful operators
take it as any watermark; an app of several inputs gets the least of theirs
(`spark.sql.streaming.multipleWatermarkPolicy=min`, Spark's default). The extension keeps
the buckets' progress in the driver for a run of a query: a query restarted from its
checkpoint starts from the watermark the checkpoint holds and moves it on again once every
bucket has been read or ticked. A bucket added to the stream while a query runs is read,
and holds no watermark back.

A bucket that has nothing left to read would hold that least value back for ever, and a
quiet input would close no window. `IdleTicker` follows the app's queries from the driver:
once every query reading the stream has read a bucket to its end, and the bucket's last
record arrived `idle_timeout` ago or more, it publishes a tick for the bucket to the app's
tick stream (`tick_stream`): the bucket's progress as the wall clock carries it on from the
bucket's last record, at that record's delay between event time and arrival time (so a
stream of records dated days ago is ticked days ago). A bucket that never had a record is
ticked with the most advanced of the other buckets. The app reads its tick stream as one more
Kafka source, and `low_watermarked` feeds each tick to its bucket's progress before
dropping it, so no query ever sees a tick as a record. A tick is valid only for the
offsets it was computed from; the ticker waits while any of the app's queries has not yet
reported where it is, and ticks no bucket that one of them has not read to its end. For the
same reason a run of the app takes only its own ticks (`Ticks.run`): a query restarted from
its checkpoint, or rolled back to an earlier batch, re-reads the ticks of the runs before it,
which were computed from offsets it may not have read again yet.

A stream a millrace app writes carries that app's watermark markers
(`millrace.engine.output_watermark`): `low_watermarked` feeds a marker's promise to its
bucket's progress, and the records the app wrote nothing, since their order within
one of the writer's micro-batches says nothing of its progress. The ticker leaves such
buckets alone: the writer's markers bring its own idle advance.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.listener import StreamingQueryProgress

from millrace.bus.internal import InternalWriter, StreamWatch, create_internal_stream
from millrace.bus.markers import WATERMARK_HEADER, WRITER_HEADER
from millrace.config.workspace import Workspace
from millrace.engine import kafka
from millrace.engine.arrival_quantiles import ARRIVAL_ACCURACY, ARRIVAL_LEVELS
from millrace.engine.checkpoint_log import stream_offsets
from millrace.engine.headers import has_header, header_text
from millrace.engine.kafka import StartingOffsets
from millrace.engine.progress import app_progresses, watch
from millrace.records import format_time_ms

TICK_EVERY_S = 1.0
"""How often an `IdleTicker` looks at its stream, and so the most often it ticks a bucket."""

_TICK = "_millrace_tick"
_TIME = "_millrace_time"
_DELAY_KEY = "spark.watermarkDelayMs"
# The metadata key by which millrace's Spark extension finds the bucket column of a watermark
# (dev.millrace.spark.LowWatermark.BucketsKey).
_BUCKETS_KEY = "millrace.buckets"
_BUCKET_OF_WATERMARK = "_millrace_watermark_bucket"
_BUCKET_MAXIMA = "millrace_bucket_maxima"
_TICK_SCHEMA = "app STRING, stream STRING, run STRING, bucket INT, time_ms LONG"
_TICK_RETENTION_MS = 86_400_000
_log = logging.getLogger(__name__)


def tick_stream(app: str) -> str:
    """The internal stream that app `app`'s idle ticks go to.

    Example:
        >>> tick_stream("TopEvents")
        '_millrace.ticks.topevents'
    """
    return f"_millrace.ticks.{app.lower()}"


def input_metrics_name(app: str, stream: str) -> str:
    """The name of the observed metrics of input `stream` of app `app`.

    Its fields: `bad` counts the records of a micro-batch that go to the dead-letter stream,
    `future` those of them dated too far ahead, `markers` the watermark markers read, and
    `max_ms` maps each bucket read in the micro-batch (its number as text) to the largest
    event time read from it: the bucket's progress, from which
    `millrace.engine.metrics` tells which bucket holds the input's watermark back.
    `arrivals` counts the records read (markers left out) and `arrival_ms` holds when they
    arrived on the bus, as quantiles at `ARRIVAL_LEVELS` (null without a record), from which
    `millrace.monitor.latency` tells the app's latency.

    Example:
        >>> input_metrics_name("demo", "clicks")
        'millrace.input.demo.clicks'
    """
    return f"{INPUT_METRICS_PREFIX}{app}.{stream}"


INPUT_METRICS_PREFIX = "millrace.input."
"""What the names of `input_metrics_name` start with."""


def read_input(
    spark: SparkSession,
    workspace: Workspace,
    stream: str,
    *,
    starting_offsets: StartingOffsets = "earliest",
    max_records_per_batch: int | None = None,
) -> DataFrame:
    """Every bucket of `stream` as one streaming DataFrame of Kafka records (one source).

    `max_records_per_batch` caps what each micro-batch reads over all the buckets; Spark
    shares it among them by what each has waiting. The caller has asked
    `millrace.bus.streams.require_stream` for the stream's bucket count, which
    `low_watermarked` takes.
    """
    return kafka.read_stream(
        spark,
        workspace.settings,
        stream,
        starting_offsets=starting_offsets,
        max_records_per_batch=max_records_per_batch,
    )


def read_control_stream(
    spark: SparkSession, workspace: Workspace, topic: str, *, retention_ms: int
) -> DataFrame:
    """An app's internal control stream (idle ticks, processor wake-ups), from its end now.

    The stream is created with `retention_ms` unless it exists. A new query starts after the
    records there are; one restarted from its checkpoint reads on from there. A record the
    retention removed before it was read is skipped: a tick or a wake-up is sent again when
    still due.
    """
    create_internal_stream(workspace.settings, topic, retention_ms=retention_ms)
    return kafka.read_stream(
        spark,
        workspace.settings,
        topic,
        starting_offsets="latest",
        fail_on_data_loss=False,
        headers=False,
    )


@dataclass(frozen=True)
class Ticks:
    """The idle ticks of one input of an app, as one run of the app reads them.

    `frame` holds `bucket` and `time_ms` of each tick of run `run`, which is what an
    `IdleTicker` of the same run publishes.
    """

    frame: DataFrame
    run: str


def read_ticks(spark: SparkSession, workspace: Workspace, app: str, stream: str) -> Ticks:
    """The idle ticks of `stream` for this run of app `app`, from now on."""
    raw = read_control_stream(spark, workspace, tick_stream(app), retention_ms=_TICK_RETENTION_MS)
    tick = F.from_json(F.col("value").cast("string"), _TICK_SCHEMA)
    run = uuid.uuid4().hex
    # Earlier runs' ticks, read again after a restart or a rollback, held for other offsets.
    frame = (
        raw.select(tick.alias("tick"))
        .where(
            (F.col("tick.app") == app)
            & (F.col("tick.stream") == stream)
            & (F.col("tick.run") == run)
        )
        .select("tick.bucket", "tick.time_ms")
    )
    return Ticks(frame, run)


def marker_columns(value: Column, headers: Column) -> list[Column]:
    """The columns `low_watermarked` tells markers and app-written records by.

    `MARKER_MS` is a watermark marker's promise (`millrace.bus.markers`), NULL for a record;
    `WRITTEN` whether a millrace app wrote the record or marker. `value` and `headers` are
    the Kafka record's columns.
    """
    promised = header_text(headers, WATERMARK_HEADER).try_cast("long")
    empty = value.isNull() | (F.length(value) == 0)
    return [
        F.when(empty, promised).alias(MARKER_MS),
        has_header(headers, WRITER_HEADER).alias(WRITTEN),
    ]


def observed_input(
    records: DataFrame,
    app: str,
    stream: str,
    *,
    bad: Column,
    future: Column,
    time_ms: Column,
    arrival_ms: Column,
) -> DataFrame:
    """An input's `records`, observed under `input_metrics_name`: what each micro-batch read.

    `bad` says which rows go to the dead-letter stream, `future` which of those are dated
    too far ahead, `time_ms` a record's event time and `arrival_ms` its append time on the
    bus (epoch ms). The rows have the `marker_columns` and `record_bucket`: a marker moves
    its bucket's progress to its promise, a record no millrace app wrote to its event time
    (`max_ms`, per bucket).
    """
    progress_ms = F.when(F.col(MARKER_MS).isNotNull(), F.col(MARKER_MS)).when(
        ~F.col(WRITTEN), time_ms
    )
    record_arrival_ms = F.when(F.col(MARKER_MS).isNull(), arrival_ms)
    return records.observe(
        input_metrics_name(app, stream),
        F.count_if(bad).alias("bad"),
        F.count_if(future).alias("future"),
        # millrace's Spark extension (`BucketMaxima`): one slot per row, whatever the count.
        F.call_function(_BUCKET_MAXIMA, F.col(BUCKET), progress_ms).alias("max_ms"),
        F.count(MARKER_MS).alias("markers"),
        F.count(record_arrival_ms).alias("arrivals"),
        F.percentile_approx(
            record_arrival_ms,
            F.array(*[F.lit(level) for level in ARRIVAL_LEVELS]),
            ARRIVAL_ACCURACY,
        ).alias("arrival_ms"),
    )


MARKER_MS = "_millrace_marker_ms"
"""The column of `marker_columns` holding a marker's watermark (epoch ms)."""
WRITTEN = "_millrace_written"
"""The column of `marker_columns` saying whether a millrace app wrote the row."""
BUCKET = "record_bucket"
"""The column holding a record's bucket, by which `low_watermarked` keeps each one's progress."""


def low_watermarked(
    records: DataFrame,
    *,
    time: str,
    lateness_ms: int,
    buckets: int,
    ticks: Ticks | None = None,
) -> DataFrame:
    """An input's `records` under its low watermark, moved on by the input's ticks.

    `time` is the TIMESTAMP column the watermark follows, `buckets` the input's bucket count
    (the `BUCKET` column says each record's). The watermark is the least over the buckets of
    each one's largest event time, minus `lateness_ms`, and none until every bucket has been
    read or ticked (millrace's Spark extension, `LowWatermarkExec`). `ticks` (from
    `read_ticks`) feed each tick's time to its bucket, and are dropped after it.

    When `records` has the `marker_columns`, its markers feed their bucket their promise and
    are dropped after it, and the records an app wrote feed it nothing: their writer's
    markers tell the bucket's progress, so their own times, which a micro-batch of the writer
    leaves in any order, move no watermark. Such records still keep their times, and are
    late when they come at or behind the watermark.
    """
    delay = f"{lateness_ms} milliseconds"
    marked = MARKER_MS in records.columns
    staged = records.withColumn(_TICK, F.lit(None).cast("boolean")).withColumn(
        _BUCKET_OF_WATERMARK, F.col(BUCKET)
    )
    if marked:
        staged = staged.withColumn(_TIME, F.col(time)).withColumn(
            time,
            F.when(F.col(MARKER_MS).isNotNull(), F.timestamp_millis(MARKER_MS))
            .when(~F.col(WRITTEN), F.col(time))
            .cast("timestamp"),
        )
    if ticks is not None:
        as_records = ticks.frame.select(
            *[
                (
                    F.timestamp_millis("time_ms").alias(name)
                    if name == time
                    else F.lit(True).alias(name)
                    if name == _TICK
                    else F.col("bucket").cast(kind).alias(name)
                    if name == _BUCKET_OF_WATERMARK
                    else F.lit(None).cast(kind).alias(name)
                )
                for name, kind in staged.dtypes
            ]
        )
        staged = staged.unionByName(as_records)
    staged = staged.withMetadata(_BUCKET_OF_WATERMARK, {_BUCKETS_KEY: buckets})
    # One condition naming the event-time column and the bucket: Spark keeps it above the
    # watermark operator rather than pushing it below, where the ticks would never reach the
    # operator, and keeps the bucket column below it, where the operator reads it.
    kept = F.col(_TICK).isNull() & (F.col(MARKER_MS).isNull() if marked else F.lit(True))
    kept = (kept & (F.col(_BUCKET_OF_WATERMARK) >= 0)) | F.col(time).isNull()
    watermarked = staged.withWatermark(time, delay).where(kept).drop(_TICK, _BUCKET_OF_WATERMARK)
    if not marked:
        return watermarked
    # The records get their own times back, marked as the watermark's column (Spark finds it
    # by this metadata), so that windows and deduplication downstream follow the watermark.
    return watermarked.select(
        *[
            F.col(_TIME).alias(time, metadata={_DELAY_KEY: lateness_ms})
            if name == time
            else F.col(name)
            for name in records.columns
            if name not in (MARKER_MS, WRITTEN)
        ]
    )


class IdleTicker:
    """Ticks the idle buckets of `stream` for the queries of app `app` (see the module).

    `run` is the run whose ticks the queries read (`Ticks.run`). `time_of` reads a record's
    event time from its value, its arrival time and the time its `time` header carries (epoch
    ms, or None when it has none that counts).
    A tick costs the app a micro-batch, so the ticker ticks only while one can matter: while
    a query reading the stream holds state (a window to close, ids to forget), or always when
    `publishes_markers` (the app's readers wait on its watermark, whatever its own state).
    The ticker runs on a thread of its own until `close`.
    """

    def __init__(
        self,
        spark: SparkSession,
        workspace: Workspace,
        app: str,
        stream: str,
        *,
        run: str,
        time_of: Callable[[Mapping[str, object], int, int | None], int | None],
        idle_timeout_ms: int,
        publishes_markers: bool = True,
        every_s: float = TICK_EVERY_S,
    ) -> None:
        self.workspace = workspace
        self.app = app
        self.stream = stream
        self.run = run
        self.idle_timeout_ms = idle_timeout_ms
        self.publishes_markers = publishes_markers
        self.ticked: dict[int, int] = {}
        """The last tick published for each bucket (epoch ms)."""
        self._time_of = time_of
        self._every_s = every_s
        self._started_ms = _now_ms()
        self._looked_at: dict[int, int] = {}
        self._ticks_end: int | None = None
        self._last: dict[int, tuple[int, int] | None] = {}
        self._written: set[int] = set()
        self._writer: InternalWriter | None = None
        self._watch = StreamWatch(workspace.settings, stream)
        watch(spark)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"idle-ticks-{stream}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop ticking."""
        self._closed.set()
        self._thread.join(timeout=10)
        if self._writer is not None:
            self._writer.close()
        self._watch.close()

    def _run(self) -> None:
        while not self._closed.wait(self._every_s):
            try:
                self.tick(_now_ms())
            except Exception:
                # The next round tries again; a missed tick only delays a window.
                _log.exception("ticking the idle buckets of %s failed", self.stream)

    def tick(self, now_ms: int) -> dict[int, int]:
        """Publish the ticks due at `now_ms`; the ticks published, by bucket."""
        progresses = self._progresses()
        if progresses is None:
            return {}
        read = self._read_offsets(progresses)
        if not read or not (self.publishes_markers or _holds_state(progresses)):
            return {}
        ends = self._watch.end_offsets()
        lasts = self._last_records(ends)
        progress = {
            bucket: time_ms + (now_ms - arrival_ms)
            for bucket, (time_ms, arrival_ms) in lasts.items()
        }
        ticks = {}
        for bucket, end in ends.items():
            if read.get(bucket, -1) < end or bucket in self._written:
                continue
            last = lasts.get(bucket)
            if last is not None:
                if now_ms - last[1] < self.idle_timeout_ms:
                    continue
                time_ms = progress[bucket]
            elif progress and now_ms - self._started_ms >= self.idle_timeout_ms:
                time_ms = max(progress.values())
            else:
                continue
            if time_ms > self.ticked.get(bucket, -(2**62)):
                ticks[bucket] = time_ms
        if ticks:
            self._publish(ticks)
        return ticks

    def _progresses(self) -> list[StreamingQueryProgress] | None:
        """The last progress of each of the app's queries that reads the stream.

        None while one of the app's queries has not reported a micro-batch (it may read the
        stream from anywhere), and while one of them has not yet read this ticker's last
        tick: ticks go no faster than the queries take them.
        """
        progresses = []
        for progress in app_progresses(self.app):
            if progress is None:
                return None
            ends = [source.endOffset for source in progress.sources]
            if not any(stream_offsets(end, self.stream) for end in ends):
                continue
            ticks_read = [
                (stream_offsets(end, tick_stream(self.app)) or {}).get(0, 0) for end in ends
            ]
            if self._ticks_end is not None and max(ticks_read) < self._ticks_end:
                return None
            progresses.append(progress)
        return progresses

    def _read_offsets(self, progresses: list[StreamingQueryProgress]) -> dict[int, int]:
        """Per bucket, the least offset the queries of `progresses` have read the stream to."""
        read: dict[int, int] = {}
        for source in (source for progress in progresses for source in progress.sources):
            for bucket, offset in (stream_offsets(source.endOffset, self.stream) or {}).items():
                read[bucket] = min(read.get(bucket, offset), offset)
        return read

    def _last_records(self, ends: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Per bucket, its last record that has an event time: (event time, arrival time).

        A bucket whose last record or marker a millrace app wrote goes to `_written` instead:
        that app's markers move it on.
        """
        stale = {b: end for b, end in ends.items() if self._looked_at.get(b) != end}
        if stale:
            found = self._watch.last_records(stale)
            for bucket, end in stale.items():
                self._looked_at[bucket] = end
                lasts = found.get(bucket, [])
                if lasts and lasts[0].value is None:
                    self._written.add(bucket)
                    self._last[bucket] = None
                    continue
                self._written.discard(bucket)
                self._last[bucket] = next(
                    (
                        (time_ms, last.arrival_ms)
                        for last in lasts
                        if last.value is not None
                        and (time_ms := self._time_of(last.value, last.arrival_ms, last.carried_ms))
                        is not None
                    ),
                    None,
                )
        return {b: last for b, last in self._last.items() if last is not None}

    def _publish(self, ticks: dict[int, int]) -> None:
        if self._writer is None:
            self._writer = InternalWriter(self.workspace.settings, tick_stream(self.app))
        offsets = self._writer.write(
            [
                json.dumps(
                    {
                        "app": self.app,
                        "stream": self.stream,
                        "run": self.run,
                        "bucket": bucket,
                        "time_ms": time_ms,
                    }
                ).encode()
                for bucket, time_ms in sorted(ticks.items())
            ]
        )
        if offsets is None:
            return
        self._ticks_end = max(offsets) + 1
        self.ticked.update(ticks)
        _log.debug(
            "ticked %s: %s", self.stream, {b: format_time_ms(t) for b, t in sorted(ticks.items())}
        )


def _holds_state(progresses: list[StreamingQueryProgress]) -> bool:
    """Whether a query of `progresses` keeps rows in a state store.

    A watermark move may close a window or evict state there; with none, it changes nothing.
    """
    return any(
        operator.numRowsTotal > 0 for progress in progresses for operator in progress.stateOperators
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
