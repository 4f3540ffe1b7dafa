"""The record every layer shares: its value, its event time and its id.

A record is a JSON object value holding the event time in its time field, a routing key, an
`id` header and, from millrace's writers, a `time` header: the record's event time as epoch
milliseconds in decimal text. The bus's timestamp is the arrival time. A reader takes a
record's event time from its value's time field when it has one, else from its `time`
header, else it is the arrival time (`record_time_ms`).

This module owns `Record`, reading and checking event times, fresh record ids, and encoding
and decoding record values. It sits below every package and loads no Kafka, Redis or Spark:
the processor core and its tester use it without them, and `millrace.bus.messages` turns
consumed Kafka messages into `Record`s.

Example:
    >>> Record("clicks", 0, 41, "u7", new_record_id(), 1_767_225_600_000, {"page": "/"}).bucket
    0
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from millrace.errors import PublishError

ID_HEADER = "id"
TIME_HEADER = "time"
"""The header in which millrace's writers carry a record's event time, as epoch ms text."""
EPOCH_MS_THRESHOLD = 100_000_000_000
"""Epoch times at or above this are milliseconds: as seconds they would be after year 5000."""
LARGEST_EPOCH_MS = 2**63 // 1000
"""Epoch milliseconds a TIMESTAMP can hold (its microseconds fill 64 bits), either side of 1970."""

JsonObject = dict[str, Any]  # Any: its values are any JSON the user sends; readers narrow them
"""A JSON object, such as a record's value: its fields hold whatever JSON the user sends."""
JsonMapping = Mapping[str, Any]  # Any: as in JsonObject, read but not changed
"""A `JsonObject` as a parameter that only reads it, so that any mapping of JSON will do."""


@dataclass(frozen=True)
class Record:
    """One record of a stream, as a reader sees it.

    Example:
        >>> record = Record("clicks", 0, 41, "user-7", "3f2a", 1_700_000_000_000, {"page": "/"})
        >>> record.value["page"]
        '/'
    """

    stream: str
    bucket: int
    offset: int
    key: str | None
    id: str | None
    time_ms: int | None
    value: JsonObject


class RecordDecodeError(ValueError):
    """A consumed message whose value is not a UTF-8 JSON object; the message says why."""


def new_record_id() -> str:
    """A fresh, unique record id: 32 hex digits, 80 random bits then a 48-bit counter.

    The random part is drawn once per process (again after a fork), which makes ids several
    times cheaper than a random UUID each, on the publisher's hot path.
    """
    return f"{_id_prefix}{next(_id_counter):012x}"


def _new_id_prefix() -> None:
    global _id_prefix, _id_counter  # per-process state, drawn again after a fork
    _id_prefix = os.urandom(10).hex()
    _id_counter = itertools.count()


_id_prefix = ""
_id_counter = itertools.count()
_new_id_prefix()
os.register_at_fork(after_in_child=_new_id_prefix)


def encode_event(event: object) -> bytes:
    """The UTF-8 JSON bytes of `event`, which must be a JSON object (a mapping).

    Datetimes and dates are written as ISO-8601 strings. Raises `PublishError` for anything
    JSON cannot hold.
    """
    if not isinstance(event, Mapping):
        raise PublishError(
            f"an event must be a JSON object (a dict), got {type(event).__name__}: {event!r:.80}",
            hint='wrap the value in an object, such as {"value": ...}',
        )
    try:
        return json.dumps(
            event, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
        ).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise PublishError(
            f"the event cannot be written as JSON: {error}",
            hint="use strings, numbers, booleans, lists and objects",
        ) from None
    except RecursionError:
        raise PublishError(
            "the event is nested too deeply to be written as JSON",
            hint="flatten it: readers cannot decode values nested this deep either",
        ) from None


def event_time_ms(event: Mapping[str, object], time_field: str) -> int | None:
    """The event time of `event` in epoch milliseconds, read from `time_field`.

    The field may hold an ISO-8601 string or a datetime (without an offset, UTC), or an
    epoch number in seconds or milliseconds. Returns None when the field is absent or null; raises
    `PublishError` for any other value.

    Example:
        >>> event_time_ms({"time": "2026-01-01T00:00:00Z"}, "time")
        1767225600000
    """
    value = event.get(time_field)
    if value is None:
        return None
    if isinstance(value, bool):
        raise _bad_time(time_field, value)
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise _bad_time(time_field, value)
        milliseconds = int(value) if abs(value) >= EPOCH_MS_THRESHOLD else int(value * 1000)
        if abs(milliseconds) >= LARGEST_EPOCH_MS:
            raise _bad_time(time_field, value)
        return milliseconds
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise _bad_time(time_field, value) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    raise _bad_time(time_field, value)


