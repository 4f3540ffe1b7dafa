"""Dropping an input's copies by record id: what a query keeps, and what it pays to keep it."""

import json
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812

from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.streams import read_stream
from tests.plain_producer import plain_producer

START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)


def test_a_filtered_query_keeps_each_record_once_and_remembers_only_the_ids_it_keeps(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    # 300 records, a third of them views, each sent twice (a writer's re-run) and some of the
    # copies in the other bucket, after records of their own; then one to close the windows.
    create_stream(workspace.settings, stream_name, buckets=2)
    producer = plain_producer(workspace.settings)
    events = [
        {"time": START_MS + 10 * n, "kind": ("view", "click", "buy")[n % 3], "n": n}
        for n in range(300)
    ]
    for copy in range(2):
        for event in events:
            producer.produce(
                stream_name,
                json.dumps(event),
                headers={"id": f"ad:{event['n']}"},
                partition=(event["n"] + copy) % 2,
            )
    for bucket in (0, 1):
        closing = {"time": START_MS + 3_600_000, "kind": "click", "n": -1}
        producer.produce(stream_name, json.dumps(closing), partition=bucket)
    producer.flush()

    source = read_stream(
        spark, workspace, "views", stream_name, "kind STRING, n INT", time="time", lateness="1m"
    )
    views = source.records.where(F.col("kind") == "view")
    rows: list = []
    query = (
        views.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
        .option("checkpointLocation", str(workspace.checkpoint("views", "collect")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    source.close()

    assert sorted(row.n for row in rows) == [e["n"] for e in events if e["kind"] == "view"]
    # The filter ran before the deduplication: its state remembered the views' ids alone.
    remembered = max(
        operator["numRowsTotal"]
        for progress in query.recentProgress
        for operator in progress["stateOperators"]
    )
    assert remembered == 100
