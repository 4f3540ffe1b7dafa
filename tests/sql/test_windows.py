"""Windows and aggregates of SQL apps, checked against the same answer computed in Python.

The apps read their records from files (`tests.sql.file_sources`): what is tested is the
compiled plan, not reading the bus."""

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.sql.compiler import compile_app
from millrace.sql.parser import parse_app
from tests.sql.file_sources import FileRun, run_from_files

START = datetime(2026, 1, 1, tzinfo=UTC)

APP = """
CREATE APPLICATION windows;

CREATE INPUT TABLE clicks (ts TIMESTAMP, page STRING, user STRING, ms INT)
FROM STREAM('clicks') TIME ts LATENESS '1 minute';

CREATE TABLE sliding AS
SELECT page, COUNT(*) AS n, SUM(ms) AS total_ms, MIN(ms) AS fastest, MAX(ms) AS slowest,
       AVG(ms) AS mean_ms, TOPK(user, ms, 2) AS top_users, APPROX_COUNT_DISTINCT(user) AS users
FROM clicks [30 seconds SLIDE 10 seconds]
GROUP BY page
HAVING COUNT(*) > 1;

CREATE TABLE tumbling AS
SELECT page, TOPK(user, 1, 3) AS top_users, COUNT(*) AS n
FROM clicks [1 minute]
GROUP BY page;
"""


def _clicks(count: int, seed: int) -> list[dict]:
    """Clicks over two minutes, a little out of order, on 3 pages by 6 users."""
    generator = random.Random(seed)
    clicks = [
        {
            "ts": START + timedelta(milliseconds=generator.randrange(120_000)),
            "page": generator.choice(["home", "cart", "help"]),
            "user": generator.choice(["ann", "bob", "cy", "dee", "eve", "fay"]),
            "ms": generator.randrange(1, 500),
        }
        for _ in range(count)
    ]
    clicks.sort(key=lambda click: click["ts"] + timedelta(seconds=generator.uniform(-20, 20)))
    return [{**click, "ts": click["ts"].isoformat()} for click in clicks]


def _windows_of(time: datetime, size_s: int, slide_s: int) -> list[datetime]:
    offset = (time - START).total_seconds()
    last = int(offset // slide_s) * slide_s
    return [START + timedelta(seconds=start) for start in range(last, last - size_s, -slide_s)]


def _utc(time: datetime) -> datetime:
    """A time as Spark returns it (local, without zone) as a UTC time with zone."""
    return datetime.fromtimestamp(time.timestamp(), UTC)


def _top(weights: dict[str, float], k: int) -> list[dict]:
    ranked = sorted(weights.items(), key=lambda pair: (-pair[1], pair[0]))[:k]
    return [{"item": item, "weight": weight} for item, weight in ranked]


def _expected(clicks: list[dict], size_s: int, slide_s: int) -> dict:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for click in clicks:
        time = datetime.fromisoformat(click["ts"])
        for start in _windows_of(time, size_s, slide_s):
            groups[(start, click["page"])].append(click)
    return groups


@pytest.fixture(scope="module")
def result(spark: SparkSession, workspace: Workspace) -> tuple[list[dict], FileRun]:
    clicks = _clicks(400, seed=7)
    return clicks, run_from_files(spark, workspace, APP, {"clicks": clicks})


def test_a_sliding_window_gives_every_aggregate_of_every_window(result) -> None:
    clicks, output = result
    expected = {}
    for (start, page), rows in _expected(clicks, 30, 10).items():
        if len(rows) <= 1:
            continue
        weights: dict[str, float] = defaultdict(float)
        for row in rows:
            weights[row["user"]] += row["ms"]
        expected[(start, page)] = {
            "window_end": start + timedelta(seconds=30),
            "n": len(rows),
            "total_ms": sum(row["ms"] for row in rows),
            "fastest": min(row["ms"] for row in rows),
            "slowest": max(row["ms"] for row in rows),
            "mean_ms": pytest.approx(sum(row["ms"] for row in rows) / len(rows)),
            "top_users": _top(weights, 2),
            "users": len({row["user"] for row in rows}),
        }
    actual = {
        (_utc(row.pop("window_start")), row.pop("page")): {
            **row,
            "window_end": _utc(row["window_end"]),
        }
        for row in output.tables["sliding"]
    }
    assert actual == expected


def test_topk_ranks_items_by_total_weight_within_a_tumbling_window(result) -> None:
    clicks, output = result
    expected = {}
    for (start, page), rows in _expected(clicks, 60, 60).items():
        counts: dict[str, float] = defaultdict(float)
        for row in rows:
            counts[row["user"]] += 1
        expected[(start, page)] = (_top(counts, 3), len(rows))
    actual = {
        (_utc(row["window_start"]), row["page"]): (row["top_users"], row["n"])
        for row in output.tables["tumbling"]
    }
    assert actual == expected


def test_the_plan_of_each_table_is_chosen_by_its_window_and_aggregates(
    spark: SparkSession, workspace: Workspace
) -> None:
    app = parse_app(
        APP.replace("windows;", "windows_plans;").replace("'clicks'", "'clicks_plans'")
        + """
CREATE TABLE exact AS
SELECT page, PERCENTILE(ms, 0.5) AS median_ms FROM clicks [30 seconds SLIDE 10 seconds]
GROUP BY page;
"""
    )
    create_stream(workspace.settings, "clicks_plans", buckets=1, retention="1h", exist_ok=True)
    plans = compile_app(spark, workspace, app, route_dead_letters=False).plans
    assert plans["sliding"].startswith("two stages: partial aggregates per 10000 ms pane")
    assert plans["tumbling"].startswith("two stages: partial aggregates per 60000 ms pane")
    assert plans["exact"] == (
        "one stage, Spark's own 30000 ms windows sliding every 10000 ms "
        "(PERCENTILE cannot be combined over panes)"
    )


@pytest.mark.parametrize(
    "call",
    ["TOPK(user, ms)", "TOPK(user, ms, 0)", "TOPK(user, ms, page)"],
)
def test_topk_needs_a_positive_whole_k(
    spark: SparkSession, workspace: Workspace, call: str
) -> None:
    app = parse_app(
        "CREATE APPLICATION bad_topk;\n"
        "CREATE INPUT TABLE clicks (page STRING, user STRING, ms INT)\n"
        "  FROM STREAM('clicks_bad_topk') TIME ts LATENESS '1 minute';\n"
        f"CREATE TABLE t AS SELECT page, {call} AS top FROM clicks [1 minute] GROUP BY page;\n"
    )
    with pytest.raises(SqlError, match=r"<string>:4:1: TOPK takes \(item, weight, k\)"):
        run_from_files(spark, workspace, app, {"clicks": []})
