"""A pipeline of three apps, A → B → C, told on the bus as running apps tell it: each app's
metrics record (its watermark and the streams it reads) on `_millrace.metrics`, and the
watermark markers each app publishes to the stream it writes. A reads a stream no app writes.
"""

import time
import uuid
from dataclasses import dataclass

from millrace.bus.internal import METRICS_STREAM, create_internal_stream
from millrace.bus.markers import MarkerWriter
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.records import format_time_ms

START_MS = 1_767_225_600_000
WATERMARK_MS = {"a": START_MS + 60_000, "b": START_MS + 50_000, "c": START_MS + 20_000}
"""The watermark each app's queries run with: B trails A by 10 s, C trails A by 40 s."""
BUCKETS = 2


@dataclass(frozen=True)
class Chain:
    """The apps' names, by letter, and the stream each app writes, by letter."""

    apps: dict[str, str]
    writes: dict[str, str]


def publish_chain(settings: Settings) -> Chain:
    """Publish the chain's metrics records and markers; its apps and streams."""
    suffix = uuid.uuid4().hex[:8]
    apps = {letter: f"chain_{letter}_{suffix}" for letter in "abc"}
    raw = f"chain.raw.{suffix}"
    writes = {letter: f"chain.{letter}.{suffix}" for letter in "abc"}
    reads = {"a": raw, "b": writes["a"], "c": writes["b"]}
    for stream in (raw, *writes.values()):
        create_stream(settings, stream, buckets=BUCKETS)
    with Publisher(raw, settings=settings) as publisher:
        publisher.send({"time": START_MS, "n": 1}, key="1")
    create_internal_stream(settings, METRICS_STREAM)
    with Publisher(METRICS_STREAM, settings=settings, time_field="time") as publisher:
        for letter, app in apps.items():
            publisher.send(
                _metrics_record(app, reads[letter], WATERMARK_MS[letter]),
                key=app,
                record_id=f"metrics:{app}:0",
            )
    for letter, app in apps.items():
        writer = MarkerWriter(settings, app)
        # As an app's output watermark is published: its queries' watermark less 1 ms.
        assert writer.write(writes[letter], BUCKETS, WATERMARK_MS[letter] - 1)
        writer.close()
    return Chain(apps, writes)


def _metrics_record(app: str, reads: str, watermark_ms: int) -> dict:
    progress = {str(bucket): watermark_ms for bucket in range(BUCKETS)}
    return {
        "time": format_time_ms(int(time.time() * 1000)),
        "app": app,
        "query": f"{app}.insert",
        "run_id": app,
        "batch_id": 0,
        "input_rows": 1,
        "watermark": format_time_ms(watermark_ms),
        "event_time": {"max": format_time_ms(watermark_ms)},
        "sources": [],
        "inputs": {
            reads: {
                "max_event_ms": progress,
                "progress_ms": progress,
                "held_back_by": "0",
                "future_dated": 0,
            }
        },
    }
