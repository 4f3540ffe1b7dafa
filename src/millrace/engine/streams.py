"""Streams as Spark DataFrames: decoding with dead-letter routing, and writing back to the bus.

`read_stream` turns a stream into a streaming DataFrame of typed columns, the event time as a
TIMESTAMP column, and the record's id, key, bucket and offset. Every record that is not a JSON
object, does not fit the declared schema, or holds an unreadable time or one that cannot be
placed (before 1970, or too far ahead of its arrival) goes to `<stream>.dlq` with the reason,
and is counted: the queries reading the DataFrame count them, and a `DeadLetterRouter` writes
them after each micro-batch that had any.
`read_batch` reads the records of an event-time range into a DataFrame that is not streaming,
with the same columns, and routes the bad records the same way, at once; it reads them from
the bus, or from the stream's archive in the warehouse with the same decoding.
`write_stream` writes a DataFrame to a stream, or to a stream named per row. A record without
a key goes to a bucket chosen by its id (`bucket_by_id`), unless its stream is named per row.
Each record written carries its event time in its `time` header (`written_time`), which a
reader takes when the value has no time field of its name.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

from millrace.bus.client_config import spark_kafka_options
from millrace.bus.markers import WRITER_HEADER
from millrace.bus.streams import (
    describe_stream,
    require_stream,
)
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.dead_letter_routing import (
    DeadLetterRouter,
    dead_letter_records,
    write_dead_letters,
)
from millrace.engine.delivery import drop_duplicate_records
from millrace.engine.headers import header_text
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
from millrace.engine.triggers import Trigger
from millrace.errors import PublishError, SchemaError
from millrace.records import (
    EPOCH_MS_THRESHOLD,
    ID_HEADER,
    LARGEST_EPOCH_MS,
    TIME_HEADER,
    record_time_ms,
)
from millrace.warehouse.archive import read_archive

RECORD_COLUMNS = ("record_id", "record_key", "record_bucket", "record_offset")
"""Columns `read_stream` adds beside the declared ones; `write_stream` leaves them out."""
RECORD_TIME = "record_time"
"""A column a writer takes as each record's event time, for its `time` header, not its value."""

_CORRUPT = "_millrace_corrupt"
_FAST = "_millrace_fast"
_SLOW = "_millrace_slow"
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class StreamInput:
    """A stream read by Spark: its good records, and how its dead letters were routed.

    A streaming read routes them with `dead_letters`, after the micro-batches of the queries
    that read `records`; a batch read (`read_batch`) has routed them before it returns, and
    keeps their number in `batch_dead_letters`.
    """

    stream: str
    records: DataFrame
    dead_letters: DeadLetterRouter | None
    batch_dead_letters: int = 0
    ticker: IdleTicker | None = None

    def close(self) -> None:
        """Stop routing dead letters and ticking idle buckets; call it once the queries stop."""
        if self.dead_letters is not None:
            self.dead_letters.close()
        if self.ticker is not None:
            self.ticker.close()

    @property
    def dead_letter_count(self) -> int:
        """Records routed to the dead-letter stream by this read so far."""
        if self.dead_letters is None:
            return self.batch_dead_letters
        return self.dead_letters.routed

    def wait_for_dead_letters(self, *queries: StreamingQuery) -> int:
        """Route the bad records of all that `queries` have committed; the total routed.

        Call it once they have stopped, or after `processAllAvailable`, before reading the
        dead-letter stream: routing follows the micro-batches, a moment later.
        """
        if self.dead_letters is None:
            return self.batch_dead_letters
        return self.dead_letters.wait(*queries)


