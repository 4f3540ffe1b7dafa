"""A small real app for the monitoring tests: one Spark query reading a stream to its end,
with its checkpoint in the workspace and its batches published to the metrics stream."""

import time
import uuid

from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.metrics import publish_metrics
from millrace.monitor.metrics_log import MetricsLog

START_MS = 1_767_225_600_000


def publish(workspace: Workspace, stream: str, first: int, count: int) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for n in range(first, first + count):
            publisher.send({"time": START_MS + n * 1000, "n": n}, key=str(n))


def run_reader_app(spark: SparkSession, workspace: Workspace, app: str, stream: str) -> int:
    """Run app `app` once over what `stream` holds now; the batches it ran."""
    publish_metrics(spark, workspace, app)
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .queryName(f"{app}.reader")
        .option("checkpointLocation", str(workspace.checkpoint(app, "reader")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return len(query.recentProgress)


def run_paused_app(spark: SparkSession, workspace: Workspace, read: int, waiting: int) -> str:
    """An app that read `read` records and stopped, with `waiting` records published since.

    Returns once its batches are on the metrics stream.
    """
    suffix = uuid.uuid4().hex[:8]
    app, stream = f"paused_{suffix}", f"paused.in.{suffix}"
    create_stream(workspace.settings, stream, buckets=2)
    publish(workspace, stream, 0, read)
    batches = run_reader_app(spark, workspace, app, stream)
    publish(workspace, stream, read, waiting)
    metrics = MetricsLog(workspace.settings)
    deadline = time.monotonic() + 60
    while len(metrics.batches(app)) < batches and time.monotonic() < deadline:
        metrics.refresh()
        time.sleep(0.5)
    return app
