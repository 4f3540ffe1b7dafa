"""The rows of a processor's Spark operator: input rows in key buckets, and output rows.

Streaming (`millrace.apps.processors.streaming`) and batch (`millrace.apps.processors.batch`) runs
of a processor share them. Raw Kafka records become input rows with `placed_rows`, which
reads each value's key and event time before the shuffle, to find its key's bucket
(`bucket_of`): in the JVM for key fields, in Python for a key function. In its bucket,
`input_rows` reads a group's rows back and `record_of` makes each a `Record` for the
execution core, which is given the event time found before the shuffle. What the core gives
back becomes output rows (`output_rows_of`, `undecodable_letter`,
`report_row`) of schema `OUTPUT_SCHEMA`, one kind each: productions and dead letters, which
`millrace.apps.processors.outputs` writes, and the late records, duplicates and bucket
reports that are only counted or handed to the driver.

Example:
    >>> row = InputRow("clicks", b'{"user": "u7", "ts": 1767225600000}', "u7", "3f2a", 0, 41,
    ...                None, 1_767_225_600_000)
    >>> record_of(row).value["user"]
    'u7'
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.pandas.functions import pandas_udf

from millrace.apps.processors.bucket_store import canonical_key, canonical_text
from millrace.bus.dead_letters import dead_letter_id, dead_letter_value
from millrace.bus.streams import dead_letter_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.event_time import carried_millis, event_millis, future_dated_reason
from millrace.engine.headers import record_id_column
from millrace.engine.low_watermark import MARKER_MS, WRITTEN, marker_columns
from millrace.processor.execution import BatchOutcome, DeadLetter
from millrace.processor.keys import Key
from millrace.processor.processor import Input
from millrace.records import Record, RecordDecodeError, decode_value, placeable_time_ms

if TYPE_CHECKING:
    from pyspark.sql._typing import UserDefinedFunctionLike

OUTPUT_SCHEMA = "kind STRING, stream STRING, key STRING, value STRING, id STRING, time STRING"
"""The Spark schema of the operator's output rows, in the order of `OutputRow`'s fields."""

ARRIVAL_MS = "arrival_ms"
"""The column of `placed_rows` holding a record's append time on the bus (epoch ms)."""
PRODUCTION = "production"
"""The kind of an output row that is a processor's production, written to its stream."""
DEAD_LETTER = "dead_letter"
"""The kind of an output row that is a dead letter, written to a dead-letter stream."""
LATE = "late"
"""The kind of an output row that counts a record that came behind the watermark."""
DUPLICATE = "duplicate"
"""The kind of an output row that counts a copy of a record already processed."""
CLOCK = "clock"
"""The kind of a bucket's report of its earliest processing-time timer, for the driver's
`ProcessorClock` (`millrace.apps.processors.wakeups`)."""
TIMERS = "timers"
"""The kind of a bucket's report of its earliest event-time timer, when it changed, for the
driver's `PendingTimers` (`millrace.apps.processors.pending_timers`)."""
NOT_WRITTEN = (LATE, DUPLICATE, CLOCK, TIMERS)
"""The kinds of output rows that are counted or reported, never written to a stream."""


class InputRow(NamedTuple):
    """One input record as the bucket runner receives it; `time_ms` is None when unreadable.

    `fault` says why a record that is a JSON object is a dead letter all the same (it is
    dated too far ahead of its arrival), and is None for the others.

    Example:
        >>> InputRow("clicks", b'{"user": "u7"}', "u7", None, 0, 41, None, None).time_ms is None
        True
    """

    stream: str
    value: bytes | None
    record_key: str | None
    record_id: str | None
    record_bucket: int
    record_offset: int
    fault: str | None
    time_ms: int | None


class OutputRow(NamedTuple):
    """One row of the operator's output, in the order of `OUTPUT_SCHEMA`.

    `kind` is one of `PRODUCTION`, `DEAD_LETTER` and the `NOT_WRITTEN` kinds; `time` is a
    production's event time as epoch ms text, for its `time` header.

    Example:
        >>> OutputRow(PRODUCTION, "counts", "u7", '{"n":3}', "counter:u7:1", "1767225600000").kind
        'production'
    """

    kind: str
    stream: str
    key: str | None
    value: str | None
    id: str | None
    time: str | None = None


def bucket_of(key: object, buckets: int) -> int:
    """The hash bucket of `key`: the same for keys Python finds equal, on every machine.

    Example:
        >>> bucket_of("cats", 64) == bucket_of("cats", 64)
        True
        >>> bucket_of(1, 64) == bucket_of(1.0, 64)
        True
    """
    return zlib.crc32(canonical_text(key).encode()) % buckets