def read_stream(
    spark: SparkSession,
    workspace: Workspace,
    app: str,
    stream: str,
    schema: str | StructType,
    *,
    time: str,
    lateness: str | None = None,
    starting_offsets: str = "earliest",
    route_dead_letters: bool = True,
    max_records_per_batch: int | None = None,
    deduplicate: bool = True,
    max_future: str | None = None,
    idle_timeout: str | None = None,
) -> StreamInput:
    """Decode `stream` into a streaming DataFrame, and start routing its dead letters.

    `schema` declares the value's fields (a DDL string such as `"event STRING, score DOUBLE"`
    or a StructType); `time` names the field holding the event time (ISO-8601 or epoch ms or
    s; when a record lacks it, its arrival time is used). A record dated more than
    `max_future` ahead of its arrival (default: the setting `events.max_future`) is a dead
    letter. The bad records are routed after each micro-batch of a query reading the
    DataFrame that counted some (see `millrace.engine.dead_letter_routing`); the router keeps
    its place under the app's checkpoint folder. `route_dead_letters=False` routes nothing,
    for looking at the plan. `max_records_per_batch` caps the records each micro-batch reads
    (by default, all there are), shared evenly among the buckets.

    With `lateness`, the DataFrame has the input's low watermark (see
    `millrace.engine.low_watermark`): the least, over the stream's buckets, of each bucket's
    largest event time minus `lateness`. With `idle_timeout` too (for a query that runs on,
    not one that stops at the end of its input), a bucket read to its end whose last record
    came that long ago stops holding the watermark back: the StreamInput's `ticker` moves it
    on with the wall clock until `close`.

    With `lateness` and `deduplicate` (the default, for exactly-once), a record whose id an
    earlier record had is dropped, within the watermark horizon, and so is a record whose event
    time is behind the watermark when it comes, as late (see
    `millrace.engine.delivery.drop_duplicate_records`). Without `lateness` there is no
    horizon, and nothing is dropped.
    A record without an id header gets its place as id: `<stream>:<bucket>:<offset>`.
    """
    require_stream(workspace.settings, stream)
    fields = _value_fields(schema, time)
    max_future_ms = _max_future_ms(workspace, max_future)
    buckets = read_buckets(
        spark,
        workspace,
        stream,
        starting_offsets=starting_offsets,
        max_records_per_batch=max_records_per_batch,
    )
    router = None
    if route_dead_letters:
        router = DeadLetterRouter(
            spark,
            workspace,
            app,
            stream,
            lambda batch: _dead_letters(
                _decode(batch, fields, time, stream, max_future_ms),
                fields,
                time,
                stream,
                max_future_ms,
            ),
            starting_offsets=starting_offsets,
        )
    lateness_ms = None if lateness is None else parse_duration_ms(lateness, what="lateness")
    # The tick source is part of the plan whether or not a ticker runs, so that a checkpoint
    # holds the same sources in a run to the end of input as in a live run.
    ticks = None if lateness_ms is None else read_ticks(spark, workspace, app, stream)
    branches = []
    for bucket, raw in enumerate(buckets):
        decoded = _decode(raw, fields, time, stream, max_future_ms)
        decoded = decoded.observe(
            bucket_metrics_name(app, stream, bucket),
            F.count_if(F.col("_bad")).alias("bad"),
            F.count_if(F.col("_time_read").isNotNull() & F.col("_event_time").isNull()).alias(
                "future"
            ),
            F.max(_progress_ms()).alias("max_ms"),
            F.count(MARKER_MS).alias("markers"),
        )
        good = _good_records(decoded, fields, time, markers=lateness_ms is not None)
        if lateness_ms is not None:
            good = bucket_watermarked(
                good, time=time, lateness_ms=lateness_ms, ticks=ticks, bucket=bucket
            )
        branches.append(good)
    records = union_buckets(branches)
    if lateness_ms is not None and deduplicate:
        records = drop_duplicate_records(records)
    ticker = None
    if ticks is not None and idle_timeout is not None:
        ticker = IdleTicker(
            spark,
            workspace,
            app,
            stream,
            run=ticks.run,
            time_of=functools.partial(_time_of, time=time, max_future_ms=max_future_ms),
            idle_timeout_ms=parse_duration_ms(idle_timeout, what="idle timeout"),
        )
    return StreamInput(stream, records, router, ticker=ticker)


def _max_future_ms(workspace: Workspace, max_future: str | None) -> int:
    if max_future is None:
        return workspace.settings.max_future_ms
    return parse_duration_ms(max_future, what="max_future")


def _time_of(
    value: dict, arrival_ms: int, carried_ms: int | None, *, time: str, max_future_ms: int
) -> int | None:
    """A record's event time as a streaming read takes it; None where it would dead-letter it."""
    try:
        time_ms = record_time_ms(value, time, carried_ms, arrival_ms)
    except PublishError:
        return None
    if time_ms is None or time_ms < 0 or time_ms - arrival_ms > max_future_ms:
        return None
    return time_ms


