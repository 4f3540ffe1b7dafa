"""The short demo behind `millrace demo`: the bus up, one stream, sample events, Spark counts.

It shows the foundation working end to end on one machine: a local broker, a 4-bucket stream,
sample events published with ids and event times (a few of them malformed on purpose), and a
Spark streaming query that decodes them, routes the malformed ones to the dead-letter stream
and counts the rest per bucket.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.bus.broker import start_broker
from millrace.bus.publisher import Publisher
from millrace.bus.streams import (
    create_stream,
    dead_letter_stream,
    delete_stream,
    list_streams,
)
from millrace.config.workspace import Workspace
from millrace.engine.session import spark_session, stop_spark_session
from millrace.engine.streams import read_stream

DEMO_STREAM = "demo.events"
DEMO_APP = "demo"
_CATEGORIES = ("sports", "music", "movies", "news", "games")
_MALFORMED = (b"{not json", b"[1, 2, 3]", b'{"time": "2026-01-01T00:00:00Z", "score": "high"}')


def run_demo(workspace: Workspace, *, events: int, say: Callable[[str], None]) -> dict[int, int]:
    """Run the demo and return the count of good records per bucket that Spark computed."""
    status = start_broker(workspace)
    say(f"1. bus up at {status.bootstrap_servers}")

    settings = workspace.settings
    for name in (DEMO_STREAM, dead_letter_stream(DEMO_STREAM)):
        if name in list_streams(settings):
            delete_stream(settings, name)
    create_stream(settings, DEMO_STREAM, buckets=4, retention="1d")
    say(f"2. created stream {DEMO_STREAM!r} with 4 buckets")

    started = time.monotonic()
    _publish_sample(workspace, events)
    say(
        f"3. published {events} events and {len(_MALFORMED)} malformed records "
        f"in {time.monotonic() - started:.1f} s"
    )

    say("4. reading them through Spark (the first batch takes a few seconds)...")
    shutil.rmtree(workspace.checkpoints_dir / DEMO_APP, ignore_errors=True)
    spark = spark_session(settings, app_name="millrace-demo")
    try:
        source = read_stream(
            spark,
            workspace,
            DEMO_APP,
            DEMO_STREAM,
            "event STRING, category STRING, score DOUBLE",
            time="time",
            available_now=True,
        )
        counts: dict[int, int] = {}
        query = (
            source.records.groupBy("record_bucket")
            .agg(F.count("*").alias("records"))
            .writeStream.outputMode("complete")
            .foreachBatch(
                lambda batch, _: counts.update(
                    {row.record_bucket: row.records for row in batch.collect()}
                )
            )
            .option("checkpointLocation", str(workspace.checkpoint(DEMO_APP, "counts")))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        source.wait_for_dead_letters(query)
    finally:
        stop_spark_session()
    say("5. records per bucket, counted by Spark:")
    for bucket in sorted(counts):
        say(f"     bucket {bucket}: {counts[bucket]}")
    say(
        f"   total {sum(counts.values())}; {len(_MALFORMED)} malformed records are in "
        f"{dead_letter_stream(DEMO_STREAM)!r} (see `millrace tail "
        f"{dead_letter_stream(DEMO_STREAM)} --from-beginning`)"
    )
    say("the bus stays up: `millrace down` stops it")
    return counts


def _publish_sample(workspace: Workspace, events: int) -> None:
    generator = random.Random(7)
    now = datetime.now(UTC)
    with Publisher(DEMO_STREAM, settings=workspace.settings) as publisher:
        for number in range(events):
            category = generator.choice(_CATEGORIES)
            publisher.send(
                {
                    "time": (now - timedelta(milliseconds=generator.randrange(60_000))).isoformat(),
                    "event": f"{category}-{generator.randrange(100)}",
                    "category": category,
                    "score": round(generator.random(), 3),
                },
                key=str(number),
            )
    # Bytes no millrace publisher would send, to show dead-letter routing.
    producer = Producer({"bootstrap.servers": workspace.settings.bootstrap_servers})
    for raw in _MALFORMED:
        producer.produce(DEMO_STREAM, raw)
    producer.flush()
