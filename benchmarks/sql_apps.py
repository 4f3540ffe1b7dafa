"""SQL apps next to the same queries hand-written in PySpark, in the same run.

Run it with `.venv/bin/python benchmarks/sql_apps.py [--events N] [--memory-events M]
[--rounds R] [--only WORKLOAD]` after `make setup`. Each workload runs R times as millrace
and as hand-written PySpark, interleaved, each over all its input (trigger available-now, a
fresh checkpoint each time, on a settled JVM), after warm-up runs that are not kept
(`_sides.compare`), and reports events/s and the ratio of the medians, millrace /
hand-written, and the same per CPU second of the driver process and Spark's JVM. Events/s
count the time the query spends in micro-batches, as Spark reports it: the throughput of a
running app. Wall-clock figures (`wall_*`), from start to stop, add
starting and stopping, where millrace also compiles the app. Two queries:

- tumbling TOPK: top 10 events by score per category in 5-minute windows, with a count;
- sliding count: a count per key (10,000 keys) in 30-second windows sliding every second.

Each runs twice over:

- from Kafka (N events): the whole app. Both sides read the same topic, decode the same JSON,
  keep a 30-second watermark and append the closed windows to a Delta table; the millrace
  app also counts bad records for the dead-letter stream and writes its result table as
  every app does. Loading the topic is not measured. The app runs three times: with the
  defaults, `exactly_once`, which drops copies of its input records by id, on the `memory`
  state store (`millrace_events_per_s`); with `at_least_once`, which does not
  (`millrace_at_least_once_events_per_s`): the difference is what deduplication costs; and
  with `exactly_once` on `rocksdb` (`millrace_rocksdb_events_per_s`). The hand-written
  query runs on both stores too (`handwritten_pyspark`, the baseline of the ratios, on
  `memory`, Spark's default; `handwritten_pyspark_rocksdb`), and once more with the same
  guarantee as the default app: reading the id header and dropping copies by it with
  `dropDuplicatesWithinWatermark` (`handwritten_pyspark_exactly_once`). The default app's
  events/s over that side's is `exactly_once_ratio_of_medians`: what millrace adds to a
  hand-written query that gives the same guarantee. Workload
  `kafka_tumbling_topk_exactly_once_pair` runs only those two sides (there the
  `handwritten_pyspark` side is the exactly-once query), since the other sides, run in the
  same session, may weigh on the ratio. Workload `kafka_tumbling_topk_low_watermark_mechanism`
  adds a third side, the hand-written exactly-once query under millrace's low watermark over
  the buckets (`handwritten_pyspark_low_watermark`): its
  `handwritten_pyspark_low_watermark_ratio_of_medians` is what millrace's low watermark costs
  by its mechanism alone, before anything else millrace does per record.
- from memory (M events, already decoded, read as a stream from a Delta table): the query
  plan alone, millrace's compiled plan against Spark's own, both appending to Delta. The
  sliding count runs twice, on events 100,000 and 1,000,000 to a second of event time (10
  and 100 events per key and second, `_dense`): how much a pane plan saves depends on how
  many events a pane gathers.

The input ends with one event an hour later than the rest (in each bucket), so that the
watermark closes every window and both sides write all their results: a run whose windows
stay open would leave out the work of closing them, which the two plans do differently. Each
run's result is checked against the other side's (rows, and the sum of the counts).

The result goes to benchmarks/results/sql-apps-*.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import uuid
from datetime import UTC, datetime

from _harness import Run, buckets_of, isolated_workspace, produce, write_results
from _sides import (
    HANDWRITTEN_STATE_STORE,
    at_least_once,
    compare,
    handwritten,
    millrace_app,
    on_rocksdb,
)
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.engine.low_watermark import BUCKET, low_watermarked

STREAM = "bench.events"
BUCKETS = 2
KEYS = 10_000
CATEGORIES = 20
EVENT_NAMES = 1_000
EVENTS_PER_S = 100_000
"""Event-time rate of the generated events: N events span N / EVENTS_PER_S seconds."""
DENSE_EVENTS_PER_S = 1_000_000
"""The event-time rate of a stream arriving at 1 M events/s, where the SQL-apps issue found
Spark's own sliding window falling behind: 100 events per key and second, not 10."""
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
    parser.add_argument(
        "--only", action="append", metavar="WORKLOAD", help="run this workload (repeatable)"
    )
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        _load_events(workspace, options.events)
        spark = spark_session(workspace.settings, app_name="millrace-bench-sql")
        memory = {}
        for rate in (EVENTS_PER_S, DENSE_EVENTS_PER_S):
            memory[rate] = str(workspace.tables_dir / "bench" / f"events-{rate}")
            _memory_events(spark, options.memory_events, rate).write.format("delta").save(
                memory[rate]
            )

        def kafka(deduplicate: bool = False, low_watermark: bool = False) -> DataFrame:
            return _kafka_events(spark, workspace, deduplicate, low_watermark)

        def in_memory(rate: int = EVENTS_PER_S) -> DataFrame:
            return spark.readStream.format("delta").load(memory[rate])

        workloads = {
            "kafka_tumbling_topk": (
                options.events,
                {
                    "millrace": lambda: millrace_app(spark, workspace, TOPK_APP),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_topk(kafka())
                    ),
                    "handwritten_pyspark_rocksdb": lambda: handwritten(
                        workspace, _handwritten_topk(kafka()), store="rocksdb"
                    ),
                    "handwritten_pyspark_exactly_once": lambda: handwritten(
                        workspace, _handwritten_topk(kafka(deduplicate=True))
                    ),
                    "millrace_at_least_once": lambda: millrace_app(
                        spark, workspace, at_least_once(TOPK_APP)
                    ),
                    "millrace_rocksdb": lambda: millrace_app(
                        spark, workspace, on_rocksdb(TOPK_APP)
                    ),
                },
            ),
            # The SQL-apps issue's measure: the default app against the hand-written query
            # with the same guarantee, and nothing else running in the session.
            "kafka_tumbling_topk_exactly_once_pair": (
                options.events,
                {
                    "millrace": lambda: millrace_app(spark, workspace, TOPK_APP),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_topk(kafka(deduplicate=True))
                    ),
                },
            ),
            # What the low watermark's mechanism costs a query written by hand: the same
            # exactly-once query, its watermark the least over the buckets.
            "kafka_tumbling_topk_low_watermark_mechanism": (
                options.events,
                {
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_topk(kafka(deduplicate=True))
                    ),
                    "handwritten_pyspark_low_watermark": lambda: handwritten(
                        workspace, _handwritten_topk(kafka(deduplicate=True, low_watermark=True))
                    ),
                    "millrace": lambda: millrace_app(spark, workspace, TOPK_APP),
                },
            ),
            "kafka_sliding_count_30s_1s": (
                options.events,
                {
                    "millrace": lambda: millrace_app(spark, workspace, SLIDING_APP),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_sliding(kafka())
                    ),
                    "handwritten_pyspark_rocksdb": lambda: handwritten(
                        workspace, _handwritten_sliding(kafka()), store="rocksdb"
                    ),
                    "handwritten_pyspark_exactly_once": lambda: handwritten(
                        workspace, _handwritten_sliding(kafka(deduplicate=True))
                    ),
                    "millrace_at_least_once": lambda: millrace_app(
                        spark, workspace, at_least_once(SLIDING_APP)
                    ),
                    "millrace_rocksdb": lambda: millrace_app(
                        spark, workspace, on_rocksdb(SLIDING_APP)
                    ),
                },
            ),
            "memory_tumbling_topk": (
                options.memory_events,
                {
                    "millrace": lambda: _millrace_plan(spark, workspace, TOPK_APP, in_memory()),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_topk(_watermarked(in_memory()))
                    ),
                },
            ),
            "memory_sliding_count_30s_1s": (
                options.memory_events,
                {
                    "millrace": lambda: _millrace_plan(spark, workspace, SLIDING_APP, in_memory()),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace, _handwritten_sliding(_watermarked(in_memory()))
                    ),
                },
            ),
            "memory_sliding_count_30s_1s_dense": (
                options.memory_events,
                {
                    "millrace": lambda: _millrace_plan(
                        spark, workspace, SLIDING_APP, in_memory(DENSE_EVENTS_PER_S)
                    ),
                    "handwritten_pyspark": lambda: handwritten(
                        workspace,
                        _handwritten_sliding(_watermarked(in_memory(DENSE_EVENTS_PER_S))),
                    ),
                },
            ),
        }
        results: dict[str, object] = {
            "rounds": options.rounds,
            "event_time_rates": {
                "default": EVENTS_PER_S,
                "memory_sliding_count_30s_1s_dense": DENSE_EVENTS_PER_S,
            },
            "spark": {
                "master": workspace.settings.spark_master,
                "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                "state_store": {
                    "millrace": "memory",
                    "millrace_rocksdb": "rocksdb",
                    "handwritten_pyspark": HANDWRITTEN_STATE_STORE,
                    "handwritten_pyspark_rocksdb": "rocksdb",
                    "handwritten_pyspark_exactly_once": HANDWRITTEN_STATE_STORE,
                    "memory_plans": HANDWRITTEN_STATE_STORE,
                },
            },
        }
        try:
            for name, (events, sides) in workloads.items():
                if options.only and name not in options.only:
                    continue
                results[name] = {
                    "events": events,
                    **compare(spark, events, options.rounds, sides, check=_same_summary),
                }
                if "handwritten_pyspark_exactly_once" in sides:
                    results[name]["exactly_once_ratio_of_medians"] = _median_ratio(
                        results[name], "millrace", "handwritten_pyspark_exactly_once"
                    )
        finally:
            stop_spark_session()
    write_results("sql-apps", results)