def read_batch(
    spark: SparkSession,
    workspace: Workspace,
    stream: str,
    schema: str | StructType,
    *,
    time: str,
    start_ms: int,
    end_ms: int,
    route_dead_letters: bool = True,
    source: str = "bus",
    max_future: str | None = None,
) -> StreamInput:
    """Decode the records of `stream` whose event time is in `[start_ms, end_ms)`, in batch.

    The records are those of `read_stream`, with the same columns, in a DataFrame that is not
    streaming: from the first record the stream keeps to the last it holds when `read_batch`
    is called, so every action on the DataFrame sees the same records. With
    `route_dead_letters`, the bad records of the whole read go to `<stream>.dlq` before
    `read_batch` returns, whatever their time, since an unreadable time cannot be placed in
    the range; each keeps the id a streaming read gives it, so a reader can drop the
    letters that both wrote. Times are epoch milliseconds.

    `source="warehouse"` reads the stream's archive (see `millrace.warehouse.archive`) instead
    of the bus, as it is when `read_batch` is called: the archived records are the bus's
    own, decoded by the same code, so the columns, the records kept and the dead letters
    (with their ids) are those of a read from the bus over the same records.
    """
    if source not in ("bus", "warehouse"):
        raise ValueError(f"source must be 'bus' or 'warehouse', not {source!r}")
    fields = _value_fields(schema, time)
    raw = (
        _read_bus(spark, workspace, stream)
        if source == "bus"
        else read_archive(spark, workspace, stream)
    )
    max_future_ms = _max_future_ms(workspace, max_future)
    decoded = _decode(raw, fields, time, stream, max_future_ms)
    records = _good_records(decoded, fields, time).where(
        (F.col(time) >= F.timestamp_millis(F.lit(start_ms)))
        & (F.col(time) < F.timestamp_millis(F.lit(end_ms)))
    )
    if not route_dead_letters:
        return StreamInput(stream, records, None)
    count = write_dead_letters(
        workspace, stream, _dead_letters(decoded, fields, time, stream, max_future_ms)
    )
    return StreamInput(stream, records, None, batch_dead_letters=count)


def _read_bus(spark: SparkSession, workspace: Workspace, stream: str) -> DataFrame:
    """Every record `stream` holds now, as Kafka's batch reader gives them."""
    # The end offsets are fixed here, not at each action, so that everything a run derives
    # from this read (dead letters, results, outputs) comes from the same records. This also
    # raises `StreamNotFoundError` for a missing stream.
    ends = {
        str(bucket.bucket): bucket.end_offset
        for bucket in describe_stream(workspace.settings, stream).buckets
    }
    return (
        spark.read.format("kafka")
        .options(**spark_kafka_options(workspace.settings))
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({stream: ends}))
        .option("includeHeaders", "true")
        .load()
    )