def input_max_future_ms(workspace: Workspace, source: Input) -> int:
    """How far ahead of its arrival a record of `source` may be dated, in ms.

    The input's own `max_future`, else the workspace's setting.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> input_max_future_ms(workspace, Input("clicks", key="user", time="ts", max_future="1m"))
        60000
        >>> input_max_future_ms(workspace, Input("clicks", key="user", time="ts"))
        300000
    """
    if source.max_future is None:
        return workspace.settings.max_future_ms
    return parse_duration_ms(source.max_future, what="max_future")


def event_time_of(
    value: Mapping[str, object],
    arrival_ms: int,
    carried_ms: int | None,
    *,
    source: Input,
    max_future_ms: int,
) -> int | None:
    """A record's event time as the runtime takes it; None where it dead-letters the record.

    `value` is the record's JSON object, `carried_ms` the time its `time` header carries.

    Example:
        >>> clicks = Input("clicks", key="user", time="ts")
        >>> event_time_of({"user": "u7", "ts": 1_767_225_600_000}, 1_767_225_601_000, None,
        ...               source=clicks, max_future_ms=60_000)
        1767225600000
    """
    try:
        time_ms = _time_in(source, value, carried_ms)
    except Exception:
        return None
    return placeable_time_ms(time_ms, arrival_ms, max_future_ms)


def placed_rows(raw: DataFrame, source: Input, buckets: int, max_future_ms: int) -> DataFrame:
    """Kafka records of `source` (streaming or not) as the bucket runner's input rows.

    A record's event time is its Input's time field, else the time its `time` header carries.

    A record dated more than `max_future_ms` ahead of its arrival keeps no time (so it moves
    no watermark), and its `fault` says why: the bucket runner makes it a dead letter. A
    record dated before 1970 keeps no time either, and the execution core, reading it again,
    makes it a dead letter. The rows have the `marker_columns` too: the watermark markers
    among them are for `low_watermarked`, and no reader's records; and `ARRIVAL_MS`, for the
    input's metrics, which the bucket runner is not given.
    """
    if isinstance(source.key, str | tuple):
        with_placement = _placed_in_spark(raw, source, source.key, buckets)
    else:
        carried_ms = carried_millis(F.col("headers"))
        placement = _placement(source, buckets)(F.col("value"), carried_ms)
        with_placement = raw.select(
            "*",
            placement.getField("bucket").alias(_BUCKET),
            placement.getField("time_ms").alias(_TIME_MS),
        )
    # Spark's watermark starts at 1970 and never goes back: an earlier time would be late.
    read_ms = F.when(F.col(_TIME_MS) >= 0, F.col(_TIME_MS))
    read_time = F.timestamp_millis(read_ms)
    fault = future_dated_reason(read_time, F.col("timestamp"), max_future_ms)
    placed = with_placement.select(
        F.lit(source.stream).alias("stream"),
        F.col(_BUCKET).alias("bucket"),
        read_time.alias("_read_time"),
        read_ms.alias("_read_ms"),
        F.col("value"),
        F.col("key").cast("string").alias("record_key"),
        # Another producer's empty id is no id: the record is known by its place, not dropped
        # as a copy of every other record with an empty id.
        record_id_column().alias("record_id"),
        F.col("partition").alias("record_bucket"),
        F.col("offset").alias("record_offset"),
        fault.alias("fault"),
        F.unix_millis(F.col("timestamp")).alias(ARRIVAL_MS),
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
        ARRIVAL_MS,
        MARKER_MS,
        WRITTEN,
    )


def _time_in(source: Input, record: Mapping[str, object], carried_ms: int | None) -> int:
    """A record's event time: its Input's time field, else the time its `time` header carries.

    Raises `ProcessorError` when the field holds no time, or is missing and nothing is carried.
    """
    if carried_ms is not None and record.get(source.time) is None:
        return carried_ms
    return source.time_of(record)


