"""Processing lag and watermark lag of an app that processed part of its input, checked
against what was published and against the records' own times read straight from Kafka."""

import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.internal import end_offsets
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.monitor.metrics_log import MetricsLog
from millrace.monitor.status import app_status
from millrace.sql.parser import parse_app

START_MS = 1_767_225_600_000
LATENESS_MS = 10_000


def app_text(app: str, source: str) -> str:
    return (
        f"CREATE APPLICATION {app};\n"
        "CREATE INPUT TABLE events (time, category) FROM STREAM"
        f"('{source}') TIME time LATENESS '10 seconds';\n"
        "CREATE TABLE counts AS SELECT category, COUNT(*) AS n FROM events [1 minute]\n"
        "GROUP BY category;\n"
    )


def publish(workspace: Workspace, stream: str, first: int, count: int) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for n in range(first, first + count):
            publisher.send({"time": START_MS + n * 1000, "category": f"c{n % 3}"}, key=str(n))


def kafka_records(workspace: Workspace, stream: str) -> dict[tuple[int, int], tuple[int, dict]]:
    """Every record of `stream` by (bucket, offset): its append time and value."""
    import json

    ends = end_offsets(workspace.settings, stream)
    consumer = Consumer(
        {"bootstrap.servers": workspace.settings.bootstrap_servers, "group.id": "lag-test"}
    )
    consumer.assign([TopicPartition(stream, bucket, 0) for bucket in ends])
    found: dict[tuple[int, int], tuple[int, dict]] = {}
    deadline = time.monotonic() + 60
    while len(found) < sum(ends.values()) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found[(message.partition(), message.offset())] = (
                message.timestamp()[1],
                json.loads(message.value()),
            )
    consumer.close()
    return found


def wait_for_batches(metrics: MetricsLog, app: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(metrics.batches(app)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        metrics.refresh()


def test_lag_is_what_was_published_after_the_app_stopped(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app, source = f"lagging_{suffix}", f"lag.in.{suffix}"
    create_stream(workspace.settings, source, buckets=2)
    publish(workspace, source, 0, 30)
    metrics = MetricsLog(workspace.settings)
    metrics.refresh()

    running = start_sql_app(
        spark,
        workspace,
        parse_app(app_text(app, source), tmp_path / "app.sql"),
        available_now=True,
        max_records_per_batch=10,
    )
    running.await_termination()
    processed = end_offsets(workspace.settings, source)
    time.sleep(1.5)  # so that the records published next are measurably newer
    publish(workspace, source, 30, 12)

    [query] = running.queries
    wait_for_batches(metrics, app, len(query.recentProgress))
    status = app_status(workspace, app, metrics)

    # Records: exactly the ones published after the app stopped.
    [lag] = status.inputs
    assert lag.stream == source
    assert lag.committed_offsets == processed
    assert lag.lag_records == 12 == status.lag_records
    # Seconds: newest record's append time minus the last processed one's, worst bucket.
    records = kafka_records(workspace, source)
    ends = end_offsets(workspace.settings, source)
    expected_s = max(
        (records[(b, ends[b] - 1)][0] - records[(b, processed[b] - 1)][0]) / 1000
        for b in ends
        if ends[b] > processed[b]
    )
    assert lag.lag_seconds == expected_s
    assert lag.lag_seconds >= 1.5

    # Watermark: the least over the buckets of the newest event time read from each before
    # the last batch, minus the lateness (each bucket is read by a source of its own).
    last = max(metrics.batches(app), key=lambda batch: batch.batch_id)
    starts = {
        int(bucket): offset
        for read in last.fields["sources"]
        for bucket, offset in read["start_offsets"].get(source, {}).items()
    }
    read_before: dict[int, int] = {}
    for (bucket, offset), (_, value) in records.items():
        if offset < starts.get(bucket, 0):
            read_before[bucket] = max(read_before.get(bucket, value["time"]), value["time"])
    assert status.watermark_ms == min(read_before.values()) - LATENESS_MS
    newest_read = max(
        value["time"]
        for (bucket, offset), (_, value) in records.items()
        if offset < processed[bucket]
    )
    assert status.watermark_lag_seconds == (newest_read - status.watermark_ms) / 1000
    assert status.last_batch_id == last.batch_id
