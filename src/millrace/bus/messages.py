"""Consumed Kafka messages as records: a message's value, event time, key and id headers.

The record itself (`millrace.records`) knows nothing of Kafka; this module reads a consumed
`confluent_kafka.Message` into one, for every Python reader of the bus.
"""

from __future__ import annotations

from typing import cast

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from millrace.errors import BusError, PublishError
from millrace.records import (
    ID_HEADER,
    LARGEST_EPOCH_MS,
    TIME_HEADER,
    Record,
    RecordDecodeError,
    before_1970_reason,
    decode_value,
    future_dated_reason,
    record_time_ms,
)


def decode_message(message: Message, time_field: str, max_future_ms: int | None = None) -> Record:
    """Turn a consumed Kafka message into a `Record`.

    The event time is `record_time_ms`'s: the value's `time_field`, else the `time` header,
    else the Kafka timestamp, the record's arrival time. Raises `RecordDecodeError` when the
    value is not a JSON object or its time cannot be read; with `max_future_ms`, as every
    reader of records does, also when the record is dated before 1970 or more than that
    ahead of its arrival, with the words the Spark readers give (`millrace.records`).
    """
    value = decode_value(message.value() or b"")
    timestamp_type, timestamp = message.timestamp()
    arrival_ms = None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp
    try:
        time_ms = record_time_ms(value, time_field, carried_time_ms(message), arrival_ms)
    except PublishError as error:
        raise RecordDecodeError(error.message) from None
    if max_future_ms is not None and time_ms is not None:
        unplaceable = before_1970_reason(time_ms) or (
            None if arrival_ms is None else future_dated_reason(time_ms, arrival_ms, max_future_ms)
        )
        if unplaceable is not None:
            raise RecordDecodeError(unplaceable)
    key = message.key()
    stream, bucket, offset = origin(message)
    return Record(
        stream=stream,
        bucket=bucket,
        offset=offset,
        key=key.decode("utf-8", errors="replace") if key is not None else None,
        id=header(message, ID_HEADER),
        time_ms=time_ms,
        value=value,
    )


def origin(message: Message) -> tuple[str, int, int]:
    """The stream, bucket and offset of `message`, set on each message a consumer returns.

    Example:
        >>> origin(Message(topic="clicks", partition=2, offset=41))
        ('clicks', 2, 41)
    """
    stream, bucket, offset = message.topic(), message.partition(), message.offset()
    if stream is None or bucket is None or offset is None:
        raise BusError(
            f"a message came without its place: stream {stream}, bucket {bucket}, offset {offset}",
            hint="only a message that a consumer returned has a place in a stream",
        )
    return stream, bucket, offset


def carried_time_ms(message: Message) -> int | None:
    """The event time `message` carries in its `time` header; None without a readable one."""
    text = header(message, TIME_HEADER)
    if text is None or not text.isascii() or not text.lstrip("-").isdigit():
        return None
    time_ms = int(text)
    return time_ms if abs(time_ms) < LARGEST_EPOCH_MS else None


def header(message: Message, name: str) -> str | None:
    """The first value of header `name` of `message` as text; None when absent or empty."""
    # A consumed message's headers are (key, bytes) pairs; the stubs' type, shared with the
    # producer's argument, also allows a dict and str values.
    headers = cast("list[tuple[str, bytes | None]]", message.headers() or [])
    for key, value in headers:
        if key == name and value is not None:
            # Another producer's empty header is no value: as an id it would be every record's.
            return value.decode("utf-8", errors="replace") or None
    return None