def _placed_in_spark(
    raw: DataFrame, source: Input, key: str | tuple[str, ...], buckets: int
) -> DataFrame:
    """`raw` with each record's key bucket (`_BUCKET`) and event time (`_TIME_MS`), by Spark.

    The key is field `key`, or the tuple of the fields `key` names: millrace's Spark
    extension reads it and the time field with one parse in the JVM (`millrace_key_and_time`),
    as the canonical text whose CRC-32 `bucket_of` takes, so a record's bucket is the one
    Python gives its key. It means what `_placement` means, but ISO-8601 text is read as every
    Spark reader of millrace reads it (`millrace.engine.event_time`). Each step is a projection
    of its own: Spark then computes the parse and the time once a record, rather than inlining
    them where they are used.
    """
    names = F.array(*map(F.lit, key)) if isinstance(key, tuple) else F.lit(key)
    parse = F.call_function(_KEY_AND_TIME, F.col("value"), names, F.lit(source.time))
    parsed = raw.select("*", parse.alias(_PARSED))
    key_text, text, number = (
        F.col(f"{_PARSED}.{field}") for field in ("key", "time_text", "time_number")
    )
    carried = F.when(text.isNull() & number.isNull(), carried_millis(F.col("headers")))
    time_ms = F.when(key_text.isNotNull(), F.coalesce(carried, event_millis(text, number)))
    timed = parsed.select("*", time_ms.alias(_TIME_MS))
    bucket = F.pmod(F.crc32(F.encode(key_text, "UTF-8")), F.lit(buckets)).cast("int")
    return timed.select(
        "*", F.when(F.col(_TIME_MS).isNotNull(), bucket).otherwise(0).alias(_BUCKET)
    ).drop(_PARSED)


_KEY_AND_TIME = "millrace_key_and_time"
_PARSED, _BUCKET, _TIME_MS = "_millrace_key_and_time", "_millrace_bucket", "_millrace_time_ms"


def _placement(source: Input, buckets: int) -> UserDefinedFunctionLike:
    """A vectorised UDF: each raw value's key bucket and event time (null when unreadable).

    The placement of an Input whose key is a function, which only Python can call: every
    record's value is parsed in Python for it, a pass that reading the key from a field
    (`_placed_in_spark`) does not take.
    """

    def place(
        value: bytes | None, carried_ms: int | None, known: dict[Key, int]
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
    struct_udf: Callable[[Callable[..., pd.DataFrame]], UserDefinedFunctionLike]
    struct_udf = pandas_udf("bucket INT, time_ms LONG")  # type: ignore[call-overload]

    @struct_udf
    def placement(values: pd.Series, carried: pd.Series) -> pd.DataFrame:
        # The buckets of the keys seen in this Arrow batch: a key's bucket is hashed once.
        known: dict[Key, int] = {}
        # A LONG column with nulls arrives as floats.
        carried_ms = _integers(carried)
        return pd.DataFrame(
            [place(value, ms, known) for value, ms in zip(values, carried_ms, strict=True)],
            columns=["bucket", "time_ms"],
        ).astype({"bucket": "int32", "time_ms": "Int64"})

    return placement


def input_rows(frame: pd.DataFrame) -> Iterator[InputRow]:
    """A bucket's rows from one of Spark's frames, read column by column.

    Example:
        >>> frame = pd.DataFrame({"stream": ["clicks"], "value": [b'{"user": "u7"}'],
        ...     "record_key": ["u7"], "record_id": [None], "record_bucket": [0],
        ...     "record_offset": [41], "fault": [None], "time_ms": [1_767_225_600_000]})
        >>> next(input_rows(frame)).record_offset
        41
    """
    columns = (
        _integers(frame[name]) if name in _INTEGER_FIELDS else frame[name].tolist()
        for name in InputRow._fields
    )
    return map(InputRow._make, zip(*columns, strict=True))


# An INT or LONG column with a null arrives as floats: a record's time when unreadable, and
# its bucket and offset when a wake-up (which has neither) came in the same Arrow batch. A
# float bucket would make "0.0" of the place in a dead letter and in the ids made of it.
_INTEGER_FIELDS = frozenset({"record_bucket", "record_offset", "time_ms"})


def _integers(column: pd.Series) -> list[int | None]:
    """The column's values as ints, None for null (Int64 turns floats back into ints and NA)."""
    # pandas-stubs leave NA out of the type of an Int64 column's tolist().
    return [None if value is pd.NA else value for value in column.astype("Int64").tolist()]  # type: ignore[comparison-overlap]


def record_of(row: InputRow) -> Record:
    """The record of an input row, with its event time found before the shuffle.

    Raises `RecordDecodeError` when the value is not a JSON object, or has a `fault`.

    Example:
        >>> record_of(InputRow("clicks", b'{"user": "u7"}', "u7", None, 0, 41, None, 5)).time_ms
        5
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


def undecodable_letter(name: str, row: InputRow, error: str) -> OutputRow:
    """The dead letter of a record processor `name` cannot read: not a JSON object, no time.

    It has the fields of every processor's dead letter (`LETTER_FIELDS`), with no key (none
    could be read) and no timer, and the id every millrace reader gives the letter of the
    record at that place, so that a reader drops the letters that several readers wrote.

    Example:
        >>> letter = undecodable_letter(
        ...     "counter", InputRow("clicks", b"oops", None, None, 0, 41, None, None), "no JSON")
        >>> letter.stream, sorted(json.loads(letter.value)) == sorted(LETTER_FIELDS)
        ('clicks.dlq', True)
    """
    original = bytes(row.value or b"")
    fields = _letter_fields(
        name,
        None,
        dead_letter_value(error, row.stream, row.record_bucket, row.record_offset, original),
    )
    return OutputRow(
        DEAD_LETTER,
        dead_letter_stream(row.stream),
        row.record_key,
        json.dumps(fields),
        dead_letter_id(row.stream, row.record_bucket, row.record_offset),
    )


def output_rows_of(name: str, outcome: BatchOutcome) -> list[OutputRow]:
    """The operator's output rows for one run of the execution core by processor `name`.

    Example:
        >>> from millrace.processor import Production
        >>> late = Record("clicks", 0, 41, "u7", "3f2a", 1_767_225_600_000, {"user": "u7"})
        >>> count = Production("counts", {"n": 3}, "u7", 1_767_225_600_000, "a1")
        >>> outcome = BatchOutcome(states={}, productions=[count], dead_letters=[], late=[late],
        ...                        duplicates=[], max_event_time_ms={})
        >>> [row.kind for row in output_rows_of("counter", outcome)]
        ['production', 'late']
    """
    outputs = [
        OutputRow(
            PRODUCTION,
            production.stream,
            _routing_key(production.key),
            json.dumps(production.value, separators=(",", ":"), ensure_ascii=False),
            production.id,
            _text_or_none(production.time_ms),
        )
        for production in outcome.productions
    ]
    outputs.extend(_processor_letter(name, letter) for letter in outcome.dead_letters)
    outputs.extend(OutputRow(LATE, record.stream, None, None, record.id) for record in outcome.late)
    outputs.extend(
        OutputRow(DUPLICATE, record.stream, None, None, record.id) for record in outcome.duplicates
    )
    return outputs


def report_row(kind: str, stream: str, bucket: int, time_ms: int | None) -> OutputRow:
    """A bucket's report (`CLOCK` or `TIMERS`) of its earliest timer; None when it has none.

    Example:
        >>> report_row(TIMERS, "", 3, 1_767_225_610_000).value
        '1767225610000'
    """
    return OutputRow(kind, stream, str(bucket), _text_or_none(time_ms), "")


def output_frame(rows: Iterable[OutputRow]) -> pd.DataFrame:
    """Output rows as the pandas frame Spark's operator returns, with `OUTPUT_SCHEMA`'s columns.

    Example:
        >>> list(output_frame([]).columns)
        ['kind', 'stream', 'key', 'value', 'id', 'time']
    """
    return pd.DataFrame(list(rows), columns=list(OutputRow._fields))


def _text_or_none(time_ms: int | None) -> str | None:
    return None if time_ms is None else str(time_ms)


LETTER_FIELDS = (
    "error",
    "processor",
    "key",
    "stream",
    "bucket",
    "offset",
    "original",
    "original_base64",
    "timer",
)
"""The fields of every dead letter of a processor, whatever its cause; those that do not
apply are null (a timer's letter has no record, a record's letter no timer)."""


def _letter_fields(name: str, key: object, found: dict[str, object]) -> dict[str, object]:
    """A processor's dead letter: `found` (the error and what it is about) in every field."""
    return {field: None for field in LETTER_FIELDS} | {"processor": name, "key": key} | found


