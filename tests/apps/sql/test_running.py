"""A SQL app's streaming run: what a start that fails leaves behind (nothing)."""

import threading
import time

import pytest
from pyspark.sql import SparkSession

from millrace.apps.sql.running import start_sql_app
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.sql.parser import parse_app

# The threads a run starts beside its queries, by the names they are given.
RUN_THREADS = ("dead-letters-", "idle-ticks-", "markers-", "clock-")


def test_a_start_that_fails_stops_its_queries_routers_and_tickers(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    create_stream(workspace.settings, f"{stream_name}.kept")
    name = f"failing_{stream_name.replace('.', '_')}"
    app = parse_app(
        f"CREATE APPLICATION {name};\n"
        f"CREATE INPUT TABLE events (n INT) FROM STREAM('{stream_name}') TIME time "
        "LATENESS '1 minute';\n"
        f"INSERT INTO STREAM('{stream_name}.kept') SELECT n FROM events;\n"
        "CREATE TABLE counts AS SELECT COUNT(*) AS n FROM events [1 minute];\n"
    )
    # The table's query comes second: its checkpoint folder is a file, so it cannot start.
    blocked = workspace.checkpoint(name, "table.counts")
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("")
    before = set(threading.enumerate())

    with pytest.raises(Exception, match="counts"):
        start_sql_app(spark, workspace, app)

    assert not [query.name for query in spark.streams.active if query.name.startswith(name)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _run_threads(before):
        time.sleep(0.1)
    assert _run_threads(before) == []


def _run_threads(before: set[threading.Thread]) -> list[str]:
    return [
        thread.name
        for thread in set(threading.enumerate()) - before
        if thread.name.startswith(RUN_THREADS)
    ]
