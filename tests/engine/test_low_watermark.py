"""An input's watermark is the least over its buckets, fenced from wrong clocks, and moves on
when its buckets go quiet (millrace.engine.low_watermark, through read_stream)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.low_watermark import TICK_EVERY_S
from millrace.engine.streams import StreamInput, read_stream
from millrace.ops.checkpoints import rollback
from tests.micro_batches import longest_batch_ms
from tests.plain_producer import plain_producer

SCHEMA = "event STRING"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000


def skewed_backlog(buckets: int, seconds: int) -> dict[int, list[int]]:
    """Event times per bucket whose rates change over time, each bucket in its own order.

    Bucket 0 runs at 80 events a second of event time, then 20; bucket 1 at 1; bucket 2 at
    10, then 40; others at 5. Neighbours in a bucket are at most 50 ms out of order.
    """
    rates = {0: (80, 20), 1: (1, 1), 2: (10, 40)}
    times: dict[int, list[int]] = {}
    for bucket in range(buckets):
        first, second = rates.get(bucket, (5, 5))
        bucket_times = []
        for second_of_run in range(seconds):
            rate = first if second_of_run < seconds // 2 else second
            for n in range(rate):
                at = START_MS + second_of_run * 1000 + n * 1000 // rate
                # Every other record swaps with its neighbour, 50 ms at most apart.
                bucket_times.append(at + (40 if n % 2 == 0 and rate <= 25 else 0))
        times[bucket] = bucket_times
    return times


def publish_to_buckets(workspace: Workspace, stream: str, times: dict[int, list[int]]) -> int:
    """Publish events with these times, each to its bucket, in order; how many."""
    producer = plain_producer(workspace.settings)
    failures = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    for bucket, bucket_times in times.items():
        for n, time_ms in enumerate(bucket_times):
            event = {"time": time_ms, "event": f"b{bucket}-{n}"}
            producer.produce(stream, json.dumps(event), partition=bucket, on_delivery=delivered)
            count += 1
            if count % 10_000 == 0:
                producer.flush()
    producer.flush()
    assert not failures
    return count


class Collected:
    """A query's rows, gathered batch by batch from another thread."""

    def __init__(self) -> None:
        self.rows: list = []
        self.lock = threading.Lock()

    def add(self, batch: DataFrame, _batch_id: int) -> None:
        rows = batch.collect()
        with self.lock:
            self.rows.extend(rows)

    def snapshot(self) -> list:
        with self.lock:
            return list(self.rows)


@pytest.fixture
def running_queries() -> Iterator[list]:
    """Queries (and stream inputs) to stop when the test ends."""
    running: list = []
    yield running
    for query_or_input in running:
        if isinstance(query_or_input, StreamingQuery):
            query_or_input.stop()
    for query_or_input in running:
        if not isinstance(query_or_input, StreamingQuery):
            query_or_input.close()