def _processor_letter(name: str, letter: DeadLetter) -> OutputRow:
    """A record's dead letter goes to its stream's; a timer's to the processor's own."""
    record = letter.record
    if record is not None:
        original = json.dumps(record.value, separators=(",", ":"), ensure_ascii=False)
        found = dead_letter_value(
            letter.error, record.stream, record.bucket, record.offset, original.encode()
        )
        target = dead_letter_stream(record.stream)
        letter_id = f"{name}:{dead_letter_id(record.stream, record.bucket, record.offset)}"
    else:
        timer = letter.timer
        assert timer is not None  # a dead letter holds a record or a timer
        found = {
            "error": letter.error,
            "timer": {"tag": timer.tag, "time_ms": timer.time_ms, "domain": timer.domain},
        }
        target = dead_letter_stream(name)
        letter_id = f"{name}:dlq:timer:{_canonical_text(letter.key)}:{timer.tag}:{timer.time_ms}"
    fields = _letter_fields(name, letter.key, found)
    return OutputRow(
        DEAD_LETTER, target, _routing_key(letter.key), json.dumps(fields, default=repr), letter_id
    )


def _canonical_text(key: object) -> str:
    return json.dumps(canonical_key(key), separators=(",", ":"), default=repr)


def _routing_key(key: object) -> str | None:
    if key is None or isinstance(key, str):
        return key
    return _canonical_text(key)