def write_stream(
    records: DataFrame,
    workspace: Workspace,
    app: str,
    query: str,
    stream: str | Column,
    *,
    key: str | None = None,
    output_mode: str = "append",
    available_now: bool = False,
    trigger: Trigger | None = None,
    marked: bool = False,
) -> StreamingQuery:
    """Start a query named `<app>.<query>` that writes `records` to a stream as JSON.

    `stream` is a stream name, or a column naming each row's stream (those streams must
    exist). `key` names the column used as the routing key. The value holds every column but
    the `RECORD_COLUMNS` and `RECORD_TIME`; the `id` header is the `record_id` column when
    there is one, and the `time` header the event time `written_time` gives each record.
    `trigger`, when given, sets when micro-batches run (`available_now` is its shorthand).
    `marked` says that app `app` publishes its output watermark to `stream` as markers
    (`millrace.engine.output_watermark`): each record then carries the app's name in its
    `writer` header, so that readers follow the markers rather than the records' times.
    """
    buckets = None
    if isinstance(stream, str):
        buckets = require_stream(workspace.settings, stream)
        stream = F.lit(stream)
    output = _as_kafka_records(records, stream, key, None, buckets, app if marked else None)
    writer = (
        output.writeStream.format("kafka")
        .queryName(f"{app}.{query}")
        .outputMode(output_mode)
        .options(**spark_kafka_options(workspace.settings))
        .option("kafka.linger.ms", "5")
        .option("checkpointLocation", str(workspace.checkpoint(app, query)))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = trigger.apply(writer, f"{app}.{query}", foreach_batch=False)
    return writer.start()


def write_batch(
    records: DataFrame,
    workspace: Workspace,
    stream: str,
    *,
    key: Column | None = None,
    record_id: Column | None = None,
    writer: str | None = None,
) -> None:
    """Write a DataFrame that is not streaming, such as one micro-batch, to `stream`.

    `record_id` gives each record's id (default: the `record_id` column, else a random one);
    a deterministic id lets readers drop a batch written twice. `writer` names the app whose
    markers tell the records' progress, as `write_stream`'s `marked` does.
    """
    buckets = require_stream(workspace.settings, stream)
    (
        _as_kafka_records(records, F.lit(stream), key, record_id, buckets, writer)
        .write.format("kafka")
        .options(**spark_kafka_options(workspace.settings))
        .save()
    )


def _as_kafka_records(
    records: DataFrame,
    stream: Column,
    key: str | Column | None,
    record_id: Column | None,
    buckets: int | None,
    writer: str | None,
) -> DataFrame:
    """The columns Spark's Kafka sink writes: topic, key, JSON value, headers, and bucket.

    The headers are the id, the `writer` when given, and, when `written_time` finds one, the
    record's event time.

    The bucket is set for a record without a key when the stream's bucket count is known
    (`bucket_by_id`); a keyed record goes to its key's bucket. (A generated `uuid()` id is
    drawn again for the hash: as even a spread, not tied to the id.)
    """
    if record_id is None:
        record_id = F.col("record_id") if "record_id" in records.columns else F.expr("uuid()")
    if isinstance(key, str):
        key = F.col(key)
    value_columns = [name for name in records.columns if name not in (*RECORD_COLUMNS, RECORD_TIME)]
    headers = F.array(
        F.struct(F.lit(ID_HEADER).alias("key"), record_id.cast("binary").alias("value"))
    )
    if writer is not None:
        headers = F.array_append(
            headers,
            F.struct(
                F.lit(WRITER_HEADER).alias("key"), F.lit(writer).cast("binary").alias("value")
            ),
        )
    time = written_time(records)
    if time is not None:
        time_text = F.unix_millis(time).cast("string").cast("binary")
        timed = F.array_append(
            headers, F.struct(F.lit(TIME_HEADER).alias("key"), time_text.alias("value"))
        )
        headers = F.when(time.isNull(), headers).otherwise(timed)
    columns = [
        stream.alias("topic"),
        (key.cast("string") if key is not None else F.lit(None).cast("string")).alias("key"),
        F.to_json(F.struct(*value_columns)).alias("value"),
        headers.alias("headers"),
    ]
    if buckets is not None:
        columns.append(bucket_by_id(record_id, key, F.lit(buckets)).alias("partition"))
    return records.select(*columns)


def written_time(records: DataFrame) -> Column | None:
    """Each record's event time as a writer carries it: `RECORD_TIME`, else its window's.

    A windowed result's time is its window's last millisecond (`window_end` minus 1 ms, as
    in Beam and Flink): it falls in the same window downstream, and is not before the
    watermark that closed the window. None when `records` has neither column, and the
    records are then known by their arrival time.
    """
    types = dict(records.dtypes)
    if types.get(RECORD_TIME) == "timestamp":
        return F.col(RECORD_TIME)
    if types.get("window_end") == "timestamp":
        return F.timestamp_millis(F.unix_millis("window_end") - 1)
    return None


def carried_time(headers: Column) -> Column:
    """The event time a Kafka record carries in its `time` header, as a TIMESTAMP; else NULL."""
    return F.timestamp_millis(carried_millis(headers))


def carried_millis(headers: Column) -> Column:
    """The event time a Kafka record carries in its `time` header, as epoch ms; else NULL.

    `headers` is the record's headers column, as Kafka's reader gives it.
    """
    time_ms = header_text(headers, TIME_HEADER).try_cast("long")
    return F.when(F.abs(time_ms) < LARGEST_EPOCH_MS, time_ms)


def bucket_by_id(record_id: Column, key: Column | None, buckets: Column) -> Column:
    """The bucket Kafka's sink is to write a record without a key to: a hash of its id.

    Null for a keyed record, which Kafka's producer places by its key's hash, and where
    `buckets` is null. Left to Kafka's producer, records without a key go to one bucket until
    its batch fills, and under load to the bucket with the shorter queue: tens of thousands
    in a row to one bucket were seen. A reader's watermark is the largest event time over all
    buckets, so the records of the bucket left behind would come late. Chosen by a hash of
    the record's id, each record's bucket is drawn anew, so the buckets advance together; and
    a copy that a re-run writes lands where its original did.
    """
    by_id = F.pmod(F.xxhash64(record_id), buckets).cast("int")
    unkeyed = F.lit(True) if key is None else key.isNull()
    return F.when(unkeyed, by_id)


def _value_fields(schema: str | StructType, time: str) -> list[StructField]:
    if isinstance(schema, str):
        try:
            parsed = StructType.fromDDL(schema) if schema.strip() else StructType([])
        except Exception as error:
            raise SchemaError(
                f"schema {schema!r} is not valid: {_first_line(error)}",
                hint="write it like 'event STRING, score DOUBLE'",
            ) from None
        if not isinstance(parsed, StructType):
            raise SchemaError(
                f"schema {schema!r} is a type, not a list of fields",
                hint="write it like 'event STRING, score DOUBLE'",
            )
        schema = parsed
    for field in schema.fields:
        if field.name in RECORD_COLUMNS:
            raise SchemaError(
                f"column {field.name!r} is reserved for the record's metadata",
                hint=f"rename the field; reserved names: {', '.join(RECORD_COLUMNS)}",
            )
        if not _FIELD_NAME.match(field.name):
            raise SchemaError(
                f"column {field.name!r} is not a plain name",
                hint="use letters, digits and '_', starting with a letter or '_'",
            )
        if field.name == time and not isinstance(field.dataType, TimestampType):
            raise SchemaError(
                f"time column {time!r} is declared {field.dataType.simpleString().upper()}",
                hint="declare it TIMESTAMP or leave it out: it is always read as a TIMESTAMP",
            )
    if not _FIELD_NAME.match(time):
        raise SchemaError(
            f"time column {time!r} is not a plain name",
            hint="use letters, digits and '_', starting with a letter or '_'",
        )
    return [field for field in schema.fields if field.name != time]


def _decode(
    raw: DataFrame, fields: list[StructField], time: str, stream: str, max_future_ms: int
) -> DataFrame:
    """Every Kafka record with its parsed value, its event time and whether it is bad (`_bad`).

    Each record is parsed in Spark's PERMISSIVE mode, which keeps the whole text of a value
    that is not a JSON object or has a field that does not fit its type. The time field is
    parsed as a number (`_fast`), as most producers write it. A record whose time the text
    gives as a JSON string, and one that this parse does not take whole, is parsed (again)
    with the time field as text (`_slow`), from which the time is read as an ISO-8601 time or
    an epoch number: so a record means the same whichever parse took it. Read `_field` for a
    declared field, `_time_raw` for the time's text where the text parse took it and
    `_time_number` for it as a number.

    A record is bad when it has no value, when its text was kept so, when its time cannot
    be read (a record without the field takes the time its `time` header carries, else its
    arrival time), when it is before 1970-01-01 (`_time_given` holds it, `_time_read` is NULL), or
    when its time is more than `max_future_ms` ahead of its arrival (then its `_event_time`
    is NULL, so that it moves no watermark). Why it is bad is worked out only for the bad
    ones, for their dead letters (`_error_reason`): the good records pass without it.
    """
    text = F.col("value").cast("string")
    time_as_text = F.contains(text, F.lit(f'"{time}":"')) | F.contains(text, F.lit(f'"{time}": "'))
    with_parts = raw.select(
        F.col("value").alias("_bytes"),
        text.alias("_text"),
        F.col("key").cast("string").alias("record_key"),
        F.col("partition").alias("record_bucket"),
        F.col("offset").alias("record_offset"),
        F.coalesce(
            record_id_column(),
            # The stream's name, not Kafka's `topic` column: an archive has none.
            F.concat_ws(":", F.lit(stream), F.col("partition"), F.col("offset")),
        ).alias("record_id"),
        # Spark would push a filter on `_bad` below this projection, pasting the parse into
        # each of the many references to the parsed value and parsing every record a dozen
        # times; it pushes no filter through a nondeterministic column, so each parse is made
        # one. A time given as text would fail the numeric parse record by record, each
        # failure a thrown exception, so such records skip it.
        F.when(
            (F.spark_partition_id() >= 0) & ~time_as_text, _parse(text, fields, time, True)
        ).alias(_FAST),
        F.col("timestamp").alias("_kafka_time"),
        F.col("headers").alias("_headers"),
        *marker_columns(F.col("value"), F.col("headers")),
    )
    fast_whole = F.col(_FAST).isNotNull() & F.col(f"{_FAST}.{_CORRUPT}").isNull()
    with_parts = with_parts.withColumn(
        _SLOW,
        F.when(
            (F.spark_partition_id() >= 0) & ~fast_whole,
            _parse(F.col("_text"), fields, time, False),
        ),
    )
    with_parts = with_parts.withColumn("_time_raw", F.col(f"{_SLOW}.`{time}`")).withColumn(
        "_time_number",
        F.when(F.col(_SLOW).isNotNull(), F.col("_time_raw").try_cast("double")).otherwise(
            F.col(f"{_FAST}.`{time}`")
        ),
    )
    # The header is read only for a record without the field: most carry their time in both.
    with_parts = with_parts.withColumn(
        "_time_given",
        event_time_column(
            F.col("_time_raw"),
            F.coalesce(carried_time(F.col("_headers")), F.col("_kafka_time")),
            number=F.col("_time_number"),
        ),
    )
    with_parts = with_parts.withColumn(
        "_time_read", F.when(_from_1970(F.col("_time_given")), F.col("_time_given"))
    )
    ahead_ms = F.unix_millis("_time_read") - F.unix_millis("_kafka_time")
    with_parts = with_parts.withColumn(
        "_event_time", F.when(ahead_ms <= max_future_ms, F.col("_time_read"))
    )
    bad = F.col(MARKER_MS).isNull() & (_unparsed() | ~_valid_utf8() | F.col("_event_time").isNull())
    # Nondeterministic for the same reason as the parses: the filter on `_bad` then tests a
    # column computed once, instead of recomputing the event time and the checks inside it.
    return with_parts.withColumn("_bad", F.when(F.spark_partition_id() >= 0, bad))


def _parse(text: Column, fields: list[StructField], time: str, numeric_time: bool) -> Column:
    """`text` parsed as JSON with `fields`, the time field as a DOUBLE or as text (STRING)."""
    # Spark fills a STRING field with the JSON text of any value (a number's digits, a
    # string's characters), so the text parse reads every record's time.
    time_type = DoubleType() if numeric_time else StringType()
    schema = StructType(
        [*fields, StructField(time, time_type), StructField(_CORRUPT, StringType())]
    )
    return F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})


