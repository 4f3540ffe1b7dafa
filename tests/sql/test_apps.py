import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.records import Record
from millrace.sql.parser import load_app, parse_app
from millrace.testing import SqlAppTester
from millrace.warehouse.result_tables import read_result_rows
from tests.plain_producer import plain_producer
from tests.sql.file_sources import run_from_files

EXAMPLE = Path(__file__).parents[2] / "examples" / "top_events.sql"
START = datetime(2026, 1, 1, tzinfo=UTC)


def _event(second: float, event: str, category: str, score: float) -> dict:
    return {
        "event_time": (START + timedelta(seconds=second)).isoformat(),
        "event": event,
        "category": category,
        "score": score,
    }


def test_the_example_app_counts_per_window_and_filters_a_derived_stream(
    spark: SparkSession, workspace: Workspace
) -> None:
    events = [
        _event(10, "kickoff #superbowl", "sports", 2.0),
        _event(20, "new trailer", "movies", 1.0),
        _event(290, "touchdown #superbowl", "sports", 5.0),
        _event(310, "halftime", "sports", 3.0),
        _event(320, "premiere", "movies", 4.0),
    ]
    result = SqlAppTester(EXAMPLE, spark=spark, workspace=workspace).run({"events_score": events})

    rows = {
        (row["window_start"].timestamp(), row["category"]): (
            row["n"],
            row["total_score"],
            [(top["item"], top["weight"]) for top in row["top_events"]],
        )
        for row in result.tables["top_events_5min"]
    }
    first, second = START.timestamp(), (START + timedelta(minutes=5)).timestamp()
    assert rows == {
        (first, "sports"): (2, 7.0, [("touchdown #superbowl", 5.0), ("kickoff #superbowl", 2.0)]),
        (first, "movies"): (1, 1.0, [("new trailer", 1.0)]),
        (second, "sports"): (1, 3.0, [("halftime", 3.0)]),
        (second, "movies"): (1, 4.0, [("premiere", 4.0)]),
    }
    # Records without a key spread over the buckets, which keep no order between them.
    assert sorted(post["event"] for post in result.streams["superbowl_posts"]) == [
        "kickoff #superbowl",
        "touchdown #superbowl",
    ]
    assert result.dead_letters == {"events_score": 0}


def test_an_unknown_column_is_reported_at_its_place_in_the_file(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    app = tmp_path / "broken.sql"
    app.write_text(
        "CREATE APPLICATION broken;\n"
        "CREATE INPUT TABLE events (event_time, event) FROM STREAM('events') TIME event_time;\n"
        "INSERT INTO STREAM('out')\n"
        "SELECT event, scroe FROM events;\n"
    )
    with pytest.raises(SqlError) as raised:
        run_from_files(spark, workspace, load_app(app), {"events": []})
    assert raised.value.message.startswith(f"{app}:4:15: ")
    assert "scroe" in raised.value.message


def test_an_updates_table_merges_each_change_and_emits_it(
    spark: SparkSession, workspace: Workspace
) -> None:
    app = (
        "CREATE APPLICATION running_totals;\n"
        "CREATE INPUT TABLE events (event_time, category, score DOUBLE)\n"
        "  FROM STREAM('scores') TIME event_time;\n"
        "CREATE TABLE totals WITH (emit = 'totals_stream', mode = 'updates') AS\n"
        "SELECT category, COUNT(*) AS n, SUM(score) AS total FROM events GROUP BY category;\n"
    )
    events = [
        _event(1, "e", "sports", 1.0),
        _event(2, "e", "sports", 2.0),
        _event(3, "e", "music", 5.0),
    ]
    result = SqlAppTester(app, spark=spark, workspace=workspace).run(
        {"events": events}, close_windows=False
    )
    assert sorted((row["category"], row["n"], row["total"]) for row in result.tables["totals"]) == [
        ("music", 1, 5.0),
        ("sports", 2, 3.0),
    ]
    assert sorted((row["category"], row["n"]) for row in result.streams["totals_stream"]) == [
        ("music", 1),
        ("sports", 2),
    ]


def test_records_are_dated_by_their_time_field_else_their_time_header_and_outputs_carry_theirs(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    source, copies, sums = (f"test.dated-{part}.{run}" for part in ("in", "copies", "sums"))
    for stream in (source, copies, sums):
        create_stream(workspace.settings, stream, buckets=1)
    t0 = int(START.timestamp() * 1000)
    # (value, time header): a processor's productions carry their time in the header only.
    records = [
        ({"kind": "a", "n": 1}, t0 + 1000),
        ({"kind": "b", "n": 2, "time": t0 + 7000}, t0 + 2000),  # the field wins
        ({"kind": "a", "n": 3}, t0 + 3000),
        ({"kind": "z", "n": 0, "time": t0 + 60_000}, None),  # closes the windows before it
    ]
    producer = plain_producer(workspace.settings)
    for value, carried in records:
        headers = [] if carried is None else [("time", str(carried).encode())]
        producer.produce(source, json.dumps(value).encode(), headers=headers)
    producer.flush()
    app = parse_app(
        f"CREATE APPLICATION dated_{run};\n"
        f"CREATE INPUT TABLE src (kind, n INT) FROM STREAM('{source}') TIME time\n"
        "  LATENESS '0 seconds';\n"
        f"INSERT INTO STREAM('{copies}') SELECT kind, n FROM src;\n"
        f"CREATE TABLE per_5s WITH (emit = '{sums}') AS\n"
        "SELECT kind, SUM(n) AS total FROM src [5 seconds] GROUP BY kind;\n"
    )
    start_sql_app(spark, workspace, app, available_now=True).await_termination()

    times = {"a": {1: t0 + 1000, 3: t0 + 3000}, "b": {2: t0 + 7000}, "z": {0: t0 + 60_000}}
    expected: dict = {}
    for kind, by_n in times.items():
        for n, time_ms in by_n.items():
            window = (kind, time_ms // 5000 * 5000)
            if window[1] + 5000 <= t0 + 60_000:
                expected[window] = expected.get(window, 0) + n
    result = read_result_rows(workspace, app.name, "per_5s")
    assert {
        (row["kind"], int(row["window_start"].timestamp() * 1000)): row["total"] for row in result
    } == expected
    copied = _tail(workspace, copies)
    assert {record.value["n"]: record.time_ms for record in copied} == {
        n: time_ms for by_n in times.values() for n, time_ms in by_n.items()
    }
    assert all("time" not in record.value for record in copied)
    # An emitted window is dated by its last millisecond: in the same window downstream.
    assert {(r.value["kind"], r.time_ms) for r in _tail(workspace, sums)} == {
        (kind, start + 4999) for kind, start in expected
    }


def _tail(workspace: Workspace, stream: str) -> list[Record]:
    return list(tail(stream, TailStart(from_beginning=True), settings=workspace.settings))
