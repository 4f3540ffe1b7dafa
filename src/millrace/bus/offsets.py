"""Where a stream's buckets stand: their offsets at the start, the end, or a time."""

from __future__ import annotations

from typing import Literal

from confluent_kafka import Consumer, TopicPartition

from millrace.bus.client_config import kafka_client_config
from millrace.bus.streams import require_stream
from millrace.config.settings import Settings

_TIMEOUT_S = 10


def stream_offsets(
    settings: Settings, stream: str, at: Literal["earliest", "latest"] | int
) -> dict[int, int]:
    """The offset of each bucket of `stream`: its first, its next, or its first at a time.

    With a time (epoch ms), each bucket's offset is that of its first record that reached the
    bus at or after it (Kafka's timestamp is the arrival time), or the bucket's end.
    """
    buckets = require_stream(settings, stream)
    consumer = Consumer(
        {
            **kafka_client_config(settings),
            "group.id": "millrace-offsets",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        offsets = {}
        for bucket in range(buckets):
            partition = TopicPartition(stream, bucket)
            low, high = consumer.get_watermark_offsets(partition, timeout=_TIMEOUT_S)
            if at == "earliest":
                offsets[bucket] = low
            elif at == "latest":
                offsets[bucket] = high
            else:
                [found] = consumer.offsets_for_times(
                    [TopicPartition(stream, bucket, at)], timeout=_TIMEOUT_S
                )
                offsets[bucket] = found.offset if found.offset >= 0 else high
        return offsets
    finally:
        consumer.close()