def future_dated_reason(time_ms: int, arrival_ms: int, max_future_ms: int) -> str | None:
    """Why a record dated `time_ms` that arrived at `arrival_ms` is future-dated, or None.

    A record whose event time is more than `max_future_ms` ahead of its arrival is dated by a
    wrong clock: it must not move a watermark, so readers send it to the dead-letter stream
    with this reason, and publishers refuse it (against the wall clock) with it. The words
    are the same in every reader, streaming or batch, so that the dead letters agree.

    Example:
        >>> future_dated_reason(4_102_444_800_000, 1_767_225_600_000, 300_000)[:40]
        'event time 2100-01-01T00:00:00.000Z is 2'
    """
    if time_ms - arrival_ms <= max_future_ms:
        return None
    return (
        f"event time {format_time_ms(time_ms)} is {time_ms - arrival_ms} ms ahead of its "
        f"arrival time {format_time_ms(arrival_ms)}, more than max_future ({max_future_ms} ms)"
    )


def before_1970_reason(time_ms: int) -> str | None:
    """Why a record dated `time_ms` cannot be placed in event time, or None.

    Spark's watermark starts at 1970-01-01 and never goes back, so a record dated before it
    would be dropped as late even in a stream's first micro-batch: readers send it to the
    dead-letter stream with this reason instead, and publishers refuse it. The words are the
    same in every reader.

    Example:
        >>> before_1970_reason(-1)[:60]
        'event time 1969-12-31T23:59:59.999Z is before 1970-01-01, wh'
    """
    if time_ms >= 0:
        return None
    return (
        f"event time {format_time_ms(time_ms)} is before 1970-01-01, which Spark cannot place "
        "in event time"
    )


def placeable_time_ms(time_ms: int, arrival_ms: int, max_future_ms: int) -> int | None:
    """`time_ms`, where a reader places a record in event time; None where it dead-letters it.

    A reader dead-letters a record dated before 1970 (`before_1970_reason`) or more than
    `max_future_ms` ahead of its arrival (`future_dated_reason`).

    Example:
        >>> placeable_time_ms(1_767_225_600_000, 1_767_225_601_000, 300_000)
        1767225600000
        >>> placeable_time_ms(-1, 1_767_225_601_000, 300_000) is None
        True
    """
    if before_1970_reason(time_ms) or future_dated_reason(time_ms, arrival_ms, max_future_ms):
        return None
    return time_ms


def format_time_ms(time_ms: int) -> str:
    """Epoch milliseconds as an ISO-8601 UTC time with milliseconds.

    Example:
        >>> format_time_ms(1_767_225_600_000)
        '2026-01-01T00:00:00.000Z'
    """
    try:
        moment = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
    except (ValueError, OverflowError):
        # Outside years 1 to 9999, which a datetime holds and a TIMESTAMP goes beyond.
        return f"{time_ms} ms from 1970-01-01T00:00:00.000Z"
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


def record_time_ms(
    value: Mapping[str, object], time_field: str, carried_ms: int | None, arrival_ms: int | None
) -> int | None:
    """A record's event time: its `time_field`, else the time it carries, else its arrival.

    `carried_ms` is the time the record's `time` header carries, which millrace's writers
    set, so a record keeps its event time whatever its value holds. Raises `PublishError`
    when the field holds no time.

    Example:
        >>> record_time_ms({"n": 1}, "time", 1_767_225_600_000, 1_767_225_660_000)
        1767225600000
    """
    time_ms = event_time_ms(value, time_field)
    if time_ms is not None:
        return time_ms
    return carried_ms if carried_ms is not None else arrival_ms


def time_header(time_ms: int) -> tuple[str, bytes]:
    """The `time` header carrying event time `time_ms`, as a producer takes headers.

    Example:
        >>> time_header(1_767_225_600_000)
        ('time', b'1767225600000')
    """
    return TIME_HEADER, str(time_ms).encode()


def decode_value(raw: bytes) -> JsonObject:
    """The JSON object a record's value holds; `RecordDecodeError` saying why when it is not one.

    Example:
        >>> decode_value(b'{"page": "home"}')
        {'page': 'home'}
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordDecodeError("value is not valid UTF-8") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordDecodeError(f"value is not valid JSON: {error}") from None
    except (RecursionError, ValueError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise RecordDecodeError(f"value is JSON that cannot be read: {reason}") from None
    if not isinstance(value, dict):
        raise RecordDecodeError(f"value is JSON but not an object: {type(value).__name__}")
    return value


def _json_default(value: object) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _bad_time(time_field: str, value: object) -> PublishError:
    return PublishError(
        f"event time field {time_field!r} holds {value!r:.60}, which is neither an ISO-8601 "
        "time nor an epoch number",
        hint="write times like 2026-01-01T12:00:00Z or as epoch milliseconds, or name another "
        "field with events.time_field (MILLRACE_TIME_FIELD)",
    )
