"""Streams read as Spark DataFrames: decoding, with dead-letter routing.

`read_stream` turns a stream into a streaming DataFrame of typed columns, the event time as a
TIMESTAMP column, and the record's id, key, bucket and offset. Every record that is not a JSON
object, does not fit the declared schema, or holds an unreadable time or one that cannot be
placed (before 1970, or too far ahead of its arrival) goes to `<stream>.dlq` with the reason,
and is counted: the queries reading the DataFrame count them, and a `DeadLetterRouter` writes
them after each micro-batch that had any.
`read_batch` reads the records of an event-time range into a DataFrame that is not streaming,
with the same columns, and routes the bad records the same way, at once; it reads them from
the bus, or decodes the ones it is given (a stream's archive) with the same code. Writing
back to the bus is `millrace.engine.writes`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructField, StructType, TimestampType

from millrace.bus.streams import require_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine import kafka
from millrace.engine.dead_letter_routing import (
    DeadLetterRouter,
    dead_letter_records,
    write_dead_letters,
)
from millrace.engine.delivery import drop_duplicate_records
from millrace.engine.event_time import (
    before_1970_reason,
    carried_time,
    event_time_column,
    from_1970,
    future_dated_reason,
)
from millrace.engine.headers import record_id_column
from millrace.engine.kafka import StartingOffsets
from millrace.engine.low_watermark import (
    MARKER_MS,
    WRITTEN,
    IdleTicker,
    low_watermarked,
    marker_columns,
    observed_input,
    read_input,
    read_ticks,
)
from millrace.errors import PublishError, SchemaError
from millrace.records import placeable_time_ms, record_time_ms

RECORD_COLUMNS = ("record_id", "record_key", "record_bucket", "record_offset")
"""Columns `read_stream` adds beside the declared ones; `write_stream` leaves them out."""
RECORD_TIME = "record_time"
"""A column a writer takes as each record's event time, for its `time` header, not its value."""

_PARSED = "_millrace_parsed"
# The fields of millrace's Spark extension's `ParseValue` beside the declared ones.
_TIME_TEXT, _TIME_NUMBER, _CORRUPT = (
    "_millrace_time_text",
    "_millrace_time_number",
    "_millrace_corrupt",
)
_PARSE_VALUE = "millrace_parse_value"
_IS_UTF8 = "millrace_is_utf8"
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
    starting_offsets: StartingOffsets = "earliest",
    route_dead_letters: bool = True,
    max_records_per_batch: int | None = None,
    deduplicate: bool = True,
    max_future: str | None = None,
    idle_timeout: str | None = None,
    publishes_markers: bool = True,
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
    on with the wall clock until `close`, while a query reading the DataFrame holds state, or
    always when `publishes_markers` (the app writes streams, whose readers its watermark moves).

    With `lateness` and `deduplicate` (the default, for exactly-once), a record whose id an
    earlier record had is dropped, within the watermark horizon, and so is a record whose event
    time is behind the watermark when it comes, as late (see
    `millrace.engine.delivery.drop_duplicate_records`). Without `lateness` there is no
    horizon, and nothing is dropped.
    A record without an id header gets its place as id: `<stream>:<bucket>:<offset>`.
    """
    buckets = require_stream(workspace.settings, stream)
    fields = _value_fields(schema, time)
    max_future_ms = _max_future_ms(workspace, max_future)
    raw = read_input(
        spark,
        workspace,
        stream,
        starting_offsets=starting_offsets,
        max_records_per_batch=max_records_per_batch,
    )
    lateness_ms = None if lateness is None else parse_duration_ms(lateness, what="lateness")
    idle_timeout_ms = (
        None if idle_timeout is None else parse_duration_ms(idle_timeout, what="idle timeout")
    )
    # What this starts (a router, a ticker) stops if the rest of the read fails.
    with ExitStack() as started:
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
            started.callback(router.close)
        # The tick source is part of the plan whether or not a ticker runs, so that a
        # checkpoint holds the same sources in a run to the end of input as in a live run.
        ticks = None if lateness_ms is None else read_ticks(spark, workspace, app, stream)
        decoded = observed_input(
            _decode(raw, fields, time, stream, max_future_ms),
            app,
            stream,
            bad=F.col("_bad"),
            future=F.col("_time_read").isNotNull() & F.col("_event_time").isNull(),
            time_ms=F.unix_millis("_event_time"),
            arrival_ms=F.unix_millis("_kafka_time"),
        )
        records = _good_records(decoded, fields, time, markers=lateness_ms is not None)
        if lateness_ms is not None:
            records = low_watermarked(
                records, time=time, lateness_ms=lateness_ms, buckets=buckets, ticks=ticks
            )
        if lateness_ms is not None and deduplicate:
            records = drop_duplicate_records(records)
        ticker = None
        if ticks is not None and idle_timeout_ms is not None:
            ticker = IdleTicker(
                spark,
                workspace,
                app,
                stream,
                run=ticks.run,
                time_of=functools.partial(_time_of, time=time, max_future_ms=max_future_ms),
                idle_timeout_ms=idle_timeout_ms,
                publishes_markers=publishes_markers,
            )
        started.pop_all()
    return StreamInput(stream, records, router, ticker=ticker)


def _max_future_ms(workspace: Workspace, max_future: str | None) -> int:
    if max_future is None:
        return workspace.settings.max_future_ms
    return parse_duration_ms(max_future, what="max_future")


def _time_of(
    value: Mapping[str, object],
    arrival_ms: int,
    carried_ms: int | None,
    *,
    time: str,
    max_future_ms: int,
) -> int | None:
    """A record's event time as a streaming read takes it; None where it would dead-letter it."""
    try:
        time_ms = record_time_ms(value, time, carried_ms, arrival_ms)
    except PublishError:
        return None
    return None if time_ms is None else placeable_time_ms(time_ms, arrival_ms, max_future_ms)


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
    kafka_records: DataFrame | None = None,
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

    `kafka_records` are the records to decode instead, with the columns of Kafka's reader:
    `millrace.warehouse.archive.read_archive` gives a stream's archive, the bus's own records
    decoded by the same code, so the columns, the records kept and the dead letters (with
    their ids) are those of a read from the bus over the same records.
    """
    fields = _value_fields(schema, time)
    raw = (
        kafka.read_now(spark, workspace.settings, stream)
        if kafka_records is None
        else kafka_records
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

    Each value is parsed once, in the JVM, by millrace's Spark extension (`ParseValue`): as
    Spark's `from_json` in PERMISSIVE mode would, with the time field as a number or, where the
    text gives it as a JSON string (or the numeric parse does not take the value whole), as
    text, from which the time is read as an ISO-8601 time or an epoch number: so a record means
    the same however its time is written. Read `_field` for a declared field, `_time_raw` for
    the time's text where the text parse took it and `_time_number` for it as a number.

    A record is bad when it has no value, when it is not a JSON object fitting the schema,
    when its time cannot be read (a record without the field takes the time its `time` header
    carries, else its arrival time), when it is before 1970-01-01 (`_time_given` holds it,
    `_time_read` is NULL), or when its time is more than `max_future_ms` ahead of its arrival
    (then its `_event_time` is NULL, so that it moves no watermark). Why it is bad is worked
    out only for the bad ones, for their dead letters (`_error_reason`): the good records pass
    without it.
    """
    with_parts = raw.select(
        F.col("value").alias("_bytes"),
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
        # times; it pushes no filter through a nondeterministic column, so the parse is made
        # once.
        F.when(F.spark_partition_id() >= 0, _parse(F.col("value"), fields, time)).alias(_PARSED),
        F.col("timestamp").alias("_kafka_time"),
        F.col("headers").alias("_headers"),
        *marker_columns(F.col("value"), F.col("headers")),
    )
    with_parts = with_parts.withColumn("_time_raw", F.col(f"{_PARSED}.{_TIME_TEXT}")).withColumn(
        "_time_number",
        F.coalesce(F.col(f"{_PARSED}.{_TIME_NUMBER}"), F.col("_time_raw").try_cast("double")),
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
        "_time_read", F.when(from_1970(F.col("_time_given")), F.col("_time_given"))
    )
    ahead_ms = F.unix_millis("_time_read") - F.unix_millis("_kafka_time")
    with_parts = with_parts.withColumn(
        "_event_time", F.when(ahead_ms <= max_future_ms, F.col("_time_read"))
    )
    bad = F.col(MARKER_MS).isNull() & (_unparsed() | ~_valid_utf8() | F.col("_event_time").isNull())
    # Nondeterministic for the same reason as the parses: the filter on `_bad` then tests a
    # column computed once, instead of recomputing the event time and the checks inside it.
    return with_parts.withColumn("_bad", F.when(F.spark_partition_id() >= 0, bad))


