import uuid
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.batch import BatchRun, run_sql_app_batch
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.sql.compiler import compile_app
from millrace.sql.parser import SqlApp, parse_app
from millrace.warehouse.result_tables import read_result_rows

START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MINUTE_MS = 60_000
CATEGORIES = ("sports", "movies", "news")


def _app(stream: str, *, table_options: str = "", more: str = "") -> SqlApp:
    """An app of its own name over `stream`, counting per 5-minute window and category."""
    return parse_app(
        f"CREATE APPLICATION batch_{uuid.uuid4().hex[:8]};\n"
        "CREATE INPUT TABLE events (event_time, event, category, score DOUBLE)\n"
        f"  FROM STREAM('{stream}') TIME event_time LATENESS '30 seconds';\n"
        f"CREATE TABLE per_5min {table_options} AS\n"
        "SELECT category, COUNT(*) AS n, SUM(score) AS total\n"
        "FROM events [5 minutes] GROUP BY category;\n" + more
    )


def _publish(workspace: Workspace, stream: str, events: list[dict]) -> dict[str, str]:
    """Publish `events` in order; their record ids by event name."""
    with Publisher(stream, settings=workspace.settings, time_field="event_time") as publisher:
        return {event["event"]: publisher.send(event) for event in events}


def _events(count: int, every_ms: int) -> list[dict]:
    return [
        {
            "event_time": START_MS + 20_000 + n * every_ms,
            "event": f"e{n}",
            "category": CATEGORIES[n % 3],
            "score": float(n),
        }
        for n in range(count)
    ]


def _windows(rows: list[dict]) -> dict[tuple[int, str], tuple[int, float]]:
    """Result rows as (window start in minutes from START, category) → (n, total)."""
    return {
        (
            (int(row["window_start"].timestamp() * 1000) - START_MS) // MINUTE_MS,
            row["category"],
        ): (row["n"], row["total"])
        for row in rows
    }


