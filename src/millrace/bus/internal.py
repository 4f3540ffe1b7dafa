"""millrace's own streams, such as `_millrace.metrics`, and reading streams by offset.

Internal streams start with `_`, which user stream names cannot, so an app can never write
into them by mistake. This module creates them, and gives the monitor what it reads of any
stream: its end offsets, the record at a given offset, the records after given offsets, and the
watermark markers at the end of the streams (`latest_markers`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

# confluent-kafka's admin package imports these without `__all__` or `as`: strict mypy takes
# them as not exported.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from millrace.bus.client_config import kafka_client_config
from millrace.bus.markers import WATERMARK_HEADER, is_marker, writer_of
from millrace.bus.messages import carried_time_ms, decode_message, header, origin
from millrace.bus.streams import (
    admin_client,
    bus_error,
    describe_stream,
    stream_topic,
    wait_for_leaders,
)
from millrace.bus.timeouts import bounded
from millrace.config.settings import Settings
from millrace.errors import StreamNameError
from millrace.records import JsonObject, Record, RecordDecodeError, decode_value

METRICS_STREAM = "_millrace.metrics"
"""Where every app's query listener publishes the progress of each micro-batch."""

_INTERNAL = re.compile(r"^_millrace\.[a-z0-9._-]{1,100}$")
_TIMEOUT_S = 15.0
_POLL_S = 0.2


def is_internal_stream(name: str) -> bool:
    """Whether `name` is one of millrace's own streams, such as `_millrace.metrics`.

    Example:
        >>> is_internal_stream("_millrace.ticks.demo"), is_internal_stream("clicks")
        (True, False)
    """
    return bool(_INTERNAL.match(name))


@dataclass(frozen=True)
class StampedRecord:
    """A record with its append time: when the bus stored it (Kafka's LogAppendTime)."""

    record: Record
    append_ms: int | None


def create_internal_stream(
    settings: Settings, name: str, *, buckets: int = 1, retention_ms: int = 7 * 86_400_000
) -> None:
    """Create internal stream `name` (`_millrace.<something>`) unless it exists."""
    if not _INTERNAL.match(name):
        raise StreamNameError(
            f"{name!r} is not an internal stream name",
            hint="internal streams are named _millrace.<lowercase name>",
        )
    topic = stream_topic(settings, name, buckets, retention_ms)
    admin = admin_client(settings)
    future = admin.create_topics([topic], request_timeout=bounded(_TIMEOUT_S))[name]
    try:
        future.result(timeout=bounded(_TIMEOUT_S))
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise bus_error(f"could not create stream {name!r}", error, settings) from None
    wait_for_leaders(admin, name)


class InternalWriter:
    """Writes values to one internal stream and says at which offsets they were stored."""

    def __init__(self, settings: Settings, stream: str) -> None:
        self.stream = stream
        self._producer = Producer({**kafka_client_config(settings), "acks": "all", "log_level": 0})

    def write(self, values: list[bytes]) -> list[int] | None:
        """Store `values` in order; their offsets, or None when one of them was not stored."""
        offsets: list[int] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            offsets.append(-1 if error is not None else origin(message)[2])

        for value in values:
            self._producer.produce(self.stream, value, on_delivery=delivered)
        if self._producer.flush(_TIMEOUT_S) or -1 in offsets or len(offsets) < len(values):
            return None
        return offsets

    def close(self) -> None:
        """Wait for what is queued, then let go of the connection."""
        self._producer.flush(_TIMEOUT_S)


def end_offsets(settings: Settings, stream: str) -> dict[int, int]:
    """The offset the next record of each bucket of `stream` will get.

    Raises `StreamNotFoundError` when the stream does not exist.
    """
    return {
        bucket.bucket: bucket.end_offset for bucket in describe_stream(settings, stream).buckets
    }


def append_times_at(settings: Settings, stream: str, offsets: dict[int, int]) -> dict[int, int]:
    """When the bus stored the record at `offsets[bucket]` of each bucket (epoch ms).

    A bucket whose offset is past its end, or whose record retention removed, is left out.
    """
    watch = StreamWatch(settings, stream)
    try:
        return watch.append_times_at(offsets)
    finally:
        watch.close()


class LastRecord(NamedTuple):
    """A record as `StreamWatch.last_records` finds it.

    `value` is its JSON object, None for a record or marker that a millrace app wrote (whose
    progress the app's markers tell, `millrace.bus.markers`); `arrival_ms` its append time;
    `carried_ms` the event time its `time` header carries (None without one).
    """

    value: JsonObject | None
    arrival_ms: int
    carried_ms: int | None


