from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.testing import SqlAppTester

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
        SqlAppTester(app, spark=spark, workspace=workspace).run({"events": []})
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
