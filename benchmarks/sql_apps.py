"""SQL apps next to the same queries hand-written in PySpark, in the same run.

Run it with `.venv/bin/python benchmarks/sql_apps.py [--events N] [--rounds R]` after
`make setup`. It loads N events into a stream (raw producer: loading is not measured), then
runs each workload R times as a millrace SQL app and as hand-written PySpark, interleaved,
each from the first record to the last (trigger available-now, a fresh checkpoint each time),
and reports events/s and the ratio millrace / hand-written. The workloads:

- tumbling TOPK: top 10 events by score per category in 5-minute windows, with a count;
- sliding count: a count per key (10,000 keys) in 30-second windows sliding every second.

Both sides read the same Kafka topic, decode the same JSON, keep a 30-second watermark and
append the closed windows to a Delta table. The millrace side also routes bad records to the
dead-letter stream, as every app does. The result goes to benchmarks/results/sql-apps-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable

from _harness import isolated_workspace, write_results
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

STREAM = "bench.events"
KEYS = 10_000
CATEGORIES = 20
EVENT_NAMES = 1_000
EVENTS_PER_S = 100_000
"""Event-time rate of the generated events: N events span N / EVENTS_PER_S seconds."""
START_MS = 1_767_225_600_000

TOPK_APP = """
CREATE APPLICATION bench_topk_{run};
CREATE INPUT TABLE events (key STRING, category STRING, event STRING, score DOUBLE)
FROM STREAM('bench.events') TIME time LATENESS '30 seconds';
CREATE TABLE top_events AS
SELECT category, TOPK(event, score, 10) AS top_events, COUNT(*) AS n
FROM events [5 minutes]
GROUP BY category;
"""

SLIDING_APP = """
CREATE APPLICATION bench_sliding_{run};
CREATE INPUT TABLE events (key STRING, category STRING, event STRING, score DOUBLE)
FROM STREAM('bench.events') TIME time LATENESS '30 seconds';
CREATE TABLE counts AS
SELECT key, COUNT(*) AS n
FROM events [30 seconds SLIDE 1 second]
GROUP BY key;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        _load_events(workspace, options.events)
        spark = spark_session(workspace.settings, app_name="millrace-bench-sql")
        try:
            workloads = {
                "tumbling_topk": (
                    lambda: _millrace(spark, workspace, TOPK_APP),
                    lambda: _handwritten(spark, workspace, _handwritten_topk),
                ),
                "sliding_count_30s_1s": (
                    lambda: _millrace(spark, workspace, SLIDING_APP),
                    lambda: _handwritten(spark, workspace, _handwritten_sliding),
                ),
            }
            results: dict[str, object] = {
                "events": options.events,
                "rounds": options.rounds,
                "spark": {
                    "master": workspace.settings.spark_master,
                    "shuffle_partitions": workspace.settings.spark_shuffle_partitions,
                },
            }
            for name, (ours, theirs) in workloads.items():
                results[name] = _compare(options.events, options.rounds, ours, theirs)
        finally:
            stop_spark_session()
    write_results("sql-apps", results)


def _compare(
    events: int, rounds: int, ours: Callable[[], float], theirs: Callable[[], float]
) -> dict[str, object]:
    """Events/s of both sides over interleaved rounds, and the ratio of their medians."""
    millrace_rates, handwritten_rates = [], []
    for _ in range(rounds):
        millrace_rates.append(events / ours())
        handwritten_rates.append(events / theirs())
    millrace, handwritten = (
        statistics.median(millrace_rates),
        statistics.median(handwritten_rates),
    )
    return {
        "millrace_events_per_s": millrace_rates,
        "handwritten_pyspark_events_per_s": handwritten_rates,
        "ratio_of_medians": millrace / handwritten,
    }


def _millrace(spark: SparkSession, workspace, app_text: str) -> float:
    from millrace.runtime.sql_apps import start_sql_app
    from millrace.sql.parser import parse_app

    app = parse_app(app_text.format(run=uuid.uuid4().hex[:8]))
    started = time.perf_counter()
    start_sql_app(spark, workspace, app, available_now=True).await_termination()
    return time.perf_counter() - started


def _handwritten(spark: SparkSession, workspace, query: Callable[[DataFrame], DataFrame]) -> float:
    run = uuid.uuid4().hex[:8]
    table = str(workspace.tables_dir / "handwritten" / run)
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", STREAM)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema = "time BIGINT, key STRING, category STRING, event STRING, score DOUBLE"
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("time", F.timestamp_millis("time"))
        .withWatermark("time", "30 seconds")
    )
    started = time.perf_counter()
    (
        query(events)
        .writeStream.outputMode("append")
        .foreachBatch(lambda batch, _: batch.write.format("delta").mode("append").save(table))
        .option("checkpointLocation", str(workspace.checkpoint("handwritten", run)))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    return time.perf_counter() - started


def _handwritten_topk(events: DataFrame) -> DataFrame:
    per_event = events.groupBy(F.window("time", "5 minutes"), "category", "event").agg(
        F.sum("score").alias("weight"), F.count(F.lit(1)).alias("n")
    )
    ranked = F.sort_array(F.collect_list(F.struct("weight", "event")), asc=False)
    return per_event.groupBy("window", "category").agg(
        F.slice(ranked, 1, 10).alias("top_events"), F.sum("n").alias("n")
    )


def _handwritten_sliding(events: DataFrame) -> DataFrame:
    return events.groupBy(F.window("time", "30 seconds", "1 second"), "key").agg(
        F.count(F.lit(1)).alias("n")
    )


def _load_events(workspace, count: int) -> None:
    from millrace.bus.streams import create_stream

    create_stream(workspace.settings, STREAM, buckets=2)
    producer = Producer(
        {
            "bootstrap.servers": workspace.settings.bootstrap_servers,
            "linger.ms": 20,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    generator = random.Random(42)
    for number in range(count):
        event = {
            "time": START_MS + number * 1000 // EVENTS_PER_S + generator.randrange(-2000, 2000),
            "key": f"k{generator.randrange(KEYS)}",
            "category": f"c{generator.randrange(CATEGORIES)}",
            "event": f"e{min(int(generator.paretovariate(1.2)), EVENT_NAMES)}",
            "score": round(generator.random(), 3),
        }
        while True:
            try:
                producer.produce(
                    STREAM, json.dumps(event).encode(), headers={"id": f"bench:{number}"}
                )
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()


if __name__ == "__main__":
    main()
