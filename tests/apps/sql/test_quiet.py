"""A SQL app whose input goes quiet: its last window closes, then it runs no micro-batch and
asks its input less often until a record comes, and that record's window closes in its turn."""

import json
import time

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from millrace.apps.sql.running import start_sql_app
from millrace.bus.streams import create_stream
from millrace.config.storage import StoragePath
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import batch_ids, commits_log
from millrace.engine.session import poll_less_when_idle
from millrace.engine.spark_internals import polling_delay_ms
from millrace.sql.parser import parse_app
from millrace.warehouse.result_tables import ResultTableNotFoundError, read_result_rows
from tests.plain_producer import plain_producer

WINDOW_MS = 5_000
QUIET_S = 60
SETTLE_S = 10


def test_a_quiet_app_runs_no_micro_batch_once_its_windows_closed_and_wakes_for_a_record(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    # Two buckets, one of which never gets a record: the idle ticks must still close windows.
    create_stream(workspace.settings, stream_name, buckets=2)
    name = f"quiet_{stream_name.replace('.', '_')}"
    app = parse_app(
        f"CREATE APPLICATION {name};\n"
        f"CREATE INPUT TABLE events (ts TIMESTAMP, category STRING) FROM STREAM('{stream_name}')"
        " TIME ts LATENESS '2 seconds' IDLE TIMEOUT '3 seconds';\n"
        "CREATE TABLE counts AS SELECT category, COUNT(*) AS n FROM events [5 seconds]"
        " GROUP BY category;\n"
    )
    producer = plain_producer(workspace.settings)

    def publish(category: str, count: int) -> int:
        """`count` records of `category` dated now, in bucket 0; their window's start."""
        now_ms = int(time.time() * 1000)
        for _ in range(count):
            producer.produce(
                stream_name, json.dumps({"ts": now_ms, "category": category}), partition=0
            )
        producer.flush()
        return now_ms // WINDOW_MS * WINDOW_MS

    settings = workspace.settings
    poll_less_when_idle(spark, settings.idle_poll_delay_ms)
    running = start_sql_app(spark, workspace, app)
    try:
        [query] = running.queries
        commits = commits_log(workspace.checkpoint(name, "table.counts"))
        first_window = publish("first", 3)
        assert _wait_for_window(workspace, name, first_window) == {"first": 3}
        # The ids kept for exactly-once are forgotten in their turn; a tick the ticker sent
        # while they were kept may still be read, and its watermark's batch run.
        _wait_until(lambda: _state_rows(query) == 0, query)
        quiet_from = _settled(commits, SETTLE_S)
        time.sleep(QUIET_S)
        assert batch_ids(commits)[-1] == quiet_from, "micro-batches ran for a quiet input"
        # Nothing is due: the query asks its sources less often, until its next micro-batch.
        assert polling_delay_ms(query) == settings.idle_poll_delay_ms

        next_window = publish("next", 2)
        assert _wait_for_window(workspace, name, next_window) == {"next": 2}
        assert polling_delay_ms(query) == settings.poll_delay_ms
    finally:
        running.stop()


def _wait_for_window(workspace: Workspace, app: str, start_ms: int) -> dict[str, int]:
    """The counts of the window starting at `start_ms`, once the app has written them."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            rows = read_result_rows(workspace, app, "counts")
        except ResultTableNotFoundError:
            rows = []
        found = {
            row["category"]: row["n"]
            for row in rows
            if int(row["window_start"].timestamp() * 1000) == start_ms
        }
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"the window starting at {start_ms} did not close within 180 s")


def _settled(commits: StoragePath, quiet_s: float) -> int:
    """The last committed batch, once no batch has been committed for `quiet_s` seconds."""
    deadline = time.monotonic() + 120
    last, since = batch_ids(commits)[-1], time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"micro-batches kept coming: {last} committed"
        time.sleep(0.5)
        if batch_ids(commits)[-1] != last:
            last, since = batch_ids(commits)[-1], time.monotonic()
    return last


def _state_rows(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return sum(operator["numRowsTotal"] for operator in progress["stateOperators"])


def _wait_until(condition, query: StreamingQuery, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {query.lastProgress}"
        time.sleep(0.5)
