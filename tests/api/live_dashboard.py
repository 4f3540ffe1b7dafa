"""A small live pipeline for the dashboard's browser tests, and the service over HTTP: a
generator publishing twenty events a second, a SQL app counting them in 5-second windows, the
WindowCounter processor producing counts, and one malformed record for the dead letters."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import SparkSession

from millrace.api.app import background_service
from millrace.apps.processors.placement import Placement
from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.sql.parser import parse_app
from tests.apps.processor_apps import QUERIES, window_counter
from tests.plain_producer import plain_producer
from tests.ports import free_port

TOKEN = "s3cret-dashboard"
MALFORMED = b"{this is not json"
RESULT_TABLE = "query_counts"

SQL_APP = """
CREATE APPLICATION {app};
CREATE INPUT TABLE events (query) FROM STREAM('{stream}')
  TIME ts LATENESS '1 second' IDLE TIMEOUT '3 seconds';
CREATE TABLE {table} AS
SELECT query, COUNT(*) AS n FROM events [5 seconds] GROUP BY query;
"""


@dataclass(frozen=True)
class LivePipeline:
    """The running pipeline, and the service over HTTP twice: `url` open on loopback,
    `guarded_url` with `TOKEN`, as a service reachable beyond loopback must be."""

    url: str
    guarded_url: str
    stream: str
    output: str
    sql_app: str
    processor: str


@contextlib.contextmanager
def live_pipeline_running(spark: SparkSession, workspace: Workspace) -> Iterator[LivePipeline]:
    """The pipeline and the two services, for as long as the `with` lasts."""
    suffix = uuid.uuid4().hex[:8]
    stream, output = f"dash.events.{suffix}", f"dash.counts.{suffix}"
    create_stream(workspace.settings, stream, buckets=2)
    create_stream(workspace.settings, output, buckets=1)
    sql = parse_app(SQL_APP.format(app=f"dash_sql_{suffix}", stream=stream, table=RESULT_TABLE))
    processor = window_counter(stream, output)
    stop = threading.Event()
    generator = threading.Thread(target=_generate, args=(workspace, stream, stop), daemon=True)
    generator.start()
    every_second = Trigger.parse("interval:1s")
    running_sql = start_sql_app(spark, workspace, sql, trigger=every_second)
    running_processor = start_processor_app(
        spark, workspace, processor, placement=Placement(4), trigger=every_second
    )
    _publish_raw(workspace, stream, MALFORMED)
    try:
        with (
            background_service(workspace, host="127.0.0.1", port=free_port()) as url,
            background_service(
                workspace, host="127.0.0.1", port=free_port(), token=TOKEN
            ) as guarded_url,
        ):
            yield LivePipeline(url, guarded_url, stream, output, sql.name, processor.name)
    finally:
        stop.set()
        generator.join()
        running_processor.stop()
        running_sql.stop()


def _generate(workspace: Workspace, stream: str, stop: threading.Event) -> None:
    """Twenty events a second, dated now, until `stop`; each query's events in one bucket."""
    with Publisher(stream, settings=workspace.settings, time_field="ts") as publisher:
        n = 0
        while not stop.is_set():
            query = QUERIES[n % len(QUERIES)]
            publisher.send({"query": query, "ts": int(time.time() * 1000)}, key=query)
            n += 1
            if n % 10 == 0:
                publisher.flush()
            stop.wait(0.05)


def _publish_raw(workspace: Workspace, stream: str, value: bytes) -> None:
    """Bytes no reader can decode, as a broken client would publish them."""
    producer = plain_producer(workspace.settings)
    producer.produce(stream, value, key=QUERIES[0].encode())
    assert producer.flush(10) == 0