def _field(name: str) -> Column:
    """Declared field `name` of a record of `_decode`, from whichever parse took the record."""
    return F.when(F.col(_SLOW).isNotNull(), F.col(f"{_SLOW}.`{name}`")).otherwise(
        F.col(f"{_FAST}.`{name}`")
    )


def _progress_ms() -> Column:
    """How far a row of `_decode` moves its bucket on (epoch ms), as its watermark sees it.

    A marker moves it to its promise; a record no millrace app wrote, to its event time.
    """
    return F.when(F.col(MARKER_MS).isNotNull(), F.col(MARKER_MS)).when(
        ~F.col(WRITTEN), F.unix_millis("_event_time")
    )


def _valid_utf8() -> Column:
    """Whether a record's value is UTF-8, as JSON is: Spark would read other bytes as U+FFFD."""
    # On the text the parses read, which the rows carry anyway, not on a cast of `_bytes` of
    # its own: the check runs on every record.
    return F.col("_text").isNull() | F.expr("is_valid_utf8(_text)")


def _from_1970(time: Column) -> Column:
    """Whether `time` is 1970-01-01 or later: Spark's watermark starts there, never goes back."""
    return time >= F.timestamp_millis(F.lit(0))


def _unparsed() -> Column:
    """Whether a decoded record has no value or one that is not an object fitting the schema."""
    # The text parse ran unless the numeric one took the record whole.
    no_value = F.col(_SLOW).isNull() & F.col(_FAST).isNull()
    return no_value | F.col(f"{_SLOW}.{_CORRUPT}").isNotNull()


