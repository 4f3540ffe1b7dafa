"""What the per-record checks of every read cost: each alone, and the whole decode by hand.

Run it with `.venv/bin/python benchmarks/record_checks.py [--records N] [--rounds R]` after
`make setup`. It builds N records shaped as Kafka's reader gives them (a JSON value of five
fields, an `id` header, a bucket, an arrival time), cached in memory so that no broker or
disk is measured, and times R interleaved rounds after a warm-up round that is not kept:

- `utf8_check`, `before_1970_check`, `empty_id_check`: one aggregate over the records with
  the check (`millrace`: the column every read of a stream computes; for UTF-8 also Spark's
  own `is_valid_utf8`, `spark_is_valid_utf8`, which millrace's Spark extension replaces) and
  without it (`no_check`, the baseline: the same aggregate over a column the check reads);
- `arrival_quantiles`: the quantiles of the records' arrival times that every streaming
  input's observation keeps for the app's latency (`millrace.engine.low_watermark.
  observed_input`: Spark's `percentile_approx` at `ARRIVAL_LEVELS`, with a count), against
  the count alone (`no_check`);
- `decode`: every record decoded to its fields and event time, written to Spark's `noop`
  sink: `millrace` is `millrace.engine.streams.read_batch` over the records (every check,
  the dead-letter columns, the markers), `handwritten_pyspark` a `from_json` of the value
  with the id header and its time as a TIMESTAMP, as a query written by hand reads it.

Records/s count the time of the Spark job. The result goes to
benchmarks/results/record-checks-*.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from _harness import isolated_workspace, write_results
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.records import ID_HEADER

START_MS = 1_767_225_600_000
FIELDS = "key STRING, category STRING, event STRING, score DOUBLE"
"""The value's fields besides its time, as a read of the stream declares them."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()

    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.engine.arrival_quantiles import ARRIVAL_ACCURACY, ARRIVAL_LEVELS
        from millrace.engine.event_time import from_1970
        from millrace.engine.headers import header_text, record_id_column
        from millrace.engine.session import spark_session
        from millrace.engine.streams import read_batch

        workspace = Workspace.locate()
        spark = spark_session(workspace.settings, app_name="bench-record-checks")
        records = _kafka_shaped(spark, options.records).persist()
        records.count()
        arrival = F.col("timestamp")

        def aggregate(*columns: Column) -> Callable[[], None]:
            return lambda: records.agg(*columns).collect()

        def decoded(frame: DataFrame) -> Callable[[], None]:
            return lambda: frame.write.format("noop").mode("overwrite").save()

        millrace_decode = read_batch(
            spark,
            workspace,
            "bench.checks",
            FIELDS,
            time="time",
            start_ms=0,
            end_ms=START_MS * 2,
            route_dead_letters=False,
            kafka_records=records,
        ).records
        handwritten_decode = (
            records.select(
                F.from_json(F.col("value").cast("string"), f"time BIGINT, {FIELDS}").alias("e"),
                header_text(F.col("headers"), ID_HEADER).alias("id"),
            )
            .select("e.*", "id")
            .withColumn("time", F.timestamp_millis("time"))
        )
        workloads = {
            "utf8_check": {
                "no_check": aggregate(F.sum(F.length("value"))),
                "spark_is_valid_utf8": aggregate(
                    F.count_if(F.expr("is_valid_utf8(cast(value AS STRING))"))
                ),
                "millrace": aggregate(
                    F.count_if(F.call_function("millrace_is_utf8", F.col("value")))
                ),
            },
            "before_1970_check": {
                "no_check": aggregate(F.max(arrival)),
                "millrace": aggregate(F.max(F.when(from_1970(arrival), arrival))),
            },
            "empty_id_check": {
                "no_check": aggregate(F.max(header_text(F.col("headers"), ID_HEADER))),
                "millrace": aggregate(F.max(record_id_column())),
            },
            "arrival_quantiles": {
                "no_check": aggregate(F.count(arrival)),
                "millrace": aggregate(
                    F.count(arrival),
                    F.percentile_approx(
                        F.unix_millis(arrival),
                        F.array(*[F.lit(level) for level in ARRIVAL_LEVELS]),
                        ARRIVAL_ACCURACY,
                    ),
                ),
            },
            "decode": {
                "handwritten_pyspark": decoded(handwritten_decode),
                "millrace": decoded(millrace_decode),
            },
        }
        results = {"records": options.records, "rounds": options.rounds}
        for workload, sides in workloads.items():
            seconds = _interleaved(sides, options.rounds)
            results[workload] = {
                f"{side}_records_per_s": [options.records / s for s in rounds]
                for side, rounds in seconds.items()
            }
            baseline = statistics.median(next(iter(seconds.values())))
            results[workload]["ratio_of_medians"] = {
                side: baseline / statistics.median(rounds) for side, rounds in seconds.items()
            }
        write_results("record-checks", results)


def _kafka_shaped(spark: SparkSession, count: int) -> DataFrame:
    """`count` records with the columns of Kafka's reader, ASCII JSON values, each an id."""
    number = F.col("id")
    event_ms = F.lit(START_MS) + number * 50
    value = F.to_json(
        F.struct(
            event_ms.alias("time"),
            F.concat(F.lit("k"), (number % 1000).cast("string")).alias("key"),
            F.concat(F.lit("c"), (number % 10).cast("string")).alias("category"),
            F.concat(F.lit("e"), (number % 100).cast("string")).alias("event"),
            F.round(F.rand(5), 3).alias("score"),
        )
    )
    header = F.struct(
        F.lit(ID_HEADER).alias("key"),
        F.concat(F.lit("bench:"), number.cast("string")).cast("binary").alias("value"),
    )
    return spark.range(count, numPartitions=2).select(
        F.lit(None).cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        F.lit("bench.checks").alias("topic"),
        (number % 4).cast("int").alias("partition"),
        number.alias("offset"),
        F.timestamp_millis(event_ms + 100).alias("timestamp"),
        F.lit(0).alias("timestampType"),
        F.array(header).alias("headers"),
    )


def _interleaved(sides: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Each side's seconds per round, the sides taking turns, after a round not kept."""
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for round_number in range(rounds + 1):
        for side, run in sides.items():
            started = time.perf_counter()
            run()
            if round_number:
                seconds[side].append(time.perf_counter() - started)
    return seconds


if __name__ == "__main__":
    main()