def _parse(value: Column, fields: list[StructField], time: str) -> Column:
    """The bytes `value` parsed as a JSON object with `fields` and the time field `time`.

    A struct of the fields, `_TIME_TEXT`, `_TIME_NUMBER` and `_CORRUPT` (millrace's Spark
    extension, `ParseValue`, says what each holds); NULL for a value with no JSON in it.
    """
    schema = StructType(fields).json()
    return F.call_function(_PARSE_VALUE, value, F.lit(schema), F.lit(time))


def _field(name: str) -> Column:
    """Declared field `name` of a record of `_decode`, from whichever parse took the record."""
    return F.col(f"{_PARSED}.`{name}`")


def _valid_utf8() -> Column:
    """Whether a record's value is UTF-8, as JSON is: Spark would read other bytes as U+FFFD."""
    # millrace's Spark extension (`IsUtf8`): Spark's `is_valid_utf8` by its rule, with ASCII
    # proved eight bytes at a time, since the check runs on every record.
    return F.col("_bytes").isNull() | F.call_function(_IS_UTF8, F.col("_bytes"))


def _unparsed() -> Column:
    """Whether a decoded record has no value or one that is not an object fitting the schema."""
    return F.col(_PARSED).isNull() | F.col(f"{_PARSED}.{_CORRUPT}")


def _good_records(
    decoded: DataFrame, fields: list[StructField], time: str, *, markers: bool = False
) -> DataFrame:
    """The records of `decoded` that are not bad: declared fields, event time, metadata.

    With `markers`, the watermark markers too, with the `marker_columns`, for
    `low_watermarked`; without, they are left out, as from every reader.
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
        .when(~from_1970(F.col("_time_given")), before_1970_reason(F.col("_time_given")))
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
    bad = decoded.where(F.col("_bad")).withColumn("_text", F.col("_bytes").cast("string"))
    return dead_letter_records(
        bad,
        stream,
        error=_error_reason(fields, time, max_future_ms),
        original=F.col("_text"),
        original_base64=F.base64("_bytes"),
    )


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
