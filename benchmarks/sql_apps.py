"""SQL apps next to the same queries hand-written in PySpark, in the same run.

Run it with `.venv/bin/python benchmarks/sql_apps.py [--events N] [--memory-events M]
[--rounds R]` after `make setup`. Each workload runs R times as millrace and as hand-written
PySpark, interleaved, each over all its input (trigger available-now, a fresh checkpoint each
time), and reports events/s and the ratio millrace / hand-written. Two queries:

- tumbling TOPK: top 10 events by score per category in 5-minute windows, with a count;
- sliding count: a count per key (10,000 keys) in 30-second windows sliding every second.

Each runs twice over:

- from Kafka (N events): the whole app. Both sides read the same topic, decode the same JSON,
  keep a 30-second watermark and append the closed windows to a Delta table; the millrace
  app also routes bad records to the dead-letter stream and writes its result table as every
  app does. Loading the topic is not measured.
- from memory (M events, already decoded, read as a stream from a Delta table): the query
  plan alone, millrace's compiled plan against Spark's own, both appending to Delta.

The result goes to benchmarks/results/sql-apps-*.json.
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
    parser.add_argument("--memory-events", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        _load_events(workspace, options.events)
        spark = spark_session(workspace.settings, app_name="millrace-bench-sql")
        memory = str(workspace.tables_dir / "bench" / "events")
        _memory_events(spark, options.memory_events).write.format("delta").save(memory)

        def kafka() -> DataFrame:
            return _kafka_events(spark, workspace)

        def in_memory() -> DataFrame:
            return spark.readStream.format("delta").load(memory)

        workloads = {
            "kafka_tumbling_topk": (
                options.events,
                lambda: _millrace_app(spark, workspace, TOPK_APP),
                lambda: _handwritten(workspace, _handwritten_topk(kafka())),
            ),
            "kafka_sliding_count_30s_1s": (
                options.events,
                lambda: _millrace_app(spark, workspace, SLIDING_APP),
                lambda: _handwritten(workspace, _handwritten_sliding(kafka())),
            ),
            "memory_tumbling_topk": (
                options.memory_events,
                lambda: _millrace_plan(spark, workspace, TOPK_APP, in_memory()),
                lambda: _handwritten(workspace, _handwritten_topk(_watermarked(in_memory()))),
            ),
            "memory_sliding_count_30s_1s": (
                options.memory_events,
                lambda: _millrace_plan(spark, workspace, SLIDING_APP, in_memory()),
                lambda: _handwritten(workspace, _handwritten_sliding(_watermarked(in_memory()))),
            ),
        }
        results: dict[str, object] = {
            "rounds": options.rounds,
            "spark": {
                "master": workspace.settings.spark_master,
                "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
            },
        }
        try:
            for name, (events, ours, theirs) in workloads.items():
                results[name] = {"events": events, **_compare(events, options.rounds, ours, theirs)}
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


def _millrace_app(spark: SparkSession, workspace, app_text: str) -> float:
    """Seconds the whole app takes, as `millrace run --available-now` runs it."""
    from millrace.runtime.sql_apps import start_sql_app
    from millrace.sql.parser import parse_app

    app = parse_app(app_text.format(run=uuid.uuid4().hex[:8]))
    started = time.perf_counter()
    start_sql_app(spark, workspace, app, available_now=True).await_termination()
    return time.perf_counter() - started


def _millrace_plan(spark: SparkSession, workspace, app_text: str, events: DataFrame) -> float:
    """Seconds the app's compiled plan takes over `events`, appending to Delta."""
    from millrace.sql.compiler import compile_app
    from millrace.sql.parser import parse_app

    app = parse_app(app_text.format(run=uuid.uuid4().hex[:8]))
    compiled = compile_app(spark, workspace, app, sources={"events": events})
    return _handwritten(workspace, compiled.tables[app.tables[0].name])


def _handwritten(workspace, results: DataFrame) -> float:
    """Seconds a streaming DataFrame takes to run over its input, appending to Delta."""
    run = uuid.uuid4().hex[:8]
    table = str(workspace.tables_dir / "bench" / run)
    started = time.perf_counter()
    (
        results.writeStream.outputMode("append")
        .foreachBatch(lambda batch, _: batch.write.format("delta").mode("append").save(table))
        .option("checkpointLocation", str(workspace.checkpoint("bench", run)))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    return time.perf_counter() - started


def _kafka_events(spark: SparkSession, workspace) -> DataFrame:
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", STREAM)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema = "time BIGINT, key STRING, category STRING, event STRING, score DOUBLE"
    return _watermarked(
        raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("time", F.timestamp_millis("time"))
    )


def _watermarked(events: DataFrame) -> DataFrame:
    return events.withWatermark("time", "30 seconds")


def _memory_events(spark: SparkSession, count: int) -> DataFrame:
    """`count` decoded events shaped like the Kafka ones, as a DataFrame of 4 partitions."""
    return spark.range(count, numPartitions=4).select(
        F.timestamp_millis(
            (F.lit(START_MS) + F.col("id") * 1000 / EVENTS_PER_S + F.rand(1) * 4000 - 2000).cast(
                "bigint"
            )
        ).alias("time"),
        F.concat(F.lit("k"), (F.rand(2) * KEYS).cast("int")).alias("key"),
        F.concat(F.lit("c"), (F.rand(3) * CATEGORIES).cast("int")).alias("category"),
        F.concat(
            F.lit("e"),
            F.least(F.floor(1 / F.pow(F.rand(4), 1 / 1.2)), F.lit(EVENT_NAMES)).cast("int"),
        ).alias("event"),
        F.round(F.rand(5), 3).alias("score"),
    )


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
