"""Watermark markers: how a millrace app tells the readers of its output streams its progress.

After its micro-batches, an app that writes a stream publishes to each bucket of it a marker:
a record with no key and an empty value whose `watermark` header holds the app's output
watermark W (epoch ms) and whose `writer` header names the app. A marker promises that every
record the app writes to that bucket from then on is dated after W. Every record the app
writes carries the same `writer` header, so that a reader knows that the markers, not those
records' own times, tell that bucket's progress (`millrace.engine.low_watermark`).

A marker is no record: every millrace reader skips it (the `Reader`, `tail`, `pipe`, SQL
input tables, processors, archives and batch runs), and counts it nowhere.

Example:
    >>> marker_headers("filter", 1_767_225_600_000)
    [('watermark', b'1767225600000'), ('writer', b'filter')]
"""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, Producer

from millrace.bus.client_config import kafka_client_config
from millrace.bus.messages import header
from millrace.bus.timeouts import bounded
from millrace.config.settings import Settings

WATERMARK_HEADER = "watermark"
WRITER_HEADER = "writer"
_TIMEOUT_S = 10.0


def marker_headers(app: str, watermark_ms: int) -> list[tuple[str, str | bytes | None]]:
    """The headers of app `app`'s marker promising nothing more at or before `watermark_ms`."""
    return [(WATERMARK_HEADER, str(watermark_ms).encode()), (WRITER_HEADER, app.encode())]


def is_marker(message: Message) -> bool:
    """Whether a Kafka message is a watermark marker rather than a record."""
    return header(message, WATERMARK_HEADER) is not None and not message.value()


def writer_of(message: Message) -> str | None:
    """The app that wrote a record or a marker, from its `writer` header; None for others."""
    return header(message, WRITER_HEADER)


class MarkerWriter:
    """Publishes one app's watermark markers."""

    def __init__(self, settings: Settings, app: str) -> None:
        self.app = app
        self._producer = Producer({**kafka_client_config(settings), "acks": "all", "log_level": 0})

    def write(self, stream: str, buckets: int, watermark_ms: int) -> bool:
        """Publish a marker of `watermark_ms` to each of the `buckets` of `stream`.

        True when the bus stored them all; a marker not stored is published again later.
        """
        failed: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failed.append(error)

        headers = marker_headers(self.app, watermark_ms)
        for bucket in range(buckets):
            self._producer.produce(
                stream, b"", partition=bucket, headers=headers, on_delivery=delivered
            )
        return self._producer.flush(bounded(_TIMEOUT_S)) == 0 and not failed

    def close(self) -> None:
        """Wait for what is queued, then let go of the connection."""
        self._producer.flush(bounded(_TIMEOUT_S))
