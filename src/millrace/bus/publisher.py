"""Publishing events to a stream: JSON values, unique ids, event times, nothing lost quietly.

`Publisher` batches: `send` queues an event and returns at once; `flush` and `close` wait
until the bus has acknowledged every queued event and raise `DeliveryError`, naming the record
ids of the events it did not store, if any was not. `publish` sends one event for one-off use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from millrace.bus.client_config import kafka_client_config
from millrace.bus.streams import require_stream
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import DeliveryError, PublishError
from millrace.records import (
    ID_HEADER,
    before_1970_reason,
    encode_event,
    event_time_ms,
    future_dated_reason,
    new_record_id,
    time_header,
)

_DELIVERY_TIMEOUT_MS = 60_000
_MAX_REPORTED_FAILURES = 5


class Publisher:
    """Sends events to one stream with an idempotent producer (acks=all).

    Each event gets a unique `id` header (or the id you pass). Its time field
    (`events.time_field`, default `time`) must hold an ISO-8601 time or an epoch number when
    present; readers take the event time from it, and from the arrival time when it is absent.
    An event dated further ahead of the wall clock than `events.max_future`, or before
    1970-01-01 (which Spark cannot place in event time), is refused.
    With `track_ids`, a `DeliveryError` names the record ids of the events the bus did not
    store, so that they can be sent again under the same ids (at about 1 us per event).
    Use it as a context manager so that it flushes on exit.

    For example: `with Publisher("page_views") as publisher: publisher.send({"time":
    "2026-01-01T12:00:00Z", "page": "/"}, key="user-7")`.
    """

    def __init__(
        self,
        stream: str,
        *,
        settings: Settings | None = None,
        time_field: str | None = None,
        linger_ms: int = 5,
        track_ids: bool = False,
    ) -> None:
        self.stream = stream
        self.settings = settings or Workspace.locate().settings
        self.time_field = time_field or self.settings.events_time_field
        self.sent = 0
        self.max_future_ms = self.settings.max_future_ms
        require_stream(self.settings, stream)
        self._failures: list[str] = []  # the first few failure messages not yet raised
        self._failed_ids: list[str] = []  # the record ids of the failures not yet raised
        # Kafka's delivery reports carry no headers: a report names its event only through a
        # callback given with it, which costs about 1 us per event, so only on request.
        self._track_ids = track_ids
        self._unraised_failures = 0
        self._failed_total = 0
        self._producer = Producer(
            {
                **kafka_client_config(self.settings),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": linger_ms,
                "compression.type": "lz4",
                # The Java client's partitioner, so that Spark's Kafka sink and this publisher
                # route a key to the same bucket.
                "partitioner": "murmur2_random",
                "message.timeout.ms": _DELIVERY_TIMEOUT_MS,
                # Only failures call back into Python: a callback for every event would cost
                # more than the rest of `send`. Successes are the events sent minus the failed.
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                "log_level": 0,
            }
        )

    @property
    def delivered(self) -> int:
        """Events the bus has acknowledged, once `flush` or `close` has returned."""
        return self.sent - self._failed_total

    def send(
        self,
        event: Mapping[str, object],
        *,
        key: str | bytes | None = None,
        record_id: str | None = None,
        bucket: int | None = None,
    ) -> str:
        """Queue one event and return its record id.

        `bucket` sends it to that bucket of the stream rather than to its key's (or, without
        a key, to any).

        Raises `PublishError` for an event that is not a JSON object, has a bad time, is dated
        before 1970 or more than `events.max_future` ahead of the wall clock; and
        `DeliveryError` for earlier events that the bus refused, so failures surface at the
        next call (this event is then not queued).
        """
        self._raise_failures()
        value = encode_event(event)
        time_ms = event_time_ms(event, self.time_field)  # a time no reader could read is refused
        if time_ms is not None:
            reason = before_1970_reason(time_ms)
            if reason is not None:
                raise PublishError(
                    reason,
                    hint="readers would send it to the dead-letter stream: check its time field; "
                    "events must be dated 1970-01-01 or later",
                )
            reason = future_dated_reason(time_ms, int(time.time() * 1000), self.max_future_ms)
            if reason is not None:
                raise PublishError(
                    reason,
                    hint="readers would send it to the dead-letter stream: check the clock and "
                    "the time zone of what made the event; events.max_future "
                    "(MILLRACE_MAX_FUTURE) sets how far ahead it may be",
                )
        record_id = record_id or new_record_id()
        headers: list[tuple[str, str | bytes | None]] = [(ID_HEADER, record_id.encode())]
        if time_ms is not None:
            # Readers whose time field is named otherwise still find the event's time.
            headers.append(time_header(time_ms))
        # Kafka's -1 is no partition: the producer's partitioner places the event by its key.
        partition = -1 if bucket is None else bucket
        while True:
            try:
                if self._track_ids:
                    self._producer.produce(
                        self.stream,
                        value,
                        key=key,
                        headers=headers,
                        partition=partition,
                        on_delivery=functools.partial(self._on_tracked_delivery, record_id),
                    )
                else:
                    self._producer.produce(
                        self.stream, value, key=key, partition=partition, headers=headers
                    )
                break
            except BufferError:
                # The local queue is full: let deliveries drain it, then try again.
                self._producer.poll(0.1)
            except KafkaException as error:
                raise PublishError(
                    f"stream {self.stream!r} refused the event: {error.args[0].str()}",
                    hint="events must be under 1 MB of JSON; split larger ones",
                ) from None
        self.sent += 1
        self._producer.poll(0)
        return record_id

    def flush(self) -> None:
        """Wait for every queued event; `DeliveryError` if the bus did not store any of them."""
        remaining = self._producer.flush(_DELIVERY_TIMEOUT_MS / 1000 + 5)
        if remaining:
            # Purged, their delivery reports name them; they may have been stored all the same.
            self._producer.purge()
            self._producer.poll(0)
            unreported = len(self._producer)
            if unreported:
                seconds = _DELIVERY_TIMEOUT_MS // 1000
                self._count_failures(
                    unreported, f"{unreported} events unacknowledged after {seconds} s"
                )
        self._raise_failures()

    def close(self) -> None:
        """Flush, then release the connection."""
        self.flush()

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._count_failures(1, error.str())

    def _on_tracked_delivery(
        self, record_id: str, error: KafkaError | None, _message: Message
    ) -> None:
        if error is not None:
            self._count_failures(1, error.str())
            self._failed_ids.append(record_id)

    def _count_failures(self, count: int, message: str) -> None:
        self._unraised_failures += count
        self._failed_total += count
        if len(self._failures) < _MAX_REPORTED_FAILURES:
            self._failures.append(message)

    def _raise_failures(self) -> None:
        if not self._unraised_failures:
            return
        count, failures, record_ids = self._unraised_failures, self._failures, self._failed_ids
        self._unraised_failures, self._failures, self._failed_ids = 0, [], []
        raise DeliveryError(
            f"{count} events were not stored in stream {self.stream!r}: {'; '.join(failures)}",
            count=count,
            record_ids=tuple(record_ids),
            hint="check the bus with `millrace status`, then send those events again with "
            "the same record ids (the error's record_ids, with track_ids), so that readers "
            "drop any copy",
        )

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None:
            self.close()
        else:
            # Deliver what was queued before the error, but let the original error surface.
            self._producer.flush(_DELIVERY_TIMEOUT_MS / 1000 + 5)


def publish(
    stream: str,
    event: Mapping[str, object],
    key: str | bytes | None = None,
    *,
    settings: Settings | None = None,
) -> str:
    """Send one event to `stream`, wait until it is stored, and return its record id."""
    with Publisher(stream, settings=settings) as publisher:
        return publisher.send(event, key=key)
