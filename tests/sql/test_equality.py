"""One SQL app, three ways to the same windows over 100,000 events: streaming in several
micro-batches, in batch over a range holding every event, and computed in plain Python.

The app reads the events from files (`tests.sql.file_sources`): what is tested is that the
compiled streaming and batch plans agree, not reading the bus."""

import random
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from tests.sql.file_sources import FileRun, compile_from_files, run_from_files

START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
MINUTE_MS = 60_000
SLIDE_MS = 30_000
EVENTS = 100_000
CATEGORIES = ("books", "games", "music", "tools")
ITEMS = tuple(f"item{n:02}" for n in range(20))

APP = """
CREATE APPLICATION equality;

CREATE INPUT TABLE sales (sold_at TIMESTAMP, category STRING, item STRING, score INT)
FROM STREAM('sales') TIME sold_at LATENESS '30 seconds';

CREATE TABLE per_minute AS
SELECT category, COUNT(*) AS n, SUM(score) AS total, MIN(score) AS low, MAX(score) AS high,
       TOPK(item, score, 3) AS top_items
FROM sales [1 minute]
GROUP BY category;

CREATE TABLE sliding AS
SELECT category, COUNT(*) AS n, SUM(score) AS total
FROM sales [2 minutes SLIDE 30 seconds]
GROUP BY category;
"""


def _sales() -> list[dict]:
    """Sales over 30 minutes, each at most 10 s out of order: within the lateness."""
    generator = random.Random(2026)
    sales = [
        {
            "sold_at": START_MS + generator.randrange(30 * MINUTE_MS),
            "category": generator.choice(CATEGORIES),
            "item": generator.choice(ITEMS),
            "score": generator.randrange(1, 100),
        }
        for _ in range(EVENTS)
    ]
    sales.sort(key=lambda sale: sale["sold_at"] + generator.uniform(-5_000, 5_000))
    return sales


def _expected(sales: list[dict]) -> dict[str, dict]:
    """Each table's rows computed in Python, by (window start, window end, category)."""
    minutes: dict[tuple, list[dict]] = defaultdict(list)
    sliding: dict[tuple, list[int]] = defaultdict(list)
    for sale in sales:
        time, category = sale["sold_at"], sale["category"]
        minute = time - time % MINUTE_MS
        minutes[(minute, minute + MINUTE_MS, category)].append(sale)
        last = time - time % SLIDE_MS
        for start in range(last, last - 2 * MINUTE_MS, -SLIDE_MS):
            sliding[(start, start + 2 * MINUTE_MS, category)].append(sale["score"])
    per_minute = {}
    for key, group in minutes.items():
        scores = [sale["score"] for sale in group]
        weights: dict[str, float] = defaultdict(float)
        for sale in group:
            weights[sale["item"]] += sale["score"]
        top = sorted(weights.items(), key=lambda pair: (-pair[1], pair[0]))[:3]
        per_minute[key] = (len(scores), sum(scores), min(scores), max(scores), top)
    return {
        "per_minute": per_minute,
        "sliding": {key: (len(scores), sum(scores)) for key, scores in sliding.items()},
    }


def _actual(table: str, rows: list[dict]) -> dict:
    """Result rows by (window start, window end, category), in the shape of `_expected`."""
    actual = {}
    for row in rows:
        # Spark gives naive local times, and the test machine runs on UTC.
        key = (
            int(row["window_start"].timestamp() * 1000),
            int(row["window_end"].timestamp() * 1000),
            row["category"],
        )
        if table == "per_minute":
            top = [(entry["item"], entry["weight"]) for entry in row["top_items"]]
            actual[key] = (row["n"], row["total"], row["low"], row["high"], top)
        else:
            actual[key] = (row["n"], row["total"])
    assert len(actual) == len(rows), f"{table} holds a window twice"
    return actual


@pytest.fixture(scope="module")
def sales() -> list[dict]:
    return _sales()


@pytest.fixture(scope="module")
def expected(sales: list[dict]) -> dict[str, dict]:
    return _expected(sales)


@pytest.fixture(scope="module")
def streamed(spark: SparkSession, workspace: Workspace, sales: list[dict]) -> FileRun:
    return run_from_files(spark, workspace, APP, {"sales": sales}, batch_size=25_000)


def test_streaming_in_micro_batches_gives_the_windows_computed_in_python(
    streamed: FileRun, expected: dict[str, dict]
) -> None:
    assert {table: _actual(table, rows) for table, rows in streamed.tables.items()} == expected
    assert streamed.late_rows == {"per_minute": 0, "sliding": 0}


def test_a_batch_run_over_the_same_records_gives_the_same_windows(
    spark: SparkSession,
    workspace: Workspace,
    sales: list[dict],
    expected: dict[str, dict],
) -> None:
    # Every window holding an event lies inside this range.
    compiled = compile_from_files(
        spark,
        workspace,
        APP,
        {"sales": sales},
        start_ms=START_MS - 2 * MINUTE_MS,
        end_ms=START_MS + 32 * MINUTE_MS,
    )

    batch = {
        table: _actual(table, [row.asDict(recursive=True) for row in rows.collect()])
        for table, rows in compiled.tables.items()
    }
    assert batch == expected
