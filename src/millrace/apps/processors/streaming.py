"""Running a processor app on Spark: bucketed keys, bucket state, event-time timers, outputs.

A processor's keys are spread over a fixed number of hash buckets, and Spark's
`transformWithStateInPandas` runs one group per bucket (its group value spreads the buckets
evenly over Spark's tasks: `millrace.apps.processors.placement`): per micro-batch it reads
the bucket's stored state (every key's state and timers, as `millrace.processor.execution`
keeps them) from one `ValueState` holding JSON, calls `execution.run_batch` once with the
bucket's records, and writes the state back once. The cost grows with micro-batches and
buckets, not with keys: no key costs a round trip between the Python worker and the JVM. The
operator's pandas flavour is used because it hands a bucket's rows over as columns converted
from Arrow in bulk; the Row flavour builds every cell of every row as a Python object of its
own, and with it `benchmarks/processors.py` ran at half the speed with 1,000 keys. PySpark's
pandas flavour still walks the rows twice in Python to group them; the worker takes
`millrace.engine.spark_internals.group_rows_by_slices` instead when it unpickles the operator.

The bucket state is one `ValueState` of schema `keys STRING, timers STRING, timer_ms LONG`:
`keys` and `timers` are a `millrace.apps.processors.bucket_store.BucketStore`, one JSON text per key
and each key's earliest timer of each time domain, so that a micro-batch decodes and encodes
only the keys it runs (those with records and those with a due timer) and copies the others' text
through; `timer_ms` is the bucket's registered Spark timer (null when none). Keeping each key
in a `MapState` entry instead would bring back a round trip per key (Spark's state API has no
bulk map write).

Timers: each bucket registers one Spark event-time timer, at the earliest event-time timer of
its keys. When the watermark passes it, `run_batch` runs on the bucket with no records and
fires what is due. The operator runs in event time; processing-time timers fire whenever
their bucket runs in a micro-batch whose processing time has reached them, and
`millrace.apps.processors.wakeups` wakes the bucket when the wall clock gets there.

Inputs are read from Kafka as raw values, since a processor's records are whole JSON objects
of any fields, all the buckets of a stream by one source under the input's low watermark, the
least over its buckets (`millrace.engine.low_watermark`). Before
the shuffle Spark reads each record's key and event time in the JVM (a key function, which
only Python can call, takes a Python pass instead), to find its key's bucket and its time (for
the watermark; a record dated too far ahead of its arrival keeps none, and is a dead
letter). The record is decoded in Python once, in its bucket, for the execution core, which is
given the event time found before the shuffle rather than reading it again (the operator's
input and output rows are `millrace.apps.processors.rows`, shared with batch runs). Values
that are not JSON objects go to `<stream>.dlq`, as from any millrace reader.

Productions, and the dead letters of `on_error = "dlq"`, are written to Kafka once per
micro-batch (`millrace.apps.processors.outputs`), each production with its deterministic
id, so a micro-batch run again writes the same ids and millrace readers drop the copies. The
state is exactly-once: it is Spark's, in the checkpoint under
`<workspace>/checkpoints/<processor name>/processor`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import pandas as pd
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from millrace.apps.processors.bucket_store import BucketStore
from millrace.apps.processors.errors import (
    processor_error_in,
    require_inputs,
    worker_error_text,
    worker_start_error,
)
from millrace.apps.processors.lookups import ServingLookups, require_tables
from millrace.apps.processors.outputs import OutputWriter
from millrace.apps.processors.pending_timers import PendingTimers
from millrace.apps.processors.placement import Placement, bucket_count
from millrace.apps.processors.rows import (
    ARRIVAL_MS,
    CLOCK,
    DEAD_LETTER,
    DUPLICATE,
    LATE,
    OUTPUT_SCHEMA,
    PRODUCTION,
    TIMERS,
    OutputRow,
    event_time_of,
    input_max_future_ms,
    input_rows,
    output_frame,
    output_rows_of,
    placed_rows,
    record_of,
    report_row,
    undecodable_letter,
)
from millrace.apps.processors.wakeups import ProcessorClock, clock_stream, read_wakeups
from millrace.apps.progress_lines import QueryTotals, count
from millrace.bus.streams import require_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.dead_letter_routing import create_dead_letter_stream
from millrace.engine.delivery import AtMostOnce, run_without_writing
from millrace.engine.disk_full import disk_full_error
from millrace.engine.low_watermark import (
    IdleTicker,
    low_watermarked,
    observed_input,
    read_input,
    read_ticks,
)
from millrace.engine.metrics import observe_outputs
from millrace.engine.output_watermark import OutputWatermark
from millrace.engine.plans import logical_plans
from millrace.engine.progress import watch
from millrace.engine.session import state_store
from millrace.engine.spark_internals import group_rows_by_slices
from millrace.engine.triggers import Trigger, records_cap
from millrace.errors import ProcessorError
from millrace.processor.execution import run_batch
from millrace.processor.lookups import LookupSource
from millrace.processor.processor import Input, Processor
from millrace.records import Record, RecordDecodeError

# A StructType rather than its DDL text, which PySpark sends to the JVM to parse, twice in each
# task's `init`.
_BUCKET_STATE_SCHEMA = StructType(
    [
        StructField("keys", StringType()),
        StructField("timers", StringType()),
        StructField("timer_ms", LongType()),
    ]
)


@dataclass
class RunningProcessor:
    """A started processor app: its streaming query and what it has written this run.

    `productions`, `dead_letters`, `late` and `duplicates` count, since the start, the records
    written to output streams, the records and timers sent to dead-letter streams, the records
    that came behind the watermark and were not processed, and the copies of records already
    processed that were dropped (under `exactly_once`). It is the app's `Streaming` handle
    (`millrace.apps.app`): leaving it as a context manager stops what it started.
    """

    processor: type[Processor]
    query: StreamingQuery
    workspace: Workspace
    _outputs: OutputWriter
    productions: int = 0
    dead_letters: int = 0
    late: int = 0
    duplicates: int = 0
    _clock: ProcessorClock | None = None
    _timers: PendingTimers | None = None
    _resources: ExitStack = field(default_factory=ExitStack)

    stopping = "stopping once the running micro-batch is done..."

    @property
    def queries(self) -> list[StreamingQuery]:
        """The processor's one query."""
        return [self.query]

    @property
    def started(self) -> str:
        """The line said once the query runs."""
        return f"processor {self.processor.name!r} running (Ctrl-C stops)"

    def process_all_available(self) -> None:
        """Block until the query has processed the data there is; a failure is raised here."""
        self._surfacing(self.query.processAllAvailable)

    def await_termination(self) -> None:
        """Block until the query stops; with `available_now` it stops by itself.

        The error the query stopped with, if any, is raised here.
        """
        try:
            self._surfacing(self.query.awaitTermination)
        finally:
            self._resources.close()

    def stop(self) -> None:
        """Stop the query, once its running micro-batch is done, and what it started beside.

        The error the query stopped with, if it failed before, is raised here.
        """
        self.query.stop()
        self.await_termination()

    def summary(self, totals: Mapping[str, QueryTotals]) -> list[str]:
        """What the run read, and what became of it."""
        read = totals.get(self.query.name, QueryTotals()).read
        return [
            f"{count(read, 'record')} read: "
            f"{count(self.productions, 'production')}, "
            f"{count(self.late, 'late record')} dropped, "
            f"{count(self.duplicates, 'duplicate')} dropped, "
            f"{count(self.dead_letters, 'dead letter')}"
        ]

    def _surfacing(self, wait: Callable[[], object]) -> None:
        try:
            wait()
        except StreamingQueryException as error:
            raise (
                processor_error_in(str(error))
                or worker_start_error(str(error), self.processor.name)
                or disk_full_error(error, self.workspace, self.processor.name)
                or error
            ) from None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Stop the query if it still runs, and the tickers, clock and marker publisher."""
        if self.query.isActive:
            self.query.stop()
        self._resources.close()


def start_processor_app(
    spark: SparkSession,
    workspace: Workspace,
    processor_class: type[Processor],
    *,
    available_now: bool = False,
    max_records_per_batch: int | None = None,
    placement: Placement | None = None,
    trigger: Trigger | None = None,
) -> RunningProcessor:
    """Start `processor_class` on Spark; with `available_now` it stops at the end of input.

    `max_records_per_batch` caps the records each micro-batch reads from an input (by
    default the class's `max_records_per_batch`, else `engine.triggers.records_cap`'s);
    `placement` is its keys' hash buckets (by default `bucket_count`'s, spread; keep it once the
    app has a checkpoint, since a key's state lives in its bucket). Its input streams must
    exist; an output stream that does not exist stops the app at the first micro-batch that
    produces to it, before anything is written to it (`OutputWriter.write`). `trigger` sets when
    micro-batches run.
    """
    processor_class.validate()
    placement = placement or Placement(bucket_count(processor_class))
    if placement.buckets < 1:
        raise ProcessorError(
            f"{processor_class.__name__} was started with {placement.buckets} buckets",
            hint="give 1 bucket or more, or leave the placement out for the processor's own",
        )
    require_inputs(workspace, processor_class)
    for source in processor_class.inputs:
        create_dead_letter_stream(workspace, source.stream)
    if processor_class.on_error == "dlq":
        create_dead_letter_stream(workspace, processor_class.name)
    max_records_per_batch = records_cap(
        workspace.settings, max_records_per_batch or processor_class.max_records_per_batch, trigger
    )
    idle_ticks = not available_now and (trigger is None or trigger.kind != "available-now")
    name = processor_class.name
    watch(spark)
    output_writer = OutputWriter(spark, workspace, name, writer=name)
    # What a start that fails has started (tickers, the clock, the query) is stopped.
    with ExitStack() as started:
        outputs, tickers = _outputs_frame(
            spark, workspace, processor_class, placement, max_records_per_batch, idle_ticks
        )
        for ticker in tickers:
            started.callback(ticker.close)
        running: RunningProcessor
        # Spark may hand the writer its first micro-batch before `start` has returned and
        # `running` is set: the writer waits for it.
        ready = threading.Event()

        def started_running() -> RunningProcessor:
            ready.wait()
            return running

        writer = (
            outputs.writeStream.queryName(f"{name}.processor")
            .foreachBatch(_semantics_writer(processor_class, workspace, started_running))
            .option("checkpointLocation", str(workspace.checkpoint(name, "processor")))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif trigger is not None:
            writer = trigger.apply(writer, f"{name}.processor", foreach_batch=True)
        clock = None
        if idle_ticks:
            clock = ProcessorClock(workspace, name, buckets=placement.buckets)
            started.callback(clock.close)
        timers = PendingTimers(workspace.pending_timers(name))
        try:
            # transformWithState keeps its state only in RocksDB.
            with state_store(spark, "rocksdb"):
                running = RunningProcessor(
                    processor_class,
                    writer.start(),
                    workspace,
                    output_writer,
                    _clock=clock,
                    _timers=timers,
                )
            started.callback(_stop_if_active, running.query)
            markers = OutputWatermark(
                workspace, name, {running.query: timers.streams}, held_back=timers.earliest_ms
            )
            started.callback(markers.close)
        finally:
            ready.set()  # also when starting failed: the writer then fails, rather than hangs
        running._resources = started.pop_all()
    return running


def explain_processor(
    spark: SparkSession,
    workspace: Workspace,
    processor_class: type[Processor],
    *,
    placement: Placement | None = None,
) -> dict[str, str]:
    """Spark's plan of the processor's query, without running it (`millrace check`)."""
    processor_class.validate()
    require_inputs(workspace, processor_class)
    outputs, _ = _outputs_frame(
        spark,
        workspace,
        processor_class,
        placement or Placement(bucket_count(processor_class)),
        processor_class.max_records_per_batch,
        idle_ticks=False,
    )
    return {f"processor {processor_class.name}": logical_plans(outputs)}


def _stop_if_active(query: StreamingQuery) -> None:
    if query.isActive:
        query.stop()


def _outputs_frame(
    spark: SparkSession,
    workspace: Workspace,
    processor_class: type[Processor],
    placement: Placement,
    max_records_per_batch: int | None,
    idle_ticks: bool,
) -> tuple[DataFrame, list[IdleTicker]]:
    """The operator's output rows over every input and the wake-ups, and the tickers started.

    The serving tables the processor looks up must exist (`ProcessorError` otherwise).
    """
    require_tables(workspace.settings.redis, getattr(processor_class, "lookups", {}))
    frames = []
    tickers = []
    try:
        for source in processor_class.inputs:
            frame, ticker = _read_input(
                spark,
                workspace,
                processor_class,
                source,
                placement.buckets,
                max_records_per_batch,
                idle_ticks,
            )
            frames.append(frame)
            tickers += [ticker] if ticker is not None else []
    except BaseException:
        for started in tickers:
            started.close()
        raise
    # `validate` requires at least one input.
    records = functools.reduce(DataFrame.unionByName, frames)
    # Read in every run, so that a checkpoint holds the same sources whether a clock runs.
    records = records.unionByName(_wakeup_rows(spark, workspace, processor_class.name, records))
    # The grouping column keeps its name, which the state's schema holds, and takes the group.
    grouped = records.withColumn("bucket", placement.group_column(F.col("bucket")))
    outputs = grouped.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=_BucketRunner(
            processor_class,
            placement,
            ServingLookups(workspace.settings.redis, workspace.settings.redis_lookup_cache_s),
        ),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    observed = observe_outputs(spark, workspace, processor_class.name, outputs, F.col("kind"))
    return observed, tickers


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

    The watermark is the least over the stream's buckets of each one's progress (see
    `millrace.engine.low_watermark`), as `execution.watermark_after` computes it. The
    event-time column is then dropped, so that Spark does not drop late records itself: the
    execution core sets them aside and counts them. With `idle_ticks`, idle buckets are
    ticked on by the returned `IdleTicker` until it is closed.
    """
    max_future_ms = input_max_future_ms(workspace, source)
    stream_buckets = require_stream(workspace.settings, source.stream)
    # Read in every run, so that a checkpoint holds the same sources whether a ticker runs.
    ticks = read_ticks(spark, workspace, processor.name, source.stream)
    raw = read_input(spark, workspace, source.stream, max_records_per_batch=max_records_per_batch)
    records = low_watermarked(
        observed_input(
            placed_rows(raw, source, buckets, max_future_ms),
            processor.name,
            source.stream,
            # The execution core counts the dead letters, in the query's outputs.
            bad=F.lit(False),
            future=F.col("fault").isNotNull(),
            time_ms=F.col("time_ms"),
            arrival_ms=F.col(ARRIVAL_MS),
        ),
        time="event_time",
        lateness_ms=source.lateness_ms,
        buckets=stream_buckets,
        ticks=ticks,
    )
    ticker = None
    if idle_ticks:
        idle_timeout = source.idle_timeout or workspace.settings.events_idle_timeout
        ticker = IdleTicker(
            spark,
            workspace,
            processor.name,
            source.stream,
            run=ticks.run,
            time_of=functools.partial(event_time_of, source=source, max_future_ms=max_future_ms),
            idle_timeout_ms=parse_duration_ms(idle_timeout, what="idle_timeout"),
        )
    return records.drop("event_time", ARRIVAL_MS), ticker