def _millrace_plan(spark: SparkSession, workspace, app_text: str, events: DataFrame) -> Run:
    """The app's compiled plan over `events`, appending to Delta."""
    from millrace.sql.compiler import compile_app
    from millrace.sql.parser import parse_app

    app = parse_app(app_text.format(run=uuid.uuid4().hex[:8]))
    compiled = compile_app(spark, workspace, app, sources={"events": events})
    return handwritten(workspace, compiled.tables[app.tables[0].name])


def _median_ratio(result: dict[str, object], ours: str, theirs: str) -> float:
    """The median events/s of side `ours` over that of side `theirs`."""
    return statistics.median(result[f"{ours}_events_per_s"]) / statistics.median(
        result[f"{theirs}_events_per_s"]
    )


def _same_summary(spark: SparkSession, ours: str, theirs: str) -> None:
    """Stop unless both result tables have as many rows and the same sum of their counts.

    The two sides' TOPK columns differ in shape, so rows are not compared one by one here.
    """
    if _summary(spark, ours) != _summary(spark, theirs):
        raise SystemExit(
            f"results differ: millrace has {_summary(spark, ours)} (rows, sum of n), "
            f"hand-written PySpark {_summary(spark, theirs)}"
        )


def _summary(spark: SparkSession, table: str) -> tuple[int, int]:
    """The rows of a result table and the sum of its counts, `n`: what both sides must agree on."""
    row = spark.read.format("delta").load(table).agg(F.count(F.lit(1)), F.sum("n")).first()
    return row[0], row[1]


