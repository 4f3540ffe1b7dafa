"""Triggers reach Spark's queries; real-time mode is refused clearly where Spark cannot run it."""

import time
import uuid

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine import spark_internals
from millrace.engine.triggers import Trigger
from millrace.errors import EngineError
from millrace.sql.parser import parse_app

TABLE_APP = """CREATE APPLICATION {name};
CREATE INPUT TABLE events (time, category) FROM STREAM('{stream}') TIME time;
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events GROUP BY category;
"""
INSERT_APP = """CREATE APPLICATION {name};
CREATE INPUT TABLE events (time, category, n) FROM STREAM('{stream}') TIME time;
INSERT INTO STREAM('{output}') SELECT n, category FROM events WHERE category = 'keep';
"""


def _spark_trigger(query) -> str:
    # PySpark does not expose a query's trigger; the JVM object names it.
    return spark_internals.query_trigger(query)


def test_an_interval_trigger_reaches_every_query_of_an_app(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    stream, output = f"test.trigger-in.{run}", f"test.trigger-out.{run}"
    for name in (stream, output):
        create_stream(workspace.settings, name)
    insert = f"INSERT INTO STREAM('{output}') SELECT category FROM events;\n"
    app = parse_app(TABLE_APP.format(name=f"interval_{run}", stream=stream) + insert)
    running = start_sql_app(spark, workspace, app, trigger=Trigger.parse("interval:3s"))
    try:
        assert len(running.queries) == 2
        for query in running.queries:
            assert _spark_trigger(query) == "ProcessingTimeTrigger(3000)"
    finally:
        running.stop()


def test_real_time_mode_is_refused_for_an_app_with_a_result_table_before_any_query_starts(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    stream, output = f"test.realtime-table.{run}", f"test.realtime-table-out.{run}"
    for name in (stream, output):
        create_stream(workspace.settings, name)
    # With an INSERT too, which real-time mode could run: the app starts all or nothing.
    insert = f"INSERT INTO STREAM('{output}') SELECT category FROM events;\n"
    app = parse_app(TABLE_APP.format(name=f"realtime_table_{run}", stream=stream) + insert)
    with pytest.raises(EngineError, match="cannot run in Spark's real-time mode") as refused:
        start_sql_app(spark, workspace, app, trigger=Trigger.parse("real-time:5s"))
    assert "--trigger micro-batch" in refused.value.hint
    assert not [q for q in spark.streams.active if q.name.startswith(f"realtime_table_{run}")]


def test_a_stateless_insert_runs_in_real_time_mode(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    stream, output = f"test.realtime-in.{run}", f"test.realtime-out.{run}"
    for name in (stream, output):
        create_stream(workspace.settings, name)
    app = parse_app(INSERT_APP.format(name=f"realtime_{run}", stream=stream, output=output))
    running = start_sql_app(spark, workspace, app, trigger=Trigger.parse("real-time:5s"))
    try:
        [query] = running.queries
        assert _spark_trigger(query).startswith("RealTimeTrigger")
        events = [
            {"time": 1_767_225_600_000 + n, "n": n, "category": "keep" if n % 2 else "drop"}
            for n in range(10)
        ]
        with Publisher(stream, settings=workspace.settings) as publisher:
            for event in events:
                publisher.send(event)
        expected = sorted(e["n"] for e in events if e["category"] == "keep")
        deadline = time.monotonic() + 120
        while True:
            got = tail(output, TailStart(from_beginning=True), settings=workspace.settings)
            written = sorted({record.id: int(record.value["n"]) for record in got}.values())
            if written == expected or time.monotonic() > deadline:
                break
            assert query.isActive, query.exception()
            time.sleep(1)
        assert written == expected
    finally:
        running.stop()
