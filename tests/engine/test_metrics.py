"""Every micro-batch of an app publishes one metrics record, whose counts match what Spark
reported for that batch and what the input stream holds."""

import json
import time
import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from millrace import Input, Processor
from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.internal import METRICS_STREAM, end_offsets, read_after
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine.metrics import MetricsListener, OldestWaiting, publish_metrics
from millrace.monitor.history import SERIES
from millrace.monitor.metrics_log import MetricsLog, batch_of
from millrace.monitor.status import app_status
from millrace.sql.parser import parse_app
from tests.plain_producer import plain_producer
from tests.ports import free_port

START_MS = 1_767_225_600_000


def _app_text(app: str, source: str, target: str) -> str:
    return (
        f"CREATE APPLICATION {app};\n"
        "CREATE INPUT TABLE events (time, event, score DOUBLE)\n"
        f"  FROM STREAM('{source}') TIME time LATENESS '1 hour';\n"
        f"INSERT INTO STREAM('{target}') SELECT time, event, score FROM events WHERE score > 5;\n"
    )


def published_metrics(workspace: Workspace, app: str, since_ms: int, batches: int) -> list[dict]:
    """The metrics records of `app`, waiting until `batches` of them are there."""
    deadline = time.monotonic() + 60
    found: dict[tuple, dict] = {}
    positions: dict[int, int] = {}
    while time.monotonic() < deadline:
        records, positions = read_after(
            workspace.settings, METRICS_STREAM, positions, since_ms=since_ms
        )
        for stamped in records:
            value = stamped.record.value
            if value["app"] == app:
                found[(value["run_id"], value["batch_id"])] = value
        if len(found) >= batches:
            break
        time.sleep(0.5)
    return sorted(found.values(), key=lambda value: value["batch_id"])