def event_time_column(raw: Column, arrival: Column, number: Column | None = None) -> Column:
    """The event time that the text `raw` of a time field holds, as a TIMESTAMP.

    `raw` is the field's JSON text: ISO-8601, or epoch milliseconds or seconds. A NULL `raw`
    (no such field) gives `arrival`; text that is no time gives NULL, and so does a number
    too large for a TIMESTAMP (rather than stopping the query with Spark's overflow error).
    `number` is the field read as a DOUBLE where that is known (then `raw` may be NULL):
    `raw` as a number, by default.
    """
    as_number = raw.try_cast("double") if number is None else number
    milliseconds = F.when(F.abs(as_number) >= EPOCH_MS_THRESHOLD, as_number).otherwise(
        as_number * 1000
    )
    # Spark orders NaN above every number, so NaN and the infinities are out of range too.
    in_range = F.abs(milliseconds) < LARGEST_EPOCH_MS
    return (
        F.when(raw.isNull() & as_number.isNull(), arrival)
        .when(in_range, F.timestamp_millis(milliseconds.cast("long")))
        .when(as_number.isNull(), raw.try_cast("timestamp"))
    )


def record_id_column() -> Column:
    """A Kafka record's id: its `id` header's value, NULL when empty or missing.

    Reads the record's `headers` column, as Kafka's reader or an archive gives it.
    """
    # Another producer's empty header is no id: the record gets its place, as without one.
    return F.nullif(header_text(F.col("headers"), ID_HEADER), F.lit(""))


