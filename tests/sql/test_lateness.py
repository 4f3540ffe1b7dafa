"""Late records: a record behind the lateness is dropped and counted once the watermark has
closed its window; a record out of order but within the lateness is counted in its window."""

from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.testing import SqlAppTester

START = datetime(2026, 1, 1, tzinfo=UTC)

APP = """
CREATE APPLICATION lateness;
CREATE INPUT TABLE events (event_time, category, score INT)
  FROM STREAM('late_events') TIME event_time LATENESS '10 seconds';
CREATE TABLE per_minute AS
SELECT category, COUNT(*) AS n, SUM(score) AS total FROM events [1 minute] GROUP BY category;
"""


def _event(second: int, category: str, score: int) -> dict:
    return {
        "event_time": (START + timedelta(seconds=second)).isoformat(),
        "category": category,
        "score": score,
    }


# Read two at a time. The watermark, the latest time seen minus 10 seconds, moves between
# micro-batches; a window is written by the first micro-batch that starts with the watermark
# past its end, and its records that come in a later micro-batch are dropped.
EVENTS = [
    _event(10, "sports", 1),
    _event(40, "sports", 2),
    # Watermark 0:30. 5 s behind the latest, within the lateness: counted in minute 0.
    _event(35, "sports", 4),
    _event(80, "sports", 8),
    # Watermark 1:10: this micro-batch writes minute 0. 5 s behind: counted in minute 1.
    _event(90, "movies", 32),
    _event(85, "movies", 64),
    # Watermark 1:20, minute 0 is written: its record, 40 s behind the latest, is dropped.
    _event(50, "sports", 16),
]


def _windows(rows: list[dict]) -> dict[tuple[int, str], tuple[int, int]]:
    """Result rows as (window start in minutes from START, category) → (n, total)."""
    return {
        (
            int(row["window_start"].timestamp() - START.timestamp()) // 60,
            row["category"],
        ): (row["n"], row["total"])
        for row in rows
    }


def test_a_record_behind_a_closed_window_is_dropped_and_counted_one_within_the_lateness_kept(
    spark: SparkSession, workspace: Workspace
) -> None:
    result = SqlAppTester(APP, spark=spark, workspace=workspace).run(
        {"events": EVENTS}, batch_size=2
    )

    assert _windows(result.tables["per_minute"]) == {
        (0, "sports"): (3, 1 + 2 + 4),
        (1, "sports"): (1, 8),
        (1, "movies"): (2, 32 + 64),
    }
    assert result.late_rows == {"per_minute": 1}


def test_in_one_micro_batch_no_record_is_late(spark: SparkSession, workspace: Workspace) -> None:
    result = SqlAppTester(APP, spark=spark, workspace=workspace).run({"events": EVENTS})

    assert _windows(result.tables["per_minute"]) == {
        (0, "sports"): (4, 1 + 2 + 4 + 16),
        (1, "sports"): (1, 8),
        (1, "movies"): (2, 32 + 64),
    }
    assert result.late_rows == {"per_minute": 0}