def _wakeup_rows(
    spark: SparkSession, workspace: Workspace, name: str, records: DataFrame
) -> DataFrame:
    """The wake-ups of `millrace.apps.processors.wakeups` as rows of `records`' columns.

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
    once = AtMostOnce(workspace.at_most_once_marks(processor_class.name, "processor"))

    def write(batch: DataFrame, batch_id: int) -> None:
        if processor_class.semantics == "at_most_once":
            if not once.write(batch_id, lambda: _write_outputs(running(), workspace, batch)):
                run_without_writing(batch)
        else:
            _write_outputs(running(), workspace, batch)

    return write


class _BucketRunner(StatefulProcessor):
    """Spark's stateful processor for one bucket: runs the execution core over bucket state."""

    def __init__(
        self,
        processor_class: type[Processor],
        placement: Placement,
        lookup_source: LookupSource | None = None,
    ) -> None:
        self.processor_class = processor_class
        self.placement = placement
        self.lookup_source = lookup_source
        self.clock_stream = clock_stream(processor_class.name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in a Python worker, before the worker reads the rows it is sent.
        group_rows_by_slices()
        self.__dict__.update(state)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.bucket_state = handle.getValueState("bucket", _BUCKET_STATE_SCHEMA)
        self.processor = self.processor_class()

    # Spark passes the timer arguments by these names. transformWithStateInPandas passes pandas
    # frames; the base class's type also allows the Row API's rows.
    def handleInputRows(  # type: ignore[override]  # noqa: N802 - Spark's callback names
        self,
        key: Any,  # Any: as StatefulProcessor declares it; Spark passes (group,)
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        records: list[Record] = []
        undecodable: list[OutputRow] = []
        for frame in rows:
            # A wake-up only makes the bucket run.
            frame = frame[frame["stream"] != self.clock_stream]
            for row in input_rows(frame):
                try:
                    records.append(record_of(row))
                except RecordDecodeError as error:
                    undecodable.append(
                        undecodable_letter(self.processor_class.name, row, str(error))
                    )
        bucket = self.placement.bucket_of(int(key[0]))
        yield from _frames(undecodable + self._run(bucket, records, timerValues))

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,  # Any: as StatefulProcessor declares it; Spark passes (group,)
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        yield from _frames(self._run(self.placement.bucket_of(int(key[0])), [], timerValues))

    def close(self) -> None:
        pass

    def _run(
        self, bucket: int, records: list[Record], timer_values: TimerValues
    ) -> list[OutputRow]:
        name = self.processor_class.name
        # One round trip to the JVM's state server: get() answers None for no state.
        kept = self.bucket_state.get()
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
            raise RuntimeError(worker_error_text(error)) from error
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
        outputs = output_rows_of(name, outcome)
        if next_timer_ms != registered_ms:
            outputs.append(report_row(TIMERS, "", bucket, next_timer_ms))
        clock_ms = store.next_clock_ms()
        if clock_ms is not None or clock_before_ms is not None:
            outputs.append(report_row(CLOCK, self.clock_stream, bucket, clock_ms))
        return outputs


def _frames(outputs: list[OutputRow]) -> Iterator[pd.DataFrame]:
    if outputs:
        yield output_frame(outputs)


def _write_outputs(running: RunningProcessor, workspace: Workspace, batch: DataFrame) -> None:
    """Write one micro-batch's productions and dead letters to Kafka, in one write."""
    counts = running._outputs.write(
        batch,
        on_clock=running._clock.report if running._clock is not None else None,
        on_timers=running._timers.report if running._timers is not None else None,
    )
    running.productions += counts[PRODUCTION]
    running.dead_letters += counts[DEAD_LETTER]
    running.late += counts[LATE]
    running.duplicates += counts[DUPLICATE]