def _good_records(
    decoded: DataFrame, fields: list[StructField], time: str, *, markers: bool = False
) -> DataFrame:
    """The records of `decoded` that are not bad: declared fields, event time, metadata.

    With `markers`, the watermark markers too, with the `marker_columns`, for
    `bucket_watermarked`; without, they are left out, as from every reader.
    """
    good = decoded.where(~F.col("_bad"))
    columns: list[Column | str] = [
        *[_field(field.name).alias(field.name) for field in fields],
        F.col("_event_time").alias(time),
        *RECORD_COLUMNS,
    ]
    if markers:
        return good.select(*columns, MARKER_MS, WRITTEN)
    return good.where(F.col(MARKER_MS).isNull()).select(*columns)


def _error_reason(fields: list[StructField], time: str, max_future_ms: int) -> Column:
    """Why a record of `_decode` is bad, for its dead letter; NULL for a good record."""
    variant = F.expr("try_parse_json(_text)")
    field_reasons = [
        F.when(
            F.get_json_object("_text", f"$.{field.name}").isNotNull() & _field(field.name).isNull(),
            F.concat(
                F.lit(
                    f"field '{field.name}' should be "
                    f"{field.dataType.simpleString().upper()} but holds "
                ),
                F.get_json_object("_text", f"$.{field.name}"),
            ),
        )
        for field in fields
    ]
    mismatches = F.concat_ws("; ", *field_reasons) if field_reasons else F.lit("")
    corrupt = _unparsed()
    return (
        F.when(F.col("_bytes").isNull(), F.lit("value is empty"))
        .when(~_valid_utf8(), F.lit("value is not valid UTF-8"))
        .when(corrupt & variant.isNull(), F.lit("value is not valid JSON"))
        .when(
            corrupt
            & ~F.startswith(F.expr("schema_of_variant(try_parse_json(_text))"), F.lit("OBJECT")),
            F.lit("value is JSON but not an object"),
        )
        .when(
            corrupt,
            F.concat(
                F.lit("value does not fit the schema: "),
                F.coalesce(F.nullif(mismatches, F.lit("")), F.lit("a field has the wrong type")),
            ),
        )
        .when(
            ~_from_1970(F.col("_time_given")),
            F.concat(
                F.lit("event time "),
                F.date_format("_time_given", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
                F.lit(" is before 1970-01-01, which Spark cannot place in event time"),
            ),
        )
        .when(
            F.col("_time_read").isNotNull() & F.col("_event_time").isNull(),
            future_dated_reason(F.col("_time_read"), F.col("_kafka_time"), max_future_ms),
        )
        .when(
            F.col("_event_time").isNull(),
            F.concat(
                F.lit(f"time field '{time}' holds "),
                F.coalesce(F.col("_time_raw"), F.get_json_object("_text", f"$.{time}")),
                F.lit(
                    ", which is neither an ISO-8601 time nor an epoch number in a TIMESTAMP's range"
                ),
            ),
        )
    )


def _dead_letters(
    decoded: DataFrame, fields: list[StructField], time: str, stream: str, max_future_ms: int
) -> DataFrame:
    """The bad records of `decoded` as dead letters, with the reason and the original bytes."""
    return dead_letter_records(
        decoded.where(F.col("_bad")),
        stream,
        error=_error_reason(fields, time, max_future_ms),
        original=F.col("_text"),
        original_base64=F.base64("_bytes"),
    )


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
