"""SQL app results over HTTP: the windows of a live app with a lookup join are served once
the watermark closes them, and hold what plain Python computes from the same records."""

import time
import uuid
from collections import Counter
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from millrace.api.app import create_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.serving.tables import TableSpec, create_table, drop_table, write_rows
from millrace.sql.parser import parse_app

T0 = 1_767_225_600_000
WINDOW_MS = 10_000

APP = """
CREATE APPLICATION {app};
CREATE INPUT TABLE events (dimension_id) FROM STREAM('{source}')
  TIME time LATENESS '2 seconds' IDLE TIMEOUT '5 seconds';

CREATE VIEW enriched AS
SELECT e.time, c.topic AS topic
FROM events e JOIN LOOKUP {lookup} c ON c.dimension_id = e.dimension_id;

CREATE TABLE topic_counts AS
SELECT topic, COUNT(*) AS n FROM enriched [10 seconds] GROUP BY topic;
"""

# d0..d8 have a topic; d9 is not in the serving table, so its events count under a NULL topic.
TOPICS = {f"d{n}": ("sports", "music", "news")[n % 3] for n in range(9)}


def window_events(window: int) -> list[dict]:
    """Events of the 10-second window `window`, 100 ms apart, with every dimension."""
    start = T0 + window * WINDOW_MS
    return [
        {"time": start + n * 100, "dimension_id": f"d{(n * 7 + window) % 10}"}
        for n in range(WINDOW_MS // 100)
    ]


def expected_counts(events: list[dict]) -> Counter:
    """Plain Python: events per topic, the unknown dimension's under None."""
    return Counter(TOPICS.get(event["dimension_id"]) for event in events)


def iso(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def test_a_live_apps_windows_are_served_over_http_once_closed(
    spark: SparkSession, workspace: Workspace, redis_url: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    app_name, source = f"served_{suffix}", f"test.served.{suffix}"
    # One bucket keeps the events in time order, so the 2 seconds of lateness drop none.
    create_stream(workspace.settings, source, buckets=1)
    lookup = create_table(
        workspace.settings, TableSpec(f"topics_{suffix}", (("dimension_id", "STRING"),),
                                      (("topic", "STRING"),))
    )  # fmt: skip
    write_rows(redis_url, lookup, {"dimension_id": list(TOPICS), "topic": list(TOPICS.values())})
    app = parse_app(APP.format(app=app_name, source=source, lookup=lookup.name))
    client = TestClient(create_app(workspace))
    route = f"/apps/{app_name}/tables/topic_counts"

    def publish(window: int) -> None:
        with Publisher(source, settings=workspace.settings) as publisher:
            for event in window_events(window):
                publisher.send(event, key=event["dimension_id"])

    running = start_sql_app(spark, workspace, app)
    seconds_to_serve: list[float] = []
    try:
        # All three windows at once: a pause longer than the idle timeout between them would
        # move the watermark on with the wall clock, past the next window's old event times.
        for window in (0, 1, 2):
            publish(window)
        published = time.monotonic()
        # Each window's successor moves the watermark past its end; then the input is quiet,
        # and the last window closes with no further record once the bucket has been idle for
        # the idle timeout.
        for window in (0, 1, 2):
            served = _wait_for_window(client, route, T0 + window * WINDOW_MS)
            seconds_to_serve.append(time.monotonic() - published)
            assert {row["topic"]: row["n"] for row in served} == expected_counts(
                window_events(window)
            )
    finally:
        running.stop()
        drop_table(workspace.settings, lookup.name)

    # Filters and `last` over the served windows: the news rows of the latest one.
    latest = client.get(route, params={"topic": "news", "last": 1}).json()
    assert [(row["window_start"], row["n"]) for row in latest] == [
        (iso(T0 + 2 * WINDOW_MS), expected_counts(window_events(2))["news"])
    ]
    print(f"published -> served over HTTP: {[round(s, 1) for s in seconds_to_serve]} s")


def _wait_for_window(
    client: TestClient, route: str, window_start_ms: int, timeout_s: float = 180.0
) -> list[dict]:
    """The served rows of the window starting at `window_start_ms`, once it is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.get(route)
        if response.status_code == 200:
            rows = [row for row in response.json() if row["window_start"] == iso(window_start_ms)]
            if rows:
                return rows
        else:
            # Before the first window closes the table does not exist yet.
            assert response.status_code == 404, response.text
        assert time.monotonic() < deadline, f"window {iso(window_start_ms)} never served"
        time.sleep(0.2)