def test_each_batch_publishes_its_progress_with_the_right_counts(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app_name, source, target = f"metered_{suffix}", f"m.in.{suffix}", f"m.out.{suffix}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, target, buckets=1)
    events = [{"time": START_MS + n, "event": f"e{n}", "score": n % 10} for n in range(40)]
    for n in (4, 21):
        events[n] = {"time": START_MS + n, "event": "bad", "score": "high"}
    # Copies of records the app keeps (score > 5): the copies of those its filter leaves out
    # are left out with them, before the deduplication (docs/semantics.md).
    copied = [6, 7, 8]
    with Publisher(source, settings=workspace.settings) as publisher:
        for n, event in enumerate(events):
            publisher.send(event, key=str(n), record_id=f"event-{n}")
        # Copies of records already sent, with the same ids, as a re-run batch writes them.
        for n in copied:
            publisher.send(events[n], key=str(n), record_id=f"event-{n}")
    since_ms = int(time.time() * 1000) - 1000

    running = start_sql_app(
        spark,
        workspace,
        parse_app(_app_text(app_name, source, target), tmp_path / "app.sql"),
        available_now=True,
        max_records_per_batch=10,
    )
    running.await_termination()
    [query] = running.queries
    # Every batch, including those that only move the watermark on (the input has a lateness).
    reported = list({progress["batchId"]: progress for progress in query.recentProgress}.values())

    metrics = published_metrics(workspace, app_name, since_ms, len(reported))
    # One record per batch, with Spark's own figures for it.
    assert [m["batch_id"] for m in metrics] == [p["batchId"] for p in reported]
    assert [m["input_rows"] for m in metrics] == [p["numInputRows"] for p in reported]
    assert sum(m["input_rows"] for m in metrics) == len(events) + len(copied)
    assert all(m["query"] == f"{app_name}.insert.{target}" for m in metrics)
    # The bad records are counted in the batches that read them.
    assert sum(m["dead_letter_rows"] for m in metrics) == 2
    assert sum(m["dead_letters"].get(source, 0) for m in metrics) == 2
    # The copies are dropped by the app's deduplication and counted.
    assert sum(m["duplicate_rows"] for m in metrics) == len(copied)
    # The last batch ends where the input stream ends: each bucket is read by a source.
    last = {
        int(bucket): offset
        for read in metrics[-1]["sources"]
        for bucket, offset in read["end_offsets"].get(source, {}).items()
    }
    assert last == end_offsets(workspace.settings, source)
    assert all(
        m["batch_duration_ms"] >= 0 and "triggerExecution" in m["durations_ms"] for m in metrics
    )
    assert publish_metrics(spark, workspace, app_name).failures == 0


def test_a_processor_app_publishes_its_dead_letters_per_batch(
    spark: SparkSession, workspace: Workspace
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, target = f"p.in.{suffix}", f"p.out.{suffix}"
    create_stream(workspace.settings, source, buckets=1)
    create_stream(workspace.settings, target, buckets=1)

    class Echo(Processor):
        name = f"echo_{suffix}"
        inputs = [Input(source, key="query", time="ts", lateness="10s")]  # noqa: RUF012

        def on_record(self, key, record, ctx):
            ctx.produce(target, record)

    producer = plain_producer(workspace.settings, log_level=0)
    sent: list[tuple[bytes, str | None]] = [(b"not json", None), (b"[1]", None)]
    sent += [(json.dumps({"query": "q", "ts": START_MS + n}).encode(), f"e{n}") for n in range(8)]
    # Copies of three records already sent, with the same ids, as a re-run batch writes them.
    sent += sent[2:5]
    for value, record_id in sent:
        producer.produce(source, value, headers=[("id", record_id.encode())] if record_id else None)
    producer.flush()
    since_ms = int(time.time() * 1000) - 1000

    running = start_processor_app(spark, workspace, Echo, available_now=True)
    running.await_termination()
    reported = [p for p in running.query.recentProgress if p["numInputRows"] > 0]

    metrics = published_metrics(workspace, Echo.name, since_ms, len(reported))
    assert sum(m["input_rows"] for m in metrics) == len(sent)
    assert sum(m["dead_letter_rows"] for m in metrics) == running.dead_letters == 2
    assert sum(m["late_rows"] for m in metrics) == running.late
    assert sum(m["duplicate_rows"] for m in metrics) == running.duplicates == 3
    assert all(m["query"] == f"{Echo.name}.processor" for m in metrics)


def test_a_bus_that_does_not_answer_is_counted_not_raised(tmp_path: Path) -> None:
    dead_bus = Workspace(tmp_path, Settings(kafka_bootstrap=f"127.0.0.1:{free_port()}"))
    listener = MetricsListener(dead_bus)
    record = {"app": "a", "query": "a.q", "run_id": "r", "batch_id": 0, "time": "2026-01-01"}
    listener._send(record)
    listener._send({**record, "batch_id": 1})
    assert (listener.published, listener.failures) == (0, 2)


def test_each_batch_says_which_bucket_holds_an_inputs_watermark_back_and_what_came_dated_ahead(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app_name, source, target = f"held_{suffix}", f"h.in.{suffix}", f"h.out.{suffix}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, target, buckets=1)
    producer = plain_producer(workspace.settings)
    # Bucket 1 is ten minutes behind bucket 0; bucket 0 has one record from a wrong clock.
    for n in range(20):
        for bucket, behind_ms in ((0, 0), (1, 600_000)):
            event = {"time": START_MS + 1000 * n - behind_ms, "event": f"e{n}", "score": 1}
            producer.produce(source, json.dumps(event), partition=bucket)
    wrong = {"time": "2100-01-01T00:00:00Z", "event": "wrong clock", "score": 1}
    producer.produce(source, json.dumps(wrong), partition=0)
    producer.flush()
    since_ms = int(time.time() * 1000) - 1000

    running = start_sql_app(
        spark, workspace, parse_app(_app_text(app_name, source, target), tmp_path / "app.sql"),
        available_now=True,
    )  # fmt: skip
    running.await_termination()
    [query] = running.queries
    reported = {progress["batchId"] for progress in query.recentProgress}

    metrics = published_metrics(workspace, app_name, since_ms, len(reported))
    read = metrics[0]["inputs"][source]
    assert read["progress_ms"] == {"0": START_MS + 19_000, "1": START_MS + 19_000 - 600_000}
    assert read["held_back_by"] == "1"
    assert read["future_dated"] == 1
    assert metrics[0]["dead_letters"] == {source: 1}
    # The monitor (`ps --json`, `top`, /metrics) tells the same from the published records.
    log = MetricsLog(workspace.settings)
    log.refresh()
    [watermark] = app_status(workspace, app_name, log).watermarks
    assert (watermark.stream, watermark.held_back_by, watermark.future_dated) == (source, "1", 1)


def test_each_batch_says_when_the_oldest_record_it_left_waiting_arrived(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app_name, source, target = f"waiting_{suffix}", f"w.in.{suffix}", f"w.out.{suffix}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, target, buckets=1)
    arrived: dict[tuple[int, int], int] = {}

    def delivered(error, message) -> None:
        arrived[(message.partition(), message.offset())] = message.timestamp()[1]

    # 15 records per bucket, bucket 1's a second after bucket 0's.
    producer = plain_producer(workspace.settings)
    for bucket in (0, 1):
        for n in range(15):
            event = {"time": START_MS + n, "event": f"e{n}", "score": 9}
            producer.produce(source, json.dumps(event), partition=bucket, on_delivery=delivered)
        producer.flush()
        time.sleep(1)
    since_ms = int(time.time() * 1000) - 1000

    # 5 records per bucket per batch: the first two batches leave records waiting.
    running = start_sql_app(
        spark, workspace, parse_app(_app_text(app_name, source, target), tmp_path / "app.sql"),
        available_now=True, max_records_per_batch=10,
    )  # fmt: skip
    running.await_termination()
    [query] = running.queries
    reported = {progress["batchId"] for progress in query.recentProgress}

    metrics = published_metrics(workspace, app_name, since_ms, len(reported))
    reading = [m for m in metrics if m["input_rows"] > 0]
    # The oldest waiting record is bucket 0's first unread one, which arrived before bucket 1's.
    assert [m["oldest_waiting_arrival_ms"] for m in reading] == [
        {source: arrived[(0, 5)]},
        {source: arrived[(0, 10)]},
        {},
    ]
    assert all(m["oldest_waiting_arrival_ms"] == {} for m in metrics[len(reading) :])
    # The chart's lag in seconds: the batch's time minus that arrival, then 0 once caught up.
    _, lag_seconds = SERIES["lag_seconds"]
    batches = [batch_of(m) for m in metrics]
    lags = [lag_seconds(batch) for batch in batches if batch is not None]
    assert lags[0] == (batches[0].time_ms - arrived[(0, 5)]) / 1000 >= 2.0
    assert lags[1] == (batches[1].time_ms - arrived[(0, 10)]) / 1000
    assert lags[2:] == [0.0] * (len(metrics) - 2)


def test_a_lookup_of_waiting_records_on_a_bus_that_does_not_answer_leaves_the_figure_out() -> None:
    dead_bus = Settings(kafka_bootstrap=f"127.0.0.1:{free_port()}")
    waiting = OldestWaiting(dead_bus, timeout_s=1.0)
    behind = {"end_offsets": {"clicks": {"0": 5}}, "latest_offsets": {"clicks": {"0": 9}}}
    record: dict = {"sources": [behind]}
    started = time.monotonic()
    waiting.follow(record)
    assert record["oldest_waiting_arrival_ms"] is None
    assert time.monotonic() - started < 3.0
    waiting.close()