def _kafka_events(
    spark: SparkSession, workspace, deduplicate: bool, low_watermark: bool = False
) -> DataFrame:
    """The loaded events decoded, with a watermark; with `deduplicate`, each id's first only.

    Deduplicating is how a query written by hand gets exactly-once input from a stream that
    may hold copies of a record: by the id header the producer set, within the watermark.
    With `low_watermark`, the watermark is millrace's low watermark over the buckets
    (`millrace.engine.low_watermark.low_watermarked`, planned by millrace's Spark extension)
    instead of Spark's largest event time: its mechanism and nothing else of millrace.
    """
    schema = "time BIGINT, key STRING, category STRING, event STRING, score DOUBLE"
    id_header = F.expr("element_at(filter(headers, h -> h.key = 'id'), 1).value").cast("string")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", workspace.settings.bootstrap_servers)
        .option("subscribe", STREAM)
        .option("startingOffsets", "earliest")
        # As millrace's readers fetch (`millrace.engine.kafka`): the end of each bucket's read
        # is not held by the broker, so that the ratio is what millrace adds per record.
        .option("kafka.fetch.max.wait.ms", "10")
        .option("includeHeaders", str(deduplicate).lower())
        .load()
    )
    events = raw.select(
        F.from_json(F.col("value").cast("string"), schema).alias("e"),
        *([id_header.alias("id")] if deduplicate else []),
        F.col("partition").alias(BUCKET),
    ).select("e.*", *(["id"] if deduplicate else []), BUCKET)
    events = events.withColumn("time", F.timestamp_millis("time"))
    if low_watermark:
        events = low_watermarked(events, time="time", lateness_ms=30_000, buckets=BUCKETS)
    else:
        events = _watermarked(events)
    events = events.drop(BUCKET)
    if deduplicate:
        return events.dropDuplicatesWithinWatermark(["id"]).drop("id")
    return events


def _watermarked(events: DataFrame) -> DataFrame:
    return events.withWatermark("time", "30 seconds")


def _memory_events(spark: SparkSession, count: int, rate: int) -> DataFrame:
    """`count` decoded events shaped like the Kafka ones, `rate` per second, and a closing one."""
    events = spark.range(count, numPartitions=4).select(
        F.timestamp_millis(
            (F.lit(START_MS) + F.col("id") * 1000 / rate + F.rand(1) * 4000 - 2000).cast("bigint")
        ).alias("time"),
        F.concat(F.lit("k"), (F.rand(2) * KEYS).cast("int")).alias("key"),
        F.concat(F.lit("c"), (F.rand(3) * CATEGORIES).cast("int")).alias("category"),
        F.concat(
            F.lit("e"),
            F.least(F.floor(1 / F.pow(F.rand(4), 1 / 1.2)), F.lit(EVENT_NAMES)).cast("int"),
        ).alias("event"),
        F.round(F.rand(5), 3).alias("score"),
    )
    closing = _closing_event(count, rate)
    closing_row = (datetime.fromtimestamp(closing.pop("time") / 1000, UTC), *closing.values())
    return events.unionByName(spark.createDataFrame([closing_row], events.schema))


def _closing_event(count: int, rate: int) -> dict[str, object]:
    """An event an hour after `count` events at `rate`: its watermark closes all windows."""
    return {
        "time": START_MS + count * 1000 // rate + 3_600_000,
        "key": "closing",
        "category": "closing",
        "event": "closing",
        "score": 0.0,
    }


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

    create_stream(workspace.settings, STREAM, buckets=BUCKETS)
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
        produce(producer, STREAM, json.dumps(event).encode(), f"bench:{number}")
    closing = json.dumps(_closing_event(count, EVENTS_PER_S)).encode()
    for bucket in buckets_of(producer, STREAM):
        produce(producer, STREAM, closing, "closing", bucket)
    producer.flush()


if __name__ == "__main__":
    main()