class StreamWatch:
    """One connection to the bus that looks at one stream's ends, last records and append times.

    For a caller that looks again and again, where a connection of its own each time would
    cost more than the look: the idle ticker every second (`millrace.engine.low_watermark`),
    the metrics listener after every batch (`millrace.engine.metrics`).
    """

    def __init__(self, settings: Settings, stream: str) -> None:
        self.stream = stream
        self._settings = settings
        self._consumer = _consumer(settings)
        self._buckets: int | None = None

    def end_offsets(self) -> dict[int, int]:
        """The offset the next record of each bucket will get.

        Raises `StreamNotFoundError` when the stream does not exist.
        """
        if self._buckets is None:
            self._buckets = len(describe_stream(self._settings, self.stream).buckets)
        return {bucket: self._bounds(bucket)[1] for bucket in range(self._buckets)}

    def append_times_at(self, offsets: dict[int, int]) -> dict[int, int]:
        """As the module's `append_times_at`, over this watch's connection.

        Every wait for the bus is bounded by the enclosing `bus_timeouts_at_most`: a bucket
        whose record did not come in time is left out.
        """
        found: dict[int, int] = {}
        wanted = {bucket: offset for bucket, offset in offsets.items() if offset >= 0}

        def take(message: Message, bucket: int, offset: int) -> bool:
            if offset < wanted[bucket]:
                return False
            timestamp_type, timestamp = message.timestamp()
            if timestamp_type != TIMESTAMP_NOT_AVAILABLE:
                found[bucket] = timestamp
            return True

        starts = {}
        for bucket, offset in wanted.items():
            low, high = self._bounds(bucket)
            if low <= offset < high:
                starts[bucket] = offset
        self._read(starts, take)
        return found

    def last_records(self, ends: dict[int, int], *, count: int = 20) -> dict[int, list[LastRecord]]:
        """The last `count` records before `ends[bucket]` of each bucket, newest first.

        A value that is not a JSON object, or a record without an append time, is left out. A
        bucket with no record left before its end is left out. Every wait for the bus is
        bounded by the enclosing `bus_timeouts_at_most`.
        """
        found: dict[int, list[LastRecord]] = {}

        def take(message: Message, bucket: int, offset: int) -> bool:
            if offset < ends[bucket]:
                record = _last_record(message)
                if record is not None:
                    found.setdefault(bucket, []).insert(0, record)
            return offset >= ends[bucket] - 1

        starts = {}
        for bucket, end in ends.items():
            low, _ = self._bounds(bucket)
            if end > low:
                starts[bucket] = max(low, end - count)
        self._read(starts, take)
        return found

    def _bounds(self, bucket: int) -> tuple[int, int]:
        """The first offset `bucket` still holds and the offset its next record will get."""
        try:
            return self._consumer.get_watermark_offsets(
                TopicPartition(self.stream, bucket), timeout=bounded(_TIMEOUT_S)
            )
        except KafkaException as error:
            raise bus_error(
                f"could not read stream {self.stream!r}", error, self._settings
            ) from None

    def _read(self, starts: dict[int, int], take: Callable[[Message, int, int], bool]) -> None:
        """Read each bucket from its offset in `starts` until `take` is done with it.

        `take(message, bucket, offset)` sees each record read of a bucket not yet done, and
        says whether the bucket is done; the read ends early when the bus takes too long.
        """
        consumer = self._consumer
        pending = set(starts)
        try:
            if starts:
                consumer.assign([TopicPartition(self.stream, b, o) for b, o in starts.items()])
            deadline = time.monotonic() + bounded(_TIMEOUT_S)
            while pending and time.monotonic() < deadline:
                message = consumer.poll(_POLL_S)
                if message is None or message.error() is not None:
                    continue
                _, bucket, offset = origin(message)
                if bucket in pending and take(message, bucket, offset):
                    pending.discard(bucket)
                    consumer.pause([TopicPartition(self.stream, bucket)])
            # The next look assigns offsets of its own; librdkafka would keep the pauses.
            consumer.resume([TopicPartition(self.stream, bucket) for bucket in starts])
            consumer.unassign()
        except KafkaException as error:
            raise bus_error(
                f"could not read stream {self.stream!r}", error, self._settings
            ) from None

    def close(self) -> None:
        """Let go of the connection."""
        self._consumer.close()


def _last_record(message: Message) -> LastRecord | None:
    """`message` as `StreamWatch.last_records` gives it, or None when it leaves it out."""
    timestamp_type, timestamp = message.timestamp()
    if writer_of(message) is not None:
        # The writing app's markers tell this bucket's progress, not its records.
        return LastRecord(None, timestamp, None)
    try:
        value = decode_value(message.value() or b"")
    except RecordDecodeError:
        return None
    if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
        return None
    return LastRecord(value, timestamp, carried_time_ms(message))


