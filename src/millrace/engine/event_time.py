"""Event time in Spark columns: the twin of the event-time parser in `millrace.records`.

A record's event time is read in Python by `millrace.records` (the publishers, the Reader,
the processor core, the idle ticker) and in Spark by the columns here (every streaming or
batch read of a stream, the archive). Each column computes what its namesake there computes,
with the same rules and the same words, so that a record means the same to every reader:

| `millrace.records` | here |
| --- | --- |
| `event_time_ms` (ISO-8601, or epoch ms or s) | `event_time_column`, `event_millis` |
| the `time` header (`time_header`) | `carried_millis`, `carried_time` |
| `before_1970_reason` | `from_1970`, `before_1970_reason` |
| `future_dated_reason` | `future_dated_reason` |
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.engine.headers import header_text
from millrace.records import EPOCH_MS_THRESHOLD, LARGEST_EPOCH_MS, TIME_HEADER


def event_time_column(raw: Column, arrival: Column, number: Column | None = None) -> Column:
    """The event time that the text `raw` of a time field holds, as a TIMESTAMP.

    `raw` is the field's JSON text: ISO-8601, or epoch milliseconds or seconds. A NULL `raw`
    (no such field) gives `arrival`; text that is no time gives NULL, and so does a number
    too large for a TIMESTAMP (rather than stopping the query with Spark's overflow error).
    `number` is the field read as a DOUBLE where that is known (then `raw` may be NULL):
    `raw` as a number, by default.
    """
    as_number = raw.try_cast("double") if number is None else number
    from_number = _epoch_millis(as_number)
    return (
        F.when(raw.isNull() & as_number.isNull(), arrival)
        .when(from_number.isNotNull(), F.timestamp_millis(from_number))
        .when(as_number.isNull(), raw.try_cast("timestamp"))
    )


def event_millis(text: Column, number: Column) -> Column:
    """The epoch ms `event_time_ms` reads from a time field: its `number`, else its ISO `text`.

    `number` is the field where it is a JSON number, `text` where it is a string (or any other
    JSON value, which is no time); NULL where the field holds no time. The ms are Python's to
    the digit: an ISO-8601 time's are its seconds as a double times 1,000, truncated, as
    `int(datetime.timestamp() * 1000)` makes them.
    """
    seconds = F.unix_micros(text.try_cast("timestamp")) / 1_000_000
    return F.when(number.isNotNull(), _epoch_millis(number)).otherwise(
        (seconds * 1000).cast("long")
    )


def _epoch_millis(number: Column) -> Column:
    """Epoch ms or s as ms (a LONG), as `event_time_ms` reads a number; NULL out of its range."""
    milliseconds = F.when(F.abs(number) >= EPOCH_MS_THRESHOLD, number).otherwise(number * 1000)
    # Spark orders NaN above every number, so NaN and the infinities are out of range too.
    return F.when(F.abs(milliseconds) < LARGEST_EPOCH_MS, milliseconds.cast("long"))


def carried_time(headers: Column) -> Column:
    """The event time a Kafka record carries in its `time` header, as a TIMESTAMP; else NULL."""
    return F.timestamp_millis(carried_millis(headers))


def carried_millis(headers: Column) -> Column:
    """The event time a Kafka record carries in its `time` header, as epoch ms; else NULL.

    `headers` is the record's headers column, as Kafka's reader gives it.
    """
    time_ms = header_text(headers, TIME_HEADER).try_cast("long")
    return F.when(F.abs(time_ms) < LARGEST_EPOCH_MS, time_ms)


def from_1970(time: Column) -> Column:
    """Whether `time` is 1970-01-01 or later: Spark's watermark starts there, never goes back."""
    return time >= F.timestamp_millis(F.lit(0))


def before_1970_reason(time: Column) -> Column:
    """Spark's form of `millrace.records.before_1970_reason`: the same words, for any time.

    `time` is a TIMESTAMP column; the caller picks the rows dated before 1970 (`from_1970`).
    """
    return F.concat(
        F.lit("event time "),
        _iso_ms(time),
        F.lit(" is before 1970-01-01, which Spark cannot place in event time"),
    )


def future_dated_reason(time: Column, arrival: Column, max_future_ms: int) -> Column:
    """Spark's form of `millrace.records.future_dated_reason`: the same words, or NULL.

    `time` and `arrival` are TIMESTAMP columns.
    """
    ahead_ms = F.unix_millis(time) - F.unix_millis(arrival)
    return F.when(
        ahead_ms > max_future_ms,
        F.concat(
            F.lit("event time "),
            _iso_ms(time),
            F.lit(" is "),
            ahead_ms.cast("string"),
            F.lit(" ms ahead of its arrival time "),
            _iso_ms(arrival),
            F.lit(f", more than max_future ({max_future_ms} ms)"),
        ),
    )


def _iso_ms(moment: Column) -> Column:
    return F.date_format(moment, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
