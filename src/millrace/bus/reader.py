"""Reading streams from Python: the paper's Swift, a checkpointed reader for scripts.

`Reader` reads a stream in a consumer group and checkpoints (commits its position) every N
records or B bytes, so a script that stops and starts again goes on where it left off: no
record is lost, and at most the records since the last checkpoint are seen twice
(at-least-once). `tail` reads without a group, for looking at a stream.

Neither drops records whose id it has seen: the Spark readers of millrace apps do that (see
`millrace.engine.delivery`), within their watermark horizon, while a script reading with
`Reader` is at-least-once anyway, and `tail` shows a stream as it is, copies included. A script
that needs exactly-once keeps the ids it has handled (docs/semantics.md).

Both skip the watermark markers of the apps that write a stream (`millrace.bus.markers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from millrace.bus.client_config import kafka_client_config
from millrace.bus.dead_letters import DeadLetterWriter
from millrace.bus.markers import is_marker
from millrace.bus.messages import decode_message, origin
from millrace.bus.streams import require_stream
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import BusError
from millrace.records import Record, RecordDecodeError

_POLL_S = 0.5


class Reader:
    """Reads one stream in consumer group `group`, checkpointing as it goes.

    A record counts as processed once you ask for the next one (or call `checkpoint` or
    `close`); checkpoints cover processed records only. Records that are not JSON objects,
    hold no readable time, or are dated before 1970 or more than `events.max_future` ahead of
    their arrival go to `<stream>.dlq` with the reason every reader gives, and are counted in
    `dead_letter_count` instead of being returned.
    With `follow=False` iteration ends at the end of the stream as it was when reading began.

    For example: `with Reader("page_views", group="page-counter") as reader:` then
    `for record in reader: count(record.value["page"])`.
    """

    def __init__(
        self,
        stream: str,
        group: str,
        *,
        settings: Settings | None = None,
        checkpoint_every: int = 1000,
        checkpoint_bytes: int = 1 << 20,
        follow: bool = True,
    ) -> None:
        if checkpoint_every < 1 or checkpoint_bytes < 1:
            raise BusError(
                f"reader of {stream!r}: checkpoint_every and checkpoint_bytes must be positive, "
                f"got {checkpoint_every} and {checkpoint_bytes}",
                hint="checkpoint_every=1 checkpoints after every record",
            )
        self.stream = stream
        self.group = group
        self.settings = settings or Workspace.locate().settings
        self.checkpoint_every = checkpoint_every
        self.checkpoint_bytes = checkpoint_bytes
        self.follow = follow
        self.checkpoints = 0
        require_stream(self.settings, stream)
        self._dead_letters = DeadLetterWriter(self.settings, stream)
        self._consumer = Consumer(
            {
                **kafka_client_config(self.settings),
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "log_level": 0,
            }
        )
        self._consumer.subscribe([stream])
        self._end_offsets: dict[int, tuple[int, int]] | None = None  # bucket -> (start, end)
        self._positions: dict[int, int] = {}  # bucket -> next offset this reader will see
        self._pending: dict[int, int] = {}  # bucket -> next offset to commit
        self._in_hand: Message | None = None
        self._records_since_checkpoint = 0
        self._bytes_since_checkpoint = 0

    @property
    def dead_letter_count(self) -> int:
        """Records of this run that were routed to the dead-letter stream."""
        return self._dead_letters.count

    def __iter__(self) -> Iterator[Record]:
        while (record := self.read()) is not None:
            yield record

    def read(self, timeout_s: float | None = None) -> Record | None:
        """The next record, or None at the end of the stream (`follow=False`) or on timeout."""
        self._mark_processed()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            message = self._consumer.poll(_POLL_S)
            failure = message.error() if message is not None else None
            at_bucket_end = failure is not None and failure.code() == KafkaError._PARTITION_EOF
            if message is None or at_bucket_end:
                # Only when nothing came or a bucket ran out can the end have been reached.
                if message is not None:
                    _, bucket, offset = origin(message)
                    self._positions[bucket] = offset
                if not self.follow and self._at_end():
                    return None
                continue
            if failure is not None:
                raise BusError(
                    f"reading stream {self.stream!r} failed: {failure.str()}",
                    hint="check the bus with `millrace status`",
                )
            _, bucket, offset = origin(message)
            self._positions[bucket] = offset + 1
            if is_marker(message):
                self._in_hand = message
                self._mark_processed()
                continue
            try:
                record = decode_message(
                    message, self.settings.events_time_field, self.settings.max_future_ms
                )
            except RecordDecodeError as error:
                self._dead_letters.write(
                    str(error),
                    bucket,
                    offset,
                    message.value() or b"",
                    message.key(),
                )
                self._in_hand = message
                self._mark_processed()
                continue
            self._in_hand = message
            return record

    def checkpoint(self) -> None:
        """Commit the position after every processed record, now."""
        self._dead_letters.flush()
        if self._pending:
            offsets = [
                TopicPartition(self.stream, bucket, offset)
                for bucket, offset in self._pending.items()
            ]
            self._consumer.commit(offsets=offsets, asynchronous=False)
            self.checkpoints += 1
        self._pending.clear()
        self._records_since_checkpoint = 0
        self._bytes_since_checkpoint = 0

    def close(self, *, checkpoint: bool = True) -> None:
        """Checkpoint everything processed (unless `checkpoint` is off), then leave the group.

        With `checkpoint=False` the records since the last checkpoint are read again by the
        next reader of the group: the way out when their processing cannot be confirmed.
        """
        if checkpoint:
            self._mark_processed()
            self.checkpoint()
        self._consumer.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is not None:
            # The record in hand may not have been handled: leave it to be read again.
            self._in_hand = None
        self.close()

    def _mark_processed(self) -> None:
        message, self._in_hand = self._in_hand, None
        if message is None:
            return
        _, bucket, offset = origin(message)
        self._pending[bucket] = offset + 1
        self._records_since_checkpoint += 1
        self._bytes_since_checkpoint += len(message.value() or b"")
        if (
            self._records_since_checkpoint >= self.checkpoint_every
            or self._bytes_since_checkpoint >= self.checkpoint_bytes
        ):
            self.checkpoint()

    def _at_end(self) -> bool:
        assignment = self._consumer.assignment()
        if not assignment:
            return False
        if self._end_offsets is None:
            self._end_offsets = {
                partition.partition: self._consumer.get_watermark_offsets(partition, timeout=10)
                for partition in assignment
            }
        return all(
            start == end or self._positions.get(bucket, -1) >= end
            for bucket, (start, end) in self._end_offsets.items()
        )


@dataclass(frozen=True)
class TailStart:
    """Where `tail` starts in each bucket: the beginning, a time, or the last `lines` records."""

    from_beginning: bool = False
    since_ms: int | None = None
    lines: int = 10


def tail(
    stream: str,
    start: TailStart,
    *,
    follow: bool = False,
    settings: Settings | None = None,
) -> Iterator[Record]:
    """Records of `stream` from `start` on, without a consumer group and without checkpoints.

    Ends at the end of the stream unless `follow`, in which case it waits for new records
    until the caller stops iterating. Bad records (those a `Reader` routes to the dead-letter
    stream) are yielded to no one and not routed: tail only looks, so it skips them and
    `Reader` keeps the job of routing them.
    """
    settings = settings or Workspace.locate().settings
    buckets = require_stream(settings, stream)
    consumer = Consumer(
        {
            **kafka_client_config(settings),
            "group.id": "millrace-tail",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        ends: dict[int, int] = {}
        assignment = []
        for bucket in range(buckets):
            low, high = consumer.get_watermark_offsets(TopicPartition(stream, bucket), timeout=10)
            ends[bucket] = high
            assignment.append(
                TopicPartition(
                    stream, bucket, _start_offset(consumer, stream, bucket, low, high, start)
                )
            )
        consumer.assign(assignment)
        unfinished = {tp.partition for tp in assignment if tp.offset < ends[tp.partition]}
        while follow or unfinished:
            message = consumer.poll(_POLL_S)
            if message is None or message.error() is not None:
                continue
            _, bucket, offset = origin(message)
            if offset + 1 >= ends[bucket]:
                unfinished.discard(bucket)
            if is_marker(message):
                continue
            try:
                yield decode_message(message, settings.events_time_field, settings.max_future_ms)
            except RecordDecodeError:
                continue
    finally:
        consumer.close()


def _start_offset(
    consumer: Consumer,
    stream: str,
    bucket: int,
    low: int,
    high: int,
    start: TailStart,
) -> int:
    if start.from_beginning:
        return low
    if start.since_ms is not None:
        found = consumer.offsets_for_times(
            [TopicPartition(stream, bucket, start.since_ms)], timeout=10
        )[0]
        return found.offset if found.offset >= 0 else high
    return max(low, high - start.lines)
