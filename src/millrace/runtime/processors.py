"""Running a processor app on Spark: bucketed keys, bucket state, event-time timers, outputs.

A processor's keys are spread over a fixed number of hash buckets, and Spark's
`transformWithStateInPandas` runs one group per bucket: per micro-batch it reads the bucket's
stored state (every key's state and timers, as `millrace.processor.execution` keeps them) from
one `ValueState` holding JSON, calls `execution.run_batch` once with the bucket's records, and
writes the state back once. The cost grows with micro-batches and buckets, not with keys: no
key costs a round trip between the Python worker and the JVM. The operator's pandas flavour
is used because it hands a bucket's rows over as columns converted from Arrow in bulk; the
Row flavour builds every cell of every row as a Python object of its own, and with it
`benchmarks/processors.py` ran at half the speed with 1,000 keys.

The bucket state is one `ValueState` of schema `keys STRING, timers STRING, timer_ms LONG`:
`keys` and `timers` are a `millrace.runtime.bucket_store.BucketStore`, one JSON text per key
and each key's earliest timer of each time domain, so that a micro-batch decodes and encodes
only the keys it runs (those with records and those with a due timer) and copies the others' text
through; `timer_ms` is the bucket's registered Spark timer (null when none). Keeping each key
in a `MapState` entry instead would bring back a round trip per key (Spark's state API has no
bulk map write).

Timers: each bucket registers one Spark event-time timer, at the earliest event-time timer of
its keys. When the watermark passes it, `run_batch` runs on the bucket with no records and
fires what is due. The operator runs in event time; processing-time timers fire whenever
their bucket runs in a micro-batch whose processing time has reached them, and
`millrace.runtime.processor_clock` wakes the bucket when the wall clock gets there.

Inputs are read from Kafka as raw values, since a processor's records are whole JSON objects
of any fields, each bucket of a stream by a source of its own under its own watermark, so that
the input's watermark is the least over its buckets (`millrace.engine.low_watermark`): each
record is decoded once before the shuffle, to find its key's bucket and its event time (for
the watermark; a record dated too far ahead of its arrival keeps none, and is a dead
letter), and once in its bucket, for the execution core, which is given the event time found
before the shuffle rather than reading it again. Values that are not JSON objects go to
`<stream>.dlq`, as from any millrace reader.

Productions, and the dead letters of `on_error = "dlq"`, are written to Kafka once per
micro-batch, each production with its deterministic id, so a micro-batch run again writes the
same ids and millrace readers drop the copies. The state is exactly-once: it is Spark's, in
the checkpoint under `<workspace>/checkpoints/<processor name>/processor`.
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from millrace.bus.dead_letters import dead_letter_id, dead_letter_value
from millrace.bus.markers import WRITER_HEADER
from millrace.bus.streams import dead_letter_stream, require_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.dead_letter_routing import create_dead_letter_stream
from millrace.engine.delivery import AtMostOnce
from millrace.engine.disk_full import disk_full_error
from millrace.engine.low_watermark import (
    MARKER_MS,
    WRITTEN,
    IdleTicker,
    bucket_metrics_name,
    bucket_watermarked,
    future_dated_reason,
    marker_columns,
    read_buckets,
    read_ticks,
    union_buckets,
)
from millrace.engine.metrics import observe_outputs
from millrace.engine.output_watermark import OutputWatermark
from millrace.engine.serving_sink import write_table
from millrace.engine.session import state_store
from millrace.engine.streams import bucket_by_id, carried_millis
from millrace.engine.triggers import Trigger
from millrace.errors import ProcessorError, ServingError, StreamNotFoundError
from millrace.processor.execution import BatchOutcome, DeadLetter, run_batch
from millrace.processor.lookups import TABLE_PREFIX, LookupSource
from millrace.processor.processor import Input, Processor
from millrace.records import ID_HEADER, TIME_HEADER, Record, RecordDecodeError, decode_value
from millrace.runtime.bucket_store import BucketStore, canonical_key, canonical_text
from millrace.runtime.processor_clock import ProcessorClock, clock_stream, read_wakeups
from millrace.runtime.processor_lookups import ServingLookups, require_tables
from millrace.runtime.processor_watermark import PendingTimers
from millrace.serving.tables import describe_table

DEFAULT_BUCKETS = 64
"""Hash buckets a processor's keys are spread over; each is one group of Spark's operator."""

_OUTPUT_SCHEMA = "kind STRING, stream STRING, key STRING, value STRING, id STRING, time STRING"
_PRODUCTION, _DEAD_LETTER = "production", "dead_letter"
_LATE, _DUPLICATE = "late", "duplicate"
# A bucket's earliest processing-time timer, for the driver's `ProcessorClock`.
_CLOCK = "clock"
# A bucket's earliest event-time timer, when it changed, for the driver's `PendingTimers`.
_TIMERS = "timers"
_NOT_WRITTEN = (_LATE, _DUPLICATE, _CLOCK, _TIMERS)
_BUCKET_STATE_SCHEMA = "keys STRING, timers STRING, timer_ms LONG"
_PENDING_TIMERS = "pending_timers.json"
# A ProcessorError raised in a Python worker reaches the driver as the text of a Spark
# exception; this mark starts its fields, as JSON, so the driver can raise it again.
_WORKER_ERROR_MARK = "millrace-processor-error:"


@dataclass
class RunningProcessor:
    """A started processor app: its streaming query and what it has written this run.

    `productions`, `dead_letters`, `late` and `duplicates` count, since the start, the records
    written to output streams, the records and timers sent to dead-letter streams, the records
    that came behind the watermark and were not processed, and the copies of records already
    processed that were dropped (under `exactly_once`).
    """

    processor: type[Processor]
    query: StreamingQuery
    workspace: Workspace
    productions: int = 0
    dead_letters: int = 0
    late: int = 0
    duplicates: int = 0
    _stream_buckets: dict[str, int] = field(default_factory=dict)
    _tickers: list[IdleTicker] = field(default_factory=list)
    _clock: ProcessorClock | None = None
    _timers: PendingTimers | None = None
    _markers: OutputWatermark | None = None

    def process_all_available(self) -> None:
        """Block until the query has processed the data there is; a failure is raised here."""
        self._surfacing(self.query.processAllAvailable)

    def await_termination(self) -> None:
        """Block until the query stops; with `available_now` it stops by itself."""
        try:
            self._surfacing(self.query.awaitTermination)
        finally:
            self._close_tickers()

    def stop(self) -> None:
        """Stop the query, once its running micro-batch is done."""
        self.query.stop()
        self._close_tickers()

    def _close_tickers(self) -> None:
        for ticker in self._tickers:
            ticker.close()
        self._tickers.clear()
        if self._clock is not None:
            self._clock.close()
            self._clock = None
        if self._markers is not None:
            self._markers.close()
            self._markers = None

    def _surfacing(self, wait: Callable[[], Any]) -> None:
        try:
            wait()
        except StreamingQueryException as error:
            raise (
                _processor_error_in(str(error))
                or disk_full_error(error, self.workspace, self.processor.name)
                or error
            ) from None


def start_processor_app(
    spark: SparkSession,
    workspace: Workspace,
    processor_class: type[Processor],
    *,
    available_now: bool = False,
    max_records_per_batch: int | None = None,
    buckets: int = DEFAULT_BUCKETS,
    trigger: Trigger | None = None,
) -> RunningProcessor:
    """Start `processor_class` on Spark; with `available_now` it stops at the end of input.

    `max_records_per_batch` caps the records each micro-batch reads from an input (by
    default the class's `max_records_per_batch`); `buckets` is the number of hash buckets of
    keys (keep it once the app has a checkpoint: a key's state lives in its bucket). Its input
    streams must exist; an output stream that does not exist stops the app at the first
    micro-batch that produces to it, before anything of that micro-batch is written.
    `trigger` sets when micro-batches run.

    Example:
        >>> running = start_processor_app(spark, workspace, WindowCounter)  # doctest: +SKIP
        >>> running.process_all_available()  # doctest: +SKIP
        >>> running.stop()  # doctest: +SKIP
    """
    processor_class.validate()
    if buckets < 1:
        raise ProcessorError(
            f"{processor_class.__name__} was started with {buckets} buckets",
            hint="give buckets=1 or more; the default is 64",
        )
    for source in processor_class.inputs:
        _require_stream(workspace, source.stream, f"input of processor {processor_class.name!r}")
        create_dead_letter_stream(workspace, source.stream)
    if processor_class.on_error == "dlq":
        create_dead_letter_stream(workspace, processor_class.name)
    require_tables(workspace.settings.redis, getattr(processor_class, "lookups", {}))
    if max_records_per_batch is None:
        max_records_per_batch = processor_class.max_records_per_batch
    idle_ticks = not available_now and (trigger is None or trigger.kind != "available-now")
    records = None
    tickers = []
    for source in processor_class.inputs:
        frame, ticker = _read_input(
            spark, workspace, processor_class, source, buckets, max_records_per_batch, idle_ticks
        )
        records = frame if records is None else records.unionByName(frame)
        tickers += [ticker] if ticker is not None else []
    assert records is not None  # validate() requires at least one input
    # Read in every run, so that a checkpoint holds the same sources whether a clock runs.
    records = records.unionByName(_wakeup_rows(spark, workspace, processor_class.name, records))
    outputs = records.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=_BucketRunner(
            processor_class,
            ServingLookups(workspace.settings.redis, workspace.settings.redis_lookup_cache_s),
        ),
        outputStructType=_OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    outputs = observe_outputs(spark, workspace, processor_class.name, outputs, F.col("kind"))
    running: RunningProcessor
    write = _semantics_writer(processor_class, workspace, lambda: running)
    writer = (
        outputs.writeStream.queryName(f"{processor_class.name}.processor")
        .foreachBatch(write)
        .option("checkpointLocation", str(workspace.checkpoint(processor_class.name, "processor")))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = trigger.apply(writer, f"{processor_class.name}.processor", foreach_batch=True)
    # transformWithState keeps its state only in RocksDB.
    clock = ProcessorClock(workspace, processor_class.name, buckets=buckets) if idle_ticks else None
    timers = PendingTimers(
        workspace.checkpoint(processor_class.name, "processor") / _PENDING_TIMERS
    )
    with state_store(spark, "rocksdb"):
        running = RunningProcessor(
            processor_class,
            writer.start(),
            workspace,
            _tickers=tickers,
            _clock=clock,
            _timers=timers,
        )
    running._markers = OutputWatermark(
        workspace,
        processor_class.name,
        {running.query: timers.streams},
        held_back=timers.earliest_ms,
    )
    return running


def bucket_of(key: Any, buckets: int) -> int:
    """The hash bucket of `key`: the same for keys Python finds equal, on every machine.

    Example:
        >>> bucket_of("cats", 64) == bucket_of("cats", 64)
        True
        >>> bucket_of(1, 64) == bucket_of(1.0, 64)
        True
    """
    return zlib.crc32(canonical_text(key).encode()) % buckets


def _read_input(
    spark: SparkSession,
    workspace: Workspace,
    processor: type[Processor],
    source: Input,
    buckets: int,
    max_records_per_batch: int | None,
    idle_ticks: bool,
) -> tuple[DataFrame, IdleTicker | None]:
    """One input's Kafka records, placed in their key's bucket, under the input's low watermark.

    Each bucket of the stream has a watermark of its own, and Spark takes the least (see
    `millrace.engine.low_watermark`), as `execution.watermark_after` computes it. The
    event-time column is then dropped, so that Spark does not drop late records itself: the
    execution core sets them aside and counts them. With `idle_ticks`, idle buckets are
    ticked on by the returned `IdleTicker` until it is closed.
    """
    max_future_ms = _max_future_ms(workspace, source)
    # Read in every run, so that a checkpoint holds the same sources whether a ticker runs.
    ticks = read_ticks(spark, workspace, processor.name, source.stream)
    branches = [
        bucket_watermarked(
            _placed(raw, source, buckets, max_future_ms).observe(
                bucket_metrics_name(processor.name, source.stream, bucket),
                # The execution core counts the dead letters, in the query's outputs.
                F.lit(0).alias("bad"),
                F.count_if(F.col("fault").isNotNull()).alias("future"),
                F.max(
                    F.when(F.col(MARKER_MS).isNotNull(), F.col(MARKER_MS)).when(
                        ~F.col(WRITTEN), F.col("time_ms")
                    )
                ).alias("max_ms"),
                F.count(MARKER_MS).alias("markers"),
            ),
            time="event_time",
            lateness_ms=source.lateness_ms,
            ticks=ticks,
            bucket=bucket,
        )
        for bucket, raw in enumerate(
            read_buckets(
                spark, workspace, source.stream, max_records_per_batch=max_records_per_batch
            )
        )
    ]
    ticker = None
    if idle_ticks:
        idle_timeout = source.idle_timeout or workspace.settings.events_idle_timeout
        ticker = IdleTicker(
            spark,
            workspace,
            processor.name,
            source.stream,
            run=ticks.run,
            time_of=functools.partial(_time_of, source=source, max_future_ms=max_future_ms),
            idle_timeout_ms=parse_duration_ms(idle_timeout, what="idle_timeout"),
        )
    return union_buckets(branches).drop("event_time"), ticker


def _wakeup_rows(
    spark: SparkSession, workspace: Workspace, name: str, records: DataFrame
) -> DataFrame:
    """The wake-ups of `millrace.runtime.processor_clock` as rows of `records`' columns.

    A wake-up has its bucket, the clock stream for its `stream`, and nothing else.
    """
    return read_wakeups(spark, workspace, name).select(
        *[
            F.lit(clock_stream(name)).alias(column)
            if column == "stream"
            else F.col(column)
            if column == "bucket"
            else F.lit(None).cast(kind).alias(column)
            for column, kind in records.dtypes
        ]
    )


def _max_future_ms(workspace: Workspace, source: Input) -> int:
    if source.max_future is None:
        return workspace.settings.max_future_ms
    return parse_duration_ms(source.max_future, what="max_future")


def _time_of(
    value: dict, arrival_ms: int, carried_ms: int | None, *, source: Input, max_future_ms: int
) -> int | None:
    """A record's event time as the runtime takes it; None where it dead-letters the record."""
    try:
        time_ms = _time_in(source, value, carried_ms)
    except Exception:
        return None
    return None if time_ms < 0 or time_ms - arrival_ms > max_future_ms else time_ms


def _time_in(source: Input, record: dict, carried_ms: int | None) -> int:
    """A record's event time: its Input's time field, else the time its `time` header carries.

    Raises `ProcessorError` when the field holds no time, or is missing and nothing is carried.
    """
    if carried_ms is not None and record.get(source.time) is None:
        return carried_ms
    return source.time_of(record)


def _placed(raw: DataFrame, source: Input, buckets: int, max_future_ms: int) -> DataFrame:
    """Kafka records of `source` (streaming or not) as the bucket runner's input rows.

    A record's event time is its Input's time field, else the time its `time` header carries.

    A record dated more than `max_future_ms` ahead of its arrival keeps no time (so it moves
    no watermark), and its `fault` says why: the bucket runner makes it a dead letter. A
    record dated before 1970 keeps no time either, and the execution core, reading it again,
    makes it a dead letter. The rows have the `marker_columns` too: the watermark markers
    among them are for `bucket_watermarked`, and no reader's records.
    """
    placement = _placement(source, buckets)(F.col("value"), carried_millis(F.col("headers")))
    ids = F.filter("headers", lambda header: header.getField("key") == F.lit(ID_HEADER))
    # Spark's watermark starts at 1970 and never goes back: an earlier time would be late.
    read_ms = F.when(placement.getField("time_ms") >= 0, placement.getField("time_ms"))
    read_time = F.timestamp_millis(read_ms)
    fault = future_dated_reason(read_time, F.col("timestamp"), max_future_ms)
    placed = raw.select(
        F.lit(source.stream).alias("stream"),
        placement.getField("bucket").alias("bucket"),
        read_time.alias("_read_time"),
        read_ms.alias("_read_ms"),
        F.col("value"),
        F.col("key").cast("string").alias("record_key"),
        # Another producer's empty id is no id: the record is known by its place, not dropped
        # as a copy of every other record with an empty id.
        F.nullif(F.try_element_at(ids, F.lit(1)).getField("value").cast("string"), F.lit("")).alias(
            "record_id"
        ),
        F.col("partition").alias("record_bucket"),
        F.col("offset").alias("record_offset"),
        fault.alias("fault"),
        *marker_columns(F.col("value"), F.col("headers")),
    )
    kept = F.col("fault").isNull()
    return placed.select(
        "stream",
        "bucket",
        F.when(kept, F.col("_read_time")).alias("event_time"),
        F.when(kept, F.col("_read_ms")).alias("time_ms"),
        "value",
        "record_key",
        "record_id",
        "record_bucket",
        "record_offset",
        "fault",
        MARKER_MS,
        WRITTEN,
    )


# ---- Semantics (docs/semantics.md), kept apart: the query's foreachBatch is `_semantics_writer`.
# Inputs are deduplicated by the execution core, with the ids kept in each key's own state
# (MillWheel's way): Spark's `dropDuplicatesWithinWatermark` would shuffle the records by id,
# which breaks the order of a key's records before its bucket.


def _semantics_writer(
    processor_class: type[Processor],
    workspace: Workspace,
    running: Callable[[], RunningProcessor],
) -> Callable[[DataFrame, int], None]:
    """The query's foreachBatch: `_write_outputs`, at most once per batch for at_most_once."""
    once = AtMostOnce(workspace.checkpoint(processor_class.name, "processor") / "at_most_once")

    def write(batch: DataFrame, batch_id: int) -> None:
        if processor_class.semantics == "at_most_once":
            once.write(batch_id, lambda: _write_outputs(running(), workspace, batch))
        else:
            _write_outputs(running(), workspace, batch)

    return write


def _placement(source: Input, buckets: int) -> Callable[..., Any]:
    """A vectorised UDF: each raw value's key bucket and event time (null when unreadable)."""

    def place(
        value: bytes | None, carried_ms: int | None, known: dict[Any, int]
    ) -> tuple[int, int | None]:
        try:
            record = json.loads(value) if value is not None else None
            if not isinstance(record, dict):
                return 0, None
            time_ms = _time_in(source, record, carried_ms)
            key = source.key_of(record)
            bucket = known.get(key)
            if bucket is None:
                bucket = known[key] = bucket_of(key, buckets)
            return bucket, time_ms
        except Exception:
            # The record goes to any bucket: the execution core reports its fault there.
            return 0, None

    # PySpark's stubs lack the type-hinted form, pandas_udf(returnType) without functionType.
    @F.pandas_udf("bucket INT, time_ms LONG")  # type: ignore[call-overload]
    def placement(values: pd.Series, carried: pd.Series) -> pd.DataFrame:
        # The buckets of the keys seen in this Arrow batch: a key's bucket is hashed once.
        known: dict[Any, int] = {}
        # A LONG column with nulls arrives as floats; Int64 turns it back into ints and NA.
        carried_ms = [None if ms is pd.NA else ms for ms in carried.astype("Int64").tolist()]
        return pd.DataFrame(
            [place(value, ms, known) for value, ms in zip(values, carried_ms, strict=True)],
            columns=["bucket", "time_ms"],
        ).astype({"bucket": "int32", "time_ms": "Int64"})

    return placement


class _BucketRunner(StatefulProcessor):
    """Spark's stateful processor for one bucket: runs the execution core over bucket state."""

    def __init__(
        self, processor_class: type[Processor], lookup_source: LookupSource | None = None
    ) -> None:
        self.processor_class = processor_class
        self.lookup_source = lookup_source
        self.clock_stream = clock_stream(processor_class.name)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket_state = handle.getValueState("bucket", _BUCKET_STATE_SCHEMA)
        self.processor = self.processor_class()

    # Spark passes the timer arguments by these names. transformWithStateInPandas passes pandas
    # frames; the base class's type also allows the Row API's rows.
    def handleInputRows(  # type: ignore[override]  # noqa: N802 - Spark's callback names
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        records: list[Record] = []
        undecodable: list[_Output] = []
        for frame in rows:
            # A wake-up only makes the bucket run.
            frame = frame[frame["stream"] != self.clock_stream]
            for row in _input_rows(frame):
                try:
                    records.append(_record_of(row))
                except RecordDecodeError as error:
                    undecodable.append(_undecodable_letter(row, str(error)))
        yield from _frames(undecodable + self._run(int(key[0]), records, timerValues))

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        yield from _frames(self._run(int(key[0]), [], timerValues))

    def close(self) -> None:
        pass

    def _run(self, bucket: int, records: list[Record], timer_values: TimerValues) -> list[_Output]:
        name = self.processor_class.name
        kept = self.bucket_state.get() if self.bucket_state.exists() else None
        store = BucketStore(kept[0], kept[1]) if kept else BucketStore(None, None)
        registered_ms = kept[2] if kept else None
        clock_before_ms = store.next_clock_ms()
        # Spark's watermark is 0 until an input has seen a record.
        watermark_ms = timer_values.getCurrentWatermarkInMs() or None
        # The batch's timestamp, the same when a micro-batch runs again after a crash.
        processing_time_ms = timer_values.getCurrentProcessingTimeInMs()
        try:
            outcome = run_batch(
                self.processor,
                store,
                records,
                watermark_ms=watermark_ms,
                processing_time_ms=processing_time_ms,
                timer_keys=store.due_keys(watermark_ms, processing_time_ms=processing_time_ms),
                lookups=self.lookup_source,
            )
            store.update(outcome.states, processor=name)
        except ProcessorError as error:
            raise RuntimeError(_worker_error_text(error)) from error
        next_timer_ms = store.next_timer_ms()
        if next_timer_ms != registered_ms:
            if registered_ms is not None:
                self.handle.deleteTimer(registered_ms)
            if next_timer_ms is not None:
                self.handle.registerTimer(next_timer_ms)
        if not store:
            self.bucket_state.clear()
        elif outcome.states or next_timer_ms != registered_ms:
            self.bucket_state.update((*store.encode(), next_timer_ms))
        outputs = _outputs_of(name, outcome)
        if next_timer_ms != registered_ms:
            outputs.append(_Output(_TIMERS, "", str(bucket), _text_or_none(next_timer_ms), ""))
        clock_ms = store.next_clock_ms()
        if clock_ms is not None or clock_before_ms is not None:
            outputs.append(
                _Output(_CLOCK, self.clock_stream, str(bucket), _text_or_none(clock_ms), "")
            )
        return outputs


def _text_or_none(time_ms: int | None) -> str | None:
    return None if time_ms is None else str(time_ms)


def _outputs_of(name: str, outcome: BatchOutcome) -> list[_Output]:
    """The operator's output rows for one run of the execution core."""
    outputs = [
        _Output(
            _PRODUCTION,
            production.stream,
            _routing_key(production.key),
            json.dumps(production.value, separators=(",", ":"), ensure_ascii=False),
            production.id,
            _text_or_none(production.time_ms),
        )
        for production in outcome.productions
    ]
    outputs.extend(_processor_letter(name, letter) for letter in outcome.dead_letters)
    outputs.extend(_Output(_LATE, record.stream, None, None, record.id) for record in outcome.late)
    outputs.extend(
        _Output(_DUPLICATE, record.stream, None, None, record.id) for record in outcome.duplicates
    )
    return outputs


class _InputRow(NamedTuple):
    """One input record as the bucket runner receives it; `time_ms` is None when unreadable.

    `fault` says why a record that is a JSON object is a dead letter all the same (it is
    dated too far ahead of its arrival), and is None for the others.
    """

    stream: str
    value: bytes | None
    record_key: str | None
    record_id: str | None
    record_bucket: int
    record_offset: int
    fault: str | None
    time_ms: int | None


class _Output(NamedTuple):
    """One row of the operator's output, in the order of `_OUTPUT_SCHEMA`.

    `time` is a production's event time as epoch ms text, for its `time` header.
    """

    kind: str
    stream: str
    key: str | None
    value: str | None
    id: str | None
    time: str | None = None


def _input_rows(frame: pd.DataFrame) -> Iterator[_InputRow]:
    """A bucket's rows from one of Spark's frames, read column by column."""
    # A LONG column with nulls arrives as floats; Int64 turns it back into ints and NA.
    times = [
        None if time_ms is pd.NA else time_ms
        for time_ms in frame["time_ms"].astype("Int64").tolist()
    ]
    columns = (frame[name].tolist() for name in _InputRow._fields[:-1])
    return map(_InputRow._make, zip(*columns, times, strict=True))


def _frames(outputs: list[_Output]) -> Iterator[pd.DataFrame]:
    if outputs:
        yield pd.DataFrame(outputs, columns=list(_Output._fields))


def _record_of(row: _InputRow) -> Record:
    """The record of an input row, with its event time found before the shuffle.

    Raises `RecordDecodeError` when the value is not a JSON object, or has a `fault`.
    """
    if not row.value:
        raise RecordDecodeError("value is empty")
    if row.fault is not None:
        raise RecordDecodeError(row.fault)
    value = decode_value(bytes(row.value))
    return Record(
        row.stream,
        row.record_bucket,
        row.record_offset,
        row.record_key,
        row.record_id,
        row.time_ms,
        value,
    )


def _undecodable_letter(row: _InputRow, error: str) -> _Output:
    """The dead letter of a value that is not a JSON object, as every millrace reader writes."""
    letter = dead_letter_value(
        error, row.stream, row.record_bucket, row.record_offset, bytes(row.value or b"")
    )
    return _Output(
        _DEAD_LETTER,
        dead_letter_stream(row.stream),
        row.record_key,
        json.dumps(letter),
        dead_letter_id(row.stream, row.record_bucket, row.record_offset),
    )


def _processor_letter(name: str, letter: DeadLetter) -> _Output:
    """A record's dead letter goes to its stream's; a timer's to the processor's own."""
    fields: dict[str, Any] = {"error": letter.error, "processor": name, "key": letter.key}
    record = letter.record
    if record is not None:
        original = json.dumps(record.value, separators=(",", ":"), ensure_ascii=False)
        fields |= dead_letter_value(
            letter.error, record.stream, record.bucket, record.offset, original.encode()
        )
        target = dead_letter_stream(record.stream)
        letter_id = f"{name}:{dead_letter_id(record.stream, record.bucket, record.offset)}"
    else:
        timer = letter.timer
        assert timer is not None  # a dead letter holds a record or a timer
        fields["timer"] = {"tag": timer.tag, "time_ms": timer.time_ms, "domain": timer.domain}
        target = dead_letter_stream(name)
        letter_id = f"{name}:dlq:timer:{_canonical_text(letter.key)}:{timer.tag}:{timer.time_ms}"
    return _Output(
        _DEAD_LETTER, target, _routing_key(letter.key), json.dumps(fields, default=repr), letter_id
    )


def _canonical_text(key: Any) -> str:
    return json.dumps(canonical_key(key), separators=(",", ":"), default=repr)


def _routing_key(key: Any) -> str | None:
    if key is None or isinstance(key, str):
        return key
    return _canonical_text(key)


def _worker_error_text(error: ProcessorError) -> str:
    return _WORKER_ERROR_MARK + json.dumps({"message": error.message, "hint": error.hint})


def _processor_error_in(text: str) -> ProcessorError | None:
    """The `ProcessorError` a Python worker raised, from the text of the failed query's error."""
    start = text.find(_WORKER_ERROR_MARK)
    if start < 0:
        return None
    try:
        fields, _ = json.JSONDecoder().raw_decode(text, start + len(_WORKER_ERROR_MARK))
    except json.JSONDecodeError:
        return None
    return ProcessorError(fields["message"], hint=fields["hint"])


def _write_outputs(running: RunningProcessor, workspace: Workspace, batch: DataFrame) -> None:
    """Write one micro-batch's productions and dead letters to Kafka, in one write."""
    counts = _write_output_rows(
        workspace,
        running.processor.name,
        running._stream_buckets,
        batch,
        on_clock=running._clock.report if running._clock is not None else None,
        on_timers=running._timers.report if running._timers is not None else None,
    )
    running.productions += counts[_PRODUCTION]
    running.dead_letters += counts[_DEAD_LETTER]
    running.late += counts[_LATE]
    running.duplicates += counts[_DUPLICATE]


def _write_output_rows(
    workspace: Workspace,
    name: str,
    stream_buckets: dict[str, int],
    batch: DataFrame,
    *,
    on_clock: Callable[[dict[int, int | None]], None] | None = None,
    on_timers: Callable[[dict[int, int | None], set[str]], None] | None = None,
) -> dict[str, int]:
    """Write the operator's output rows to Kafka in one write; the rows of each kind.

    An output stream that does not exist fails the write before anything is written;
    `stream_buckets` remembers the bucket count of each stream found, so each is looked up
    once. A production without a key goes to a bucket chosen by its id (`bucket_by_id`).
    `on_clock` is given the buckets' earliest processing-time timers the batch reports;
    `on_timers`, once the batch is written, their earliest event-time timers and the streams
    the batch produced to; with it, productions carry the processor's name in their `writer`
    header, since its markers then tell their progress (`millrace.engine.output_watermark`).
    """
    batch.persist()
    try:
        counts = batch.groupBy("kind", "stream").count().collect()
        if on_clock is not None and any(row["kind"] == _CLOCK for row in counts):
            reports = batch.where(F.col("kind") == _CLOCK).select("key", "value").collect()
            on_clock({int(row["key"]): _int_or_none(row["value"]) for row in reports})
        tables = _write_table_productions(name, workspace, batch, counts)
        for row in counts:
            if row["stream"] in tables:
                continue
            if row["kind"] == _PRODUCTION and row["stream"] not in stream_buckets:
                try:
                    stream_buckets[row["stream"]] = _require_stream(
                        workspace, row["stream"], f"output of processor {name!r}"
                    )
                except ProcessorError as error:
                    raise RuntimeError(_worker_error_text(error)) from None
        written = batch.where(~F.col("kind").isin(*_NOT_WRITTEN))
        if tables:
            written = written.where(~F.col("stream").isin(*tables))
        if any(row["kind"] not in _NOT_WRITTEN and row["stream"] not in tables for row in counts):
            buckets = _bucket_counts(stream_buckets)
            (
                written.select(
                    F.col("stream").alias("topic"),
                    "key",
                    "value",
                    _headers(name if on_timers is not None else None).alias("headers"),
                    bucket_by_id(F.col("id"), F.col("key"), buckets).alias("partition"),
                )
                .write.format("kafka")
                .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
                .save()
            )
        if on_timers is not None:
            reports = []
            if any(row["kind"] == _TIMERS for row in counts):
                reports = batch.where(F.col("kind") == _TIMERS).select("key", "value").collect()
            produced = {
                row["stream"]
                for row in counts
                if row["kind"] == _PRODUCTION and row["stream"] not in tables
            }
            on_timers({int(row["key"]): _int_or_none(row["value"]) for row in reports}, produced)
        totals = dict.fromkeys((_PRODUCTION, _DEAD_LETTER, *_NOT_WRITTEN), 0)
        for row in counts:
            totals[row["kind"]] += row["count"]
        return totals
    finally:
        batch.unpersist()


def _headers(writer: str | None) -> Column:
    """An output row's headers: its id; for a production, its event time when it has one.

    With `writer`, a production names that processor as its writer too.
    """
    id_header = F.struct(F.lit(ID_HEADER).alias("key"), F.col("id").cast("binary").alias("value"))
    written_by = [
        F.struct(F.lit(WRITER_HEADER).alias("key"), F.lit(writer).cast("binary").alias("value"))
    ]
    if writer is None:
        written_by = []
    time_header = F.struct(
        F.lit(TIME_HEADER).alias("key"), F.col("time").cast("binary").alias("value")
    )
    production = F.col("kind") == _PRODUCTION
    return (
        F.when(~production, F.array(id_header))
        .when(F.col("time").isNull(), F.array(id_header, *written_by))
        .otherwise(F.array(id_header, *written_by, time_header))
    )


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)


def _write_table_productions(
    name: str, workspace: Workspace, batch: DataFrame, counts: list[Any]
) -> set[str]:
    """Upsert the productions to serving tables (`table:<name>`); their stream names."""
    tables = {
        row["stream"]
        for row in counts
        if row["kind"] == _PRODUCTION and row["stream"].startswith(TABLE_PREFIX)
    }
    for stream in sorted(tables):
        try:
            spec = describe_table(workspace.settings, stream.removeprefix(TABLE_PREFIX))
        except ServingError as error:
            failure = ProcessorError(
                f"processor {name!r} produced to {error.message}",
                hint=error.hint,
            )
            raise RuntimeError(_worker_error_text(failure)) from None
        schema = ", ".join(f"`{column}` {kind}" for column, kind in spec.keys + spec.values)
        rows = batch.where(F.col("stream") == stream).select(
            F.from_json("value", schema).alias("row")
        )
        write_table(rows.select("row.*"), spec, workspace.settings.redis)
    return tables


def _bucket_counts(stream_buckets: dict[str, int]) -> Column:
    """Each row's stream's bucket count, from `stream_buckets`; null for another stream."""
    if not stream_buckets:
        return F.lit(None).cast("int")
    pairs = (F.lit(part) for pair in sorted(stream_buckets.items()) for part in pair)
    return F.create_map(*pairs)[F.col("stream")]


def _require_stream(workspace: Workspace, stream: str, role: str) -> int:
    """The bucket count of `stream`; `ProcessorError` naming its `role` when it does not exist."""
    try:
        return require_stream(workspace.settings, stream)
    except StreamNotFoundError as error:
        raise ProcessorError(
            f"stream {stream!r}, {role}, does not exist",
            hint=f"create it with `millrace stream create {stream}` and start the app again",
        ) from error
