"""Running a processor in batch over a stored range of event times, with the streaming results.

`run_processor_batch` reads the records its inputs hold now, keeps those whose event time is
in `[start_ms, end_ms)`, places them in the same key buckets as the streaming runtime
(`millrace.apps.processors.streaming`), as the same input rows (`millrace.apps.processors.rows`),
and runs each bucket through the same execution core in two steps:

1. every record of the bucket, in the order of its stream's buckets and offsets (the order a
   streaming run reads them in), as one micro-batch with no watermark yet, so none is late;
2. a micro-batch of no records with the watermark at `end_ms`: every event-time timer up to
   the end of the range fires, in time order per key, as the streaming watermark would fire
   them on its way there.

Productions and dead letters are written to Kafka as the streaming runtime writes them, each
with its deterministic id. With `source="warehouse"` the records come from the inputs'
archives instead of the bus (a backfill, `millrace.apps.backfill`), and `into` keeps only
the productions to the streams it names. State is not kept: a batch run starts from no state
and its state is thrown away, so it neither reads nor changes the checkpoint of the streaming
app.

A batch run gives the productions of a streaming run over the same records when the
processor's output does not depend on how records are split into micro-batches: it acts on
records only once the watermark has passed them (as `examples/sessions.py` does) or only
aggregates them until a timer fires (as windows and `examples/zeitgeist.py` do). The values
are then the same; the ids are the same where the same callbacks produce them (a timer that
fires once per window gives the same id; one firing that closes several seconds at once, as
after a jump of the watermark, numbers its productions within that firing). Unlike a
streaming run, records that came later than their input's lateness are processed, as in the
batch runs of SQL apps.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.apps.processors.errors import (
    processor_error_in,
    require_inputs,
    worker_error_text,
    worker_start_error,
)
from millrace.apps.processors.lookups import ServingLookups, require_tables
from millrace.apps.processors.outputs import OutputWriter
from millrace.apps.processors.placement import bucket_count
from millrace.apps.processors.rows import (
    ARRIVAL_MS,
    DEAD_LETTER,
    LATE,
    OUTPUT_SCHEMA,
    PRODUCTION,
    OutputRow,
    input_max_future_ms,
    input_rows,
    output_frame,
    output_rows_of,
    placed_rows,
    record_of,
    undecodable_letter,
)
from millrace.config.workspace import Workspace
from millrace.engine.dead_letter_routing import create_dead_letter_stream
from millrace.engine.event_time import carried_time, event_time_column, from_1970
from millrace.engine.headers import record_id_column
from millrace.engine.low_watermark import MARKER_MS, WRITTEN
from millrace.errors import ProcessorError
from millrace.processor.execution import run_batch
from millrace.processor.lookups import LookupSource
from millrace.processor.processor import Input, Processor
from millrace.records import JsonMapping, RecordDecodeError
from millrace.warehouse.archive import RecordSource, read_archive, read_records


@dataclass
class ProcessorBatchRun:
    """What a batch run of a processor wrote: productions and dead letters, by count.

    `late` is always 0, since a batch run processes every record of its range; `streams` are
    the output streams it wrote to.
    """

    processor: type[Processor]
    start_ms: int
    end_ms: int
    productions: int = 0
    dead_letters: int = 0
    late: int = 0
    streams: set[str] = field(default_factory=set)


def run_processor_batch(
    spark: SparkSession,
    workspace: Workspace,
    processor_class: type[Processor],
    *,
    start_ms: int,
    end_ms: int,
    buckets: int | None = None,
    source: RecordSource = "bus",
    into: Collection[str] | None = None,
) -> ProcessorBatchRun:
    """Run `processor_class` once over its inputs' records with event times in the range.

    Times are epoch milliseconds, `end_ms` not included. The keys are spread over `buckets`
    (by default `bucket_count`'s). The records are read from the bus, or from the inputs'
    archives with `source="warehouse"`; `into`, when given, names the streams whose
    productions are written (the others are left out). Records whose value is not a JSON
    object, or has no readable time, go to their stream's dead letters whatever their time,
    with the ids a streaming run gives them, so a reader drops the letters both wrote.
    """
    processor_class.validate()
    if start_ms >= end_ms:
        raise ProcessorError(
            f"the batch range of {processor_class.name!r} is empty: {start_ms} to {end_ms}",
            hint="give an end after the start",
        )
    require_inputs(workspace, processor_class)
    require_tables(workspace.settings.redis, getattr(processor_class, "lookups", {}))
    for stream_input in processor_class.inputs:
        create_dead_letter_stream(workspace, stream_input.stream)
    if processor_class.on_error == "dlq":
        create_dead_letter_stream(workspace, processor_class.name)
    buckets = bucket_count(processor_class, buckets)
    # `validate` requires at least one input.
    records = functools.reduce(
        DataFrame.unionByName,
        [
            _read_range(spark, workspace, stream_input, buckets, start_ms, end_ms, source)
            for stream_input in processor_class.inputs
        ],
    )
    outputs = records.groupBy("bucket").applyInPandas(
        _bucket_function(
            processor_class,
            end_ms,
            processing_time_ms=int(time.time() * 1000),
            lookups=ServingLookups(
                workspace.settings.redis, workspace.settings.redis_lookup_cache_s
            ),
        ),
        schema=OUTPUT_SCHEMA,
    )
    if into is not None:
        outputs = outputs.where((F.col("kind") != PRODUCTION) | F.col("stream").isin(*into))
    run = ProcessorBatchRun(processor_class, start_ms, end_ms)
    writer = OutputWriter(spark, workspace, processor_class.name)
    try:
        counts = writer.write(outputs)
    except Exception as error:
        raise (
            processor_error_in(str(error))
            or worker_start_error(str(error), processor_class.name)
            or error
        ) from None
    run.streams = set(writer.streams)
    run.productions = counts[PRODUCTION]
    run.dead_letters = counts[DEAD_LETTER]
    run.late = counts[LATE]
    return run


def archived_input(spark: SparkSession, workspace: Workspace, source: Input) -> DataFrame:
    """The archived records of input `source`, with the event time the processor reads them at.

    Columns: `record_id`, `key` and `value` as text, `event_time` (the Input's time field,
    else the time the record's `time` header carries; NULL where neither gives a time from
    1970 on), `bucket`, `offset` and `timestamp` (the record's arrival on the bus).
    """
    archived = read_archive(spark, workspace, source.stream)
    given = event_time_column(
        F.get_json_object(F.col("value").cast("string"), f"$.{source.time}"),
        carried_time(F.col("headers")),
    )
    return archived.select(
        record_id_column().alias("record_id"),
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.when(from_1970(given), given).alias("event_time"),
        F.col("partition").alias("bucket"),
        "offset",
        "timestamp",
    )


def _read_range(
    spark: SparkSession,
    workspace: Workspace,
    source: Input,
    buckets: int,
    start_ms: int,
    end_ms: int,
    origin: RecordSource,
) -> DataFrame:
    """The input rows of `source` in the range, and its unreadable records, in batch."""
    raw = read_records(spark, workspace, source.stream, origin)
    placed = (
        placed_rows(raw, source, buckets, input_max_future_ms(workspace, source))
        .where(F.col(MARKER_MS).isNull())
        .drop("event_time", ARRIVAL_MS, MARKER_MS, WRITTEN)
    )
    # A null time is an unreadable record: it goes on, to be dead-lettered in its bucket.
    return placed.where(
        placed.time_ms.isNull() | ((placed.time_ms >= start_ms) & (placed.time_ms < end_ms))
    )


def _bucket_function(
    processor_class: type[Processor],
    end_ms: int,
    *,
    processing_time_ms: int,
    lookups: LookupSource,
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The function `applyInPandas` runs on each bucket's rows: the two steps of the module."""
    name = processor_class.name

    def run_bucket(frame: pd.DataFrame) -> pd.DataFrame:
        rows = sorted(
            input_rows(frame),
            key=lambda row: (row.stream, row.record_bucket, row.record_offset),
        )
        outputs: list[OutputRow] = []
        records = []
        for row in rows:
            try:
                records.append(record_of(row))
            except RecordDecodeError as error:
                outputs.append(undecodable_letter(name, row, str(error)))
        processor = processor_class()
        try:
            first = run_batch(
                processor,
                {},
                records,
                watermark_ms=None,
                processing_time_ms=processing_time_ms,
                lookups=lookups,
            )
            stored = {key: state for key, state in first.states.items() if state is not None}
            for key, first_stored in stored.items():
                _require_no_clock(name, key, first_stored)
            last = run_batch(
                processor,
                stored,
                [],
                watermark_ms=end_ms,
                processing_time_ms=processing_time_ms,
                lookups=lookups,
            )
            for key, last_stored in last.states.items():
                if last_stored is not None:
                    _require_no_clock(name, key, last_stored)
        except ProcessorError as error:
            raise RuntimeError(worker_error_text(error)) from error
        outputs.extend(output_rows_of(name, first))
        outputs.extend(output_rows_of(name, last))
        return output_frame(outputs)

    return run_bucket


def _require_no_clock(name: str, key: object, key_stored: JsonMapping) -> None:
    """A batch run replays stored event times: a timer waiting for the wall clock stops it."""
    for tag, (domain, _) in key_stored.get("timers", {}).items():
        if domain == "processing_time":
            raise ProcessorError(
                f"processor {name!r} set processing-time timer {tag!r} for key {key!r}, and a "
                "batch run has no wall clock to wait for",
                hint="run the processor streaming (without --batch), where processing-time "
                "timers fire when the clock reaches them, or use event-time timers",
            )
