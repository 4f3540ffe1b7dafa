import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

from millrace.apps.backfill import backfill
from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import WarehouseError
from millrace.sql.parser import parse_app
from millrace.warehouse.archive import start_archive
from millrace.warehouse.result_tables import read_result_rows
from tests.apps.processor_apps import (
    T0,
    closing,
    produced_counts,
    publish,
    queries,
    read,
    window_counter,
    window_counts,
)

EXAMPLE = Path(__file__).parents[2] / "examples" / "top_events.sql"
ZEITGEIST = Path(__file__).parents[2] / "examples" / "zeitgeist.py"
DAY_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000
CATEGORIES = ("sports", "movies", "news", "music")


def _top_events(tmp_path: Path, name: str, events: str, posts: str) -> Path:
    """examples/top_events.sql under its own app name, over streams of its own."""
    text = (
        EXAMPLE.read_text()
        .replace("CREATE APPLICATION top_events;", f"CREATE APPLICATION {name};")
        .replace("'events_stream'", f"'{events}'")
        .replace("'superbowl_posts'", f"'{posts}'")
    )
    path = tmp_path / f"{name}.sql"
    path.write_text(text)
    return path


def _events() -> list[dict]:
    """A day of events, about one every 40 seconds, some of them Super Bowl posts."""
    return [
        {
            "event_time": DAY_START_MS + n * 40_000 + n % 13,
            "event": f"e{n % 17}" + (" #superbowl" if n % 10 == 0 else ""),
            "category": CATEGORIES[n % len(CATEGORIES)],
            "score": float(n % 11),
        }
        for n in range(DAY_MS // 40_000)
    ]


def _windows(rows: list[dict]) -> dict[tuple, tuple]:
    return {
        (row["window_start"], row["category"]): (
            row["n"],
            row["total_score"],
            [(item["item"], item["weight"]) for item in row["top_events"]],
        )
        for row in rows
    }


def test_backfilling_top_events_over_an_archived_day_gives_the_windows_of_its_live_run(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    events_stream, posts, backfilled_posts = (
        f"events.{suffix}",
        f"posts.{suffix}",
        f"posts_backfill.{suffix}",
    )
    for stream in (events_stream, posts, backfilled_posts):
        create_stream(workspace.settings, stream, buckets=2)
    events = _events()
    with Publisher(events_stream, settings=workspace.settings, time_field="event_time") as out:
        ids = {out.send(event): event for event in events}
        # The next day, far enough ahead for the live run's watermark to close the whole day:
        # in every bucket, since the watermark is the least over them.
        closing = {"event_time": DAY_START_MS + DAY_MS + 600_000, "event": "x", "category": "news"}
        for bucket in range(2):
            out.send(closing, record_id="closing", bucket=bucket)

    live = parse_app(_top_events(tmp_path, f"live_{suffix}", events_stream, posts).read_text())
    start_sql_app(spark, workspace, live, available_now=True).await_termination()
    start_archive(
        spark, workspace, events_stream, available_now=True, time_field="event_time"
    ).awaitTermination()

    app_file = _top_events(tmp_path, f"backfill_{suffix}", events_stream, backfilled_posts)
    run = backfill(
        spark,
        workspace,
        str(app_file),
        start_ms=DAY_START_MS,
        end_ms=DAY_START_MS + DAY_MS,
        into=["top_events_5min", backfilled_posts],
    )

    streamed = _windows(read_result_rows(workspace, live.name, "top_events_5min"))
    backfilled = _windows(read_result_rows(workspace, f"backfill_{suffix}", "top_events_5min"))
    # The live run also closed no window of the next day: the closing event's is still open.
    assert backfilled == streamed
    assert len(backfilled) == 288 * len(CATEGORIES)
    assert run.tables == {"top_events_5min": len(backfilled)}
    # Checked against plain Python too: counts per 5-minute window and category.
    expected: dict[tuple, int] = {}
    for event in events:
        key = (event["event_time"] // 300_000, event["category"])
        expected[key] = expected.get(key, 0) + 1
    counted = {
        (int(start.timestamp()) // 300, category): n
        for (start, category), (n, _, _) in backfilled.items()
    }
    assert counted == expected

    # The derived stream: the same posts. An insert's record id is `<app>:<stream>:<input
    # record's id>` (docs/semantics.md), so both runs name the same input records.
    def post_ids(stream: str) -> set[str]:
        return {
            record.id
            for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings)
        }

    superbowl = {
        record_id
        for record_id, event in ids.items()
        if event["category"] == "sports" and "#superbowl" in event["event"]
    }
    assert superbowl
    assert post_ids(posts) == {f"{live.name}:{posts}:{record_id}" for record_id in superbowl}
    assert post_ids(backfilled_posts) == {
        f"backfill_{suffix}:{backfilled_posts}:{record_id}" for record_id in superbowl
    }
    assert run.streams == {backfilled_posts: len(superbowl)}

    # Run again: the table is merged by key, so nothing changes.
    backfill(
        spark,
        workspace,
        str(app_file),
        start_ms=DAY_START_MS,
        end_ms=DAY_START_MS + DAY_MS,
        into=["top_events_5min"],
    )
    assert (
        _windows(read_result_rows(workspace, f"backfill_{suffix}", "top_events_5min")) == backfilled
    )


def test_backfill_names_what_it_cannot_do(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    app_file = _top_events(tmp_path, "refused", "never.archived.events", "refused.posts")
    cases = {
        ("top_events_hourly",): "app 'refused' has no result table or output stream",
        ("top_events_5min",): "stream 'never.archived.events' has no archive",
    }
    for into, complaint in cases.items():
        with pytest.raises(WarehouseError) as raised:
            backfill(spark, workspace, str(app_file), start_ms=0, end_ms=1, into=into)
        assert complaint in raised.value.message
    with pytest.raises(WarehouseError) as raised:
        backfill(spark, workspace, f"{ZEITGEIST}:Zeitgeist", start_ms=0, end_ms=1, into=["x"])
    assert "has no archive" in raised.value.message


def test_backfilling_a_processor_from_the_warehouse_gives_the_productions_of_its_live_run(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    live_output, backfilled_output = f"{stream_name}.counts", f"{stream_name}.backfilled"
    for stream in (stream_name, live_output, backfilled_output):
        create_stream(workspace.settings, stream, buckets=1)
    events = queries(0, 200)
    publish(workspace, stream_name, [*events, closing(events)])
    live = window_counter(stream_name, live_output)
    start_processor_app(spark, workspace, live, available_now=True).await_termination()
    start_archive(
        spark, workspace, stream_name, available_now=True, time_field="ts"
    ).awaitTermination()

    # The same processor under the same name (so the same ids), producing elsewhere; only the
    # stream named by `into` is written.
    module = ModuleType(f"backfilled_{uuid.uuid4().hex[:8]}")
    module.Counter = window_counter(stream_name, backfilled_output)
    module.Counter.name = live.name
    sys.modules[module.__name__] = module
    run = backfill(
        spark,
        workspace,
        f"{module.__name__}:Counter",
        start_ms=T0 - 60_000,
        end_ms=closing(events)["ts"],
        into=[backfilled_output],
    )

    streamed = {record.id: record.value for record in read(workspace, live_output)}
    backfilled = read(workspace, backfilled_output)
    assert {record.id: record.value for record in backfilled} == streamed
    assert produced_counts(backfilled) == window_counts(events)
    assert run.productions == len(backfilled)