def test_a_batch_run_gives_the_final_windows_of_a_streaming_run(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    events = _events(30, 29_000)  # about 15 minutes
    _publish(workspace, stream_name, events)
    # Far enough ahead, and outside the batch range, for the watermark to close every window:
    # in both buckets, since the watermark is the least over them.
    closing = {"event_time": START_MS + 60 * MINUTE_MS, "event": "close", "category": "news"}
    with Publisher(stream_name, settings=workspace.settings, time_field="event_time") as out:
        for bucket in range(2):
            out.send(closing, record_id="closing", bucket=bucket)

    streaming = _app(stream_name)
    start_sql_app(spark, workspace, streaming, available_now=True).await_termination()
    batch = _app(stream_name)
    run_sql_app_batch(spark, workspace, batch, start_ms=START_MS, end_ms=START_MS + 30 * MINUTE_MS)

    streamed = _windows(read_result_rows(workspace, streaming.name, "per_5min"))
    assert len(streamed) == 9
    assert _windows(read_result_rows(workspace, batch.name, "per_5min")) == streamed


def test_a_batch_run_merges_the_windows_inside_its_range_and_a_second_run_changes_nothing(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    results = f"{stream_name}.results"
    for stream in (stream_name, results):
        create_stream(workspace.settings, stream, buckets=2)
    events = _events(40, 37_000)  # about 25 minutes
    # Minutes behind the latest event: a streaming run would drop it, a batch run counts it.
    late = {
        "event_time": START_MS + 7 * MINUTE_MS,
        "event": "late",
        "category": "news",
        "score": 1.0,
    }
    _publish(workspace, stream_name, [*events, late])
    app = _app(stream_name, table_options=f"WITH (emit = '{results}')")

    def run() -> BatchRun:
        return run_sql_app_batch(
            spark,
            workspace,
            app,
            start_ms=START_MS + 5 * MINUTE_MS,
            end_ms=START_MS + 17 * MINUTE_MS,
        )

    first = run()
    rows = _windows(read_result_rows(workspace, app.name, "per_5min"))

    # The windows entirely inside [5, 17) minutes: 5-10 and 10-15; 15-20 would be partial.
    expected: dict[tuple[int, str], tuple[int, float]] = defaultdict(lambda: (0, 0.0))
    for event in [*events, late]:
        minute = (event["event_time"] - START_MS) // MINUTE_MS
        if 5 <= minute < 15:
            key = (minute // 5 * 5, event["category"])
            count, total = expected[key]
            expected[key] = (count + 1, total + event["score"])
    assert rows == expected
    assert {minute for minute, _ in rows} == {5, 10}
    assert first.tables == {"per_5min": len(rows)}
    assert first.streams == {results: len(rows)}

    second = run()

    assert _windows(read_result_rows(workspace, app.name, "per_5min")) == rows
    assert second == first
    emitted = [
        record.id
        for record in tail(results, TailStart(from_beginning=True), settings=workspace.settings)
    ]
    # Each result was emitted once per run, with the id that names it.
    assert len(emitted) == 2 * len(rows)
    assert len(set(emitted)) == len(rows)
    assert all(record_id.startswith(f"{app.name}:per_5min:") for record_id in emitted)


def test_a_batch_insert_writes_the_filtered_records_of_the_range_with_their_ids(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    sports = f"{stream_name}.sports"
    for stream in (stream_name, sports):
        create_stream(workspace.settings, stream, buckets=2)
    events = _events(30, 29_000)
    ids = _publish(workspace, stream_name, events)
    app = _app(
        stream_name,
        more=f"INSERT INTO STREAM('{sports}') SELECT * FROM events WHERE category = 'sports';\n",
    )

    run = run_sql_app_batch(
        spark, workspace, app, start_ms=START_MS + 2 * MINUTE_MS, end_ms=START_MS + 9 * MINUTE_MS
    )

    in_range = [
        event
        for event in events
        if event["category"] == "sports"
        and START_MS + 2 * MINUTE_MS <= event["event_time"] < START_MS + 9 * MINUTE_MS
    ]
    written = {
        record.id: record.value["event"]
        for record in tail(sports, TailStart(from_beginning=True), settings=workspace.settings)
    }
    # Each record's id is derived from its input record's: `<app>:<stream>:<input id>`.
    assert written == {
        f"{app.name}:{sports}:{ids[event['event']]}": event["event"] for event in in_range
    }
    assert run.streams == {sports: len(in_range)}


def test_a_distinct_count_runs_exactly_in_a_batch_run_and_is_refused_on_a_stream(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name)
    events = _events(30, 29_000)
    _publish(workspace, stream_name, events)
    app = parse_app(
        f"CREATE APPLICATION batch_{uuid.uuid4().hex[:8]};\n"
        "CREATE INPUT TABLE events (event_time, event, category, score DOUBLE)\n"
        f"  FROM STREAM('{stream_name}') TIME event_time LATENESS '30 seconds';\n"
        "CREATE TABLE per_5min AS\n"
        "SELECT category, COUNT(DISTINCT event) AS events\n"
        "FROM events [5 minutes] GROUP BY category;\n",
        "app.sql",
    )

    with pytest.raises(SqlError, match=r"^app\.sql:5:18: COUNT\(DISTINCT event\) cannot run"):
        compile_app(spark, workspace, app)
    run_sql_app_batch(spark, workspace, app, start_ms=START_MS, end_ms=START_MS + 15 * MINUTE_MS)

    rows = read_result_rows(workspace, app.name, "per_5min")
    expected: dict[tuple[int, str], int] = defaultdict(int)
    for event in events:
        minute = (event["event_time"] - START_MS) // MINUTE_MS
        if minute < 15:
            expected[(minute // 5 * 5, event["category"])] += 1
    assert {
        ((int(row["window_start"].timestamp() * 1000) - START_MS) // MINUTE_MS, row["category"]): (
            row["events"]
        )
        for row in rows
    } == expected