@pytest.mark.parametrize(
    ("buckets", "seconds", "per_batch"),
    [
        (4, 120, 1000),
        # One Kafka source reads all sixteen; each bucket still holds the watermark back.
        (16, 60, 1000),
        # About 1,000,000 records (81 a second of event time over the four buckets).
        pytest.param(4, 12_346, 20_000, marks=pytest.mark.soak),
    ],
)
def test_a_skewed_backlog_read_in_capped_micro_batches_loses_no_record(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
    buckets: int,
    seconds: int,
    per_batch: int,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=buckets)
    times = skewed_backlog(buckets=buckets, seconds=seconds)
    published = publish_to_buckets(workspace, stream_name, times)
    started = time.monotonic()
    app = f"skew{buckets}"
    source = read_stream(
        spark,
        workspace,
        app,
        stream_name,
        SCHEMA,
        time="time",
        lateness="30 seconds",
        max_records_per_batch=per_batch,
    )
    collected = Collected()
    query = (
        source.records.writeStream.foreachBatch(collected.add)
        .option("checkpointLocation", str(workspace.checkpoint(app, "rows")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    source.close()

    events = Counter(row.event for row in collected.snapshot())
    print(f"{published} records, {per_batch} a micro-batch: {sum(events.values())} read once "
          f"each, in {time.monotonic() - started:.0f} s")  # fmt: skip
    assert sum(events.values()) == published, "records were dropped as late"
    assert set(events.values()) == {1}
    assert set(events) == {
        f"b{b}-{n}" for b, bucket_times in times.items() for n in range(len(bucket_times))
    }
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= min(published // per_batch, 100)


def test_a_record_from_a_wrong_clock_is_a_dead_letter_and_costs_no_other_record(
    spark: SparkSession, workspace: Workspace, stream_name: str, running_queries: list
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    good = {0: [START_MS + 10 * n for n in range(2000)]}
    producer = plain_producer(workspace.settings)
    for n, time_ms in enumerate(good[0]):
        producer.produce(stream_name, json.dumps({"time": time_ms, "event": f"g{n}"}))
        if n == 999:
            producer.produce(
                stream_name, json.dumps({"time": "2100-01-01T00:00:00Z", "event": "wrong clock"})
            )
    producer.flush()
    source = read_stream(
        spark,
        workspace,
        "clock",
        stream_name,
        SCHEMA,
        time="time",
        lateness="30 seconds",
        max_records_per_batch=500,
    )
    counts = source.records.groupBy(F.window("time", "10 seconds")).count().select("window.start")
    collected = Collected()
    rows = Collected()
    running_queries.append(
        counts.writeStream.foreachBatch(collected.add)
        .outputMode("append")
        .option("checkpointLocation", str(workspace.checkpoint("clock", "counts")))
        .start()
    )
    running_queries.append(
        source.records.writeStream.foreachBatch(rows.add)
        .option("checkpointLocation", str(workspace.checkpoint("clock", "rows")))
        .start()
    )
    running_queries.append(source)
    for query in running_queries[:2]:
        query.processAllAvailable()
    # 1,000 more good records, published after the wrong one was read.
    for n in range(1000):
        producer.produce(
            stream_name, json.dumps({"time": START_MS + 20_000 + 10 * n, "event": f"later{n}"})
        )
    producer.flush()
    for query in running_queries[:2]:
        query.processAllAvailable()

    events = {row.event for row in rows.snapshot()}
    assert len(events) == 3000
    assert "wrong clock" not in events
    assert all(
        operator["numRowsDroppedByWatermark"] == 0
        for query in running_queries[:2]
        for progress in query.recentProgress
        for operator in progress["stateOperators"]
    )
    assert source.wait_for_dead_letters(*running_queries[:2]) == 1
    (letter,) = list(
        tail(
            dead_letter_stream(stream_name),
            TailStart(from_beginning=True),
            settings=workspace.settings,
        )
    )
    assert letter.value["error"].startswith("event time 2100-01-01T00:00:00.000Z is ")
    assert "more than max_future (300000 ms)" in letter.value["error"]
    # The watermark stayed with the good records.
    watermark = running_queries[0].lastProgress["eventTime"]["watermark"]
    assert watermark < "2026-01-01T00:01"


def _live_window_counts(
    spark: SparkSession, workspace: Workspace, app: str, stream: str, idle_timeout: str
) -> tuple[Collected, Collected, list]:
    """Live queries counting 5-second windows and collecting rows; they and their input."""
    source = read_stream(
        spark,
        workspace,
        app,
        stream,
        SCHEMA,
        time="time",
        lateness="2 seconds",
        idle_timeout=idle_timeout,
    )
    windows = Collected()
    counts = source.records.groupBy(F.window("time", "5 seconds")).count()
    count_query = (
        counts.select("window.start", "window.end", "count")
        .writeStream.queryName(f"{app}.counts")
        .foreachBatch(windows.add)
        .outputMode("append")
        .option("checkpointLocation", str(workspace.checkpoint(app, "counts")))
        .start()
    )
    rows = Collected()
    # The ticker follows the app's queries: those named `<app>.<query>`.
    row_query = (
        source.records.writeStream.queryName(f"{app}.rows")
        .foreachBatch(rows.add)
        .option("checkpointLocation", str(workspace.checkpoint(app, "rows")))
        .start()
    )
    return windows, rows, [count_query, row_query, source]


def _warm_up(producer: Producer, stream: str, queries: list[StreamingQuery]) -> None:
    """One record now, read by `queries`: their first micro-batch, and its planning, is done.

    It waits for the offsets the queries read, not `processAllAvailable`, which returns once a
    micro-batch finds nothing new: with an idle ticker's tick every second, that is only when
    a micro-batch takes less than a second (seen waiting over 100 s on a busy machine).
    """
    first = {"time": int(time.time() * 1000), "event": "first"}
    producer.produce(stream, json.dumps(first), partition=0)
    producer.flush()
    for query in queries:
        _wait_for(lambda q=query: _read_to(q, stream).get(0) == 1, timeout_s=120, query=query)


def _read_to(query: StreamingQuery, stream: str) -> dict[int, int]:
    """Per bucket of `stream`, the offset `query`'s last finished micro-batch read to."""
    progress = query.lastProgress
    read: dict[int, int] = {}
    for source in progress["sources"] if progress else []:
        end = source["endOffset"]
        offsets = json.loads(end) if isinstance(end, str) else end
        if isinstance(offsets, dict) and isinstance(offsets.get(stream), dict):
            read.update({int(bucket): offset for bucket, offset in offsets[stream].items()})
    return read


def _wait_for(condition, timeout_s: float, query: StreamingQuery | None = None) -> float:
    """Seconds until `condition` held; on a timeout, says where `query` stood."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return time.monotonic() - started
        time.sleep(0.2)
    where = ""
    if query is not None:
        progress = query.lastProgress or {}
        where = (
            f": the query is {query.status['message']!r}, its last batch "
            f"{progress.get('batchId')} began at {progress.get('timestamp')} and read to "
            f"{[source['endOffset'] for source in progress.get('sources', [])]}"
        )
    raise AssertionError(f"not within {timeout_s} s{where}")


def test_the_last_window_of_a_quiet_input_closes_within_the_idle_timeout_and_lateness(
    spark: SparkSession, workspace: Workspace, stream_name: str, running_queries: list
) -> None:
    # Two buckets, of which one never gets a record: it must not hold the watermark back.
    create_stream(workspace.settings, stream_name, buckets=2)
    windows, rows, running = _live_window_counts(
        spark, workspace, "quiet", stream_name, idle_timeout="3 seconds"
    )
    running_queries.extend(running)
    producer = plain_producer(workspace.settings)
    _warm_up(producer, stream_name, running[:2])
    sent = []
    for n in range(12):
        now_ms = int(time.time() * 1000)
        producer.produce(stream_name, json.dumps({"time": now_ms, "event": f"e{n}"}), partition=0)
        producer.flush()
        sent.append(now_ms)
        time.sleep(0.25)
    last_ms = sent[-1]
    last_window_end_ms = (last_ms // 5000 + 1) * 5000

    def closed() -> bool:
        return any(row.end.timestamp() * 1000 == last_window_end_ms for row in windows.snapshot())

    # No record comes after the last: the wall clock closes its window once it is past the
    # window's end by the lateness and past the last record by the idle timeout; their sum
    # bounds that moment. Then come:
    # the micro-batch running, the ticker's wait (a tick period) for the one after it, the
    # micro-batch that reads the tick and moves the watermark on, the one that closes the
    # window, and this loop's wait. A micro-batch takes several times longer beside a busy
    # test than alone, so the bound counts micro-batches.
    waited = _wait_for(closed, timeout_s=60)
    seen_ms = time.time() * 1000
    due_ms = last_window_end_ms + 2_000 + 3_000
    longest_ms = longest_batch_ms(running[:2], due_ms, seen_ms)
    assert seen_ms - due_ms <= TICK_EVERY_S * 1000 + 4 * longest_ms + 1_000, waited
    counted = sum(row["count"] for row in windows.snapshot())
    assert counted == len(sent) + 1
    assert len({row.event for row in rows.snapshot()}) == len(sent) + 1


def test_records_dated_days_ago_published_to_a_live_app_lose_nothing_across_a_pause(
    spark: SparkSession, workspace: Workspace, stream_name: str, running_queries: list
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    windows, rows, running = _live_window_counts(
        spark, workspace, "replay", stream_name, idle_timeout="2 seconds"
    )
    running_queries.extend(running)
    producer = plain_producer(workspace.settings)
    sent = 0
    for burst in range(2):
        for n in range(10):
            dated_ms = int(time.time() * 1000) - 3 * DAY_MS
            event = {"time": dated_ms, "event": f"burst{burst}-{n}"}
            producer.produce(stream_name, json.dumps(event))
            producer.flush()
            sent += 1
            time.sleep(0.2)
        # Longer than the idle timeout: the watermark moves on meanwhile, days behind.
        time.sleep(5)

    _wait_for(lambda: len(rows.snapshot()) >= sent, timeout_s=60)
    _wait_for(lambda: sum(row["count"] for row in windows.snapshot()) == sent, timeout_s=60)
    assert len({row.event for row in rows.snapshot()}) == sent


def test_a_query_rolled_back_reads_its_backlog_again_without_the_earlier_runs_ticks(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
    running_queries: list,
    tmp_path: Path,
) -> None:
    # The first run reads the backlog and goes quiet, so its ticker ticks both buckets to
    # about now. Rolled back to its second batch, the query reads those ticks again in its
    # first batch: taken for its own, they would pass the records still to be read again.
    create_stream(workspace.settings, stream_name, buckets=2)
    now_ms = int(time.time() * 1000)
    # Six micro-batches: few enough to read on a busy machine, enough to roll back into.
    backlog = {0: [now_ms - 30_000 + n * 100 for n in range(300)], 1: []}
    published = publish_to_buckets(workspace, stream_name, backlog)

    def start(idle_timeout: str) -> tuple[Collected, StreamingQuery, StreamInput]:
        source = read_stream(
            spark,
            workspace,
            "rerun",
            stream_name,
            SCHEMA,
            time="time",
            lateness="2 seconds",
            max_records_per_batch=100,
            idle_timeout=idle_timeout,
        )
        rows = Collected()
        query = (
            source.records.writeStream.queryName("rerun.rows")
            .foreachBatch(rows.add)
            .option("checkpointLocation", str(workspace.checkpoint("rerun", "rows")))
            .start()
        )
        running_queries.extend([query, source])
        return rows, query, source

    first_rows, first_query, first_source = start(idle_timeout="1 second")
    assert first_source.ticker is not None
    _wait_for(
        lambda: _read_to(first_query, stream_name).get(0) == published,
        timeout_s=120,
        query=first_query,
    )
    assert len(first_rows.snapshot()) == published, "the first run dropped records as late"
    _wait_for(lambda: set(first_source.ticker.ticked) == {0, 1}, timeout_s=30)
    first_query.stop()
    first_source.close()
    rollback(workspace, "rerun", {"rows": 1}, tmp_path / "backup")

    rows, query, _ = start(idle_timeout="10 minutes")
    query.processAllAvailable()
    read_again = {row.event for row in rows.snapshot()}
    # The two batches kept read at most 100 records each (the cap, shared by what each
    # bucket has waiting: all of it is bucket 0's).
    assert len(read_again) >= published - 200, "records were dropped as late"
    assert read_again == {f"b0-{n}" for n in range(published - len(read_again), published)}


def test_the_buckets_progress_is_each_buckets_largest_time_read(spark: SparkSession) -> None:
    rows = [(b % 5 if b % 7 else None, b * 1_000 if b % 11 else None) for b in range(1, 400)]
    rows += [(70, 5), (-1, 10**15)]  # a bucket beyond the others; a row of no bucket
    expected: dict[str, int] = {}
    for bucket, time_ms in rows:
        if bucket is not None and bucket >= 0 and time_ms is not None:
            expected[str(bucket)] = max(expected.get(str(bucket), time_ms), time_ms)
    # Several partitions: the tasks' maxima are serialized and merged as an observation's are.
    frame = spark.createDataFrame(rows, "bucket INT, time_ms LONG").repartition(4)

    observed = frame.agg(
        F.call_function("millrace_bucket_maxima", F.col("bucket"), F.col("time_ms")).alias("max_ms")
    ).first()

    assert observed is not None
    assert observed["max_ms"] == expected
