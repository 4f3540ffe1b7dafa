"""Dead letters: records no reader could decode, kept in `<stream>.dlq` with the reason.

A dead letter is a JSON object with the fields in `DEAD_LETTER_FIELDS`: the error text, the
source stream, bucket and offset, and the original bytes (base64, plus the text when it is
UTF-8). Its id is derived from the source position, so routing the same record twice gives
the same id. Python readers write them with `DeadLetterWriter`; Spark readers build the same
fields in `millrace.engine.streams`.
"""

from __future__ import annotations

import base64
import json

from confluent_kafka import KafkaError, Message, Producer

from millrace.bus.client_config import kafka_client_config
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.settings import Settings
from millrace.errors import PublishError
from millrace.records import ID_HEADER

DEAD_LETTER_FIELDS = ("error", "stream", "bucket", "offset", "original", "original_base64")
DEAD_LETTER_RETENTION = "30d"


def dead_letter_id(stream: str, bucket: int, offset: int) -> str:
    """The id of the dead letter of the record at (`stream`, `bucket`, `offset`)."""
    return f"dlq:{stream}:{bucket}:{offset}"


def dead_letter_value(
    error: str, stream: str, bucket: int, offset: int, original: bytes
) -> dict[str, object]:
    """The fields of the dead letter of the record at (`stream`, `bucket`, `offset`).

    Example:
        >>> dead_letter_value("value is not valid JSON", "clicks", 0, 17, b"{oops")["original"]
        '{oops'
    """
    return {
        "error": error,
        "stream": stream,
        "bucket": bucket,
        "offset": offset,
        "original": original.decode("utf-8", errors="replace"),
        "original_base64": base64.b64encode(original).decode("ascii"),
    }


class DeadLetterWriter:
    """Writes the bad records of one stream to its dead-letter stream and counts them.

    Use it as a context manager, which flushes and closes it:
    `with DeadLetterWriter(settings, "clicks") as dead_letters: dead_letters.write(reason,
    bucket, offset, original, key=None)`.
    """

    def __init__(self, settings: Settings, stream: str) -> None:
        self.stream = stream
        self.target = dead_letter_stream(stream)
        self.count = 0
        self._settings = settings
        self._producer: Producer | None = None
        self._failures: list[str] = []

    def write(
        self, error: str, bucket: int, offset: int, original: bytes, key: bytes | None
    ) -> None:
        """Queue the dead letter of one record; `flush` makes sure it arrived."""
        if self._producer is None:
            create_stream(
                self._settings,
                self.target,
                buckets=1,
                retention=DEAD_LETTER_RETENTION,
                exist_ok=True,
            )
            self._producer = Producer(
                {
                    **kafka_client_config(self._settings),
                    "enable.idempotence": True,
                    "acks": "all",
                    "log_level": 0,
                }
            )
        value = dead_letter_value(error, self.stream, bucket, offset, original)
        self._producer.produce(
            self.target,
            json.dumps(value).encode("utf-8"),
            key=key,
            headers=[(ID_HEADER, dead_letter_id(self.stream, bucket, offset).encode())],
            on_delivery=self._on_delivery,
        )
        self.count += 1

    def flush(self) -> None:
        """Wait until every queued dead letter is stored; `PublishError` if one was not."""
        if self._producer is not None:
            self._producer.flush()
        if self._failures:
            failures, self._failures = self._failures, []
            raise PublishError(
                f"{len(failures)} dead letters for {self.target!r} were not stored: {failures[0]}",
                hint="check the bus with `millrace status`; the records will be read again",
            )

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failures.append(error.str())

    def __enter__(self) -> DeadLetterWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.flush()