def read_after(
    settings: Settings,
    stream: str,
    positions: dict[int, int],
    *,
    since_ms: int | None = None,
    limit: int = 100_000,
) -> tuple[list[StampedRecord], dict[int, int]]:
    """The records of `stream` from `positions` to its end now, and the positions after them.

    A bucket missing from `positions` starts at the first record appended at or after
    `since_ms` (at its end when `since_ms` is None). At most `limit` records are returned;
    the positions then say where to go on. Records that are not JSON objects are skipped.
    """
    consumer = _consumer(settings)
    records: list[StampedRecord] = []
    try:
        buckets = len(describe_stream(settings, stream).buckets)
        start: dict[int, int] = {}
        ends: dict[int, int] = {}
        for bucket in range(buckets):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(stream, bucket), timeout=bounded(_TIMEOUT_S)
            )
            ends[bucket] = high
            if bucket in positions:
                start[bucket] = max(low, positions[bucket])
            elif since_ms is None:
                start[bucket] = high
            else:
                found = consumer.offsets_for_times(
                    [TopicPartition(stream, bucket, since_ms)], timeout=bounded(_TIMEOUT_S)
                )[0]
                start[bucket] = found.offset if found.offset >= 0 else high
        after = dict(start)
        unfinished = {b for b in start if start[b] < ends[b]}
        if unfinished:
            consumer.assign([TopicPartition(stream, b, start[b]) for b in unfinished])
        deadline = time.monotonic() + bounded(_TIMEOUT_S)
        while unfinished and len(records) < limit and time.monotonic() < deadline:
            message = consumer.poll(_POLL_S)
            if message is None or message.error() is not None:
                continue
            _, bucket, offset = origin(message)
            if bucket not in unfinished:
                continue
            after[bucket] = offset + 1
            if after[bucket] >= ends[bucket]:
                unfinished.discard(bucket)
            try:
                records.append(_stamped(message, settings.events_time_field))
            except RecordDecodeError:
                continue
    except KafkaException as error:
        raise bus_error(f"could not read stream {stream!r}", error, settings) from None
    finally:
        consumer.close()
    return records, after


MARKER_LOOKBACK = 100
"""`latest_markers` reads at most this many messages at the end of each bucket."""


def latest_markers(
    settings: Settings, read_to: dict[tuple[str, int], int], *, count: int = MARKER_LOOKBACK
) -> tuple[dict[str, dict[str, int]], dict[tuple[str, int], int]]:
    """The newest watermark of each writer among the markers at the end of every user stream.

    Reads the last `count` messages of each bucket, skipping those before `read_to[(stream,
    bucket)]` (the offsets a previous call returned): the buckets' offsets come in two
    requests to the bus, and a bucket nothing was appended to since is not read. Returns
    `{stream: {writer: watermark_ms}}` for the markers found, and the offsets read to. A
    writer whose last marker lies further back than `count` messages in every bucket is not
    found.
    """
    found: dict[str, dict[str, int]] = {}
    admin = admin_client(settings)
    try:
        topics = admin.list_topics(timeout=bounded(_TIMEOUT_S)).topics
        buckets = [
            TopicPartition(stream, bucket)
            for stream in sorted(name for name in topics if not name.startswith("_"))
            for bucket in sorted(topics[stream].partitions)
        ]
        # confluent-kafka leaves OffsetSpec.earliest and .latest unannotated.
        lows = _offsets_of(admin, buckets, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        ends = _offsets_of(admin, buckets, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    except KafkaException as error:
        raise bus_error("could not read the streams' watermark markers", error, settings) from None
    starts = {
        place: max(lows[place], end - count, read_to.get(place, 0))
        for place, end in ends.items()
        if place in lows
    }
    pending = {place for place, start in starts.items() if start < ends[place]}
    if pending:
        consumer = _consumer(settings)
        try:
            consumer.assign([TopicPartition(s, b, starts[(s, b)]) for s, b in sorted(pending)])
            deadline = time.monotonic() + bounded(_TIMEOUT_S)
            while pending and time.monotonic() < deadline:
                message = consumer.poll(_POLL_S)
                if message is None or message.error() is not None:
                    continue
                stream, bucket, offset = origin(message)
                if offset >= ends[(stream, bucket)] - 1:
                    pending.discard((stream, bucket))
                writer = writer_of(message)
                text = header(message, WATERMARK_HEADER) or ""
                if writer is None or not is_marker(message) or not text.isdigit():
                    continue
                writers = found.setdefault(stream, {})
                writers[writer] = max(writers.get(writer, int(text)), int(text))
        except KafkaException as error:
            raise bus_error(
                "could not read the streams' watermark markers", error, settings
            ) from None
        finally:
            consumer.close()
    # A bucket not read to its end before the deadline is read again next time.
    return found, {place: ends[place] for place in starts if place not in pending}


def _offsets_of(
    admin: AdminClient, buckets: list[TopicPartition], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    """The offset `spec` names in each of `buckets`, asked in one request.

    A bucket whose leader does not answer now is left out, to be looked at next time.
    """
    if not buckets:
        return {}
    futures = admin.list_offsets(
        {bucket: spec for bucket in buckets}, request_timeout=bounded(_TIMEOUT_S)
    )
    offsets = {}
    for bucket, future in futures.items():
        try:
            offsets[(bucket.topic, bucket.partition)] = future.result(
                timeout=bounded(_TIMEOUT_S)
            ).offset
        except KafkaException:
            continue
    return offsets


def _consumer(settings: Settings) -> Consumer:
    return Consumer(
        {
            **kafka_client_config(settings),
            "group.id": "millrace-monitor",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )


def _stamped(message: Message, time_field: str) -> StampedRecord:
    timestamp_type, timestamp = message.timestamp()
    append_ms = None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp
    return StampedRecord(decode_message(message, time_field), append_ms)
